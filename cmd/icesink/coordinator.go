package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/coordgrpc"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// cmdCoordinator serves the vnode-aligned coordinator over gRPC for
// writers in other processes (icesink run --coordinator HOST:PORT --vnodes ...).
func cmdCoordinator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help := newHelpTopics(fs)
	var (
		tf                               tableFlags
		sf                               specFlags
		rf                               retentionFlags
		tof                              timeoutFlags
		secf                             securityFlags
		listen, commitBytes, metricsAddr *string
		sinkID, stateDir, template       *string
		interval                         *uint64
		vnodeCount                       *int
		checkpointInterval               *time.Duration
		verbose                          *bool
		config                           *string
	)
	help.add("Warehouse and tables", func(fs *flag.FlagSet) {
		tf.register(fs)
		template = fs.String("table-template", "", "serve the coordinators of every table `NS.NAME` this template spells (as icesink run --table-template: {topic}, {server}, {db}, {schema}, {table}, {source.*} each match one name part) instead of one --table: one coordinator for all of them, one epoch over every table (each committed in its own transaction), a table joining when its first writer does, with that writer's vnode count (its topic's partitions)")
		sinkID = fs.String("sink-id", "icesink", "sink `ID` recorded in snapshot summaries")
		stateDir = fs.String("state-dir", "", "`DIR` for the coordinator's checkpoints (default: DIR/_icesink/NS.NAME/SINK-ID; with --table-template DIR/_icesink/database/SINK-ID, and a given DIR gets DIR/database)")
	})
	help.add("New tables", sf.register)
	help.add("Serving writers", func(fs *flag.FlagSet) {
		listen = fs.String("listen", "127.0.0.1:7480", "`HOST:PORT` to serve writers on (without --tls-cert and --auth-token-file: loopback or a trusted network only)")
		vnodeCount = fs.Int("vnode-count", 256, "number `N` of vnodes (with --table-template: at most this many a table, its topic's partitions)")
		secf.register(fs, true)
	})
	help.add("Epochs and commits", func(fs *flag.FlagSet) {
		checkpointInterval = fs.Duration("checkpoint-interval", 10*time.Second, "ask every writer to end its checkpoint this often, every `DURATION` (Kafka consumer-group writers end theirs only then); 0 = off")
		interval = fs.Uint64("commit-interval", 1, "commit every `K` checkpoints")
		commitBytes = fs.String("commit-bytes", "0", "also commit when all writers together buffer this `SIZE`; 0 = off")
		tof.register(fs)
	})
	help.add("History", rf.register)
	help.add("Output and monitoring", func(fs *flag.FlagSet) {
		metricsAddr = fs.String("metrics-listen", "", "serve Prometheus metrics (icesink_commits_total, icesink_commit_duration_seconds, ...) at http://`HOST:PORT`/metrics")
		verbose = fs.Bool("v", false, "log the coordinator's decisions (writers joining and leaving, epochs committed, aborts) to stderr")
		config = registerConfig(fs)
	})
	if err := parseFlagsAndConfig(fs, args, config); err != nil {
		return err
	}
	if *template != "" {
		switch {
		case tf.warehouse == "":
			return fmt.Errorf("%w: --warehouse is required", errUsage)
		case tf.table != "":
			return fmt.Errorf("%w: --table-template serves every table it spells; drop --table", errUsage)
		case sf.schema != "" || sf.partition != "":
			return fmt.Errorf("%w: --table-template: the writers create the tables from their events; drop --schema and --partition-spec", errUsage)
		}
	} else if err := tf.check(); err != nil {
		return err
	}
	if err := warehouse.CheckName(*sinkID); err != nil {
		return fmt.Errorf("%w: --sink-id: %v", errUsage, err)
	}
	retention, err := rf.retention()
	if err != nil {
		return err
	}
	timeouts, err := tof.timeouts()
	if err != nil {
		return err
	}
	sec, err := secf.security()
	if err != nil {
		return err
	}
	cb, err := parseSize(*commitBytes)
	if err != nil {
		return fmt.Errorf("%w: --commit-bytes: %v", errUsage, err)
	}
	wh, err := warehouse.Open(ctx, tf.warehouse, tf.options())
	if err != nil {
		return err
	}
	defer wh.Close()
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	var reg prometheus.Registerer
	if *metricsAddr != "" {
		r, stopMetrics, err := serveMetrics(*metricsAddr, stderr)
		if err != nil {
			return err
		}
		defer stopMetrics()
		reg = r
	}
	base := sink.Config{
		Loader: wh.Catalog, SinkID: *sinkID, CommitInterval: *interval,
		CommitBytes: cb, Vnodes: *vnodeCount, BarrierInterval: *checkpointInterval, Retention: retention, Timeouts: timeouts,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})), Registerer: reg,
	}
	if *template != "" {
		return serveTables(ctx, wh.Catalog, base, *template, *listen, *stateDir, tf.warehouse, sec, stderr)
	}
	ident, err := warehouse.ParseIdent(tf.table)
	if err != nil {
		return fmt.Errorf("%w: --table: %v", errUsage, err)
	}
	spec, err := sf.spec()
	if err != nil {
		return err
	}
	tbl, _, err := wh.LoadOrCreate(ctx, ident, spec)
	if err != nil {
		return err
	}
	// Refuse a table the writers cannot upsert into before they join.
	if _, err := deltawriter.NewKeyCodec(tbl.Schema()); err != nil {
		return fmt.Errorf("table %s: %w", tf.table, err)
	}
	if *stateDir == "" {
		if *stateDir, err = tf.localStateDir(*sinkID); err != nil {
			return err
		}
	}
	cfg := base
	cfg.Ident, cfg.StateDir = ident, *stateDir
	c, stop, err := sink.StartCoordinator(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	fmt.Fprintf(stderr, "icesink coordinator: sink %q on %s, serving writers on %s\n", *sinkID, tf.table, lis.Addr())
	err = coordgrpc.Serve(ctx, lis, c, sec.ServerOptions()...)
	if errors.Is(err, coordinator.ErrFailed) {
		return fmt.Errorf("%w\n(the recorded epoch stays in %s; a restart commits it once its cause is fixed. An epoch that can never commit (its files are gone) is dropped by moving that folder away: its writers then redo it from the input)", err, *stateDir)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// serveTables serves one coordinator for every table template spells
// (icesink coordinator --table-template): a sink.Database, one epoch over
// all of them, each table's writers (of any process) in a slot of
// base.Vnodes vnodes taken at its first writer, its commits its own
// transactions; one state folder.
func serveTables(ctx context.Context, cat catalog.Catalog, base sink.Config, template, listen, stateDir, whDir string, sec coordgrpc.Security, stderr io.Writer) error {
	match, err := templatePattern(template)
	if err != nil {
		return fmt.Errorf("%w: --table-template: %v", errUsage, err)
	}
	if base.StateDir, err = databaseStateDir(whDir, stateDir, base.SinkID); err != nil {
		return err
	}
	known, err := templateTables(ctx, cat, match)
	if err != nil {
		return err
	}
	// The server's lifetime: a signal stops it after the listener.
	db, err := sink.StartDatabase(context.WithoutCancel(ctx), base, (1<<20)/base.Vnodes, known)
	if err != nil {
		return err
	}
	defer db.Close()
	lookup := func(ctx context.Context, job map[string]string, vnodeCount int) (coordgrpc.Connector, error) {
		name := job[coordinator.JobTable]
		switch {
		case name == "":
			return nil, fmt.Errorf("%w: the writer names no table (an icesink older than this coordinator?)", coordinator.ErrJobMismatch)
		case !match.MatchString(name):
			return nil, fmt.Errorf("%w: table %s is not one of --table-template %s", coordinator.ErrJobMismatch, name, template)
		}
		return db.Remote(ctx, name, job, vnodeCount)
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	fmt.Fprintf(stderr, "icesink coordinator: sink %q on the tables of %s (state in %s), serving writers on %s\n", base.SinkID, template, base.StateDir, lis.Addr())
	// A failed coordinator ends the server (a restart recovers it).
	sctx, cancel := untilStop(ctx, db.Done())
	defer cancel()
	err = coordgrpc.ServeLookup(sctx, lis, lookup, sec.ServerOptions()...)
	if err == nil {
		if cerr := db.Err(); errors.Is(cerr, coordinator.ErrFailed) {
			return fmt.Errorf("%w\n(the recorded epoch stays in %s; a restart commits it once its cause is fixed)", cerr, base.StateDir)
		}
	}
	return err
}

// templateTables lists the catalog's tables whose names the template's
// pattern matches: a database coordinator with no state yet starts after
// their epochs.
func templateTables(ctx context.Context, cat catalog.Catalog, match *regexp.Regexp) ([]table.Identifier, error) {
	nss, err := cat.ListNamespaces(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing the catalog's namespaces: %w", err)
	}
	var out []table.Identifier
	for _, ns := range nss {
		for ident, err := range cat.ListTables(ctx, ns) {
			if err != nil {
				return nil, fmt.Errorf("listing the tables of %s: %w", strings.Join(ns, "."), err)
			}
			if match.MatchString(strings.Join(ident, ".")) {
				out = append(out, ident)
			}
		}
	}
	return out, nil
}
