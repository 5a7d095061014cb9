package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/dustin/go-humanize"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/term"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/kafka"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// debeziumOptions parses --debezium-decimal and --debezium-time-unit.
func debeziumOptions(decimal, unit string) (changelog.DebeziumOptions, error) {
	var o changelog.DebeziumOptions
	switch decimal {
	case "precise":
		o.DecimalBase64 = true
	case "string":
	default:
		return o, fmt.Errorf("%w: --debezium-decimal %q: want precise or string (for decimal.handling.mode=double, string works: the values are JSON numbers)", errUsage, decimal)
	}
	switch unit {
	case "":
	case "ms":
		o.TimeUnit = time.Millisecond
	case "us", "µs":
		o.TimeUnit = time.Microsecond
	case "ns":
		o.TimeUnit = time.Nanosecond
	default:
		return o, fmt.Errorf("%w: --debezium-time-unit %q: want ms, us or ns", errUsage, unit)
	}
	return o, nil
}

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tf  tableFlags
		sf  specFlags
		inf inputFlags
		kf  kafkaFlags
		db  databaseFlags
		wf  writerFlags
		cmf commitFlags
		crf coordFlags
		rpf reportFlags
		pf  pgFlags
	)
	// -h shows the flags by topic, the common ones first.
	help := newHelpTopics(fs)
	help.add("Input", inf.register)
	help.add("Warehouse and table", tf.register)
	help.add("New tables", sf.register)
	help.add("A whole database (one table per topic or source table)", db.register)
	help.add("Kafka", kf.register)
	help.add("PostgreSQL", pf.register)
	help.add("Writers and memory", wf.register)
	help.add("Commits, history and maintenance", cmf.register)
	help.add("Coordinator (writers in several processes)", crf.register)
	help.add("Output and monitoring", rpf.register)
	var config *string
	help.add("Output and monitoring", func(fs *flag.FlagSet) { config = registerConfig(fs) })
	if err := parseFlagsAndConfig(fs, args, config); err != nil {
		return err
	}
	if err := pf.check(fs, &tf, &sf, inf.input != "", kf.enabled(), crf.addr); err != nil {
		return err
	}
	if !pf.enabled() {
		if err := db.check(&tf, &kf, &sf, crf.addr, inf.format); err != nil {
			return err
		}
		if err := tf.check(); err != nil && !db.enabled() {
			return err
		}
	}
	if err := warehouse.CheckName(cmf.sinkID); err != nil {
		return fmt.Errorf("%w: --sink-id: %v", errUsage, err)
	}
	if err := inf.parse(); err != nil {
		return err
	}
	fmtv, dbz := inf.parsedFormat, inf.parsedDebeziumOption
	kf.maxRecord = inf.maxRecordBytes
	input := inf.input
	if pf.enabled() {
		input = pf.url // the database is the input
	}
	if err := kf.check(input, crf.addr, fmtv); err != nil {
		return err
	}
	for _, w := range kf.cleartextWarnings() {
		fmt.Fprintf(stderr, "icesink: warning: %s\n", w)
	}
	wopts, err := wf.options()
	if err != nil {
		return err
	}
	cfg := sink.Config{EvolveSchema: inf.evolve, Writer: wopts, Writers: wf.writers, Vnodes: wf.vnodeCount, KeyIndexDir: wf.keyIndexDir, InputID: inf.inputID}
	if err := cmf.apply(fs, &cfg, crf.addr != ""); err != nil {
		return err
	}
	if err := crf.apply(fs, &cfg, kf.grouped()); err != nil {
		return err
	}
	if !db.enabled() && !pf.enabled() {
		if cfg.Ident, err = warehouse.ParseIdent(tf.table); err != nil {
			return fmt.Errorf("%w: --table: %v", errUsage, err)
		}
		if cfg.StateDir == "" && crf.addr == "" {
			if cfg.StateDir, err = tf.localStateDir(cfg.SinkID); err != nil {
				return err
			}
		}
	}
	spec, err := sf.spec()
	if err != nil {
		return err
	}
	var in io.Reader = stdin
	var inFile *os.File // a file input: reopened for a restart
	if inf.input != "-" && inf.input != "" {
		f, err := os.Open(inf.input)
		if err != nil {
			return fmt.Errorf("opening the input: %w", err)
		}
		defer func() { f.Close() }()
		in = f
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			inFile = f
		}
	}
	// A stream read once (standard input, a pipe, a FIFO) is journaled
	// from the last commit on: a restart reads it again from there.
	var journal *changelog.Journal
	if inFile == nil && !kf.enabled() && !db.enabled() && !pf.enabled() {
		if journal, err = changelog.NewJournal(in, wopts.SpillDir); err != nil {
			// A read-only temporary folder: the run goes on, and a commit
			// lost to another writer stops it instead.
			fmt.Fprintf(stderr, "icesink: warning: no journal of the input (a commit lost to another writer's stops the run; give --spill-dir): %v\n", err)
			journal = nil
		} else {
			defer journal.Close()
			in = journal
		}
	}
	wh, err := warehouse.Open(ctx, tf.warehouse, tf.options())
	if err != nil {
		return err
	}
	defer wh.Close()
	cfg.Loader = wh.Catalog
	stopBound := boundMemory(ctx, wf.limit, wf.writers)
	defer stopBound()
	stopMetrics, err := rpf.apply(&cfg, stderr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if pf.enabled() {
		return runPostgres(ctx, pf, wh, cfg, db.template, tf.warehouse, kf.interval, spec, db.overrides, stdout, rpf.quiet)
	}
	if db.enabled() {
		d := &database{wh: wh, base: cfg, kf: kf, format: fmtv, dbz: dbz, evolve: inf.evolve, spec: spec, overrides: db.overrides,
			template: db.template, warehouse: tf.warehouse, stdout: stdout, stderr: stderr, quiet: rpf.quiet, stats: rpf.stats, memProfile: rpf.memProfile, stopBound: stopBound,
			grouped: kf.grouped(), vnodesGiven: isSet(fs, "vnode-count"), rowsGiven: isSet(fs, "checkpoint-rows")}
		return d.run(ctx, db.topics(kf.topic), db.regex, db.refresh)
	}
	ident := cfg.Ident
	if spec.Schema == nil && kf.enabled() && fmtv != changelog.ChangelogJSON {
		// A table that does not exist yet takes the schema of the events.
		if _, err := wh.Catalog.LoadTable(ctx, ident); errors.Is(err, catalog.ErrNoSuchTable) {
			if spec.Schema, err = kf.eventSchema(ctx, fmtv); err != nil {
				return fmt.Errorf("table %s does not exist, and its schema cannot come from the events (give --schema): %w", tf.table, err)
			}
		}
	}
	tbl, _, err := wh.LoadOrCreate(ctx, ident, spec)
	if err != nil {
		return err
	}
	// The writer checks the table before any input is read.
	ps := tbl.Spec()
	if err := deltawriter.CheckTable(tbl.Schema(), &ps); err != nil {
		return fmt.Errorf("table %s: %w", tf.table, err)
	}
	if err := deltawriter.CheckProperties(tbl.Properties()); err != nil {
		return fmt.Errorf("table %s: %w", tf.table, err)
	}
	kf.schema, kf.spec, kf.evolve = tbl.Schema(), tbl.Spec(), inf.evolve
	var src sink.Source
	runCtx := ctx
	var ksrc *kafka.Source
	if !kf.enabled() {
		dec, err := changelog.NewDecoder(in, fmtv, tbl.Schema(), decoderOptions(dbz, inf.evolve, inf.maxRecordBytes)...)
		if err != nil {
			return fmt.Errorf("table %s: %w", tf.table, err)
		}
		src = dec
		if journal != nil {
			src = journaled{Decoder: dec, j: journal, head: dec}
		}
	}
	if kf.enabled() && !kf.grouped() {
		dec, err := kf.decoder(fmtv, tbl.Schema(), dbz)
		if err != nil {
			return fmt.Errorf("table %s: %w", tf.table, err)
		}
		// The first SIGINT or SIGTERM ends the input: the records read so
		// far are committed and the run exits 0. A second one kills.
		if ksrc, err = kf.open(ctx, dec, ctx.Done()); err != nil {
			return err
		}
		defer func() { ksrc.Close() }()
		src, runCtx = ksrc, context.WithoutCancel(ctx)
		if cfg.Registerer != nil {
			if err := cfg.Registerer.Register(ksrc.Collector()); err != nil {
				return fmt.Errorf("registering the Kafka source's metrics: %w", err)
			}
		}
	}
	mon := startMonitor(rpf.memProfile)
	var res sink.Result
	if kf.grouped() {
		res, err = kf.runGroup(ctx, cfg, tbl.Schema(), fmtv, dbz, isSet(fs, "vnode-count"), isSet(fs, "checkpoint-rows"), cfg.Logger)
	} else {
		in := &restartableInput{file: inFile, journal: journal, head: journalHead(src), kafka: ksrc, kf: &kf, reg: cfg.Registerer, format: fmtv, schema: tbl.Schema(), dbz: dbz}
		res, err = in.run(ctx, runCtx, cfg, src, cfg.Logger)
		inFile, ksrc = in.file, in.kafka // closed by the deferred calls
	}
	peak := mon.stop()
	peak.bound = stopBound()
	if peak.profileErr != nil {
		fmt.Fprintf(stderr, "icesink: --memprofile: %v\n", peak.profileErr)
	}
	if cfg.Progress != nil {
		fmt.Fprintln(stderr)
	}
	return reportRun(stdout, stderr, res, err, runReport{table: strings.Join(ident, "."), sinkID: cfg.SinkID, kafka: kf.enabled(), quiet: rpf.quiet, stats: rpf.stats, peak: peak, limit: wf.limit})
}

