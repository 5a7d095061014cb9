// Package membound holds a process inside a memory bound on its whole
// resident set. The Go runtime's soft memory limit (debug.SetMemoryLimit)
// covers only the memory the runtime maps; the binary's own resident pages
// (51-74 MiB for icesink, by how the binary was placed) and what other
// allocators map are outside it. A Governor sets the limit to what the
// bound leaves after that outside memory, follows it as it changes, and
// never sets it so low that the collector would run all the time; it
// also gives back the binary's pages that only start-up used.
package membound

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/icesink/icesink/internal/procstat"
)

// Bound is the resident set `icesink run --memory-limit` promises for
// writers writers of budget bytes each: twice their budgets (the garbage
// collector's headroom) and 64 MiB for the rest of the process, the
// binary's pages included.
func Bound(budget int64, writers int) int64 {
	return 2*budget*int64(max(writers, 1)) + 64<<20
}

// Figures are what a limit is computed from, in bytes.
type Figures struct {
	RSS  int64 // the process's resident set (VmRSS)
	File int64 // of it, pages mapped from files: the binary's (RssFile)
	// GoMapped is the memory the Go runtime holds from the system: what
	// its soft limit counts.
	GoMapped int64
	// NonHeap is the part of GoMapped that is not heap spans (stacks, the
	// runtime's own structures).
	NonHeap int64
	// Live is the heap the last collection found reachable.
	Live int64
}

// MinHeadroom is the least room for new allocations the limit leaves over
// the live heap; Limit leaves as much as the live heap when that is more
// (the room the runtime's default, GOGC=100, gives). A lower floor
// traded time for little memory: at three quarters of the live heap a
// 16 MiB writer's run peaked 10 MiB lower (100-103 MiB) but the bench's
// spilled writer at 32 MiB ran at 0.73x of the unbounded one's rows/s
// against 0.88x (icesink run over 1.5M changes; icesink bench --rows 4M
// --keys 2M; 2026-12-07).
const MinHeadroom = 8 << 20

// Limit returns the soft memory limit that keeps the resident set of a
// process with figures f under bound: bound less the memory outside the
// Go runtime (its file pages, or what the resident set holds beyond the
// runtime's memory when that is more). It is never under the floor that
// leaves the collector its room (the runtime's non-heap memory, the live
// heap, and as much again or MinHeadroom), so that holding the bound
// never makes the collector run more often than GOGC=100 does; and never
// over ceiling (the limit without a governor). floored reports that the
// floor decided: the bound may then be exceeded.
func Limit(bound, ceiling int64, f Figures) (limit int64, floored bool) {
	outside := max(f.File, f.RSS-f.GoMapped)
	limit = bound - outside
	floor := f.NonHeap + f.Live + max(f.Live, MinHeadroom)
	if limit < floor {
		limit, floored = floor, true
	}
	return min(limit, ceiling), floored
}

// Read returns the process's figures now.
func Read() Figures {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	v := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(s[i].Value.Uint64())
	}
	st := procstat.Read()
	mapped := v(0) - v(1)
	return Figures{
		RSS:      st.RSS,
		File:     st.File,
		GoMapped: mapped,
		NonHeap:  max(mapped-v(2)-v(3)-v(4), 0),
		Live:     v(5),
	}
}

// Stats are what a Governor did.
type Stats struct {
	Bound    int64 // the bound it held the process to
	MinLimit int64 // the lowest soft limit it set
	MaxLimit int64 // the highest
	Floored  int   // the times the floor, not the bound, decided the limit
	// Releases counts the times it released the binary's pages
	// (ReleaseBinary); ReleaseErr is why the last attempt failed, after
	// which it stopped trying.
	Releases   int
	ReleaseErr error
}

// Interval is how often a governor of a running sink follows the
// process's memory: the runtime reads the limit at every allocation of a
// span, so a change takes effect at once.
const Interval = 50 * time.Millisecond

// ReleaseInterval is how often a governor releases the binary's pages
// (ReleaseBinary) after the release at Start: the pages the run's own
// start-up touched (opening the catalog, recovering) go too, and those
// of paths a run takes now and then (its first commit, a compaction
// round) stay out between their uses. The pages a run keeps using are read
// back one by one (MADV_RANDOM), a few thousand 4 KiB reads per release:
// every 10 s, a 16 MiB run over 1,000 commits peaked at 94-96 MiB against
// 99-101 every 30 s, in the same time.
const ReleaseInterval = 10 * time.Second

