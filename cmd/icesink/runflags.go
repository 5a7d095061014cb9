package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/coordgrpc"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/membound"
	"github.com/icesink/icesink/sink"
)

// The flag groups of `icesink run`, each registering its flags and turning
// them into what the run needs: the input, the writers, the commits, the
// coordinator and the report (the table's are tableFlags and specFlags,
// Kafka's kafkaFlags, a database's databaseFlags).

// inputFlags say what the input is and how it is spelled.
type inputFlags struct {
	input, format        string
	dbzDecimal, dbzTime  string
	evolve               bool
	inputID              string
	maxRecord            string
	maxRecordBytes       int // --max-record-size, parsed
	parsedFormat         changelog.Format
	parsedDebeziumOption changelog.DebeziumOptions
}

func (f *inputFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.input, "input", "", "input `FILE`, or - for standard input (or --kafka-brokers)")
	fs.StringVar(&f.format, "format", "changelog-json", "input `FORMAT`: changelog-json, debezium-json or debezium-avro (Kafka with --schema-registry)")
	fs.StringVar(&f.dbzDecimal, "debezium-decimal", "string", "debezium-json events without a schema: decimals as the connector's decimal.handling.mode spells them, `MODE` precise (base64) or string (events with a schema say it themselves)")
	fs.StringVar(&f.dbzTime, "debezium-time-unit", "", "debezium-json events without a schema: the `UNIT` of integer times and timestamps, ms, us or ns (default: integers there are refused)")
	fs.BoolVar(&f.evolve, "evolve-schema", true, "with debezium-json events that carry a Kafka Connect schema, or debezium-avro: make the table follow the events' schema (add a new column, widen int to long, float to double, a decimal's precision; make a column optional), committed before the rows that need it; other changes stop the run naming the column. false: such events are bad records")
	fs.StringVar(&f.maxRecord, "max-record-size", "64MiB", "the longest input line or Kafka record value (JSON or Avro, and so the longest string or bytes value) accepted, as a `SIZE`; a longer one is a bad record (dead-lettered with --dead-letter-topic)")
	fs.StringVar(&f.inputID, "input-id", "", "a `NAME` for the input, recorded with every commit and checked on resume (default: a fingerprint of its first 4 KiB)")
}

// parse checks the format and the Debezium spellings.
func (f *inputFlags) parse() error {
	var err error
	if f.parsedFormat, err = changelog.ParseFormat(f.format); err != nil {
		return fmt.Errorf("%w: --format: %v", errUsage, err)
	}
	n, err := parseSize(f.maxRecord)
	if err == nil && (n <= 0 || n > 1<<30) {
		err = fmt.Errorf("%q: want a size from 1 byte to 1GiB", f.maxRecord)
	}
	if err != nil {
		return fmt.Errorf("%w: --max-record-size: %v", errUsage, err)
	}
	f.maxRecordBytes = int(n)
	f.parsedDebeziumOption, err = debeziumOptions(f.dbzDecimal, f.dbzTime)
	return err
}

// writerFlags configure the writers.
type writerFlags struct {
	delMode, mode, memLimit string
	writers, vnodeCount     int
	spillDir, keyIndexDir   string
	rewrite                 float64
	limit                   int64 // --memory-limit, parsed
}

func (f *writerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.delMode, "delete-mode", "position", "`MODE`: how rows of earlier commits are deleted: position (a key index built from the table at start; no equality deletes) or equality (an equality delete per key and window; for tables other writers change too)")
	fs.StringVar(&f.mode, "mode", "upsert", "`MODE`: upsert (inserts replace any row of the key) or changelog (trusted -U/+U pairs)")
	fs.StringVar(&f.memLimit, "memory-limit", "0", "memory budget `SIZE` per writer (e.g. 64MiB, 1GiB); 0 = unbounded. The Go soft memory limit then holds the process to 2 x budget x writers + 64MiB where that leaves the collector the live heap as room (unless GOMEMLIMIT is set)")
	fs.IntVar(&f.writers, "writers", 1, "`P` writers in this process, vnodes split evenly, rows routed by vnode")
	fs.IntVar(&f.vnodeCount, "vnode-count", 256, "number `N` of vnodes keys are routed by")
	fs.Float64Var(&f.rewrite, "rewrite-deleted", 0, "rewrite at commit each data file of the window of which this `SHARE` of rows was deleted in it, so readers scan live rows only (0: never)")
	fs.StringVar(&f.spillDir, "spill-dir", "", "`DIR` for the index's spill runs (default: the OS temp dir; a private subfolder per writer)")
	fs.StringVar(&f.keyIndexDir, "key-index-dir", "", "`DIR` where each writer keeps its key index between runs, so that a restart on an unchanged table skips the rebuild (default: SPILL-DIR/icesink-keyindex, without --spill-dir the user's cache folder; private to the user; - for none)")
}

