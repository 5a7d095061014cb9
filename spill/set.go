package spill

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// Entry is one entry of a run: the caller's hash of Key, Key and Value.
type Entry struct {
	Hash  uint64
	Key   []byte
	Value []byte
}

// Stats are a Set's counters. Counts are cumulative since OpenSet; Runs,
// RunEntries and RunBytes describe the runs on disk now.
type Stats struct {
	// Runs, RunEntries and RunBytes describe the current runs.
	Runs       int
	RunEntries int64
	RunBytes   int64
	// Flushes, FlushedEntries and FlushedBytes count the runs written by
	// Flush (spills).
	Flushes        int64
	FlushedEntries int64
	FlushedBytes   int64
	// Compactions counts merges; CompactedRuns their input runs,
	// CompactedBytes the bytes they wrote and DroppedEntries the entries
	// that SetOptions.Drop removed.
	Compactions    int64
	CompactedRuns  int64
	CompactedBytes int64
	DroppedEntries int64
	// Lookups counts Get calls; BySource splits them by the Source each
	// returned (indexed by Source).
	Lookups  int64
	BySource [4]int64
	// FilterSkips counts run probes that the hash range or the filter
	// answered; FalsePositives counts probes that passed the filter, read a
	// block and did not find the key.
	FilterSkips    int64
	FalsePositives int64
	// StaleSwept is the number of stale folders OpenSet removed.
	StaleSwept int
	// FiltersDropped counts runs whose bloom filter was freed to stay
	// under SetOptions.MaxFilterBytes.
	FiltersDropped int
}

type counters struct {
	flushes, flushedEntries, flushedBytes               atomic.Int64
	compactions, compactedRuns, compactedBytes, dropped atomic.Int64
	lookups, filterSkips, falsePositives                atomic.Int64
	bySource                                            [4]atomic.Int64
	runs, runEntries, runBytes, readerMem               atomic.Int64
	staleSwept, filtersDropped                          atomic.Int64
}

type run struct {
	id     uint64 // cache ID
	path   string
	r      *Reader
	info   RunInfo
	synced bool // Sync made it durable (runs are immutable)
}

// Set is the run manager of one writer: a private folder of runs, newest
// last, with their readers open and a block cache. It is not safe for
// concurrent use, except Stats and MemoryBytes, which any goroutine may call.
type Set struct {
	opts     SetOptions
	fs       FS
	dir      string // the private folder
	lock     io.Closer
	cache    *Cache
	ownCache bool
	runs     []*run // oldest first
	// dirSynced: the folder's entries were made durable by Sync and no
	// run was added or removed since.
	dirSynced bool
	nextID    uint64
	closed    atomic.Bool
	c         counters
}

const (
	setDirPrefix = "icesink-spill-"
	lockName     = "LOCK"
)