// NearBound is how near its bound (a NearBound-th of it) the resident set
// comes before the governor releases the binary's pages without waiting
// for the next ReleaseInterval; NearBoundGap is the least time between two
// such releases (each costs the reads of the pages that come back),
// doubled after each one in a row up to ReleaseInterval. The
// default command at 16 MiB (15 commits, two compaction rounds, 8 s)
// peaked at 99-101 MiB before (bound 96: its one release was at Start),
// 93-96 with it.
const (
	NearBound    = 32
	NearBoundGap = 2 * time.Second
)

// Governor sets the Go runtime's soft memory limit from a bound while it
// runs (Start), and restores the limit it found when stopped. It also
// releases the binary's resident pages at Start and every
// ReleaseInterval: of the 49-51 MiB a copied icesink binary has resident
// after start-up, a run over 1,000 commits had 27 MiB at its peak; the
// rest served package initialization (arrow-go's compute registry, pgx's
// types, the AWS SDK's tables) and start-up paths.
//
// After Start, a release is skipped when the resident set stayed under
// three quarters of the bound since the last one: a process well inside
// its bound does not pay the reads of the pages coming back. One comes
// early when the resident set nears the bound (NearBound): a short run's
// peak, a compaction round, may come before the next periodic release.
type Governor struct {
	bound, ceiling int64
	prev           int64 // the limit before Start
	stop           chan struct{}
	done           chan struct{}
	// high is the highest resident set adjust saw since the last
	// release; only the governor's goroutine touches it after Start.
	high int64
	// last is the time of the last release. nearGap is the least time
	// between two releases that coming near the bound triggers; it
	// doubles with each such release in a row (near counts them), up to
	// releaseEvery, and is back at its start once the resident set falls
	// a sixteenth under the bound.
	last                  time.Time
	nearGap, releaseEvery time.Duration
	near                  int
	stats                 Stats // written by adjust and release only, read by Stop once done
}

// Start releases the binary's pages and sets the limit for bound (at most
// ceiling) now, then sets the limit again every interval and releases the
// pages ReleaseInterval after the last release (when the resident set came
// within a quarter of the bound since),
// and at once when the resident set comes within NearBound of the bound
// (at least NearBoundGap apart, backing off), until ctx ends or Stop is
// called.
func Start(ctx context.Context, bound, ceiling int64, interval time.Duration) *Governor {
	return start(ctx, bound, ceiling, interval, ReleaseInterval, NearBoundGap)
}

// start is Start with the release intervals given.
func start(ctx context.Context, bound, ceiling int64, interval, releaseEvery, nearGap time.Duration) *Governor {
	g := &Governor{bound: bound, ceiling: ceiling, nearGap: nearGap, releaseEvery: releaseEvery, prev: debug.SetMemoryLimit(-1),
		stop: make(chan struct{}), done: make(chan struct{}), stats: Stats{Bound: bound}}
	g.release()
	g.adjust()
	go func() {
		defer close(g.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-g.stop:
				return
			case <-t.C:
				g.adjust()
			}
		}
	}()
	return g
}

// release releases the binary's pages unless an earlier attempt failed.
func (g *Governor) release() {
	if g.stats.ReleaseErr != nil {
		return
	}
	if _, err := ReleaseBinary(); err != nil {
		g.stats.ReleaseErr = err
		return
	}
	g.stats.Releases++
	g.high = 0
	g.last = time.Now()
}

// adjust releases the binary's pages when it is time (releaseEvery since
// the last release, if the resident set came within a quarter of the
// bound; sooner near the bound) and sets the limit from the figures now.
func (g *Governor) adjust() {
	f := Read()
	g.high = max(g.high, f.RSS)
	if f.RSS < g.bound-g.bound/16 {
		g.near = 0 // away from the bound: the next peak is a new one
	}
	since := time.Since(g.last)
	near := f.RSS >= g.bound-g.bound/NearBound && since >= min(g.nearGap<<min(g.near, 16), g.releaseEvery)
	if near || since >= g.releaseEvery && g.high >= g.bound/4*3 {
		// Pages of paths taken since the last release (a compaction
		// round's, a commit's) are what the bound can still give. A
		// process that stays at its bound backs off to the periodic
		// rate: each release costs the reads of the pages in use.
		g.release()
		if near {
			g.near++
		}
		f = Read()
	}
	l, floored := Limit(g.bound, g.ceiling, f)
	debug.SetMemoryLimit(l)
	s := &g.stats
	if s.MinLimit == 0 || l < s.MinLimit {
		s.MinLimit = l
	}
	s.MaxLimit = max(s.MaxLimit, l)
	if floored {
		s.Floored++
	}
}

// Stop ends the adjustments, restores the limit Start found and returns
// what the governor did.
func (g *Governor) Stop() Stats {
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	<-g.done
	debug.SetMemoryLimit(g.prev)
	return g.stats
}
