package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/dustin/go-humanize"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/membound"
	"github.com/icesink/icesink/kafka"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// databaseFlags route many topics into many tables in one run: a whole
// database's change feed (one Debezium connector, a topic per table).
type databaseFlags struct {
	template  string
	regex     string
	refresh   time.Duration
	overrides tableOverrides
}

func (f *databaseFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.template, "table-template", "", "route each topic into its own table `NS.NAME`, spelled with {topic}, {server}, {db}, {schema} and {table} taken from a Debezium topic name SERVER.SCHEMA.TABLE (e.g. inventory.{table}), or {source.name}, {source.db}, {source.schema} and {source.table} from the source block of the topic's first event (topics renamed by a router); the topics from --topic T1,T2,... and --topic-regex; a table that does not exist is created from the events' schema")
	f.overrides = tableOverrides{}
	fs.Var(f.overrides, "tables", "with --table-template: a YAML `FILE` of per-table overrides for the tables it creates, by NS.NAME: key (the key columns of a source table without a primary key), partition-spec (a FILE), properties (a mapping); in the --config file: a tables: mapping")
	fs.StringVar(&f.regex, "topic-regex", "", "with --table-template: also every topic whose whole name matches `REGEX`")
	fs.DurationVar(&f.refresh, "topic-refresh", time.Minute, "with --topic-regex (without --stop-at-end): look for new matching topics every `DURATION`; when one appears, every table commits what it read and the run goes on with the new topic's table too (0: only at start)")
}

func (f *databaseFlags) enabled() bool { return f.template != "" }

// check refuses what database mode cannot run, and lets the other flags'
// checks pass without --table.
func (f *databaseFlags) check(tf *tableFlags, kf *kafkaFlags, sf *specFlags, coordinator, format string) error {
	if !f.enabled() {
		if f.regex != "" || len(f.overrides) > 0 {
			return fmt.Errorf("%w: --topic-regex and --tables need --table-template", errUsage)
		}
		return nil
	}
	switch {
	case tf.warehouse == "":
		return fmt.Errorf("%w: --warehouse is required", errUsage)
	case tf.table != "":
		return fmt.Errorf("%w: --table-template names the tables; drop --table", errUsage)
	case sf.schema != "" || sf.partition != "":
		return fmt.Errorf("%w: --table-template creates each table from its events' schema; drop --schema and --partition-spec", errUsage)
	case !kf.enabled():
		return fmt.Errorf("%w: --table-template reads Kafka topics: give --kafka-brokers", errUsage)
	case coordinator != "" && kf.group == "" || coordinator == "" && kf.group != "":
		return fmt.Errorf("%w: --table-template in several processes needs both --group (the consumer group splits each topic's partitions among them) and --coordinator (icesink coordinator --table-template)", errUsage)
	case format != changelog.DebeziumJSON.String() && format != changelog.DebeziumAvro.String():
		return fmt.Errorf("%w: --table-template needs events that carry their schema: --format debezium-json (with schemas) or debezium-avro", errUsage)
	case kf.topic == "" && f.regex == "":
		return fmt.Errorf("%w: --table-template needs --topic T1,T2,... or --topic-regex", errUsage)
	}
	if f.regex != "" {
		if _, err := regexp.Compile(f.regex); err != nil {
			return fmt.Errorf("%w: --topic-regex: %v", errUsage, err)
		}
	}
	if _, err := tableFor(f.template, "server.schema.table", exampleSource()); err != nil {
		return fmt.Errorf("%w: --table-template: %v", errUsage, err)
	}
	kf.anyTopics = true
	return nil
}

