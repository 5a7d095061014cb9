package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/deltawriter"
)

// heldDeadLetterer is a source that can send the record it held back on a
// schema change to its dead-letter topic (kafka.Source).
type heldDeadLetterer interface {
	DeadLetterHeld(why error) error
}

// batch is what the router hands a writer: changes, then possibly the end
// of a checkpoint.
type batch struct {
	changes []deltawriter.Change
	lines   []int64
	barrier bool
	epoch   uint64
	line    int64 // the input line the checkpoint ends at
	inputID string
	offsets map[string]string // an OffsetSource's position at the checkpoint
	final   bool
	// schema, when set, is the table's evolved schema: the writer takes it
	// before the batch's changes.
	schema *iceberg.Schema
}

const batchSize = 1024

// routeInput reads src, routes each change to the writer owning its vnode,
// and sends every writer every checkpoint.
func routeInput(ctx context.Context, cfg Config, src Source, writers []*writer, route []int, res *Result, ec *epochCommitter) error {
	kc, err := deltawriter.NewKeyCodec(writers[0].dw.Schema())
	if err != nil {
		return err
	}
	if setter, ok := src.(SchemaSetter); ok && cfg.EvolveSchema {
		// The source decodes into the schema the writers took from the
		// table: another process may have evolved it since the source
		// was made (a group's member meets it at every new assignment).
		if err := setter.SetSchema(writers[0].dw.Schema()); err != nil {
			return fmt.Errorf("sink: decoding with the table's schema: %w", err)
		}
	}
	pending := make([]batch, len(writers))
	send := func(i int) error {
		select {
		case writers[i].in <- pending[i]:
			pending[i] = batch{}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	report := func() {
		if cfg.Progress == nil {
			return
		}
		if ec != nil { // in process: the commits so far (a remote coordinator's show at the end)
			res.LastCommit, res.Commits = ec.committed()
			ec.mu.Lock()
			res.CommitLatency = ec.latency
			ec.mu.Unlock()
		}
		cfg.Progress(res.Progress)
	}
	var rows int64
	var key []byte
	osrc, _ := src.(OffsetSource)
	psrc, byPartition := src.(partitionedSource)
	byPartition = byPartition && psrc.RoutesByPartition()
	// With a partitioned input under a remote coordinator, the
	// coordinator's barriers end the epochs: want is the highest epoch it
	// asked to end, and a barrier record from the source ends one only
	// while want is ahead of the epochs already ended.
	var want atomic.Uint64
	bsrc, followBarriers := src.(barrierSource)
	if followBarriers {
		// A source waiting for records returns a barrier when the run is
		// canceled, so the router sees it.
		defer context.AfterFunc(ctx, bsrc.RequestBarrier)()
	}
	followBarriers = followBarriers && (byPartition && cfg.Connect != nil || cfg.Database != nil && cfg.Connect == nil)
	if followBarriers {
		stop := make(chan struct{})
		defer close(stop)
		for _, w := range writers {
			bs, ok := w.sess.(barrierSession)
			if !ok {
				continue
			}
			go func() {
				for {
					select {
					case e := <-bs.Barriers():
						for old := want.Load(); e > old && !want.CompareAndSwap(old, e); old = want.Load() {
						}
						bsrc.RequestBarrier()
					case <-stop:
						return
					case <-ctx.Done():
						return
					}
				}
			}()
		}
	}
	checkpoint := func(line int64, final bool) error {
		id := inputID(cfg, src)
		var offsets map[string]string
		if osrc != nil {
			id, offsets = osrc.Identity(), osrc.Offsets()
		}
		res.Epoch++
		rows = 0
		if m := writers[0].metrics; m != nil {
			m.ended.Store(res.Epoch)
		}
		for i := range writers {
			pending[i].barrier, pending[i].epoch, pending[i].line, pending[i].final = true, res.Epoch, line, final
			pending[i].inputID, pending[i].offsets = id, offsets
			if err := send(i); err != nil {
				return err
			}
		}
		report()
		return nil
	}
	evolvedLast := false // the last Next ended in a schema change
	// evolve changes the table's schema as the source asks and hands the
	// new schema to every writer, after the changes routed before.
	evolve := func(decodeErr error, sc *changelog.SchemaChangeError) error {
		setter, ok := src.(SchemaSetter)
		if !cfg.EvolveSchema || !ok {
			return decodeErr
		}
		if evolvedLast {
			// The decoder still refuses what the new schema holds.
			return fmt.Errorf("sink: the table's schema changed, and the events still differ from it: %w", decodeErr)
		}
		evolvedLast = true
		tbl, err := commit.EvolveSchema(ctx, cfg.Loader, cfg.Ident, sc.Columns)
		if err != nil {
			err = fmt.Errorf("%w (%v)", err, decodeErr)
			if dl, ok := src.(heldDeadLetterer); ok && errors.Is(err, commit.ErrSchemaChange) {
				// With a dead-letter topic the record goes there, and
				// the table goes on.
				evolvedLast = false
				return dl.DeadLetterHeld(err)
			}
			return err
		}
		schema := tbl.Schema()
		for i := range writers {
			if len(pending[i].changes) > 0 || pending[i].schema != nil {
				if err := send(i); err != nil {
					return err
				}
			}
			pending[i].schema = schema
		}
		if err := setter.SetSchema(schema); err != nil {
			return err
		}
		res.SchemaChanges++
		cfg.Logger.Info("the table's schema follows the events", "table", strings.Join(cfg.Ident, "."), "schema-id", schema.ID, "change", sc.Error())
		return nil
	}
	began := time.Now()
	for {
		rec, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			sc, ok := errors.AsType[*changelog.SchemaChangeError](err)
			if !ok {
				return err
			}
			if err := evolve(err, sc); err != nil {
				return err
			}
			continue
		}
		evolvedLast = false
		res.Line = rec.Line
		res.Elapsed = time.Since(began)
		if rec.Barrier {
			if err := ctx.Err(); err != nil {
				return err
			}
			if followBarriers && want.Load() <= res.Epoch {
				continue // the coordinator's request for an epoch already ended
			}
			if err := checkpoint(rec.Line, false); err != nil {
				return err
			}
			continue
		}
		for _, ch := range rec.Changes {
			key, err = kc.Append(key[:0], ch.Row)
			if err != nil {
				return fmt.Errorf("line %d: %w", rec.Line, err)
			}
			var i int
			if byPartition {
				i = route[psrc.Vnode()] - 1
			} else {
				i = route[coordinator.VnodeOf(key, cfg.Vnodes)] - 1
			}
			if i < 0 {
				continue // another process's writer owns this vnode
			}
			p := &pending[i]
			if p.changes == nil {
				p.changes, p.lines = writers[i].spare()
			}
			p.changes = append(p.changes, ch)
			p.lines = append(p.lines, rec.Line)
			res.Changes++
			if len(p.changes) >= batchSize {
				if err := send(i); err != nil {
					return err
				}
				report() // between checkpoints too
			}
		}
		if rows++; rows >= cfg.CheckpointRows {
			if err := checkpoint(rec.Line, false); err != nil {
				return err
			}
		}
	}
	return checkpoint(res.Line, true)
}
