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
	"sync"
	"time"

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
	var tf tableFlags
	tf.register(fs)
	listen := fs.String("listen", "127.0.0.1:7480", "`HOST:PORT` to serve writers on (without --tls-cert and --auth-token-file: loopback or a trusted network only)")
	interval := fs.Uint64("commit-interval", 1, "commit every `K` checkpoints")
	commitBytes := fs.String("commit-bytes", "0", "also commit when all writers together buffer this much; 0 = off")
	vnodeCount := fs.Int("vnode-count", 256, "number of vnodes")
	metricsAddr := fs.String("metrics-listen", "", "serve Prometheus metrics (icesink_commits_total, icesink_commit_duration_seconds, ...) at http://`HOST:PORT`/metrics")
	checkpointInterval := fs.Duration("checkpoint-interval", 10*time.Second, "ask every writer to end its checkpoint this often (Kafka consumer-group writers end theirs only then); 0 = off")
	sinkID := fs.String("sink-id", "icesink", "sink `ID` recorded in snapshot summaries")
	stateDir := fs.String("state-dir", "", "`DIR` for the coordinator's checkpoints (default: DIR/_icesink/NS.NAME/SINK-ID)")
	var sf specFlags
	sf.register(fs)
	var rf retentionFlags
	rf.register(fs)
	var tof timeoutFlags
	tof.register(fs)
	var secf securityFlags
	secf.register(fs, true)
	template := fs.String("table-template", "", "serve the coordinators of every table `NS.NAME` this template spells (as icesink run --table-template: {topic}, {server}, {db}, {schema}, {table}, {source.*} each match one name part) instead of one --table: a table's coordinator starts when its first writer joins, with that writer's vnode count (its topic's partitions), its state in --state-dir/NS.NAME")
	verbose := fs.Bool("v", false, "log the coordinator's decisions (writers joining and leaving, epochs committed, aborts) to stderr")
	config := registerConfig(fs)
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
		return serveTables(ctx, base, *template, *listen, *stateDir, tf.warehouse, sec, stderr)
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

// tableCoordinators are the coordinators of a server of many tables
// (icesink coordinator --table-template): one per table, started when its
// first writer joins and started again at the next join after it failed.
type tableCoordinators struct {
	base     sink.Config // without Ident, StateDir
	match    *regexp.Regexp
	template string
	stateDir string // --state-dir, or "" for WAREHOUSE/_icesink
	whDir    string
	mu       sync.Mutex
	running  map[string]tableCoordinator
}

type tableCoordinator struct {
	c    *coordinator.Coordinator
	stop func() error
}

// lookup is the server's coordgrpc.Lookup.
func (t *tableCoordinators) lookup(ctx context.Context, job map[string]string, vnodeCount int) (*coordinator.Coordinator, error) {
	name := job[coordinator.JobTable]
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: the writer names no table (an icesink older than this coordinator?)", coordinator.ErrJobMismatch)
	case !t.match.MatchString(name):
		return nil, fmt.Errorf("%w: table %s is not one of --table-template %s", coordinator.ErrJobMismatch, name, t.template)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tc, ok := t.running[name]; ok {
		select {
		case <-tc.c.Done():
			// Failed or stopped: its state is read again by a new one.
			t.base.Logger.Warn("the table's coordinator stopped; starting it again", "table", name, "err", tc.c.Err())
			_ = tc.stop()
			delete(t.running, name)
		default:
			return tc.c, nil
		}
	}
	ident, err := warehouse.ParseIdent(name)
	if err != nil {
		return nil, fmt.Errorf("%w: table %q: %v", coordinator.ErrJobMismatch, name, err)
	}
	cfg := forTable(t.base, ident)
	if vnodeCount > 0 {
		cfg.Vnodes = vnodeCount
	}
	if cfg.StateDir, err = tableStateDir(t.whDir, t.stateDir, name, cfg.SinkID); err != nil {
		return nil, err
	}
	// The server's lifetime, not the joining writer's.
	c, stop, err := sink.StartCoordinator(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, fmt.Errorf("starting the coordinator of table %s: %w", name, err)
	}
	t.running[name] = tableCoordinator{c: c, stop: stop}
	t.base.Logger.Info("coordinating a table", "table", name, "vnodes", cfg.Vnodes, "state", cfg.StateDir)
	return c, nil
}

// close stops every table's coordinator.
func (t *tableCoordinators) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, tc := range t.running {
		if err := tc.stop(); err != nil {
			t.base.Logger.Warn("stopping the table's coordinator", "table", name, "err", err)
		}
	}
	clear(t.running)
}

// serveTables serves the coordinators of every table template spells.
func serveTables(ctx context.Context, base sink.Config, template, listen, stateDir, whDir string, sec coordgrpc.Security, stderr io.Writer) error {
	match, err := templatePattern(template)
	if err != nil {
		return fmt.Errorf("%w: --table-template: %v", errUsage, err)
	}
	if _, err := tableStateDir(whDir, stateDir, "", base.SinkID); err != nil {
		return err
	}
	tc := &tableCoordinators{base: base, match: match, template: template, stateDir: stateDir, whDir: whDir, running: map[string]tableCoordinator{}}
	defer tc.close()
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	fmt.Fprintf(stderr, "icesink coordinator: sink %q on the tables of %s, serving writers on %s\n", base.SinkID, template, lis.Addr())
	return coordgrpc.ServeLookup(ctx, lis, tc.lookup, sec.ServerOptions()...)
}