// topics are the topics --topic lists.
func (f *databaseFlags) topics(list string) []string {
	var out []string
	for t := range strings.SplitSeq(list, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// sourcePlaceholders are the template's placeholders taken from the
// source block of a topic's first event.
var sourcePlaceholders = []string{"{source.name}", "{source.db}", "{source.schema}", "{source.table}"}

// placeholders are every placeholder a --table-template may spell: the
// topic's parts, then the source block's.
var placeholders = append([]string{"{topic}", "{server}", "{db}", "{schema}", "{table}"}, sourcePlaceholders...)

// exampleSource stands for an event's source block where the template is
// only checked.
func exampleSource() *changelog.DebeziumSource {
	return &changelog.DebeziumSource{Server: "server", DB: "db", Schema: "schema", Table: "table"}
}

// fromSource reports whether template names tables from the events'
// source blocks (the topic's name alone does not say its table).
func fromSource(template string) bool { return strings.Contains(template, "{source.") }

// tableFor spells template for topic: {topic} is the whole name (dots as
// underscores), {server}, {db} (= {schema}) and {table} its first,
// second-to-last and last dot-separated parts; {source.name},
// {source.db}, {source.schema} and {source.table} are src's (the source
// block of the topic's first event; nil: the template has none of them).
func tableFor(template, topic string, src *changelog.DebeziumSource) (table.Identifier, error) {
	parts := strings.Split(topic, ".")
	schema := parts[0]
	if len(parts) >= 2 {
		schema = parts[len(parts)-2]
	}
	pairs := []string{
		"{topic}", strings.ReplaceAll(topic, ".", "_"),
		"{server}", parts[0],
		"{db}", schema,
		"{schema}", schema,
		"{table}", parts[len(parts)-1],
	}
	if src != nil {
		for i, v := range []string{src.Server, src.DB, src.Schema, src.Table} {
			p := sourcePlaceholders[i]
			if !strings.Contains(template, p) {
				continue
			}
			if v == "" {
				return nil, fmt.Errorf("topic %s: its events' source block has no %s for %s", topic, strings.Trim(p[len("{source."):], "}"), p)
			}
			// Event content fills one name part of the template, no more:
			// a dot would move the table to another namespace, a path
			// character out of its folder.
			if strings.Contains(v, ".") {
				return nil, fmt.Errorf("topic %s: its events' %s is %q, whose dot would place the table outside the template %s; refused", topic, strings.Trim(p, "{}"), v, template)
			}
			if err := warehouse.CheckName(v); err != nil {
				return nil, fmt.Errorf("topic %s: its events' %s cannot name a table in the template %s: %w; refused", topic, strings.Trim(p, "{}"), template, err)
			}
			pairs = append(pairs, p, v)
		}
	}
	name := strings.NewReplacer(pairs...).Replace(template)
	ident, err := warehouse.ParseIdent(name)
	if err != nil {
		return nil, fmt.Errorf("topic %s gives table %q: %w", topic, name, err)
	}
	var blank []string
	for _, p := range placeholders {
		blank = append(blank, p, "x")
	}
	if want := strings.Count(strings.NewReplacer(blank...).Replace(template), ".") + 1; len(ident) != want {
		return nil, fmt.Errorf("topic %s gives table %q, of %d name parts where the template %s has %d; refused", topic, name, len(ident), template, want)
	}
	return ident, nil
}

// tableOfSources is the table the first events of the topic's partitions
// name through template; partitions that name different tables are
// refused (a topic of {source.*} tables carries one table's events, and
// which partition answers first must not decide it).
func tableOfSources(template, topic string, srcs []partitionSource) (table.Identifier, error) {
	var ident table.Identifier
	var first int32
	for i, ps := range srcs {
		id, err := tableFor(template, topic, &ps.src)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			ident, first = id, ps.partition
			continue
		}
		if !slices.Equal(id, ident) {
			return nil, fmt.Errorf("topic %s: the first event of partition %d names table %s, that of partition %d names %s: a topic under a {source.*} template must carry one table's events; refused", topic, first, strings.Join(ident, "."), ps.partition, strings.Join(id, "."))
		}
	}
	if ident == nil {
		return nil, fmt.Errorf("topic %s: no event names its table", topic)
	}
	return ident, nil
}

// templatePattern matches the table names template spells: each
// placeholder stands for one name part (no dot).
func templatePattern(template string) (*regexp.Regexp, error) {
	if _, err := tableFor(template, "server.schema.table", exampleSource()); err != nil {
		return nil, err
	}
	quoted := regexp.QuoteMeta(template)
	for _, p := range placeholders {
		quoted = strings.ReplaceAll(quoted, regexp.QuoteMeta(p), `[^.]+`)
	}
	return regexp.Compile("^" + quoted + "$")
}

// databaseStateDir is the folder of the checkpoints of the coordinator of
// a database's tables in one process: DIR/database under a given
// --state-dir DIR, else WAREHOUSE/_icesink/database/SINK-ID (a local
// warehouse only). No table's folder (NS.NAME) is spelled so.
func databaseStateDir(whDir, stateDir, sinkID string) (string, error) {
	if stateDir != "" {
		return filepath.Join(stateDir, "database"), nil
	}
	if warehouse.IsObjectStore(whDir) {
		return "", fmt.Errorf("%w: --state-dir: with an object-storage warehouse, give a local folder for the coordinator's checkpoints", errUsage)
	}
	return filepath.Join(whDir, "_icesink", "database", sinkID), nil
}

// untilStop is ctx, cancelled also when stop is closed.
func untilStop(ctx context.Context, stop <-chan struct{}) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-sctx.Done():
		}
	}()
	return sctx, cancel
}