// options returns the writers' options.
func (f *writerFlags) options() (deltawriter.Options, error) {
	dm, err := deltawriter.ParseDeleteMode(f.delMode)
	if err != nil {
		return deltawriter.Options{}, fmt.Errorf("%w: --delete-mode: %v", errUsage, err)
	}
	m, err := deltawriter.ParseMode(f.mode)
	if err != nil {
		return deltawriter.Options{}, fmt.Errorf("%w: --mode: %v", errUsage, err)
	}
	if f.limit, err = parseSize(f.memLimit); err != nil {
		return deltawriter.Options{}, fmt.Errorf("%w: --memory-limit: %v", errUsage, err)
	}
	switch {
	case f.writers < 1:
		return deltawriter.Options{}, fmt.Errorf("%w: --writers must be at least 1", errUsage)
	case f.vnodeCount < 1:
		return deltawriter.Options{}, fmt.Errorf("%w: --vnode-count %d: keys need at least 1 vnode", errUsage, f.vnodeCount)
	}
	o := deltawriter.Options{Mode: m, MemoryLimit: f.limit, SpillDir: f.spillDir, RewriteDeleted: f.rewrite, DeleteMode: dm}
	if o.Failpoint, err = failpointFromEnv(); err != nil {
		return o, err
	}
	return o, nil
}

// commitFlags say when and how the run commits and keeps the table.
type commitFlags struct {
	ckRows      int64
	interval    uint64
	commitBytes string
	sinkID      string
	stateDir    string
	maintain    bool
	rf          retentionFlags
	cf          compactionFlags
}

func (f *commitFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.ckRows, "checkpoint-rows", 100000, "end a checkpoint every `N` input rows (besides barrier lines)")
	fs.Uint64Var(&f.interval, "commit-interval", 1, "commit every `K` checkpoints")
	fs.StringVar(&f.sinkID, "sink-id", "icesink", "sink `ID` recorded in snapshot summaries; a rerun continues from its last commit")
	fs.StringVar(&f.commitBytes, "commit-bytes", "0", "also commit when all writers together buffer this `SIZE` (e.g. 512MiB); 0 = off")
	fs.StringVar(&f.stateDir, "state-dir", "", "`DIR` for the in-process coordinator's checkpoints (default: DIR/_icesink/NS.NAME/SINK-ID; with --table-template one for all tables, DIR/_icesink/database/SINK-ID, and a given DIR gets DIR/database)")
	f.rf.register(fs)
	fs.BoolVar(&f.maintain, "maintain", true, "compact the table's small files (their deletes applied) every --compact-every commits, between epochs; the writers' key indexes follow (in-process writers only; --maintain=false for a table another engine maintains)")
	f.cf.register(fs, true)
}

// apply checks the flags and sets cfg's commit fields. Maintenance is on
// by default for in-process writers; writers joining a coordinator
// (remote) cannot follow a compaction, so for them it is off unless asked
// for, which is refused.
func (f *commitFlags) apply(fs *flag.FlagSet, cfg *sink.Config, remote bool) error {
	cb, err := parseSize(f.commitBytes)
	if err != nil {
		return fmt.Errorf("%w: --commit-bytes: %v", errUsage, err)
	}
	switch {
	case f.ckRows < 1:
		return fmt.Errorf("%w: --checkpoint-rows %d: a checkpoint needs at least 1 input row", errUsage, f.ckRows)
	case f.interval < 1:
		return fmt.Errorf("%w: --commit-interval 0: commit every 1 or more checkpoints", errUsage)
	}
	cfg.SinkID, cfg.CheckpointRows, cfg.CommitInterval, cfg.CommitBytes, cfg.StateDir = f.sinkID, f.ckRows, f.interval, cb, f.stateDir
	if cfg.Retention, err = f.rf.retention(); err != nil {
		return err
	}
	if remote && f.maintain && isSet(fs, "maintain") {
		return fmt.Errorf("%w: --maintain runs in the process of the coordinator and its writers; drop it with --coordinator", errUsage)
	}
	if !f.maintain || remote {
		return nil
	}
	switch {
	case f.cf.every <= 0:
		return fmt.Errorf("%w: --compact-every must be positive", errUsage)
	}
	if cfg.Compaction, err = f.cf.compaction(); err != nil {
		return err
	}
	cfg.CompactEvery = f.cf.every
	return nil
}

// coordFlags join an external coordinator.
type coordFlags struct {
	addr, vnodes string
	tof          timeoutFlags
	secf         securityFlags
}

