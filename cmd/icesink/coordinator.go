package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	verbose := fs.Bool("v", false, "log the coordinator's decisions (writers joining and leaving, epochs committed, aborts) to stderr")
	config := registerConfig(fs)
	if err := parseFlagsAndConfig(fs, args, config); err != nil {
		return err
	}
	if err := tf.check(); err != nil {
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
	ident, err := warehouse.ParseIdent(tf.table)
	if err != nil {
		return fmt.Errorf("%w: --table: %v", errUsage, err)
	}
	wh, err := warehouse.Open(ctx, tf.warehouse, tf.options())
	if err != nil {
		return err
	}
	defer wh.Close()
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
	c, stop, err := sink.StartCoordinator(ctx, sink.Config{
		Loader: wh.Catalog, Ident: ident, SinkID: *sinkID, CommitInterval: *interval,
		CommitBytes: cb, Vnodes: *vnodeCount, BarrierInterval: *checkpointInterval, StateDir: *stateDir, Retention: retention, Timeouts: timeouts,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})), Registerer: reg,
	})
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
