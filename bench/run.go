package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/membound"
	"github.com/icesink/icesink/internal/procstat"
)

// Options configure Run. Zero values take the defaults.
type Options struct {
	// Stream is the generated stream; see StreamOptions for its defaults.
	Stream StreamOptions
	// Mode is the writer's mode. Default deltawriter.Upsert. With
	// deltawriter.Changelog the stream should set UpdateBefore.
	Mode deltawriter.Mode
	// Scenarios are run in this order, rotated by one each repeat.
	// Default: unbounded, bounded-64MiB, append-baseline, parquet-floor.
	Scenarios []Scenario
	// Repeat is how many times each scenario runs. Default 3.
	Repeat int
	// CommitEvery commits the writer's window every so many changes.
	// Default 0: one window for the whole stream (the worst case for
	// memory, and the window-length axis of the plots).
	CommitEvery int64
	// TargetFileSize is the writer's data-file size. Default: the
	// writer's default (the table's write.target-file-size-bytes).
	TargetFileSize int64
	// RewriteDeleted is the writer scenarios' Options.RewriteDeleted: the
	// deleted share at which a data file is rewritten at commit (0: never).
	RewriteDeleted float64
	// FormatVersion is the Iceberg format of the runs' tables: 2 (the
	// default) or 3 (deletion vectors).
	FormatVersion int
	// CompactEvery, if > 0, has the writer scenarios compact their table
	// every so many commits (commit.Committer.Compact with MinInputFiles
	// 2; the key index follows), as `icesink run --maintain` does.
	CompactEvery int
	// Scans is the number of times each run's table is scanned; the
	// fastest counts (a single scan of a small table varies 2-3x on a
	// noisy machine). Default 1.
	Scans int
	// WorkDir holds a fresh folder per run (warehouse, spill runs, the
	// floor's file), removed after the run unless Keep. Default: the OS
	// temp dir.
	WorkDir string
	// Keep keeps each run's folder (RunResult.Dir names it).
	Keep bool
	// SampleInterval is the period of the memory sampler. Default 20ms.
	SampleInterval time.Duration
	// GoMemoryLimit sets the Go runtime's soft memory limit during every
	// run (debug.SetMemoryLimit); 0 leaves it as the process has it.
	GoMemoryLimit int64
	// AutoGoMemoryLimit governs, during each bounded run, the Go
	// runtime's soft memory limit as `icesink run --memory-limit` does: a
	// membound.Governor holds the process to 2 x budget + 64 MiB, at most
	// deltawriter.SoftMemoryLimit(budget, 1). Other runs keep
	// GoMemoryLimit.
	// Default false (the command's default is true).
	AutoGoMemoryLimit bool
	// CommandLine is recorded in the results, to say how to reproduce them.
	CommandLine string
	// Progress, when set, is called as the bench advances: at most every
	// 100ms and at every phase of a run. Calls never overlap, but may come
	// from a goroutine other than Run's.
	Progress func(Progress)
}

// Progress is the state of a bench in progress.
type Progress struct {
	Scenario string  // the scenario running
	Repeat   int     // its repeat, from 0
	Run      int     // the run's position, from 0
	Runs     int     // runs in the bench
	Phase    string  // "setup", "write", "commit", "scan" or "done"
	Fraction float64 // of the whole bench, in [0, 1]
}

func (o Options) withDefaults() (Options, error) {
	var err error
	if o.Stream, err = o.Stream.withDefaults(); err != nil {
		return o, err
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios, _ = ParseScenarios("all", []int64{64 << 20})
	}
	for i, s := range o.Scenarios {
		if s.Kind < Unbounded || s.Kind > ParquetFloor {
			return o, fmt.Errorf("bench: scenario %q has no kind", s.Name)
		}
		if s.Kind == Bounded && s.MemoryLimit <= 0 {
			return o, fmt.Errorf("bench: scenario %q needs a positive memory limit", s.Name)
		}
		if s.Name == "" {
			o.Scenarios[i] = NewScenario(s.Kind, s.MemoryLimit)
		}
	}
	if o.Repeat <= 0 {
		o.Repeat = 3
	}
	if o.CommitEvery < 0 {
		return o, fmt.Errorf("bench: negative commit interval %d", o.CommitEvery)
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = 20 * time.Millisecond
	}
	return o, nil
}

