package sink

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/localdir"
)

// writer is one deltawriter and its coordinator session.
type writer struct {
	dw   *deltawriter.Writer
	sess coordinator.Session
	in   chan batch
	// given holds the slices of batches the writer has written, cleared,
	// for the router's next batches to it (spare).
	given    chan spareSlices
	inCommit bool // the last error came from Commit: its files may be recorded
	// follow returns the table as it is before epoch's window is resolved
	// (loaded once per epoch for all writers): the writer's key index
	// follows it.
	follow func(ctx context.Context, epoch uint64) (*table.Table, error)
	// current returns the table as the sink last committed it (to save
	// the key index with).
	current func(context.Context) (*table.Table, error)
	// pub and pubBuffered are the writer's counters as it last published
	// them (after each batch), for the metrics.
	pub          atomic.Pointer[deltawriter.Stats]
	pubBuffered  atomic.Int64
	metrics      *runMetrics // metrics are on: publish after each batch
	countCommits bool        // record the commits in metrics (remote coordinator)
	// onCommit, when set, is told (in its own goroutine) of every epoch
	// this writer committed with its input's offsets.
	onCommit func(Position)
	done     bool // the final epoch is committed
	// share is the writer's part of Config.Budget (nil: none).
	share *budgetShare
	// stats are the writer's counters as the run left them, taken by
	// close before the deltawriter is closed: closing drops its index and
	// with it the spill counters (Stats after Close reads no spills).
	stats deltawriter.Stats
}

func (w *writer) run(ctx context.Context) error {
	var wake chan struct{} // nil without a shared budget: never ready
	if w.share != nil {
		wake = w.share.wake
	}
	for {
		var b batch
		select {
		case <-wake:
			// The share moved, also while the input is idle: a smaller
			// one is given back before the next change.
			n := w.share.limit.Load()
			if err := w.dw.SetMemoryLimit(ctx, n); err != nil {
				return err
			}
			w.share.applied.Store(n)
			continue
		case in, ok := <-w.in:
			if !ok {
				return nil
			}
			b = in
		}
		if err := w.batch(ctx, b); err != nil {
			return err
		}
		w.giveBack(b)
	}
}

// spareSlices are a written batch's slices, emptied.
type spareSlices struct {
	changes []deltawriter.Change
	lines   []int64
}

// spare returns empty slices for a new batch to the writer: a written
// batch's when the writer gave one back, else new ones of batchSize. A
// run would otherwise allocate (and grow) them again for every batch.
func (w *writer) spare() ([]deltawriter.Change, []int64) {
	select {
	case s := <-w.given:
		return s.changes, s.lines
	default:
		return make([]deltawriter.Change, 0, batchSize), make([]int64, 0, batchSize)
	}
}

// giveBack hands a written batch's slices to the router (spare), cleared
// first so that they keep no row alive.
func (w *writer) giveBack(b batch) {
	if cap(b.changes) == 0 {
		return
	}
	clear(b.changes)
	select {
	case w.given <- spareSlices{b.changes[:0], b.lines[:0]}:
	default:
	}
}

// batch writes one batch of the router's and, at a barrier, takes part in
// the checkpoint (and the commit when the coordinator calls one).
func (w *writer) batch(ctx context.Context, b batch) error {
	if b.schema != nil {
		if err := w.dw.Evolve(ctx, b.schema); err != nil {
			return err
		}
	}
	for i, ch := range b.changes {
		if err := w.dw.Write(ctx, ch); err != nil {
			if errors.Is(err, deltawriter.ErrBadChange) {
				return fmt.Errorf("line %d: %w", b.lines[i], err)
			}
			return err
		}
	}
	if w.metrics != nil {
		w.publish()
	}
	if w.share != nil {
		w.share.changes.Add(int64(len(b.changes)))
	}
	if !b.barrier {
		return nil
	}
	buffered := w.dw.BufferedBytes()
	var p *commit.Payload
	var err error
	if b.final {
		// A final epoch always commits (coordinator.Report): the window
		// is prepared before the report, so that a writer whose input
		// ended early writes its last files while the others still
		// read, instead of all of them after the last one's report.
		if p, err = w.prepare(ctx, b); err != nil {
			return err
		}
	}
	commitNow, err := w.sess.Checkpoint(ctx, b.epoch, buffered, b.final)
	if err == nil && p != nil && !commitNow {
		err = fmt.Errorf("the coordinator did not commit the writer's final epoch")
	}
	if err != nil {
		if p != nil {
			_ = w.dw.Discard(ctx, *p)
		}
		return fmt.Errorf("checkpoint of epoch %d: %w", b.epoch, err)
	}
	if commitNow {
		if p == nil {
			if p, err = w.prepare(ctx, b); err != nil {
				return err
			}
		}
		data, err := p.Marshal()
		if err != nil {
			return err
		}
		w.inCommit = true
		if err := w.sess.Commit(ctx, b.epoch, data); err != nil {
			if errors.Is(err, coordinator.ErrAborted) {
				w.inCommit = false
				_ = w.dw.Discard(ctx, *p)
			}
			return fmt.Errorf("commit of epoch %d: %w", b.epoch, err)
		}
		w.inCommit = false
		if w.metrics != nil {
			w.metrics.epochDone(b.epoch)
			if w.countCommits {
				w.metrics.remoteCommitted(b.line)
			}
		}
		if err := w.dw.Committed(ctx); err != nil {
			return err
		}
		if w.dw.CheckpointsKeyIndex() {
			// A restart after a crash takes the index as of this
			// commit instead of rebuilding it from the table.
			tbl, err := w.current(ctx)
			if err != nil {
				return err
			}
			if _, err := w.dw.CheckpointKeyIndex(ctx, tbl); err != nil {
				return err
			}
		}
		if w.onCommit != nil && len(b.offsets) > 0 {
			go w.onCommit(Position{Epoch: b.epoch, Line: b.line, InputID: b.inputID, Offsets: b.offsets})
		}
	}
	if b.final {
		w.done = true
	}
	return nil
}