// committedNote says, after a failed run, what the table holds of the sink
// and what the run did.
func committedNote(res sink.Result, r runReport) string {
	ran := fmt.Sprintf("%d commits by this run; the uncommitted window was discarded", res.Commits)
	switch {
	case !res.CommittedKnown:
		return fmt.Sprintf("what table %s holds of sink %q could not be read; %s", r.table, r.sinkID, ran)
	case res.Committed.Epoch == 0:
		return fmt.Sprintf("table %s holds no epoch of sink %q; %s", r.table, r.sinkID, ran)
	case r.kafka:
		return fmt.Sprintf("table %s holds sink %q up to epoch %d, offsets %s; %s", r.table, r.sinkID, res.Committed.Epoch, formatOffsets(res.Committed.Offsets), ran)
	}
	return fmt.Sprintf("table %s holds sink %q up to input line %d, epoch %d; %s", r.table, r.sinkID, res.Committed.Line, res.Committed.Epoch, ran)
}

// runReport is what reportRun says a run did.
type runReport struct {
	table, sinkID string
	kafka         bool // offsets, not lines
	quiet, stats  bool
	peak          peaks
	limit         int64
}

// reportRun prints where the run resumed and what it committed (and the
// statistics with --stats), and returns err with what the table holds.
func reportRun(stdout, stderr io.Writer, res sink.Result, err error, r runReport) error {
	if res.Start.RolledBack > 0 && !r.quiet {
		fmt.Fprintf(stderr, "icesink: table %s was rolled back past epoch %d of sink %q: what it no longer holds is written again\n", r.table, res.Start.RolledBack, r.sinkID)
	}
	if res.Start.Line > 0 && !r.quiet {
		if r.kafka {
			fmt.Fprintf(stderr, "icesink: sink %q resumed at the offsets of epoch %d (%s)\n", r.sinkID, res.Start.Epoch, formatOffsets(res.Start.Offsets))
		} else {
			fmt.Fprintf(stderr, "icesink: sink %q resumed after input line %d (epoch %d was committed)\n", r.sinkID, res.Start.Line, res.Start.Epoch)
		}
	}
	if err != nil {
		return fmt.Errorf("%w\n(%s)", err, committedNote(res, r))
	}
	if !r.quiet {
		fmt.Fprintf(stdout, "committed %d snapshots: %d changes from %d input lines in %s (%.0f changes/s)\n",
			res.Commits, res.Changes, res.Line-res.Start.Line, res.Elapsed.Round(time.Millisecond), float64(res.Changes)/res.Elapsed.Seconds())
	}
	if r.stats {
		printStats(stdout, res, r.peak, r.limit, "per writer")
	}
	return nil
}

