package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// benchIdent names the table every run writes.
func benchIdent() table.Identifier { return table.Identifier{"bench", "events"} }

const (
	benchSink = "icesink-bench"
	batchSize = 1024 // changes generated, then written, at a time
)

// openTable opens a fresh warehouse under dir and creates the stream's table.
func openTable(ctx context.Context, dir string, o StreamOptions, version int) (*warehouse.Warehouse, *table.Table, error) {
	wh, err := warehouse.Open(ctx, dir, warehouse.Options{})
	if err != nil {
		return nil, nil, err
	}
	props := iceberg.Properties{"format-version": strconv.Itoa(max(version, 2))}
	tbl, _, err := wh.LoadOrCreate(ctx, benchIdent(), warehouse.TableSpec{Schema: o.Schema(), Properties: props})
	if err != nil {
		wh.Close()
		return nil, nil, err
	}
	return wh, tbl, nil
}

// runWriter runs the upsert writer (Unbounded or Bounded) over the stream.
func runWriter(ctx context.Context, e *runEnv) (err error) {
	dirs, err := runDirs(e.dir, "warehouse", "spill")
	if err != nil {
		return err
	}
	wh, _, err := openTable(ctx, dirs[0], e.opts.Stream, e.opts.FormatVersion)
	if err != nil {
		return err
	}
	defer wh.Close()
	cm, err := commit.NewCommitter(ctx, wh.Catalog, benchIdent(), benchSink)
	if err != nil {
		return err
	}
	w, err := deltawriter.New(ctx, cm.Table(), deltawriter.Options{
		Mode:           e.opts.Mode,
		SinkID:         benchSink,
		MemoryLimit:    e.sc.MemoryLimit,
		SpillDir:       dirs[1],
		TargetFileSize: e.opts.TargetFileSize,
		RewriteDeleted: e.opts.RewriteDeleted,
		DeleteMode:     e.deleteMode(),
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.Close(ctx)) }()
	stream, err := NewStream(e.opts.Stream)
	if err != nil {
		return err
	}
	batch := make([]deltawriter.Change, batchSize)

	var changes, window int64
	var epoch uint64
	// A compaction round runs in the background while the writer writes
	// the next window, and the writer follows it before the window's
	// PrepareCommit, as in the sink (`run --maintain`).
	var compacting chan error
	follow := func() error {
		if compacting == nil {
			return nil
		}
		err := <-compacting
		compacting = nil
		if err != nil {
			return err
		}
		return w.Follow(ctx, cm.Table())
	}
	// compact runs a round as run --maintain does; all: the round that
	// ends the input (commit.Compaction.AllDeletes).
	compact := func(all bool) error {
		pol := commit.DefaultCompaction()
		pol.MinInputFiles = 2
		pol.MemoryLimit = e.sc.MemoryLimit
		pol.AllDeletes = all
		c, err := cm.Compact(ctx, pol)
		if err == nil && c.Snapshot != 0 {
			e.res.TableCompactions++
		}
		return err
	}
	commitWindow := func() error {
		if err := follow(); err != nil {
			return err
		}
		p, err := w.PrepareCommit(ctx)
		if err != nil {
			return err
		}
		e.res.tally(p.Files)
		epoch++
		cr, err := cm.Commit(ctx, epoch, []commit.Payload{p}, nil)
		if err != nil {
			return err
		}
		if err := w.Committed(ctx); err != nil {
			return err
		}
		if !cr.Empty {
			e.res.Commits++
			// The sink's default history bounds, as after its commits.
			if _, err := cm.Tidy(ctx, commit.DefaultRetention()); err != nil {
				return err
			}
		}
		if n := e.opts.CompactEvery; n > 0 && !cr.Empty && e.res.Commits%n == 0 {
			compacting = make(chan error, 1)
			go func(done chan<- error) {
				done <- compact(false)
			}(compacting)
		}
		return nil
	}

	e.pr.phase("write", e.opts.Stream.Rows)
	e.startTimed()
	defer e.stopTimed(0)
	began := time.Now()
	var gen time.Duration
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		n := stream.Fill(batch)
		gen += time.Since(t0)
		if n == 0 {
			break
		}
		for i := range batch[:n] {
			if err := w.Write(ctx, batch[i]); err != nil {
				return fmt.Errorf("change %d: %w", changes+int64(i)+1, err)
			}
		}
		changes += int64(n)
		window += int64(n)
		acc := w.BufferedBytes()
		e.res.PeakAccounted = max(e.res.PeakAccounted, acc)
		e.cell.accounted.Store(acc)
		e.cell.changes.Store(changes)
		e.pr.rows(changes)
		if e.opts.CommitEvery > 0 && window >= e.opts.CommitEvery {
			if err := commitWindow(); err != nil {
				return err
			}
			window = 0
		}
	}
	e.pr.phase("commit", 0)
	if err := commitWindow(); err != nil {
		return err
	}
	if err := follow(); err != nil {
		return err
	}
	if n := e.opts.CompactEvery; n > 0 && e.res.Commits >= n {
		// As a run whose input ended, having maintained its table.
		if err := compact(true); err != nil {
			return err
		}
		if err := w.Follow(ctx, cm.Table()); err != nil {
			return err
		}
	}
	elapsed := time.Since(began) - gen
	e.stopTimed(gen)
	e.res.Rows = changes
	e.res.Seconds = elapsed.Seconds()
	applyStats(e.res, w.Stats())

	if tasks, err := cm.Table().Scan().PlanFiles(ctx); err == nil {
		e.res.LiveDataFiles = len(tasks)
		del := map[string]bool{}
		for _, t := range tasks {
			for _, d := range append(append(t.DeleteFiles, t.EqualityDeleteFiles...), t.DeletionVectorFiles...) {
				del[d.FilePath()] = true
			}
		}
		e.res.LiveDeleteFiles = len(del)
	}
	if snap := cm.Table().CurrentSnapshot(); snap != nil {
		if fsys, err := cm.Table().FS(ctx); err == nil {
			if mans, err := snap.Manifests(fsys); err == nil {
				e.res.LiveManifests = len(mans)
			}
		}
	}
	e.pr.phase("scan", 0)
	if e.res.Scan, err = scanBest(ctx, cm.Table(), e.opts.Scans); err != nil {
		return err
	}
	if !e.sc.Equality {
		// What a restart pays: a new writer rebuilds its key index from
		// the committed table.
		// Then what a restart on an unchanged table pays: the writer takes
		// the index the rebuilt one saved.
		ro := deltawriter.Options{SinkID: benchSink, MemoryLimit: e.sc.MemoryLimit, SpillDir: dirs[1], KeyIndexDir: filepath.Join(dirs[1], "keyindex")}
		t0 := time.Now()
		rw, err := deltawriter.New(ctx, cm.Table(), ro)
		if err != nil {
			return fmt.Errorf("rebuilding the key index: %w", err)
		}
		st := rw.Stats()
		e.res.Rebuild = &RebuildResult{Seconds: time.Since(t0).Seconds(), Rows: st.IndexRebuildRows, Files: st.IndexRebuildFiles}
		if why, err := rw.SaveKeyIndex(ctx, cm.Table()); err != nil || why != "" {
			return fmt.Errorf("saving the key index: %q %w", why, err)
		}
		if err := rw.Close(ctx); err != nil {
			return err
		}
		t0 = time.Now()
		if rw, err = deltawriter.New(ctx, cm.Table(), ro); err != nil {
			return fmt.Errorf("reopening the key index: %w", err)
		}
		e.res.Rebuild.ReopenSeconds = time.Since(t0).Seconds()
		if rw.Stats().IndexesReused != 1 {
			return fmt.Errorf("the saved key index was not reused: %s", rw.Stats().IndexRebuildReason)
		}
		if err := rw.Close(ctx); err != nil {
			return err
		}
	}
	return nil
}