// OpenSet creates dir if needed, removes the folders that crashed processes
// left in it, and creates this set's private folder
// dir/icesink-spill-<pid>-<random>, holding an exclusive lock on its LOCK
// file until Close. A folder whose lock can be taken has no live owner and is
// removed; a live set's folder is left alone.
func OpenSet(dir string, opts SetOptions) (*Set, error) {
	opts = opts.ensureDefaults()
	fs := opts.FS
	if err := fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("spill: create spill dir %s: %w", dir, err)
	}
	s := &Set{opts: opts, fs: fs}
	s.c.staleSwept.Store(int64(sweep(fs, dir)))
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.dir = filepath.Join(dir, fmt.Sprintf("%s%d-%016x", setDirPrefix, os.Getpid(), rand.Uint64()))
		if err = fs.MkdirAll(s.dir); err != nil {
			return nil, fmt.Errorf("spill: create spill folder %s: %w", s.dir, err)
		}
		s.lock, err = fs.Lock(filepath.Join(s.dir, lockName))
		if errors.Is(err, ErrLockUnsupported) {
			s.lock, err = nil, nil
		}
		if err == nil || !(errors.Is(err, ErrLocked) || errors.Is(err, iofs.ErrNotExist)) {
			break
		}
		// Another set's sweep took our fresh folder before we locked it
		// (it holds the lock, or it has removed the folder): go again.
	}
	if err != nil {
		fs.RemoveAll(s.dir)
		return nil, fmt.Errorf("spill: lock spill folder %s: %w", s.dir, err)
	}
	if err := s.openCache(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openCache takes SetOptions.Cache or makes the set's own.
func (s *Set) openCache() error {
	if s.opts.Cache != nil {
		s.cache = s.opts.Cache
	} else if s.opts.CacheSize > 0 {
		c, err := NewCache(s.opts.CacheSize)
		if err != nil {
			return err
		}
		s.cache, s.ownCache = c, true
	}
	return nil
}

// sweep removes the unlocked set folders in dir and returns how many.
func sweep(fs FS, dir string) int {
	names, err := fs.List(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, name := range names {
		if !strings.HasPrefix(name, setDirPrefix) {
			continue
		}
		sub := filepath.Join(dir, name)
		l, err := fs.Lock(filepath.Join(sub, lockName))
		if err != nil {
			continue // live (locked), not a folder, or no locking here
		}
		if fs.RemoveAll(sub) == nil {
			n++
		}
		l.Close()
	}
	return n
}

// Dir returns the set's private folder.
func (s *Set) Dir() string { return s.dir }

func (s *Set) errClosed(op string) error {
	return fmt.Errorf("spill: %s on set %s: %w", op, s.dir, ErrClosed)
}

// Flush writes entries, which must come in strictly increasing (hash, key)
// order, as the newest run. n is the number of entries (or an estimate;
// <= 0 if unknown) and sizes the run's filter up front. An empty sequence
// writes no run. On error the partial run file is removed and the set is as
// before. If the set then has more than FanIn runs it compacts; an error
// there matches ErrCompaction, and the flushed run is in the set all the
// same.
func (s *Set) Flush(n int, entries iter.Seq[Entry]) (RunInfo, error) {
	if s.closed.Load() {
		return RunInfo{}, s.errClosed("flush")
	}
	rn, err := s.writeRun(n, func(w *Writer) error {
		for e := range entries {
			if err := w.Add(e.Hash, e.Key, e.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || rn == nil {
		return RunInfo{}, err
	}
	s.runs = append(s.runs, rn)
	s.dirSynced = false
	s.c.flushes.Add(1)
	s.c.flushedEntries.Add(rn.info.Entries)
	s.c.flushedBytes.Add(rn.info.Bytes)
	s.updateGauges()
	if len(s.runs) > s.opts.FanIn {
		if err := s.compact(len(s.runs) - s.pick()); err != nil {
			return rn.info, fmt.Errorf("%w: %w", ErrCompaction, err)
		}
	}
	return rn.info, nil
}

// writeRun creates a new run file, fills it with fill and opens it. It
// returns nil, nil if fill added nothing. On error nothing is left behind.
func (s *Set) writeRun(expected int, fill func(*Writer) error) (*run, error) {
	seq := s.nextID
	s.nextID++
	path := filepath.Join(s.dir, fmt.Sprintf("run-%06d.spill", seq))
	f, err := s.fs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("spill: create run %s: %w", path, err)
	}
	wo := s.opts.Writer
	wo.ExpectedEntries = max(expected, 0)
	wo.FileName = path
	w := NewWriter(f, wo)
	fail := func(err error) (*run, error) {
		w.Abort()
		if rerr := s.fs.Remove(path); rerr != nil {
			err = errors.Join(err, fmt.Errorf("spill: remove partial run %s: %w", path, rerr))
		}
		return nil, err
	}
	if err := fill(w); err != nil {
		return fail(err)
	}
	if w.EntryCount() == 0 {
		return fail(nil)
	}
	info, err := w.Finish()
	if err != nil {
		return fail(err)
	}
	rn, err := s.openRun(path)
	if err != nil {
		return fail(err)
	}
	rn.info = info
	return rn, nil
}

// openRun opens the run file at path for reads through the set's cache.
func (s *Set) openRun(path string) (*run, error) {
	var id uint64 // cache ID: unique among the cache's users
	if s.cache != nil {
		id = s.cache.NewRunID()
	}
	rf, err := s.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("spill: open run %s: %w", path, err)
	}
	r, err := OpenReader(rf, ReaderOptions{Cache: s.cache, CacheID: id, FileName: path})
	if err != nil {
		return nil, err
	}
	return &run{id: id, path: path, r: r, info: r.Info()}, nil
}

// Get looks key up in the runs, newest first, and returns the value of the
// newest run that has it. The value must not be modified and is valid
// until the next call on the set; copy it to keep it. src is the dearest Source any run's probe needed.
func (s *Set) Get(hash uint64, key []byte) (value []byte, found bool, src Source, err error) {
	if s.closed.Load() {
		return nil, false, SourceNone, s.errClosed("get")
	}
	var skips, fps int64
	for i := len(s.runs) - 1; i >= 0 && !found && err == nil; i-- {
		var ps Source
		value, found, ps, err = s.runs[i].r.Get(hash, key)
		switch {
		case ps == SourceFilter:
			skips++
		case !found && err == nil:
			fps++
		}
		src = max(src, ps)
	}
	s.c.lookups.Add(1)
	s.c.bySource[src].Add(1)
	if skips > 0 {
		s.c.filterSkips.Add(skips)
	}
	if fps > 0 {
		s.c.falsePositives.Add(fps)
	}
	if !found {
		value = nil
	}
	return value, found, src, err
}

// Reset deletes every run (at the end of a commit window) and keeps the set
// open for new flushes.
func (s *Set) Reset() error {
	if s.closed.Load() {
		return s.errClosed("reset")
	}
	err := s.dropRuns(s.runs)
	s.runs = nil
	s.dirSynced = false
	s.updateGauges()
	return err
}

// dropRuns closes, evicts and removes runs.
func (s *Set) dropRuns(runs []*run) error {
	var errs []error
	for _, rn := range runs {
		if err := rn.r.Close(); err != nil {
			errs = append(errs, err)
		}
		if s.cache != nil {
			s.cache.EvictRun(rn.id)
		}
		if err := s.fs.Remove(rn.path); err != nil {
			errs = append(errs, fmt.Errorf("spill: remove run %s: %w", rn.path, err))
		}
	}
	return errors.Join(errs...)
}

// Close deletes the runs and the set's folder, releases its lock and its own
// cache. Close is idempotent.
func (s *Set) Close() error {
	if s.closed.Load() {
		return nil
	}
	s.closed.Store(true)
	errs := []error{s.dropRuns(s.runs)}
	s.runs = nil
	s.dirSynced = false
	s.updateGauges()
	if err := s.fs.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("spill: remove spill folder %s: %w", s.dir, err))
	}
	if s.lock != nil {
		s.lock.Close()
	}
	if s.ownCache {
		s.cache.Close()
	}
	return errors.Join(errs...)
}

func (s *Set) updateGauges() {
	s.capFilters()
	var entries, bytes, mem int64
	for _, rn := range s.runs {
		entries += rn.info.Entries
		bytes += rn.info.Bytes
		mem += rn.r.MemoryBytes()
	}
	s.c.runs.Store(int64(len(s.runs)))
	s.c.runEntries.Store(entries)
	s.c.runBytes.Store(bytes)
	s.c.readerMem.Store(mem)
}

// Stats returns the counters. Safe to call from any goroutine.
func (s *Set) Stats() Stats {
	st := Stats{
		Runs:           int(s.c.runs.Load()),
		RunEntries:     s.c.runEntries.Load(),
		RunBytes:       s.c.runBytes.Load(),
		Flushes:        s.c.flushes.Load(),
		FlushedEntries: s.c.flushedEntries.Load(),
		FlushedBytes:   s.c.flushedBytes.Load(),
		Compactions:    s.c.compactions.Load(),
		CompactedRuns:  s.c.compactedRuns.Load(),
		CompactedBytes: s.c.compactedBytes.Load(),
		DroppedEntries: s.c.dropped.Load(),
		Lookups:        s.c.lookups.Load(),
		FilterSkips:    s.c.filterSkips.Load(),
		FalsePositives: s.c.falsePositives.Load(),
		StaleSwept:     int(s.c.staleSwept.Load()),
		FiltersDropped: int(s.c.filtersDropped.Load()),
	}
	for i := range st.BySource {
		st.BySource[i] = s.c.bySource[i].Load()
	}
	return st
}

// MemoryBytes returns the bytes the set holds between calls: the open
// readers' indexes and filters, plus the memory of its own cache (a shared
// SetOptions.Cache is its owner's to count). Flush and compaction hold more
// while they run: a writer (~BlockSize, plus the new run's filter, which the
// new reader then keeps) and, for compaction, 64 KiB per input run. Safe to
// call from any goroutine.
func (s *Set) MemoryBytes() int64 {
	n := s.c.readerMem.Load()
	if s.ownCache && !s.closed.Load() {
		n += s.cache.MemoryBytes()
	}
	return n
}

// SetMaxFilterBytes changes SetOptions.MaxFilterBytes (0: no cap) and
// applies it. Filters dropped before stay dropped.
func (s *Set) SetMaxFilterBytes(n int64) {
	s.opts.MaxFilterBytes = n
	s.updateGauges()
}

// capFilters drops the filters of the largest runs while the filters hold
// more than SetOptions.MaxFilterBytes. Smaller, newer runs keep theirs:
// they are the ones most lookups skip.
func (s *Set) capFilters() {
	if s.opts.MaxFilterBytes <= 0 {
		return
	}
	var total int64
	for _, rn := range s.runs {
		total += rn.r.FilterBytes()
	}
	for total > s.opts.MaxFilterBytes {
		var big *run
		for _, rn := range s.runs {
			if fb := rn.r.FilterBytes(); fb > 0 && (big == nil || fb > big.r.FilterBytes()) {
				big = rn
			}
		}
		if big == nil {
			return
		}
		total -= big.r.FilterBytes()
		big.r.DropFilter()
		s.c.filtersDropped.Add(1)
	}
}