func parseSize(s string) (int64, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: give a number of bytes with an optional unit, such as 64MiB, 1GiB or 500MB", s)
	}
	return int64(n), nil
}

// specFlags are the flags that describe a table to create.
type specFlags struct {
	schema, partition string
	version           int
	props             propertyFlag
}

func (f *specFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.schema, "schema", "", "Iceberg schema `FILE` (the spec's JSON form); required to create the table, except from a Kafka topic of debezium-avro (the registry's TOPIC-value and TOPIC-key) or debezium-json with schemas (the first record's)")
	fs.StringVar(&f.partition, "partition-spec", "", "Iceberg partition spec `FILE` (JSON) for a new table; default unpartitioned")
	fs.IntVar(&f.version, "format-version", 2, "Iceberg format `VERSION` of a new table: 2 (position-delete files) or 3 (deletion vectors)")
	f.props = propertyFlag{}
	fs.Var(f.props, "property", "table property `KEY=VALUE` of a new table (repeatable), e.g. write.parquet.compression-codec=snappy; the writer honours write.target-file-size-bytes and write.parquet.{compression-codec,compression-level,row-group-limit,page-size-bytes,page-row-limit,dict-size-bytes,page-version}")
}

// spec reads the files the flags name (none: an empty spec, which only
// loads an existing table).
func (f *specFlags) spec() (warehouse.TableSpec, error) {
	var spec warehouse.TableSpec
	if f.version != 2 && f.version != 3 {
		return spec, fmt.Errorf("%w: --format-version %d: icesink writes format 2 or 3", errUsage, f.version)
	}
	spec.Properties = iceberg.Properties{}
	for k, v := range f.props {
		spec.Properties[k] = v
	}
	if v, ok := f.props["format-version"]; ok && v != strconv.Itoa(f.version) {
		return spec, fmt.Errorf("%w: --property format-version=%s: give --format-version instead", errUsage, v)
	}
	spec.Properties["format-version"] = strconv.Itoa(f.version)
	if err := deltawriter.CheckProperties(spec.Properties); err != nil {
		return spec, fmt.Errorf("%w: --property: %v", errUsage, err)
	}
	if f.schema != "" {
		var err error
		if spec.Schema, err = readSchema(f.schema); err != nil {
			return spec, err
		}
	}
	if f.partition != "" {
		b, err := os.ReadFile(f.partition)
		if err != nil {
			return spec, fmt.Errorf("reading the partition spec: %w", err)
		}
		var ps iceberg.PartitionSpec
		if err := json.Unmarshal(b, &ps); err != nil {
			return spec, fmt.Errorf("partition spec %s: %w", f.partition, err)
		}
		spec.Partition = &ps
	}
	if spec.Schema != nil {
		// Refuse what the writers could not write before anything is
		// created: no table is left behind by a run that cannot start.
		if err := deltawriter.CheckTable(spec.Schema, spec.Partition); err != nil {
			return spec, fmt.Errorf("%w: %s: %v", errUsage, f.schema, err)
		}
		if _, err := changelog.NewDecoder(strings.NewReader(""), changelog.ChangelogJSON, spec.Schema); err != nil {
			return spec, fmt.Errorf("%w: %s: %v", errUsage, f.schema, err)
		}
	}
	return spec, nil
}

