package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/icesink/icesink/bench"
	"github.com/icesink/icesink/deltawriter"
)

// countValue is a flag holding a count written as 1000000, 1_000_000,
// 250k, 10M or 1G (decimal multipliers).
type countValue struct{ n *int64 }

func (c countValue) String() string {
	if c.n == nil {
		return "0"
	}
	return strconv.FormatInt(*c.n, 10)
}

func (c countValue) Set(s string) error {
	n, err := parseCount(s)
	if err != nil {
		return err
	}
	*c.n = n
	return nil
}

func parseCount(s string) (int64, error) {
	t := strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	mul := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mul = 1e3
		case 'm', 'M':
			mul = 1e6
		case 'g', 'G':
			mul = 1e9
		}
		if mul > 1 {
			t = t[:len(t)-1]
		}
	}
	if f, err := strconv.ParseFloat(t, 64); err == nil && mul > 1 {
		return int64(f * float64(mul)), nil
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("count %q: want digits with an optional k, M or G", s)
	}
	return n, nil
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help := newHelpTopics(fs)
	help.section("The stream")
	st := bench.DefaultStream()
	st.Keys = 0 // rows/4 unless --keys is given
	fs.Var(countValue{&st.Rows}, "rows", "`N` changes in the stream (accepts 250k, 10M)")
	fs.Var(countValue{&st.Keys}, "keys", "`N` distinct keys (default: rows/4)")
	fs.Float64Var(&st.Updates, "updates", st.Updates, "`SHARE` of events that update a live key (+U)")
	fs.Float64Var(&st.Deletes, "deletes", st.Deletes, "`SHARE` of events that delete a live key (-D)")
	fs.Float64Var(&st.Reinserts, "reinserts", st.Reinserts, "`SHARE` of events that re-insert a deleted key (+I); first inserts take the rest")
	fs.Float64Var(&st.Zipf, "zipf", st.Zipf, "key skew `S` of updates and deletes: 0 uniform, or a Zipf exponent > 1")
	fs.IntVar(&st.RowBytes, "row-bytes", st.RowBytes, "approximate row width in `BYTES`")
	keyType := fs.String("key-type", st.KeyType.String(), "key `SHAPE`: long, string (24 bytes) or composite (tenant string, id long)")
	fs.Uint64Var(&st.Seed, "seed", st.Seed, "`SEED` of the stream")
	mode := fs.String("mode", "upsert", "writer `MODE`: upsert, or changelog (the stream then sends -U before each +U)")
	help.section("Scenarios and runs")
	scenarios := fs.String("scenarios", "all", "comma-separated `SCENARIOS`: unbounded, bounded, append-baseline, parquet-floor, or all; or history alone (a long run of small commits: memory and commit time at 100, 1000 and 10000 commits)")
	var commits, commitRows int64
	fs.Var(countValue{&commits}, "commits", "history: `N` commits (default 10000)")
	fs.Var(countValue{&commitRows}, "commit-rows", "history: `N` changes per commit (default 50)")
	var rf retentionFlags
	rf.register(fs)
	limits := fs.String("memory-limit", "64MiB", "writer budget(s) `SIZE[,SIZE...]` of the bounded scenario (e.g. 16MiB,64MiB)")
	repeat := fs.Int("repeat", 3, "`N` runs of each scenario (alternating)")
	var commitEvery int64
	fs.Var(countValue{&commitEvery}, "commit-every", "commit the window every `N` changes (0: one window for the whole stream)")
	targetFile := fs.String("target-file-size", "", "writer's data-file `SIZE` (default: the table's, 512MiB)")
	formatVersion := fs.Int("format-version", 2, "Iceberg format `VERSION` of the runs' tables: 2 or 3 (deletion vectors)")
	compactEvery := fs.Int("compact-every", 0, "writer scenarios compact their table every `N` commits, the key index following (as run --maintain; 0: never)")
	scans := fs.Int("scans", 1, "scan each run's table `N` times and report the fastest")
	rewrite := fs.Float64("rewrite-deleted", 0, "writers rewrite at commit each data file of which this `SHARE` of rows was deleted in the window (0: never)")
	help.section("Output")
	workDir := fs.String("work-dir", "", "`DIR` for the runs' warehouses and spill files (default: the OS temp dir)")
	keep := fs.Bool("keep", false, "keep each run's folder")
	out := fs.String("out", "", "write results.json, report.md and the PNG plots into `DIR` (the plots by icesink-plot, found beside this binary or on PATH, else go run ./cmd/icesink-plot in the source tree)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	help.section("Measuring")
	interval := fs.Duration("sample-interval", 20*time.Millisecond, "memory sampling period `DURATION`")
	goLimit := fs.String("go-memory-limit", "auto", "Go soft memory limit during the runs: auto (bounded runs are held to 2 x budget + 64MiB as icesink run --memory-limit holds them, the soft limit at most 1.25 x budget + 48MiB, unless GOMEMLIMIT is set; others none), none (the process's), or a `SIZE` for every run")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole bench to `FILE` (pick scenarios with --scenarios)")
	memProfile := fs.String("memprofile", "", "write an allocation profile to `FILE` at the end")
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	if *scenarios == "history" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
		return benchHistory(ctx, stdout, stderr, int(commits), int(commitRows), int(st.Keys), *limits, &rf, *workDir, *quiet)
	}
	if st.Keys <= 0 {
		st.Keys = max(st.Rows/4, 1)
	}
	var err error
	if st.KeyType, err = bench.ParseKeyType(*keyType); err != nil {
		return fmt.Errorf("%w: --key-type: %v", errUsage, err)
	}
	if _, err := bench.NewStream(st); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	opts := bench.Options{
		Stream:         st,
		Repeat:         *repeat,
		CommitEvery:    commitEvery,
		WorkDir:        *workDir,
		Keep:           *keep,
		SampleInterval: *interval,
		RewriteDeleted: *rewrite,
		CompactEvery:   *compactEvery,
		Scans:          *scans,
		FormatVersion:  *formatVersion,
		CommandLine:    "icesink bench " + strings.Join(args, " "),
	}
	if opts.Mode, err = deltawriter.ParseMode(*mode); err != nil {
		return fmt.Errorf("%w: --mode: %v", errUsage, err)
	}
	if opts.Mode == deltawriter.Changelog {
		opts.Stream.UpdateBefore = true
	}
	var budgets []int64
	for _, l := range strings.Split(*limits, ",") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n, err := bench.ParseSize(l)
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: --memory-limit: %q: want a positive size such as 64MiB", errUsage, l)
		}
		budgets = append(budgets, n)
	}
	if opts.Scenarios, err = bench.ParseScenarios(*scenarios, budgets); err != nil {
		return fmt.Errorf("%w: --scenarios: %v", errUsage, err)
	}
	if *targetFile != "" {
		if opts.TargetFileSize, err = bench.ParseSize(*targetFile); err != nil {
			return fmt.Errorf("%w: --target-file-size: %v", errUsage, err)
		}
	}
	switch *goLimit {
	case "none", "":
	case "auto":
		opts.AutoGoMemoryLimit = os.Getenv("GOMEMLIMIT") == ""
	default:
		if opts.GoMemoryLimit, err = bench.ParseSize(*goLimit); err != nil {
			return fmt.Errorf("%w: --go-memory-limit: %v", errUsage, err)
		}
	}

	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()

	var bar *progressbar.ProgressBar
	if !*quiet && benchIsTerminal(stderr) {
		bar = progressbar.NewOptions(1000,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		opts.Progress = func(p bench.Progress) {
			bar.Describe(fmt.Sprintf("run %d/%d %-22s %-6s", p.Run+1, p.Runs, p.Scenario, p.Phase))
			_ = bar.Set(int(p.Fraction * 1000))
		}
	}
	res, err := bench.Run(ctx, opts)
	if bar != nil {
		_ = bar.Finish()
		_ = bar.Clear()
	}
	if err != nil {
		return err
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return fmt.Errorf("memory profile: %w", err)
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return fmt.Errorf("memory profile: %w", err)
		}
	}
	if err := bench.WriteMarkdown(stdout, res); err != nil {
		return err
	}
	if *out != "" {
		if err := bench.WriteReport(*out, res); err != nil {
			return err
		}
		if err := drawPlots(ctx, *out, stderr); err != nil {
			fmt.Fprintf(stderr, "icesink bench: wrote %s and %s to %s; no plots (%v): go run ./cmd/icesink-plot %s draws them\n", bench.ResultsFile, bench.ReportFile, *out, err, *out)
		} else if !*quiet {
			fmt.Fprintf(stderr, "icesink bench: wrote %s, %s and the PNG plots to %s\n", bench.ResultsFile, bench.ReportFile, *out)
		}
	}
	return nil
}