// Run runs every scenario Repeat times in this process, alternating (the
// order rotates by one scenario each repeat), each run on a fresh
// embedded warehouse, and returns what they measured with the ratios
// between them. Memory is sampled per run after a GC that returns freed
// memory to the OS; see RunResult for what each figure means.
func Run(ctx context.Context, opts Options) (*Results, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: work dir: %w", err)
	}
	res := &Results{
		Config:      configOf(opts),
		Environment: environment(),
		Started:     time.Now().UTC(),
	}
	// The stream's counts, from a replay (cheap: no rows are built).
	if res.Stream, err = streamCounts(opts.Stream); err != nil {
		return nil, err
	}
	for _, s := range opts.Scenarios {
		res.Scenarios = append(res.Scenarios, ScenarioResult{Scenario: s})
	}
	n := len(opts.Scenarios)
	runs := n * opts.Repeat
	pr := &progress{fn: opts.Progress, runs: runs}
	order := 0
	for r := range opts.Repeat {
		for i := range n {
			idx := (i + r) % n
			sc := opts.Scenarios[idx]
			pr.begin(sc.Name, r, order)
			rr, err := runOne(ctx, opts, sc, res.Stream, pr)
			if err != nil {
				return nil, fmt.Errorf("bench: %s (repeat %d): %w", sc.Name, r+1, err)
			}
			rr.Repeat, rr.Order = r, order
			if rr.Scan != nil && rr.Scan.Rows != res.Stream.Live {
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s (repeat %d): the scan returned %d rows; the stream left %d live keys",
					sc.Name, r+1, rr.Scan.Rows, res.Stream.Live))
			}
			if sc.Kind == Bounded && rr.PeakAccounted > sc.MemoryLimit {
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s (repeat %d): the writer accounted %s MiB at its peak, over its %s budget",
					sc.Name, r+1, mib(float64(rr.PeakAccounted)), FormatSize(sc.MemoryLimit)))
			}
			res.Scenarios[idx].Runs = append(res.Scenarios[idx].Runs, rr)
			order++
			pr.end()
		}
	}
	for i := range res.Scenarios {
		res.Scenarios[i].summarize()
	}
	res.Ratios = ratios(res)
	res.Elapsed = time.Since(res.Started).Seconds()
	return res, nil
}

func streamCounts(o StreamOptions) (Counts, error) {
	s, err := NewStream(o)
	if err != nil {
		return Counts{}, err
	}
	for {
		if _, _, _, ok := s.next(); !ok {
			return s.Counts(), nil
		}
	}
}

// runOne runs one scenario once in a fresh folder.
func runOne(ctx context.Context, opts Options, sc Scenario, counts Counts, pr *progress) (RunResult, error) {
	dir, err := os.MkdirTemp(opts.WorkDir, fmt.Sprintf("icesink-bench-%s-", sc.Name))
	if err != nil {
		return RunResult{}, fmt.Errorf("creating the run's folder: %w", err)
	}
	var rr RunResult
	if opts.Keep {
		rr.Dir = dir
	} else {
		defer os.RemoveAll(dir)
	}
	env := &runEnv{opts: opts, sc: sc, dir: dir, pr: pr, cell: &progressCell{}, res: &rr, prevLimit: -1}
	env.goLimit = opts.GoMemoryLimit
	if opts.AutoGoMemoryLimit && sc.Kind == Bounded {
		env.goLimit, env.bound = 0, sc.MemoryLimit
	}
	switch sc.Kind {
	case Unbounded, Bounded:
		err = runWriter(ctx, env)
	case AppendBaseline:
		err = runAppend(ctx, env)
	case ParquetFloor:
		err = runFloor(ctx, env)
	}
	if err != nil {
		return rr, err
	}
	rr.LiveRows = counts.Live
	if rr.Seconds > 0 {
		rr.RowsPerSec = float64(rr.Rows) / rr.Seconds
	}
	if rr.CPUSeconds > 0 {
		rr.RowsPerCPUSec = float64(rr.Rows) / rr.CPUSeconds
	}
	return rr, nil
}

// runEnv is what a scenario runner gets.
type runEnv struct {
	opts Options
	sc   Scenario
	dir  string
	pr   *progress
	cell *progressCell
	res  *RunResult
	smp  *sampler
	cpu0 time.Duration
	// goLimit is the Go soft memory limit of the timed phase (0: none);
	// prevLimit the one to restore after it (-1: nothing to restore).
	goLimit, prevLimit int64
	// bound is the budget whose bound a governor holds the timed phase
	// to, as `icesink run --memory-limit` does (0: none); gov is it.
	bound int64
	gov   *membound.Governor
}