func readSchema(path string) (*iceberg.Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the schema: %w", err)
	}
	var sc iceberg.Schema
	if err := json.Unmarshal(b, &sc); err != nil {
		return nil, fmt.Errorf("schema %s: %w", path, err)
	}
	if len(sc.Fields()) == 0 {
		return nil, errors.New("schema " + path + ": no fields")
	}
	return &sc, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func progressLine(w io.Writer) func(sink.Progress) {
	var last time.Time
	return func(p sink.Progress) {
		if time.Since(last) < 250*time.Millisecond {
			return
		}
		last = time.Now()
		rate := float64(p.Changes) / max(p.Elapsed.Seconds(), 1e-9)
		fmt.Fprintf(w, "\r%s lines, %s changes, %s changes/s, %d commits   ",
			humanize.Comma(p.Line), humanize.Comma(p.Changes), humanize.Comma(int64(rate)), p.Commits)
	}
}

// newLogger returns a logger to w in format (text or json).
func newLogger(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, format)
}

// commitLog logs a line per commit, for a run without a terminal.
func commitLog(l *slog.Logger) func(sink.Progress) {
	commits := 0
	return func(p sink.Progress) {
		if p.Commits == commits {
			return
		}
		commits = p.Commits
		rate := float64(p.Changes) / max(p.Elapsed.Seconds(), 1e-9)
		attrs := []any{"commits", p.Commits, "epoch", p.LastCommit.Epoch, "commit_ms", p.CommitLatency.Milliseconds(), "read_lines", p.Line, "changes", p.Changes, "changes_per_s", int64(rate)}
		if p.LastCommit.Offsets != nil {
			attrs = append(attrs, "offsets", formatOffsets(p.LastCommit.Offsets))
		}
		l.Info("committed", attrs...)
	}
}

