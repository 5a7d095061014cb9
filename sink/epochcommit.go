package sink

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/statestore"
	"github.com/icesink/icesink/spill"
	"github.com/icesink/icesink/warehouse"
)

// tableView loads the table once per epoch for the writers of a run, which
// follow it before they resolve a window's positions. With the
// in-process coordinator it is the epoch committer's table, reloaded under
// its lock (after a running compaction round); under a remote one, this
// process's committer only loads.
type tableView struct {
	ec *epochCommitter // nil: a remote coordinator
	cm *commit.Committer

	mu   sync.Mutex
	load epochLoad
}

// at returns the table as the catalog holds it now, loaded at most once
// per epoch.
func (v *tableView) at(ctx context.Context, epoch uint64) (*table.Table, error) {
	if v.ec != nil {
		return v.ec.tableAt(ctx, epoch)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.load.table(ctx, v.cm, epoch)
}

// epochLoad reloads a committer's table at most once per epoch: the
// first call for an epoch reloads, later ones return what it loaded. Its
// owner's lock guards it.
type epochLoad struct {
	loaded bool
	epoch  uint64
}

func (l *epochLoad) table(ctx context.Context, cm *commit.Committer, epoch uint64) (*table.Table, error) {
	if !l.loaded || l.epoch != epoch {
		if err := cm.Refresh(ctx); err != nil {
			return nil, err
		}
		l.loaded, l.epoch = true, epoch
	}
	return cm.Table(), nil
}

// epochCommitter commits an epoch's payloads for the coordinator, one
// epoch at a time, and remembers the last position committed.
type epochCommitter struct {
	cm           *commit.Committer
	retain       commit.Retention
	compact      *commit.Compaction // nil: none
	compactEvery int
	log          *slog.Logger
	mu           sync.Mutex
	pos          Position
	n            int
	compacted    commit.Compacted // summed over the run
	compactions  int
	// runCtx is the run's: a compaction round runs in the background
	// under it. maint, when not nil, is closed when that round ends.
	runCtx context.Context
	maint  chan struct{}
	// metrics, when set, records commits and compactions.
	metrics *commitMetrics
	// onCommit, when set, is told of every commit (in its own goroutine).
	onCommit func(Position)
	// latency is the last commit's duration in the catalog.
	latency time.Duration
	// load: the table reloaded once per epoch (tableAt).
	load epochLoad
	// failpoint, when set, is told of the crash points of the commits
	// and compactions (deltawriter.Options.Failpoint).
	failpoint func(string)
}

// fail calls the failpoint hook, if any.
func (e *epochCommitter) fail(point string) {
	if e.failpoint != nil {
		e.failpoint(point)
	}
}

// waitMaintenance returns once no compaction round is running.
func (e *epochCommitter) waitMaintenance() {
	e.mu.Lock()
	ch := e.maint
	e.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// table returns the table as the last commit and the compaction round
// after it (waited for) left it.
func (e *epochCommitter) table() *table.Table {
	e.waitMaintenance()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cm.Table()
}

// tableAt returns the table as the catalog holds it now (once a running
// compaction round ended), reloaded at most once per epoch.
func (e *epochCommitter) tableAt(ctx context.Context, epoch uint64) (*table.Table, error) {
	e.waitMaintenance()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.load.table(ctx, e.cm, epoch)
}

// compactRound runs one compaction round in the background; the next
// CommitEpoch and table() wait for it. Called with e.mu held.
func (e *epochCommitter) compactRound(epoch uint64) {
	ch := make(chan struct{})
	e.maint = ch
	go func() {
		defer close(ch)
		e.compactNow(epoch, *e.compact, "compacted the table")
	}()
}

// finish runs, once a finite input ended, a round that also rewrites
// every data file a delete applies to (commit.Compaction.AllDeletes):
// the table the run leaves has no delete for a reader to apply. Only a
// run that maintained its table (committed a round's period of epochs)
// does: a bulk load of a window or a few leaves its files as they are,
// since rewriting them would cost about what the load did. A failure
// leaves the table as it was.
func (e *epochCommitter) finish() {
	e.waitMaintenance()
	e.mu.Lock()
	n, pol, epoch := e.n, e.compact, e.pos.Epoch
	e.mu.Unlock()
	if pol == nil || n < e.compactEvery {
		return
	}
	p := *pol
	p.AllDeletes = true
	e.compactNow(epoch, p, "compacted the table at the end of the input")
}

// compactNow runs one round of policy p after epoch and counts it.
func (e *epochCommitter) compactNow(epoch uint64, p commit.Compaction, done string) {
	t0 := time.Now()
	c, err := e.cm.Compact(e.runCtx, p)
	if err == nil && c.Snapshot != 0 {
		e.fail("compaction-committed") // before the writers follow it
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil:
		e.log.Warn("compacting the table", "after-epoch", epoch, "err", err)
	case c.Snapshot != 0:
		e.compactions++
		if e.metrics != nil {
			e.metrics.compactions.Add(1)
		}
		e.compacted.RemovedDataFiles += c.RemovedDataFiles
		e.compacted.AddedDataFiles += c.AddedDataFiles
		e.compacted.RemovedDeleteFiles += c.RemovedDeleteFiles
		e.compacted.BytesBefore += c.BytesBefore
		e.compacted.BytesAfter += c.BytesAfter
		e.log.Info(done, "after-epoch", epoch, "data-files-removed", c.RemovedDataFiles, "data-files-added", c.AddedDataFiles,
			"delete-files-removed", c.RemovedDeleteFiles, "seconds", time.Since(t0).Seconds())
	}
}

func (e *epochCommitter) CommitEpoch(ctx context.Context, epoch uint64, payloads [][]byte) error {
	e.waitMaintenance()
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := make([]commit.Payload, 0, len(payloads))
	var line int64
	// Offsets carry over: a writer reports those of its own partitions.
	offsets := maps.Clone(e.pos.Offsets)
	for _, b := range payloads {
		if len(b) == 0 {
			continue
		}
		p, err := commit.UnmarshalPayload(b)
		if err != nil {
			return err
		}
		// Every writer reads the whole input and ends the epoch at the same
		// line; if they disagree, the resume position would skip or repeat
		// some writer's lines, so nothing is committed. (A partitioned
		// input's processes read their own partitions: the offsets say
		// where each resumes.)
		if len(ps) > 0 && p.InputPosition != ps[0].InputPosition && len(p.InputOffsets) == 0 {
			return fmt.Errorf("sink: epoch %d: one writer's window ends at input line %d, another's at line %d; the writers must read the same input with the same checkpoints (--checkpoint-rows)",
				epoch, ps[0].InputPosition, p.InputPosition)
		}
		line = p.InputPosition
		ps = append(ps, p)
		for k, v := range p.InputOffsets {
			if offsets == nil {
				offsets = map[string]string{}
			}
			offsets[k] = v
		}
	}
	if len(offsets) > 0 {
		// The records read over all partitions, whoever read them.
		line = 0
		for _, v := range offsets {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("sink: epoch %d: offset %q is not a number", epoch, v)
			}
			line += n
		}
	}
	props := map[string]string{commit.PropInputPosition: strconv.FormatInt(line, 10)}
	maps.Copy(props, offsets)
	if len(ps) > 0 && ps[0].InputID != "" {
		props[commit.PropInputID] = ps[0].InputID
	}
	t0 := time.Now()
	res, err := e.cm.Commit(ctx, epoch, ps, props)
	switch {
	case errors.Is(err, commit.ErrForeignChange):
		// The table changed under the epoch (another writer's commit won
		// the race, a rollback): the coordinator drops it and the writers
		// read their input again from what the table holds.
		return fmt.Errorf("%w: %w", coordinator.ErrStale, err)
	case errors.Is(err, commit.ErrForeignPayload) || errors.Is(err, commit.ErrFenced):
		return fmt.Errorf("%w: %w", coordinator.ErrPermanent, err) // another attempt sees the same table
	}
	if err != nil {
		return err
	}
	if !res.Empty && !res.AlreadyCommitted {
		e.fail("epoch-committed") // in the table, not yet acknowledged to the writers
	}
	if res.Recorded {
		// No file, but offsets moved: the table properties keep them.
		e.pos = Position{Epoch: epoch, Line: line, Offsets: offsets}
		if len(ps) > 0 {
			e.pos.InputID = ps[0].InputID
		}
		if e.onCommit != nil {
			go e.onCommit(e.pos)
		}
	}
	if !res.Empty {
		e.pos = Position{Epoch: epoch, Line: line, Offsets: offsets}
		if len(ps) > 0 {
			e.pos.InputID = ps[0].InputID
		}
		if e.onCommit != nil {
			go e.onCommit(e.pos)
		}
		if !res.AlreadyCommitted {
			e.n++
			e.latency = time.Since(t0)
			if e.metrics != nil {
				e.metrics.committed(time.Since(t0), line)
			}
		}
		// The epoch is committed whatever tidying does: a failure (a
		// concurrent commit) is retried after the next epoch.
		if _, err := e.cm.Tidy(ctx, e.retain); err != nil && e.log != nil {
			e.log.Warn("tidying the table history", "epoch", epoch, "err", err)
		}
		// A compaction round starts in the background: the writers keep
		// writing the next window, and each follows the round
		// (deltawriter.Writer.Follow, waiting for it) before it resolves
		// that window's positions; the next epoch's commit waits for it
		// too. A failure leaves the table as it was.
		if e.compact != nil && !res.AlreadyCommitted && e.n%e.compactEvery == 0 {
			e.compactRound(epoch)
		}
	}
	return nil
}

// StartCoordinator starts the vnode-aligned coordinator of the sink cfg
// describes, committing to its table and checkpointing in cfg.StateDir,
// for writers that join it over a transport (coordgrpc.Serve). stop closes
// it and its state store.
func StartCoordinator(ctx context.Context, cfg Config) (c *coordinator.Coordinator, stop func() error, err error) {
	cfg = cfg.withDefaults()
	if err := warehouse.CheckName(cfg.SinkID); err != nil {
		return nil, nil, fmt.Errorf("sink id: %w", err)
	}
	if err := cfg.Timeouts.check(); err != nil {
		return nil, nil, err
	}
	cm, err := commit.NewCommitter(ctx, cfg.Loader, cfg.Ident, cfg.SinkID)
	if err != nil {
		return nil, nil, err
	}
	// Writers of other processes could not follow a compaction.
	cfg.Compaction = nil
	c, ec, stop, err := startCoordinator(ctx, cfg, cm)
	if err != nil || cfg.Registerer == nil {
		return c, stop, err
	}
	m := newCommitMetrics()
	if err := cfg.Registerer.Register(m); err != nil {
		stop()
		return nil, nil, fmt.Errorf("registering the coordinator's metrics: %w", err)
	}
	ec.mu.Lock()
	ec.metrics = m
	ec.mu.Unlock()
	return c, func() error {
		cfg.Registerer.Unregister(m)
		return stop()
	}, nil
}

// newEpochCommitter commits for the sink cfg describes through cm; ctx
// is the run's (its compaction rounds run under it).
func newEpochCommitter(ctx context.Context, cfg Config, cm *commit.Committer) *epochCommitter {
	ec := &epochCommitter{cm: cm, retain: *cfg.Retention, log: cfg.Logger, compact: cfg.Compaction, compactEvery: cfg.CompactEvery, runCtx: ctx, failpoint: cfg.Writer.Failpoint}
	// Commits carry the offsets of partitions no writer reports forward.
	ec.pos, _ = positionOf(cm)
	if ec.log == nil {
		ec.log = slog.Default()
	}
	return ec
}

// openStateStore opens the coordinator's state folder cfg.StateDir, locked
// for this run (in memory without one); closeStore closes and unlocks it.
func openStateStore(ctx context.Context, cfg Config) (store coordinator.StateStore, closeStore func() error, err error) {
	if cfg.StateDir == "" {
		return &coordinator.MemStore{}, func() error { return nil }, nil
	}
	// One run of a sink at a time on its state folder: a second one
	// (a rolling deploy, a restart that did not wait) would sweep the
	// first's checkpoints and remove its in-flight files.
	unlock, err := lockStateDir(cfg)
	if err != nil {
		return nil, nil, err
	}
	st, err := statestore.Open(ctx, statestore.Options{Dir: cfg.StateDir, InFileEnabled: true, NoStateError: coordinator.ErrNoState})
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return st, func() error { return errors.Join(st.Close(), unlock()) }, nil
}

func startCoordinator(ctx context.Context, cfg Config, cm *commit.Committer) (*coordinator.Coordinator, *epochCommitter, func() error, error) {
	ec := newEpochCommitter(ctx, cfg, cm)
	store, closeStore, err := openStateStore(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if cfg.StateDir != "" {
		if err := checkRecorded(ctx, store, cm, ec.log); err != nil {
			closeStore()
			return nil, nil, nil, fmt.Errorf("the coordinator's state in %s does not belong to table %v: %w (move that folder away to start afresh; the files of its epochs are then left as orphans)", cfg.StateDir, cfg.Ident, err)
		}
	}
	// This run is the sink's one committer from now on: a run still going
	// elsewhere (a rolling deploy) is fenced off at its next commit.
	if err := cm.Claim(ctx, newRunID()); err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	var opts []coordinator.Option
	if cfg.Logger != nil {
		opts = append(opts, coordinator.WithLogger(cfg.Logger))
	}
	if cfg.Timeouts.Commit > 0 {
		opts = append(opts, coordinator.WithCommitTimeout(cfg.Timeouts.Commit))
	}
	coord, err := coordinator.Start(ctx, coordinator.Config{
		Vnodes: cfg.Vnodes, CommitInterval: cfg.CommitInterval, CommitBytes: cfg.CommitBytes,
		AlignTimeout: ticks(cfg.Timeouts.Align), PayloadTimeout: ticks(cfg.Timeouts.Payload),
		BarrierInterval: ticks(cfg.BarrierInterval),
		Job:             jobOf(cm.Table(), cfg.SinkID),
	}, ec, store, opts...)
	if err != nil {
		closeStore()
		return nil, nil, nil, err
	}
	stop := func() error { return errors.Join(coord.Close(), closeStore()) }
	return coord, ec, stop, nil
}

// newRunID names a run of a sink: random, so that two runs never share it.
func newRunID() string {
	var b [8]byte
	_, _ = cryptorand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrSinkRunning is returned by Run when another process runs the same
// sink on the same state folder.
var ErrSinkRunning = errors.New("another run of the sink holds its state folder")

// lockStateDir takes cfg.StateDir's LOCK (flock: released when the process
// dies) and returns its release.
func lockStateDir(cfg Config) (func() error, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the coordinator's state folder: %w", err)
	}
	lock, err := spill.OSFS{}.Lock(filepath.Join(cfg.StateDir, "LOCK"))
	switch {
	case errors.Is(err, spill.ErrLocked):
		return nil, fmt.Errorf("%w: sink %q, %s (two runs of one sink would remove each other's files and checkpoints): stop the other run first", ErrSinkRunning, cfg.SinkID, cfg.StateDir)
	case errors.Is(err, spill.ErrLockUnsupported):
		return func() error { return nil }, nil
	case err != nil:
		return nil, fmt.Errorf("locking the coordinator's state folder: %w", err)
	}
	return lock.Close, nil
}

// jobOf is what a sink's writers and coordinator must agree on before any
// file is written: the table (by UUID, so another warehouse's table of the
// same name differs), its partition spec and format, and the sink. Not
// the schema: it evolves while writers run (each process evolves it when
// its events need it), and the committer reloads the table for a payload
// written with a schema it does not know yet. (Keys only one side knows
// are not compared: a coordinator's state saved with a schema-id is read.)
// The table's name (coordinator.JobTable) lets a server of many tables
// find the table's coordinator.
func jobOf(tbl *table.Table, sinkID string) map[string]string {
	meta := tbl.Metadata()
	return map[string]string{
		coordinator.JobTable: strings.Join(tbl.Identifier(), "."),
		"table-uuid":         meta.TableUUID().String(),
		"spec-id":            strconv.Itoa(meta.DefaultPartitionSpec()),
		"format-version":     strconv.Itoa(meta.Version()),
		"sink-id":            sinkID,
	}
}

func (e *epochCommitter) committed() (Position, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pos, e.n
}