func (f *coordFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "coordinator", "", "join the coordinator at `HOST:PORT` (gRPC) instead of starting one in process")
	fs.StringVar(&f.vnodes, "vnodes", "", "with --coordinator: the `RANGES` this writer owns, e.g. 0-127")
	f.tof.register(fs)
	f.secf.register(fs, false)
}

// apply checks the flags (the coordinator decides when and how to commit:
// those flags are refused) and sets cfg's coordinator fields.
func (f *coordFlags) apply(fs *flag.FlagSet, cfg *sink.Config, grouped bool) error {
	var err error
	if cfg.Timeouts, err = f.tof.timeouts(); err != nil {
		return err
	}
	sec, err := f.secf.security()
	if err != nil {
		return err
	}
	if f.addr == "" {
		return nil
	}
	var decided []string // flags whose decision is the coordinator's
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "commit-interval", "commit-bytes", "retain-snapshots", "expire-older-than", "max-manifests", "state-dir",
			"align-timeout", "payload-timeout", "commit-timeout", "checkpoint-interval":
			decided = append(decided, "--"+fl.Name)
		}
	})
	switch {
	case len(decided) > 0:
		return fmt.Errorf("%w: %s: with --coordinator the coordinator decides this; give it to icesink coordinator", errUsage, strings.Join(decided, ", "))
	case cfg.Writers != 1:
		return fmt.Errorf("%w: --coordinator runs one writer per process; drop --writers", errUsage)
	case grouped && f.vnodes != "":
		return fmt.Errorf("%w: --vnodes with --group: the consumer group assigns this process its partitions, which are its vnodes", errUsage)
	case !grouped:
		own, err := coordinator.ParseVnodes(f.vnodes, cfg.Vnodes)
		if err != nil || f.vnodes == "" {
			return fmt.Errorf("%w: --vnodes: give the ranges this writer owns (e.g. 0-127): %v", errUsage, err)
		}
		cfg.OwnVnodes = own
	}
	addr := f.addr
	cfg.Connect = func(ctx context.Context, vn *roaring.Bitmap, opts ...coordinator.ConnectOption) (coordinator.Session, error) {
		return coordgrpc.DialSecure(ctx, addr, sec, vn, opts...)
	}
	return nil
}

// reportFlags say what the run tells while it runs and at its end.
type reportFlags struct {
	quiet, stats bool
	metricsAddr  string
	logFormat    string
	cpuProfile   string
	memProfile   string
}

func (f *reportFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.quiet, "quiet", false, "no progress line or commit log")
	fs.StringVar(&f.metricsAddr, "metrics-listen", "", "serve Prometheus metrics (icesink_*, Go runtime, process) at http://`HOST:PORT`/metrics while the run lasts")
	fs.StringVar(&f.logFormat, "log-format", "text", "`FORMAT` of log lines (the commit log without a terminal, the coordinator's warnings): text or json")
	fs.BoolVar(&f.stats, "stats", false, "print the writer's statistics at the end")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to `FILE` (read it with go tool pprof)")
	fs.StringVar(&f.memProfile, "memprofile", "", "write the heap profile taken nearest the run's peak Go heap to `FILE` (read it with go tool pprof)")
}

// apply sets cfg's logger, progress report and metrics registry and
// starts the CPU profile; stop ends the metrics server and the profile.
func (f *reportFlags) apply(cfg *sink.Config, stderr io.Writer) (stop func(), err error) {
	if cfg.Logger, err = newLogger(stderr, f.logFormat); err != nil {
		return nil, err
	}
	switch {
	case f.quiet:
	case isTerminal(stderr):
		cfg.Progress = progressLine(stderr)
	default:
		cfg.Progress = commitLog(cfg.Logger)
	}
	stopMetrics := func() {}
	if f.metricsAddr != "" {
		if cfg.Registerer, stopMetrics, err = serveMetrics(f.metricsAddr, stderr); err != nil {
			return nil, err
		}
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		stopMetrics()
		return nil, err
	}
	return func() { stopProfile(); stopMetrics() }, nil
}

// boundMemory holds the process inside the bound of its writers' budgets
// (membound.Bound: 2 x the budgets + 64 MiB, the binary's pages
// included) until stop is called: a membound.Governor sets the Go
// runtime's soft memory limit to what the bound leaves, at most
// deltawriter.SoftMemoryLimit. Without a budget, or with GOMEMLIMIT set
// (the user's limit), it does nothing and stop reports nothing.
func boundMemory(ctx context.Context, limit int64, writers int) (stop func() membound.Stats) {
	if limit <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return func() membound.Stats { return membound.Stats{} }
	}
	g := membound.Start(ctx, membound.Bound(limit, writers), deltawriter.SoftMemoryLimit(limit, writers), membound.Interval)
	return g.Stop
}

// isSet reports whether the flag name was given on the command line or in
// the --config file.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}