// printStats prints what --stats shows; of says what the limit bounds
// ("per writer", "process").
func printStats(w io.Writer, res sink.Result, p peaks, limit int64, of string) {
	s := res.Stats
	var b strings.Builder
	lim := "unbounded"
	if limit > 0 {
		lim = humanize.IBytes(uint64(limit))
	}
	fmt.Fprintf(&b, "memory limit %-12s %s\n", of, lim)
	fmt.Fprintf(&b, "peak accounted bytes      %s (largest writer)\n", humanize.IBytes(uint64(s.PeakAccountedBytes)))
	fmt.Fprintf(&b, "peak Go heap              %s\n", humanize.IBytes(p.heap))
	fmt.Fprintf(&b, "peak RSS                  %s", humanize.IBytes(p.rss))
	if g := p.bound; g.Bound > 0 {
		fmt.Fprintf(&b, " (bound %s = 2 x budget + 64 MiB; Go soft limit %s to %s", humanize.IBytes(uint64(g.Bound)), humanize.IBytes(uint64(g.MinLimit)), humanize.IBytes(uint64(g.MaxLimit)))
		if g.Floored > 0 {
			fmt.Fprintf(&b, ", %d times raised over the bound to leave the collector room", g.Floored)
		}
		if g.ReleaseErr != nil {
			fmt.Fprintf(&b, "; the binary's pages kept: %v", g.ReleaseErr)
		} else if g.Releases > 0 {
			fmt.Fprintf(&b, "; the binary's pages released %d times", g.Releases)
		}
		b.WriteString(")")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "Go allocated / GC cycles  %s / %d\n", humanize.IBytes(p.allocs), p.cycles)
	fmt.Fprintf(&b, "changes                   %d\n", s.Changes)
	fmt.Fprintf(&b, "spills / bytes spilled    %d / %s\n", s.Index.Spills, humanize.IBytes(uint64(s.Index.SpilledBytes)))
	fmt.Fprintf(&b, "compactions / runs        %d / %d\n", s.Index.Compactions, s.Index.RunsCompacted)
	fmt.Fprintf(&b, "local flushes             %d\n", s.LocalFlushes)
	fmt.Fprintf(&b, "lookups memory/filter/cache/disk %d / %d / %d / %d; resolved in sorted passes %d\n", s.Index.LookupsMemory, s.Index.LookupsFilter, s.Index.LookupsCache, s.Index.LookupsDisk, s.Index.LookupsSorted)
	fmt.Fprintf(&b, "data files / rows         %d / %d\n", s.DataFiles, s.DataRows)
	fmt.Fprintf(&b, "pos-delete files / rows   %d / %d\n", s.PositionDeleteFile, s.PositionDeletes)
	fmt.Fprintf(&b, "eq-delete files / rows    %d / %d\n", s.EqualityDeleteFile, s.EqualityDeletes)
	fmt.Fprintf(&b, "rewritten files / deletes %d / %d (--rewrite-deleted)\n", s.RewrittenFiles, s.RewrittenDeletes)
	fmt.Fprintf(&b, "key index: rebuilt from   %d rows in %d files\n", s.IndexRebuildRows, s.IndexRebuildFiles)
	if s.IndexesReused > 0 || s.IndexRebuildReason != "" {
		fmt.Fprintf(&b, "key index: reused by      %d writers", s.IndexesReused)
		if s.IndexRebuildReason != "" {
			fmt.Fprintf(&b, " (rebuilt: %s)", s.IndexRebuildReason)
		}
		b.WriteString("\n")
	}
	if res.Compactions > 0 {
		c := res.Compacted
		fmt.Fprintf(&b, "compactions               %d: %d data files into %d, %d delete files dropped, %s read, %s written\n", res.Compactions,
			c.RemovedDataFiles, c.AddedDataFiles, c.RemovedDeleteFiles, humanize.IBytes(uint64(c.BytesBefore)), humanize.IBytes(uint64(c.BytesAfter)))
	}
	if s.IndexCheckpoints > 0 {
		fmt.Fprintf(&b, "key index: saved at       %d commits (writers x commits)\n", s.IndexCheckpoints)
	}
	if s.IndexNotSaved != "" {
		fmt.Fprintf(&b, "key index: not saved      %s\n", s.IndexNotSaved)
	}
	fmt.Fprintf(&b, "key index: lookups / old rows deleted %d / %d\n", s.IndexLookups, s.OldRowsDeleted)
	fmt.Fprintf(&b, "key index: keys / spills  %d / %d\n", s.TableIndex.Keys, s.TableIndex.Spills)
	io.WriteString(w, b.String())
}

