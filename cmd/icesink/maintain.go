package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// cmdMaintain compacts a table once, then expires its history and merges
// its manifests. Run it while the sink is stopped (or use `run
// --maintain`): a running sink's writers cannot follow it, and the sink's
// next commit is refused as a foreign change; at its next start the sink
// rebuilds its key indexes from the compacted table.
func cmdMaintain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("maintain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help := newHelpTopics(fs)
	var (
		tf        tableFlags
		cf        compactionFlags
		rf        retentionFlags
		sinkID    *string
		rounds    *int
		orphans   *bool
		orphanAge *time.Duration
		config    *string
	)
	help.add("Warehouse and table", func(fs *flag.FlagSet) {
		tf.register(fs)
		sinkID = fs.String("sink-id", "icesink", "sink `ID` the compaction snapshots are marked with (icesink.maintained-by)")
	})
	help.add("Compaction", func(fs *flag.FlagSet) {
		rounds = fs.Int("rounds", 100, "at most `N` compaction rounds (each reads up to --compact-max-bytes)")
		cf.register(fs, false)
	})
	help.add("History and orphan files", func(fs *flag.FlagSet) {
		rf.register(fs)
		orphans = fs.Bool("remove-orphans", false, "also remove the files under the table's location that no snapshot or metadata lists and that are older than --orphans-older-than; the sink's own files are left to the sink, which removes its crashed windows' at start once its recorded epochs are committed")
		orphanAge = fs.Duration("orphans-older-than", 72*time.Hour, "with --remove-orphans: only files older than this `DURATION` (a writer may still be about to commit younger ones)")
	})
	help.add("Configuration", func(fs *flag.FlagSet) { config = registerConfig(fs) })
	if err := parseFlagsAndConfig(fs, args, config); err != nil {
		return err
	}
	if err := tf.check(); err != nil {
		return err
	}
	if *rounds < 0 || *orphanAge < 0 {
		return fmt.Errorf("%w: --rounds and --orphans-older-than must not be negative", errUsage)
	}
	policy, err := cf.compaction()
	if err != nil {
		return err
	}
	retention, err := rf.retention()
	if err != nil {
		return err
	}
	retention.CheckManifestsEvery = 1
	ident, err := warehouse.ParseIdent(tf.table)
	if err != nil {
		return fmt.Errorf("%w: --table: %v", errUsage, err)
	}
	wh, err := warehouse.Open(ctx, tf.warehouse, tf.options())
	if err != nil {
		return err
	}
	defer wh.Close()
	cm, err := commit.NewCommitter(ctx, wh.Catalog, ident, *sinkID)
	if err != nil {
		return err
	}
	var sum commit.Compacted
	n := 0
	for ; n < *rounds; n++ {
		c, err := cm.Compact(ctx, *policy)
		if err != nil {
			return fmt.Errorf("compaction round %d: %w", n+1, err)
		}
		if c.Snapshot == 0 {
			break
		}
		sum.RemovedDataFiles += c.RemovedDataFiles
		sum.AddedDataFiles += c.AddedDataFiles
		sum.RemovedDeleteFiles += c.RemovedDeleteFiles
		sum.BytesBefore += c.BytesBefore
		sum.BytesAfter += c.BytesAfter
	}
	t, err := cm.Tidy(ctx, *retention)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compaction: %d rounds, %d data files into %d, %d delete files dropped, %s read, %s written\n",
		n, sum.RemovedDataFiles, sum.AddedDataFiles, sum.RemovedDeleteFiles, humanize.IBytes(uint64(sum.BytesBefore)), humanize.IBytes(uint64(sum.BytesAfter)))
	fmt.Fprintf(stdout, "history: %d snapshots expired, %d data manifests and %d delete manifests merged\n", t.ExpiredSnapshots, t.RewrittenManifests, t.MergedDeletes)
	if *orphans {
		// Except the sink's own files: those may belong to an epoch its
		// coordinator recorded and will commit at its next start.
		n, err := commit.RemoveOrphanFiles(ctx, cm.Table(), commit.OrphanFiles{OlderThan: *orphanAge,
			Remove: func(p string) bool { return !deltawriter.SinkFile(p, *sinkID) }})
		if err != nil {
			return fmt.Errorf("removing orphan files: %w", err)
		}
		fmt.Fprintf(stdout, "orphans: %d files removed\n", n)
	}
	return nil
}
