// Package sink is the pipeline of one icesink job: input records are routed
// by key to the writers, checkpoints are counted, and on a commit
// checkpoint every writer's window is committed together as one snapshot
// that records the sink id, the epoch and the input position, so that a
// rerun after a crash continues where the table left off.
//
// It wires deltawriter, commit and coordinator together; the upsert rules,
// the commit protocol and the catalog live in those packages.
package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
)

// Source yields input records in order; *changelog.Decoder is one.
type Source interface {
	Next() (changelog.Record, error)
}

// Config configures a Run.
type Config struct {
	// Loader is the catalog holding the table Ident.
	Loader commit.TableLoader
	Ident  table.Identifier
	// SinkID names the sink in snapshot summaries; a rerun must use the
	// same id to continue. Default "icesink".
	SinkID string
	// Writer configures every writer (mode, memory limit, file sizes).
	Writer deltawriter.Options
	// CheckpointRows ends a checkpoint every so many input rows, besides
	// barrier lines. Default 100000.
	CheckpointRows int64
	// CommitInterval commits every so many checkpoints. Default 1.
	CommitInterval uint64
	// Progress, when set, is called after every checkpoint and at the end.
	Progress func(Progress)
}

func (c Config) withDefaults() Config {
	if c.SinkID == "" {
		c.SinkID = "icesink"
	}
	if c.CheckpointRows <= 0 {
		c.CheckpointRows = 100000
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 1
	}
	c.Writer.SinkID = c.SinkID
	return c
}

// Progress is a snapshot of a run's counters.
type Progress struct {
	Line    int64 // input lines consumed, counting those skipped on resume
	Changes int64 // changes applied by this run
	Commits int   // snapshots committed by this run
	Epoch   uint64
	Elapsed time.Duration
}

// Position is where a sink's committed state ends.
type Position struct {
	Epoch uint64 // the last committed epoch (0: none)
	Line  int64  // input lines the committed state covers
}

// Result is what a Run did.
type Result struct {
	Start     Position // where the run started
	Committed Position // what the table holds for the sink when the run ended
	Progress           // the final counters
	Stats     deltawriter.Stats
}

// Resume returns the position the table holds for the sink: its last
// committed epoch and the input lines that epoch covers.
func Resume(ctx context.Context, cfg Config) (Position, error) {
	cfg = cfg.withDefaults()
	cm, err := commit.NewCommitter(ctx, cfg.Loader, cfg.Ident, cfg.SinkID)
	if err != nil {
		return Position{}, err
	}
	return positionOf(cm)
}

func positionOf(cm *commit.Committer) (Position, error) {
	last, ok := cm.Last()
	if !ok {
		return Position{}, nil
	}
	line, err := strconv.ParseInt(last.Properties[commit.PropInputPosition], 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("snapshot %d of sink %q has no valid %s: %w", last.SnapshotID, cm.Table().Identifier(), commit.PropInputPosition, err)
	}
	return Position{Epoch: last.Epoch, Line: line}, nil
}

// Run writes src into the table from position start (the caller has
// already skipped start.Line lines of the input). It commits every
// CommitInterval checkpoints and at the end of the input. On a bad input
// line or any error the open window is aborted (its files removed) and
// the error returned; what was committed before stays, and Result says so.
func Run(ctx context.Context, cfg Config, src Source, start Position) (Result, error) {
	cfg = cfg.withDefaults()
	res := Result{Start: start, Committed: start}
	res.Line, res.Epoch = start.Line, start.Epoch
	began := time.Now()
	cm, err := commit.NewCommitter(ctx, cfg.Loader, cfg.Ident, cfg.SinkID)
	if err != nil {
		return res, err
	}
	w, err := deltawriter.New(ctx, cm.Table(), cfg.Writer)
	if err != nil {
		return res, err
	}
	defer func() { res.Stats = w.Stats() }()
	fail := func(err error) (Result, error) {
		res.Elapsed = time.Since(began)
		res.Stats = w.Stats()
		return res, errors.Join(err, w.Close(ctx))
	}
	var rows int64 // since the last checkpoint
	checkpoint := func(line int64, final bool) error {
		res.Epoch++
		rows = 0
		if final || res.Epoch%cfg.CommitInterval == 0 {
			p, err := w.PrepareCommit(ctx)
			if err != nil {
				return err
			}
			props := map[string]string{commit.PropInputPosition: strconv.FormatInt(line, 10)}
			cr, err := cm.Commit(ctx, res.Epoch, []commit.Payload{p}, props)
			if err != nil {
				// The outcome may be unknown; the files are left for the
				// rerun to find committed or to ignore.
				return err
			}
			if !cr.Empty {
				res.Committed = Position{Epoch: res.Epoch, Line: line}
				if !cr.AlreadyCommitted {
					res.Commits++
				}
			}
		}
		if cfg.Progress != nil {
			res.Elapsed = time.Since(began)
			cfg.Progress(res.Progress)
		}
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		rec, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		res.Line = rec.Line
		if rec.Barrier {
			if err := checkpoint(rec.Line, false); err != nil {
				return fail(err)
			}
			continue
		}
		for _, ch := range rec.Changes {
			if err := w.Write(ctx, ch); err != nil {
				if errors.Is(err, deltawriter.ErrBadChange) {
					return fail(fmt.Errorf("line %d: %w", rec.Line, err))
				}
				return fail(err)
			}
			res.Changes++
		}
		if rows++; rows >= cfg.CheckpointRows {
			if err := checkpoint(rec.Line, false); err != nil {
				return fail(err)
			}
		}
	}
	if err := checkpoint(res.Line, true); err != nil {
		return fail(err)
	}
	res.Elapsed = time.Since(began)
	res.Stats = w.Stats()
	return res, w.Close(ctx)
}