// decoderOptions are the options of a line or JSON message decoder.
func decoderOptions(dbz changelog.DebeziumOptions, evolve bool, maxRecord int) []changelog.Option {
	opts := []changelog.Option{changelog.WithDebezium(dbz)}
	if maxRecord > 0 {
		opts = append(opts, changelog.WithMaxRecordSize(maxRecord))
	}
	if evolve {
		opts = append(opts, changelog.WithEvolution())
	}
	return opts
}

// restartableInput is a run's input that can be opened again: a file
// (read again from its start; the sink skips the lines the table holds),
// a stream's journal (read again from its oldest line kept) or a Kafka
// source (a new one seeks to the table's offsets).
type restartableInput struct {
	file    *os.File
	journal *changelog.Journal
	kafka   *kafka.Source
	kf      *kafkaFlags
	reg     prometheus.Registerer
	format  changelog.Format
	schema  *iceberg.Schema
	dbz     changelog.DebeziumOptions
	stop    <-chan struct{}    // ends a Kafka input; nil: ctx's end
	head    *changelog.Decoder // a journaled stream's first decoder (its identity)
}

// journaled is a decoder of a journaled stream: the commits it makes
// free the journal's lines they hold, and the input's identity is the
// one of the stream's start (head), which a replay no longer reads.
type journaled struct {
	*changelog.Decoder
	j    *changelog.Journal
	head *changelog.Decoder
}