// tally counts a payload's files by kind.
func (r *RunResult) tally(files []commit.File) {
	for _, f := range files {
		var c *Files
		switch f.Kind {
		case commit.DataFile:
			c = &r.Data
		case commit.PositionDeleteFile, commit.DeletionVector:
			// (Deletion vectors count one file per vector: a Puffin file
			// holds several.)
			c = &r.PositionDeletes
		case commit.EqualityDeleteFile:
			c = &r.EqualityDeletes
		default:
			continue
		}
		c.Files++
		c.Rows += f.Rows
		c.Bytes += f.Bytes
	}
}

// scanTable reads every live row of tbl with iceberg-go's scanner (deletes
// applied) and times it.
// scanBest scans tbl n times (at least once) and returns the fastest.
func scanBest(ctx context.Context, tbl *table.Table, n int) (*ScanResult, error) {
	var best *ScanResult
	for i := 0; i < max(n, 1); i++ {
		s, err := scanTable(ctx, tbl)
		if err != nil {
			return nil, err
		}
		if best == nil || s.Seconds < best.Seconds {
			best = s
		}
	}
	return best, nil
}

func scanTable(ctx context.Context, tbl *table.Table) (*ScanResult, error) {
	settle()
	began := time.Now()
	var rows int64
	if tbl.CurrentSnapshot() != nil {
		_, recs, err := tbl.Scan().ToArrowRecords(ctx)
		if err != nil {
			return nil, fmt.Errorf("scanning %v: %w", tbl.Identifier(), err)
		}
		for rec, err := range recs {
			if err != nil {
				return nil, fmt.Errorf("scanning %v: %w", tbl.Identifier(), err)
			}
			rows += rec.NumRows()
			rec.Release()
		}
	}
	s := &ScanResult{Seconds: time.Since(began).Seconds(), Rows: rows}
	if s.Seconds > 0 {
		s.RowsPerSec = float64(rows) / s.Seconds
	}
	return s, nil
}

// deleteMode is the writer's delete mode in the run's scenario.
func (e *runEnv) deleteMode() deltawriter.DeleteMode {
	if e.sc.Equality {
		return deltawriter.DeleteByEquality
	}
	return deltawriter.DeleteByPosition
}