// startTimed settles the heap, releases the binary's pages (every
// scenario starts from the same resident set: a bounded one's governor
// releases them at its start), sets the Go soft memory limit if asked,
// and starts the memory sampler; the timed phase begins.
func (e *runEnv) startTimed() {
	settle()
	if e.bound <= 0 {
		_, _ = membound.ReleaseBinary() // an old kernel's refusal leaves them all resident, in every scenario alike
	}
	if e.goLimit > 0 {
		e.prevLimit = debug.SetMemoryLimit(e.goLimit)
	}
	if e.bound > 0 {
		e.gov = membound.Start(context.Background(), membound.Bound(e.bound, 1), deltawriter.SoftMemoryLimit(e.bound, 1), membound.Interval)
	}
	e.smp = startSampler(e.opts.SampleInterval, e.cell)
	e.cpu0 = processCPU()
}

// stopTimed stops the sampler and records the memory figures and the
// CPU time the process used, less gen (the generator's own time).
func (e *runEnv) stopTimed(gen time.Duration) {
	if e.prevLimit >= 0 {
		debug.SetMemoryLimit(e.prevLimit)
		e.prevLimit = -1
	}
	if e.gov != nil {
		e.gov.Stop()
		e.gov = nil
	}
	if e.smp == nil {
		return
	}
	if c := processCPU() - e.cpu0 - gen; c > 0 && e.cpu0 > 0 {
		e.res.CPUSeconds = c.Seconds()
	}
	m := e.smp.finish()
	e.smp = nil
	e.res.StartRSS, e.res.PeakRSS, e.res.ExactPeakRSS = m.startRSS, m.peakRSS, m.exactPeak
	e.res.StartRSSFile = m.startFile
	e.res.PeakHeap = m.peakHeap
	e.res.PeakAccounted = max(e.res.PeakAccounted, m.peakAcc)
	e.res.Series = m.series
}

// progress throttles Options.Progress and serializes its calls (the
// baselines' records may be pulled from iceberg-go's goroutines).
type progress struct {
	mu    sync.Mutex
	fn    func(Progress)
	runs  int
	cur   Progress
	last  time.Time
	total int64 // rows of the current run, for its fraction
}

func (p *progress) begin(name string, repeat, run int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = Progress{Scenario: name, Repeat: repeat, Run: run, Runs: p.runs, Phase: "setup",
		Fraction: float64(run) / float64(p.runs)}
	p.total = 0
	p.emit(true)
}

func (p *progress) phase(ph string, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur.Phase = ph
	if total > 0 {
		p.total = total
	}
	p.emit(true)
}

func (p *progress) rows(done int64) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total > 0 {
		p.cur.Fraction = (float64(p.cur.Run) + min(float64(done)/float64(p.total), 1)) / float64(p.runs)
	}
	p.emit(false)
}

func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur.Phase = "done"
	p.cur.Fraction = float64(p.cur.Run+1) / float64(p.runs)
	p.emit(true)
}

// emit calls fn; p.mu is held.
func (p *progress) emit(force bool) {
	if p.fn == nil || (!force && time.Since(p.last) < 100*time.Millisecond) {
		return
	}
	p.last = time.Now()
	p.fn(p.cur)
}

func configOf(o Options) Config {
	c := Config{
		CommandLine:    o.CommandLine,
		Stream:         o.Stream,
		Mode:           modeName(o.Mode),
		Repeat:         o.Repeat,
		CommitEvery:    o.CommitEvery,
		TargetFileSize: o.TargetFileSize,
		RewriteDeleted: o.RewriteDeleted,
		CompactEvery:   o.CompactEvery,
		Scans:          o.Scans,
		SampleInterval: o.SampleInterval.String(),
	}
	for _, s := range o.Scenarios {
		c.Scenarios = append(c.Scenarios, s.Name)
	}
	switch {
	case o.AutoGoMemoryLimit && o.GoMemoryLimit > 0:
		c.GoMemoryLimit = "auto for bounded runs, else " + FormatSize(o.GoMemoryLimit)
	case o.AutoGoMemoryLimit:
		c.GoMemoryLimit = "auto for bounded runs (1.25 x budget + 48MiB, as icesink run sets it)"
	case o.GoMemoryLimit > 0:
		c.GoMemoryLimit = FormatSize(o.GoMemoryLimit)
	}
	return c
}

func modeName(m deltawriter.Mode) string {
	if m == deltawriter.Changelog {
		return "changelog"
	}
	return "upsert"
}

func environment() Environment {
	e := Environment{
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GOGC:       os.Getenv("GOGC"),
		GOMEMLIMIT: os.Getenv("GOMEMLIMIT"),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	e.MemTotal = procstat.MemTotal()
	return e
}

// runDirs returns the folders of a run's parts, created.
func runDirs(root string, names ...string) ([]string, error) {
	out := make([]string, len(names))
	var errs []error
	for i, n := range names {
		out[i] = filepath.Join(root, n)
		errs = append(errs, os.MkdirAll(out[i], 0o755))
	}
	return out, errors.Join(errs...)
}