// database runs one sink per topic, each into its own table, in this
// process.
type database struct {
	wh        *warehouse.Warehouse
	base      sink.Config // without Ident; Writer.MemoryLimit is the process's budget
	kf        kafkaFlags
	format    changelog.Format
	dbz       changelog.DebeziumOptions
	evolve    bool
	spec      warehouse.TableSpec // properties of created tables
	overrides tableOverrides
	template  string
	warehouse string
	stdout    io.Writer
	stderr    io.Writer
	quiet     bool
	stats     bool
	// stopBound ends the memory governor and says what it did.
	stopBound func() membound.Stats
	// memProfile is --memprofile: where the heap profile nearest the
	// run's peak goes.
	memProfile string
	// grouped: one of several processes of a consumer group, each table's
	// writer joining its coordinator at the server --coordinator names.
	grouped                bool
	vnodesGiven, rowsGiven bool

	mu     sync.Mutex
	claims map[string]string // table -> the topic that goes to it (fromSource)
}

// tableRun is what one table's sink did.
type tableRun struct {
	topic   string
	ident   table.Identifier
	res     sink.Result
	err     error
	skipped string // why the topic was not run
}

// topics are the listed topics and those matching regex.
func (d *database) topics(ctx context.Context, listed []string, regex string) ([]string, error) {
	topics := slices.Clone(listed)
	if regex != "" {
		cfg := kafka.Config{Brokers: strings.Split(d.kf.brokers, ","), Security: d.kf.sec}
		found, err := kafka.Topics(ctx, cfg, regexp.MustCompile(regex))
		if err != nil {
			return nil, err
		}
		for _, t := range found {
			if !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("no topic matches --topic-regex %q", regex)
	}
	return topics, nil
}

// run starts a sink for every topic (listed, or matching regex), all at
// once, their writers sharing the memory budget by traffic (sink.Budget),
// waits for them and reports each. A table that fails does not stop the others; the run
// fails if one did. With refresh, a matching topic that appears ends the
// round: every table commits what it read and stops, and the next round
// starts them all again, the new one with them.
func (d *database) run(ctx context.Context, listed []string, regex string, refresh time.Duration) error {
	topics, err := d.topics(ctx, listed, regex)
	if err != nil {
		return err
	}
	total := map[string]*tableRun{}
	mon := startMonitor(d.memProfile)
	for {
		runs, grown, err := d.round(ctx, topics, listed, regex, refresh)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if t, ok := total[r.topic]; ok {
				r.res.Commits += t.res.Commits
				r.res.Changes += t.res.Changes
			}
			total[r.topic] = &r
		}
		if grown == nil || ctx.Err() != nil {
			break
		}
		d.base.Logger.Info("new topics match --topic-regex: starting their tables", "topics", strings.Join(slices.Collect(func(yield func(string) bool) {
			for _, t := range grown {
				if !slices.Contains(topics, t) && !yield(t) {
					return
				}
			}
		}), ","))
		topics = grown
	}
	peak := mon.stop()
	peak.bound = d.stopBound()
	if peak.profileErr != nil {
		fmt.Fprintf(d.stderr, "icesink: --memprofile: %v\n", peak.profileErr)
	}
	var errs []error
	var sum sink.Result
	for _, t := range topics {
		r := total[t]
		name := strings.Join(r.ident, ".")
		switch {
		case r.skipped != "":
			fmt.Fprintf(d.stderr, "icesink: topic %s: %s\n", r.topic, r.skipped)
		case r.err != nil:
			errs = append(errs, fmt.Errorf("table %s (topic %s): %w", name, r.topic, r.err))
		case !d.quiet:
			fmt.Fprintf(d.stdout, "table %s (topic %s): %d changes, %d commits, epoch %d committed\n",
				name, r.topic, r.res.Changes, r.res.Commits, r.res.Committed.Epoch)
		}
		sum.Stats = sum.Stats.Add(r.res.Stats)
		sum.Changes += r.res.Changes
		sum.Compactions += r.res.Compactions
	}
	if d.stats && len(errs) == 0 {
		fmt.Fprintf(d.stdout, "%d tables (counters: their sum; peak accounted bytes: the largest writer's)\n", len(topics))
		printStats(d.stdout, sum, peak, d.base.Writer.MemoryLimit, "process")
	}
	return errors.Join(errs...)
}