// prepare ends the writer's window at barrier b: its positions are
// resolved on the table as it is now (the last compaction round waited
// for), and its files are closed into a payload that carries b's input
// position.
func (w *writer) prepare(ctx context.Context, b batch) (*commit.Payload, error) {
	if w.follow != nil {
		tbl, err := w.follow(ctx, b.epoch)
		if err != nil {
			return nil, err
		}
		if err := w.dw.Follow(ctx, tbl); err != nil {
			return nil, err
		}
	}
	p, err := w.dw.PrepareCommit(ctx)
	if err != nil {
		return nil, err
	}
	p.InputPosition, p.InputID, p.InputOffsets = b.line, b.inputID, b.offsets
	return &p, nil
}

// publish makes the writer's counters visible to the metrics.
func (w *writer) publish() {
	st := w.dw.Stats()
	w.pub.Store(&st)
	w.pubBuffered.Store(w.dw.BufferedBytes())
}

// close records the writer's counters, ends its session and drops its
// uncommitted window.
func (w *writer) close(ctx context.Context, failed bool) error {
	// The key index is saved while the session still holds the writer's
	// vnodes: no commit can have touched them since its last Committed.
	// A stop by signal saves it too (a quick restart is what it is for).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	var kerr error
	if tbl, err := w.current(sctx); err != nil {
		kerr = err
	} else {
		if w.follow != nil && !failed {
			// A compaction round after the last window: the index
			// follows it before it is saved. (A change by another
			// writer since is caught by the next run's check of the
			// saved index, not read here.)
			kerr = w.dw.Follow(sctx, tbl)
		}
		_, serr := w.dw.SaveKeyIndex(sctx, tbl)
		kerr = errors.Join(kerr, serr)
	}
	cancel()
	w.stats = w.dw.Stats()
	serr := w.sess.Close()
	if w.done && !failed {
		serr = nil
	}
	cerr := w.dw.Close(ctx)
	if w.share != nil {
		w.share.leave()
	}
	return errors.Join(serr, kerr, cerr)
}

// keyIndexDir returns the folder of the key index of the writer of
// vnodes: a digest of the sink, the table and the vnode set names it.
func keyIndexDir(cfg Config, tbl *table.Table, vnodes *roaring.Bitmap) string {
	base := keyIndexBase(cfg)
	if base == "" {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", cfg.SinkID, tbl.Metadata().TableUUID(), cfg.Vnodes)
	vnodes.WriteTo(h)
	return filepath.Join(base, fmt.Sprintf("%s%x", deltawriter.KeyIndexFolderPrefix, h.Sum(nil)[:12]))
}

// ForTable is cfg for table ident of a database run: its logs and metrics
// labelled with the table, and its key indexes in a folder of its own
// (t-NS.NAME under KeyIndexBase), so that closing one table's sink
// sweeps its own stale key indexes, not every table's.
func (cfg Config) ForTable(ident table.Identifier) Config {
	name := strings.Join(ident, ".")
	cfg.Ident = ident
	if cfg.Logger != nil {
		cfg.Logger = cfg.Logger.With("table", name)
	}
	if cfg.Registerer != nil {
		cfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"table": name}, cfg.Registerer)
	}
	if base := cfg.KeyIndexBase(); base != "" {
		cfg.KeyIndexDir = filepath.Join(base, "t-"+name)
	}
	return cfg
}

// KeyIndexBase returns the folder the writers keep their key index folders
// in ("": none): Config.KeyIndexDir with its default applied.
func (cfg Config) KeyIndexBase() string { return keyIndexBase(cfg) }

// keyIndexBase returns the folder of the writers' key index folders ("":
// none).
func keyIndexBase(cfg Config) string {
	switch base := cfg.KeyIndexDir; base {
	case "-":
		return ""
	case "":
		if cfg.Writer.SpillDir == "" {
			return localdir.DefaultKeyIndexBase()
		}
		return filepath.Join(cfg.Writer.SpillDir, "icesink-keyindex")
	default:
		return base
	}
}