// CommittedLine frees the journal's lines a commit holds.
func (s journaled) CommittedLine(line int64) { s.j.Committed(line) }

// Identity is the stream's identity (changelog.Decoder.Identity).
func (s journaled) Identity() string { return s.head.Identity() }

// IdentityOf is the stream's (changelog.Decoder.IdentityOf).
func (s journaled) IdentityOf(n int) string { return s.head.IdentityOf(n) }

// journalHead is src's first decoder when it is a journaled stream.
func journalHead(src sink.Source) *changelog.Decoder {
	if j, ok := src.(journaled); ok {
		return j.head
	}
	return nil
}

// run runs the sink on src. Another writer's commit that landed while the
// sink was committing (between its writers' reload of the table and the
// commit) refuses the epoch: the run starts again from what the table
// holds, as a rerun would, while it makes progress; a commit lost to such
// a race three times in a row without a commit between stops it.
func (in *restartableInput) run(ctx, runCtx context.Context, cfg sink.Config, src sink.Source, logger *slog.Logger) (sink.Result, error) {
	res, err := sink.Run(runCtx, cfg, src)
	for lost := 0; errors.Is(err, commit.ErrForeignChange) && ctx.Err() == nil && (in.file != nil || in.journal != nil || in.kafka != nil); {
		if res.Commits == 0 {
			lost++
		} else {
			lost = 0
		}
		if lost > 3 {
			break
		}
		logger.Warn("another writer committed to the table while the sink was committing; starting again from the table", "err", err)
		if tbl, lerr := cfg.Loader.LoadTable(ctx, cfg.Ident); lerr == nil {
			in.schema = tbl.Schema() // it may have evolved
			in.kf.schema = in.schema
		}
		if src, err = in.reopen(ctx); err != nil {
			break
		}
		prev := res
		res, err = sink.Run(runCtx, cfg, src)
		res.Start, res.Commits = prev.Start, res.Commits+prev.Commits
	}
	return res, err
}

// reopen opens the input again, closing the old one.
func (in *restartableInput) reopen(ctx context.Context) (sink.Source, error) {
	if in.kafka != nil {
		dec, err := in.kf.decoder(in.format, in.schema, in.dbz)
		if err != nil {
			return nil, err
		}
		if in.reg != nil {
			in.reg.Unregister(in.kafka.Collector())
		}
		in.kafka.Close()
		stop := in.stop
		if stop == nil {
			stop = ctx.Done()
		}
		if in.kafka, err = in.kf.open(ctx, dec, stop); err != nil {
			return nil, err
		}
		if in.reg != nil {
			if err := in.reg.Register(in.kafka.Collector()); err != nil {
				return nil, fmt.Errorf("registering the Kafka source's metrics: %w", err)
			}
		}
		return in.kafka, nil
	}
	if in.journal != nil {
		r, first, err := in.journal.Replay()
		if err != nil {
			return nil, err
		}
		dec, err := changelog.NewDecoder(r, in.format, in.schema, append(decoderOptions(in.dbz, in.kf.evolve, in.kf.maxRecord), changelog.WithFirstLine(first))...)
		if err != nil {
			return nil, err
		}
		return journaled{Decoder: dec, j: in.journal, head: in.head}, nil
	}
	f, err := os.Open(in.file.Name())
	if err != nil {
		return nil, fmt.Errorf("opening the input again: %w", err)
	}
	in.file.Close()
	in.file = f
	return changelog.NewDecoder(f, in.format, in.schema, decoderOptions(in.dbz, in.kf.evolve, in.kf.maxRecord)...)
}