// round runs every topic's table until the input ends, or until a new
// matching topic appears (grown is then the new topic list).
func (d *database) round(ctx context.Context, topics, listed []string, regex string, refresh time.Duration) (runs []tableRun, grown []string, err error) {
	// Tables named from their events are known only as each run reads
	// its first one: each run claims its name, and the round's end checks
	// the overrides.
	if !fromSource(d.template) {
		seen := map[string]string{}
		for _, t := range topics {
			ident, err := tableFor(d.template, t, nil)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: --table-template: %v", errUsage, err)
			}
			name := strings.Join(ident, ".")
			if other, dup := seen[name]; dup {
				return nil, nil, fmt.Errorf("%w: --table-template: topics %s and %s both go to table %s", errUsage, other, t, name)
			}
			seen[name] = t
		}
		if names := d.overrides.unknownTables(seen); names != "" {
			return nil, nil, fmt.Errorf("%w: --tables: no topic goes to %s", errUsage, names)
		}
	}
	var budget *sink.Budget
	if total := d.base.Writer.MemoryLimit; total > 0 {
		// One budget for every table's writers, shared by traffic.
		bctx, stopBudget := context.WithCancel(ctx)
		defer stopBudget()
		var err error
		if budget, err = sink.DatabaseBudget(bctx, total, len(topics), d.base.Writers); err != nil {
			return nil, nil, budgetUsage(err)
		}
	}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if regex == "" || refresh <= 0 || d.kf.stopAtEnd {
			select {
			case <-ctx.Done():
				close(stop)
			case <-stop:
			}
			return
		}
		tick := time.NewTicker(refresh)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				close(stop)
				return
			case <-stop:
				return
			case <-tick.C:
				now, err := d.topics(ctx, listed, regex)
				if err != nil || len(now) <= len(topics) {
					continue // a failed listing is tried again
				}
				grown = now
				close(stop)
				return
			}
		}
	}()
	fetch := d.kf.fetchBytes
	if fetch == 0 && budget != nil {
		fetch = tableFetchBytes(budget.Total(), len(topics))
	}
	var db *sink.Database
	if !d.grouped {
		if db, err = d.startDatabase(ctx, topics); err != nil {
			close(stop)
			<-watched
			return nil, nil, err
		}
		defer func() {
			if cerr := db.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	runs = make([]tableRun, len(topics))
	var wg sync.WaitGroup
	for i, t := range topics {
		wg.Go(func() {
			runs[i] = d.runTable(ctx, t, budget, fetch, stop, db)
			if r := runs[i]; r.err != nil {
				// Said now, not only at the end of the run: the other
				// tables may go on for days (a consumer group's run ends
				// only at a signal).
				d.base.Logger.Error("a table stopped; the other tables go on", "table", strings.Join(r.ident, "."), "topic", t, "err", r.err)
			}
		})
	}
	wg.Wait()
	if fromSource(d.template) {
		named := map[string]string{}
		for _, r := range runs {
			if r.ident != nil {
				named[strings.Join(r.ident, ".")] = r.topic
			}
		}
		if names := d.overrides.unknownTables(named); names != "" {
			d.base.Logger.Warn("--tables names tables no topic's events went to", "tables", names)
		}
	}
	select {
	case <-stop:
	default:
		close(stop) // every table ended by itself
	}
	<-watched
	return runs, grown, nil
}

// startDatabase starts the coordinator of the round's tables, one epoch
// for all: a table per topic, its checkpoints in one state folder, its
// barriers ending every table's epochs at once (--checkpoint-interval).
// It outlives ctx: a stop commits what the tables read.
func (d *database) startDatabase(ctx context.Context, topics []string) (*sink.Database, error) {
	cfg := d.base
	var err error
	if cfg.StateDir, err = databaseStateDir(d.warehouse, cfg.StateDir, cfg.SinkID); err != nil {
		return nil, err
	}
	cfg.BarrierInterval = d.kf.interval
	var known []table.Identifier
	if !fromSource(d.template) {
		for _, t := range topics {
			if ident, err := tableFor(d.template, t, nil); err == nil {
				known = append(known, ident)
			}
		}
	} else {
		// Named from their first events: every table the template spells.
		match, err := templatePattern(d.template)
		if err != nil {
			return nil, err
		}
		if known, err = templateTables(ctx, d.wh.Catalog, match); err != nil {
			return nil, err
		}
	}
	return sink.StartDatabase(context.WithoutCancel(ctx), cfg, len(topics), known)
}

// claim gives table to topic, unless another topic goes to it.
func (d *database) claim(table, topic string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.claims == nil {
		d.claims = map[string]string{}
	}
	if other, ok := d.claims[table]; ok && other != topic {
		return fmt.Errorf("--table-template: topics %s and %s both go to table %s", other, topic, table)
	}
	d.claims[table] = topic
	return nil
}

// budgetUsage words a database budget too small (sink.BudgetError) as
// the flags to change.
func budgetUsage(err error) error {
	be, ok := errors.AsType[*sink.BudgetError](err)
	if !ok {
		return err
	}
	return fmt.Errorf("%w: --memory-limit %s is the process's budget in a database run: split over %d tables x %d writers it leaves %s a writer, less than the %s a writer needs; give --memory-limit %s or more, or fewer --writers",
		errUsage, humanize.IBytes(uint64(be.Total)), be.Tables, be.Writers, humanize.IBytes(uint64(be.PerWriter)), humanize.IBytes(deltawriter.MinMemoryLimit), humanize.IBytes(uint64(be.Need())))
}

// tableFetchBytes is what each of tables' Kafka clients reads ahead in
// one fetch under a process budget of total bytes: a 128th of the budget
// split over the tables, from 32 KiB to 1 MiB each. Fetched bytes sit
// outside the writers' shares, compressed: Debezium JSON with schemas
// takes 10-14 times its size once decompressed and decoded into records.
// At a 32nd (164 KiB each), 50 tables' read-ahead was 110 of the 184 MB
// of Go heap at the run's peak, and each fetch filled memory the process
// had not touched yet (page faults in snappy's decoder); at a 128th the
// same run took 0.95x the CPU. A table reading a 50th of the traffic
// needs a 50th of the read-ahead of one table reading it all.
func tableFetchBytes(total int64, tables int) int32 {
	return int32(min(max(total/128/int64(max(tables, 1)), 32<<10), 1<<20))
}

// runTable runs the sink of one topic into its table, creating the table
// from the events' schema when it does not exist; fetch is what its Kafka
// client reads ahead (0: kafka.Config's default). In one process its
// epochs are db's; in a consumer group, its table's coordinator's at the
// server.
func (d *database) runTable(ctx context.Context, topic string, budget *sink.Budget, fetch int32, stop <-chan struct{}, db *sink.Database) (r tableRun) {
	r.topic = topic
	kf := d.kf
	kf.topic, kf.fetchBytes = topic, fetch
	if !fromSource(d.template) {
		r.ident, r.err = tableFor(d.template, topic, nil)
	} else {
		// The round may end before the topic's first record.
		fctx, cancel := untilStop(ctx, stop)
		srcs, err := kf.firstSources(fctx, d.format)
		cancel()
		if errors.Is(err, kafka.ErrEmptyTopic) || err != nil && fctx.Err() != nil {
			r.skipped = "no records yet; its table is named from the first one's source block"
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		if r.ident, r.err = tableOfSources(d.template, topic, srcs); r.err == nil {
			r.err = d.claim(strings.Join(r.ident, "."), topic)
		}
	}
	if r.err != nil {
		return r
	}
	name := strings.Join(r.ident, ".")
	spec := d.spec
	tbl, err := d.wh.Catalog.LoadTable(ctx, r.ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		key, err := d.overrides.apply(name, &spec)
		if err != nil {
			r.err = err
			return r
		}
		// The round may end before the topic's first record.
		fctx, cancel := untilStop(ctx, stop)
		defer cancel()
		spec.Schema, r.err = kf.eventSchema(fctx, d.format, key...)
		if errors.Is(r.err, kafka.ErrEmptyTopic) || r.err != nil && fctx.Err() != nil {
			r.skipped, r.err = "no records yet; its table is created once the topic has one", nil
			return r
		}
		if r.err != nil {
			return r
		}
	}
	if err != nil {
		// Not there yet (created now from the events' schema), or the
		// catalog failed (LoadOrCreate says so naming the table); a table
		// that exists is not loaded twice.
		if tbl, _, err = d.wh.LoadOrCreate(ctx, r.ident, spec); err != nil {
			r.err = err
			return r
		}
	}
	ps := tbl.Spec()
	if err := deltawriter.CheckTable(tbl.Schema(), &ps); err != nil {
		r.err = err
		return r
	}
	kf.schema, kf.spec, kf.evolve = tbl.Schema(), tbl.Spec(), d.evolve
	cfg := d.base.ForTable(r.ident)
	cfg.Budget = budget
	if cfg.Progress != nil {
		cfg.Progress = commitLog(cfg.Logger)
	}
	if d.grouped {
		// The table's partitions among the group's processes, its
		// commits by its coordinator at the server; the round's stop
		// ends the input as a signal would.
		gctx, cancel := untilStop(ctx, stop)
		defer cancel()
		r.res, r.err = kf.runGroup(gctx, cfg, tbl.Schema(), d.format, d.dbz, d.vnodesGiven, d.rowsGiven, cfg.Logger)
		return r
	}
	// The database's barriers end the table's epochs, at the same epoch
	// as every other table's.
	cfg.Database, cfg.StateDir = db, ""
	if kf.interval > 0 {
		kf.interval = 0
		if !d.rowsGiven {
			// A table counting its own rows would end epochs the others
			// have not reached, and wait for them.
			cfg.CheckpointRows = math.MaxInt64
		}
	}
	dec, err := kf.decoder(d.format, tbl.Schema(), d.dbz)
	if err != nil {
		r.err = err
		return r
	}
	src, err := kf.open(ctx, dec, stop)
	if err != nil {
		r.err = err
		return r
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(src.Collector()); err != nil {
			src.Close()
			r.err = fmt.Errorf("registering the Kafka source's metrics: %w", err)
			return r
		}
	}
	in := &restartableInput{kafka: src, kf: &kf, reg: cfg.Registerer, format: d.format, schema: tbl.Schema(), dbz: d.dbz, stop: stop}
	r.res, r.err = in.run(ctx, context.WithoutCancel(ctx), cfg, src, cfg.Logger)
	for idle := 0; errors.Is(r.err, coordinator.ErrAborted) && idle < 10; {
		// Another table stopped with a window open, which aborted every
		// table's: this one goes on from what it committed. Ten aborts
		// in a row with no commit end it (its own failure, say).
		cfg.Logger.Info("another table's failure aborted the open window; going on from the table's offsets", "err", r.err)
		again, err := in.reopen(ctx)
		if err != nil {
			r.err = err
			break
		}
		prev := r.res
		r.res, r.err = in.run(ctx, context.WithoutCancel(ctx), cfg, again, cfg.Logger)
		if idle++; r.res.Commits > 0 {
			idle = 0
		}
		r.res.Start, r.res.Commits, r.res.Changes = prev.Start, r.res.Commits+prev.Commits, r.res.Changes+prev.Changes
	}
	in.kafka.Close()
	return r
}