// writerSetup is what openWriter needs of the run.
type writerSetup struct {
	index       int
	vnodes      *roaring.Bitmap
	cm          *commit.Committer
	ec          *epochCommitter // nil: a remote coordinator
	connect     func(ctx context.Context, vnodes *roaring.Bitmap, opts ...coordinator.ConnectOption) (coordinator.Session, error)
	job         map[string]string
	view        *tableView
	byPartition bool
}

// openWriter connects writer ws.index to the coordinator for its vnodes
// and opens its deltawriter (with its key index, built or loaded) on the
// table as the coordinator left it.
func openWriter(ctx context.Context, cfg Config, ws writerSetup) (*writer, error) {
	i, b, cm, ec := ws.index, ws.vnodes, ws.cm, ws.ec
	sess, err := ws.connect(ctx, b, coordinator.WithVnodeCount(cfg.Vnodes), coordinator.WithJob(ws.job))
	if err != nil {
		return nil, fmt.Errorf("connecting writer %d (vnodes %s): %w", i, coordinator.FormatVnodes(b), err)
	}
	if ec != nil {
		// Recovered epochs may have started a compaction round: the
		// committer is its until it ends, and the index is built after.
		ec.waitMaintenance()
	}
	wopts := cfg.Writer
	wopts.Writer = i
	if wopts.DeleteMode == deltawriter.DeleteByPosition {
		// The key index is built from the table as the coordinator
		// left it (recorded epochs committed at the first join), and
		// holds only this writer's vnodes.
		if err := cm.Refresh(ctx); err != nil {
			sess.Close()
			return nil, err
		}
		owned, vnodes := b.Clone(), uint64(cfg.Vnodes)
		wopts.Owns = func(h uint64) bool { return owned.Contains(uint32(h % vnodes)) }
		if ws.byPartition {
			wopts.Owns = nil // a partition's keys are not known by hash
		}
		wopts.KeyIndexDir = keyIndexDir(cfg, cm.Table(), b)
	}
	var share *budgetShare
	if cfg.Budget != nil {
		// Created with an even split (its caches' size), then given its
		// share.
		wopts.MemoryLimit = cfg.Budget.initial()
		share = cfg.Budget.join()
	}
	dw, err := deltawriter.New(ctx, cm.Table(), wopts)
	if err == nil && share != nil {
		n := share.limit.Load()
		if err = dw.SetMemoryLimit(ctx, n); err != nil {
			dw.Close(ctx)
		}
		share.applied.Store(n)
	}
	if err != nil {
		if share != nil {
			share.leave()
		}
		sess.Close()
		return nil, err
	}
	w := &writer{dw: dw, sess: sess, share: share, in: make(chan batch, 4), given: make(chan spareSlices, 2), current: func(ctx context.Context) (*table.Table, error) {
		return lastTable(ctx, cm, ec)
	}}
	// Each window follows the table as it is before the window's
	// positions are resolved: the sink's commits and compactions, and
	// other writers' changes (the key index is rebuilt), so that the
	// committer's check passes and the index's base stays inside the
	// retained history.
	w.follow = ws.view.at
	return w, nil
}

// lastTable returns the table as this process's last commit and
// compaction round left it (ec: the process commits), or as the catalog
// holds it now (under a remote coordinator).
func lastTable(ctx context.Context, cm *commit.Committer, ec *epochCommitter) (*table.Table, error) {
	if ec != nil {
		return ec.table(), nil
	}
	if err := cm.Refresh(ctx); err != nil {
		return nil, err
	}
	return cm.Table(), nil
}

// closeWriters closes the run's writers (saving their key indexes), adds
// their counters to res, and removes the key index folders this sink can
// never reuse; it returns err joined with what failed.
func closeWriters(ctx context.Context, cfg Config, cm *commit.Committer, ec *epochCommitter, writers []*writer, res *Result, err error) error {
	for _, w := range writers {
		if w != nil {
			err = errors.Join(err, w.close(ctx, err != nil))
			res.Writers = append(res.Writers, w.stats)
			res.Stats = res.Stats.Add(w.stats)
		}
	}
	if base := keyIndexBase(cfg); base != "" && cfg.Writer.DeleteMode == deltawriter.DeleteByPosition && err == nil {
		// The writers saved theirs: what else this sink left there
		// (an older writer layout, a crashed run) cannot be reused.
		// Judged by the table they were saved with.
		if tbl, err := lastTable(context.WithoutCancel(ctx), cm, ec); err == nil {
			if _, err := deltawriter.RemoveStaleKeyIndexes(base, tbl, cfg.SinkID); err != nil {
				log := cfg.Logger
				if log == nil {
					log = slog.Default()
				}
				log.Warn("removing stale key indexes", "err", err)
			}
		}
	}
	return err
}