// startCPUProfile profiles the process into path until stop; "" does
// nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// benchHistory runs `icesink bench --scenarios history`.
func benchHistory(ctx context.Context, stdout, stderr io.Writer, commits, rows, keys int, limit string, rf *retentionFlags, workDir string, quiet bool) error {
	budget, err := bench.ParseSize(limit)
	if err != nil || budget <= 0 {
		return fmt.Errorf("%w: --memory-limit: %q: want one positive size such as 4MiB", errUsage, limit)
	}
	retention, err := rf.retention()
	if err != nil {
		return err
	}
	o := bench.HistoryOptions{Commits: commits, RowsPerCommit: rows, Keys: keys, MemoryLimit: budget, Retention: retention, WorkDir: workDir}
	if !quiet && benchIsTerminal(stderr) {
		bar := progressbar.NewOptions(1000, progressbar.OptionSetWriter(stderr), progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		defer bar.Clear()
		o.Progress = func(done, total int) { _ = bar.Set(done * 1000 / max(total, 1)) }
	}
	res, err := bench.History(ctx, o)
	if err != nil {
		return err
	}
	return bench.WriteHistoryMarkdown(stdout, res)
}

// benchIsTerminal reports whether w is a terminal (the progress bar's
// condition).
func benchIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// drawPlots runs icesink-plot on a report folder: the icesink binary
// links no plotting library (its pages count in every sink's RSS), so the
// plots come from the icesink-plot command, beside this binary or on
// PATH, or else built from the source tree this process runs in (go run).
func drawPlots(ctx context.Context, dir string, stderr io.Writer) error {
	var cmd *exec.Cmd
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "icesink-plot"); fileExists(p) {
			cmd = exec.CommandContext(ctx, p, dir)
		}
	}
	if cmd == nil {
		if p, err := exec.LookPath("icesink-plot"); err == nil {
			cmd = exec.CommandContext(ctx, p, dir)
		}
	}
	if cmd == nil {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		cmd = exec.CommandContext(ctx, "go", "run", "./cmd/icesink-plot", abs)
		cmd.Dir = root
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	return nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// moduleRoot is the folder of this module's go.mod above the working
// directory, with the icesink-plot command's source.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/icesink/icesink\n") &&
			fileExists(filepath.Join(dir, "cmd", "icesink-plot", "main.go")) {
			if _, err := exec.LookPath("go"); err != nil {
				return "", errors.New("no icesink-plot beside icesink or on PATH, and no go command to build it")
			}
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no icesink-plot beside icesink or on PATH, and not in icesink's source tree")
		}
		dir = parent
	}
}
