// Package sink is the pipeline of one icesink job: input records are routed
// by key vnode to the writers, every writer reports every checkpoint to the
// vnode-aligned coordinator, and on a commit epoch all writers' windows go
// into one snapshot that records the sink id, the epoch and the input
// position, so that a rerun after a crash continues where the table left
// off.
//
// It wires changelog, deltawriter, commit and coordinator together; the
// upsert rules, the commit protocol and the catalog live in those packages.
package sink

import (
	"cmp"
	"context"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/statestore"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/localdir"
	"github.com/icesink/icesink/spill"
	"github.com/icesink/icesink/warehouse"
)

// Source yields input records in order; *changelog.Decoder is one.
type Source interface {
	Next() (changelog.Record, error)
	// Skip consumes n lines without decoding them (resuming after a commit).
	Skip(n int64) error
}

// OffsetSource is a Source whose position is not a count of lines but
// offsets of its own (a Kafka topic's partitions): Offsets are recorded
// with every commit as summary properties (commit.PropOffsetPrefix) and
// handed back to Seek on resume, instead of Skip.
type OffsetSource interface {
	Source
	// Seek makes Next continue after the sink's last commit: offsets are
	// the properties it recorded (nil: none), position its record count.
	Seek(ctx context.Context, offsets map[string]string, position int64) error
	// Offsets returns the properties saying how far Next has read.
	Offsets() map[string]string
	// Identity names the input; a resume on another input is refused.
	Identity() string
}

// partitionedSource is an OffsetSource whose records carry their vnode: a
// Kafka source restricted to the partitions a consumer group assigned to
// this process, where vnode = partition. A key must then stay in one
// partition, and each writer's key index holds the whole table (the rows
// of a vnode cannot be told from the key).
type partitionedSource interface {
	OffsetSource
	// RoutesByPartition reports whether records carry their vnode.
	RoutesByPartition() bool
	// PartitionVnodes is the vnode (partition) count, known after Seek.
	PartitionVnodes() int
	// Vnode is the vnode of the record Next returned last.
	Vnode() int
}

// barrierSource is a source that can end a checkpoint when asked (a Kafka
// source: RequestBarrier makes its Next return a barrier promptly, also
// while it waits for records).
type barrierSource interface {
	RequestBarrier()
}

// barrierSession is a coordinator session that passes on the
// coordinator's requests to end an epoch (sink.Config.BarrierInterval).
type barrierSession interface {
	Barriers() <-chan uint64
}

// committedNotifier is an OffsetSource told of each commit (a Kafka
// source commits the offsets to its consumer group, for monitoring).
type committedNotifier interface {
	Committed(ctx context.Context, offsets map[string]string) error
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
	// CommitBytes, when positive, also commits an epoch whose writers
	// together buffer at least this many bytes (the coordinator sums every
	// writer's report and decides for all). Default 0: off.
	CommitBytes int64
	// Writers is the number of writers in this process; the vnodes are
	// split evenly among them. Default 1.
	Writers int
	// Vnodes is the number of vnodes keys are routed by. Default 256.
	Vnodes int
	// StateDir keeps the in-process coordinator's checkpoints (pending
	// pre-commit payloads); empty keeps them in memory only, and a crash
	// between recording and committing an epoch then redoes the epoch
	// from the input instead of committing the recorded files.
	StateDir string
	// KeyIndexDir is where the writers keep their key indexes between runs
	// (DeleteByPosition): one subfolder per sink, table and vnode set, so
	// that a restart on an unchanged table skips the rebuild. Default:
	// icesink-keyindex in Writer.SpillDir, or without one the user's
	// cache folder (localdir.DefaultKeyIndexBase); "-" keeps none. The
	// folder must be this user's alone (localdir.Private): a key index
	// another user could write would decide which rows get deleted.
	KeyIndexDir string
	// Compaction, when set, has the coordinator rewrite the table's small
	// data files (their deletes applied) every CompactEvery commits,
	// between two epochs, in a snapshot of its own; the writers' key
	// indexes follow the moved rows before their next window. Only with
	// the in-process coordinator. nil: no compaction.
	Compaction *commit.Compaction
	// CompactEvery is the number of commits between compaction rounds.
	// Default 10.
	CompactEvery int
	// Connect, when set, joins an external coordinator (over gRPC) instead
	// of starting one in process: this process runs one writer owning
	// OwnVnodes and writes only the rows routed to them.
	Connect   func(ctx context.Context, vnodes *roaring.Bitmap, opts ...coordinator.ConnectOption) (coordinator.Session, error)
	OwnVnodes *roaring.Bitmap
	// Progress, when set, is called after every checkpoint, every 1024
	// changes a writer is handed, and at the end, on the routing
	// goroutine: it must return quickly.
	Progress func(Progress)
	// Registerer, when set, gets the run's Prometheus metrics (icesink_*:
	// per writer changes, rows, deletes by kind, buffered, accounted and
	// spilled bytes, index lookups by tier; commits, their latency, the
	// time of the last one, compactions; epochs ended and pending) for the
	// run's duration. For StartCoordinator: the commit metrics, until stop.
	Registerer prometheus.Registerer
	// Retention bounds the table history after each commit (snapshot
	// expiry, data-manifest merges), so that a sink running for weeks
	// keeps flat memory and commit cost. nil: commit.DefaultRetention();
	// a zero Retention keeps all history.
	Retention *commit.Retention
	// InputID, when set, is the identity of the input recorded with every
	// commit and checked on resume (a rerun must give the same). Empty: a
	// fingerprint of the input's first bytes when the Source can give one
	// (changelog.Decoder.Identity).
	InputID string
	// BarrierInterval, for a coordinator serving other processes
	// (StartCoordinator), asks every writer to end its epoch this often
	// (coordinator.Config.BarrierInterval): writers reading a partitioned
	// input (a Kafka consumer group) end their checkpoints only then, all
	// at the same epoch. 0: off; writers end epochs on their own.
	BarrierInterval time.Duration
	// Timeouts bound the coordinator's waits; zero fields take their
	// defaults.
	Timeouts Timeouts
	// Logger receives the coordinator's log: its decisions (joins, epochs
	// committed, writers that left, aborts) at Debug level, failures at
	// Warn and Error. Default slog.Default().
	Logger *slog.Logger
}

// Timeouts bound what the coordinator waits for. A wait that runs out
// fails the epoch with a coordinator.TimeoutError naming what was missing
// (vnodes, writers); the sink then stops and a rerun redoes the epoch.
type Timeouts struct {
	// Align is how long an epoch waits, from its first report, for every
	// vnode's report. Default 60s.
	Align time.Duration
	// Payload is how long a commit epoch waits, from its decision, for
	// every writer's payload. Default 60s.
	Payload time.Duration
	// Commit bounds each attempt to commit an epoch to the catalog.
	// Default 5m.
	Commit time.Duration
}

// check reports a negative timeout.
func (t Timeouts) check() error {
	if t.Align < 0 || t.Payload < 0 || t.Commit < 0 {
		return fmt.Errorf("sink: negative timeout in %+v", t)
	}
	return nil
}

// ticks converts a timeout into the coordinator's ticks (0 stays 0, the
// default; anything shorter than a tick is one tick).
func ticks(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(max((d+coordinator.DefaultTick-1)/coordinator.DefaultTick, 1))
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
	if c.Writers <= 0 {
		c.Writers = 1
	}
	if c.Vnodes <= 0 {
		c.Vnodes = coordinator.DefaultVnodes
	}
	if c.Retention == nil {
		r := commit.DefaultRetention()
		c.Retention = &r
	}
	if c.CompactEvery <= 0 {
		c.CompactEvery = 10
	}
	c.Writer.SinkID = c.SinkID
	return c
}

// Progress is a snapshot of a run's counters.
type Progress struct {
	Line    int64 // input lines consumed, counting those skipped on resume
	Changes int64 // changes routed to this process's writers by this run
	Commits int   // epochs committed by this run
	Epoch   uint64
	Elapsed time.Duration
	// LastCommit is the position of the last commit of the in-process
	// coordinator (zero before the first, and with a remote coordinator).
	LastCommit Position
	// CommitLatency is how long the last commit took (its RowDelta in the
	// catalog, retries included; not the tidying after it).
	CommitLatency time.Duration
}

// Position is where a sink's committed state ends.
type Position struct {
	Epoch   uint64 // the last committed epoch (0: none)
	Line    int64  // input lines the committed state covers
	InputID string // the input those lines came from ("" when not recorded)
	// Offsets are an OffsetSource's properties the commit recorded (nil
	// for line input).
	Offsets map[string]string
	// RolledBack is the newest epoch of the sink that the table's branch
	// was rolled back past (0: none): the input after Line is written
	// again.
	RolledBack uint64
}

// identified is a Source that fingerprints the input it read
// (changelog.Decoder).
type identified interface {
	Identity() string
	IdentityOf(n int) string
}

// inputID is what a checkpoint of src records as its input's identity.
func inputID(cfg Config, src Source) string {
	if cfg.InputID != "" {
		return "user:" + cfg.InputID
	}
	if id, ok := src.(identified); ok {
		return id.Identity()
	}
	return ""
}

// checkInput refuses to resume from start with an input other than the
// one start's commits came from.
func checkInput(cfg Config, src Source, start Position) error {
	if start.InputID == "" {
		return nil // recorded before identities were
	}
	var have string
	if rest, ok := strings.CutPrefix(start.InputID, "user:"); ok {
		if cfg.InputID == "" || cfg.InputID == rest {
			return nil // named before and not now: the rerun is trusted
		}
		have = "user:" + cfg.InputID
	} else {
		id, ok := src.(identified)
		if !ok {
			return nil
		}
		n, _, _ := strings.Cut(start.InputID, ":")
		size, err := strconv.Atoi(n)
		if err != nil {
			return nil
		}
		if have = id.IdentityOf(size); have == start.InputID {
			return nil
		}
	}
	return fmt.Errorf("the input is not the one sink %q committed its first %d lines from (recorded input %s, this input %s): "+
		"to write this input as a new stream, give another --sink-id; to continue, give the same input",
		cfg.SinkID, start.Line, start.InputID, cmp.Or(have, "shorter than the recorded part"))
}

// Result is what a Run did.
type Result struct {
	Start     Position // where the run started
	Committed Position // what the table holds for the sink when the run ended
	Progress           // the final counters
	// Stats sums the writers' counters (peaks are the largest writer's).
	Stats deltawriter.Stats
	// Writers holds each writer's own counters, by writer index.
	Writers []deltawriter.Stats
	// OrphansRemoved counts the files of earlier runs' uncommitted windows
	// removed at the start (in-process coordinator only).
	OrphansRemoved int
	// Compactions counts the compaction rounds that rewrote files
	// (Config.Compaction); Compacted sums what they did.
	Compactions int
	Compacted   commit.Compacted
}

// Resume returns the position the table holds for the sink: its last
// committed epoch and the input lines that epoch covers.
func Resume(ctx context.Context, cfg Config) (Position, error) {
	cfg = cfg.withDefaults()
	if err := warehouse.CheckName(cfg.SinkID); err != nil {
		return Position{}, fmt.Errorf("sink id: %w", err)
	}
	cm, err := commit.NewCommitter(ctx, cfg.Loader, cfg.Ident, cfg.SinkID)
	if err != nil {
		return Position{}, err
	}
	return positionOf(cm)
}

func positionOf(cm *commit.Committer) (Position, error) {
	last, ok := cm.Last()
	if !ok {
		if last.RolledBack > 0 {
			return Position{}, fmt.Errorf("table %v was rolled back past every epoch of sink %q it still has a snapshot of (its newest was epoch %d): which of the sink's older epochs it holds is unknown; "+
				"to write the input again from its start, give another --sink-id", cm.Table().Identifier(), cm.SinkID(), last.RolledBack)
		}
		return Position{}, nil
	}
	line, err := strconv.ParseInt(last.Properties[commit.PropInputPosition], 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("snapshot %d of table %v has no valid %s: %w", last.SnapshotID, cm.Table().Identifier(), commit.PropInputPosition, err)
	}
	pos := Position{Epoch: last.Epoch, Line: line, InputID: last.Properties[commit.PropInputID], RolledBack: last.RolledBack}
	for k, v := range last.Properties {
		if strings.HasPrefix(k, commit.PropOffsetPrefix) {
			if pos.Offsets == nil {
				pos.Offsets = map[string]string{}
			}
			pos.Offsets[k] = v
		}
	}
	return pos, nil
}

// tableView loads the table once per epoch for the writers of a run, which
// follow it before they resolve a window's positions. With the
// in-process coordinator it is the epoch committer's table, reloaded under
// its lock (after a running compaction round); under a remote one, this
// process's committer only loads.
type tableView struct {
	ec *epochCommitter // nil: a remote coordinator
	cm *commit.Committer

	mu     sync.Mutex
	loaded bool
	epoch  uint64
}

// at returns the table as the catalog holds it now, loaded at most once
// per epoch.
func (v *tableView) at(ctx context.Context, epoch uint64) (*table.Table, error) {
	if v.ec != nil {
		return v.ec.tableAt(ctx, epoch)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.loaded || v.epoch != epoch {
		if err := v.cm.Refresh(ctx); err != nil {
			return nil, err
		}
		v.loaded, v.epoch = true, epoch
	}
	return v.cm.Table(), nil
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
	// loaded and loadedFor: the table was reloaded for epoch loadedFor
	// (tableAt).
	loaded    bool
	loadedFor uint64
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
	if !e.loaded || e.loadedFor != epoch {
		if err := e.cm.Refresh(ctx); err != nil {
			return nil, err
		}
		e.loaded, e.loadedFor = true, epoch
	}
	return e.cm.Table(), nil
}

// compactRound runs one compaction round in the background; the next
// CommitEpoch and table() wait for it. Called with e.mu held.
func (e *epochCommitter) compactRound(epoch uint64) {
	ch := make(chan struct{})
	e.maint = ch
	go func() {
		defer close(ch)
		t0 := time.Now()
		c, err := e.cm.Compact(e.runCtx, *e.compact)
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
			e.log.Info("compacted the table", "after-epoch", epoch, "data-files-removed", c.RemovedDataFiles, "data-files-added", c.AddedDataFiles,
				"delete-files-removed", c.RemovedDeleteFiles, "seconds", time.Since(t0).Seconds())
		}
	}()
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
	if errors.Is(err, commit.ErrForeignChange) || errors.Is(err, commit.ErrForeignPayload) || errors.Is(err, commit.ErrVectorsOfOneFile) || errors.Is(err, commit.ErrFenced) {
		return fmt.Errorf("%w: %w", coordinator.ErrPermanent, err) // another attempt sees the same table
	}
	if err != nil {
		return err
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

func startCoordinator(ctx context.Context, cfg Config, cm *commit.Committer) (*coordinator.Coordinator, *epochCommitter, func() error, error) {
	ec := &epochCommitter{cm: cm, retain: *cfg.Retention, log: cfg.Logger, compact: cfg.Compaction, compactEvery: cfg.CompactEvery, runCtx: ctx}
	// Commits carry the offsets of partitions no writer reports forward.
	ec.pos, _ = positionOf(cm)
	if ec.log == nil {
		ec.log = slog.Default()
	}
	var store coordinator.StateStore = &coordinator.MemStore{}
	closeStore := func() error { return nil }
	if cfg.StateDir != "" {
		// One run of a sink at a time on its state folder: a second one
		// (a rolling deploy, a restart that did not wait) would sweep the
		// first's checkpoints and remove its in-flight files.
		unlock, err := lockStateDir(cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		st, err := statestore.Open(ctx, statestore.Options{Dir: cfg.StateDir, InFileEnabled: true, NoStateError: coordinator.ErrNoState})
		if err != nil {
			unlock()
			return nil, nil, nil, err
		}
		store, closeStore = st, func() error { return errors.Join(st.Close(), unlock()) }
		if err := checkRecorded(ctx, st, cm, ec.log); err != nil {
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

// checkRecorded refuses a state store whose recorded, uncommitted epochs
// hold payloads the committer must not commit (another table's files, or
// another sink's), before the coordinator would commit them on recovery.
// A recorded epoch whose key-indexed deletes another writer's later change
// of the table made stale (commit.ErrForeignChange) is dropped, with the
// epochs after it, from the state: its lines are written again from the
// input by writers whose key index is rebuilt from the table (its files
// are left as orphans, which an in-process run removes).
func checkRecorded(ctx context.Context, store coordinator.StateStore, cm *commit.Committer, log *slog.Logger) error {
	id, b, err := store.Latest(ctx)
	if errors.Is(err, coordinator.ErrNoState) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := coordinator.DecodeState(b)
	if err != nil {
		return err
	}
	if last, _ := cm.Last(); last.RolledBack > 0 {
		// The table was rolled back: recorded epochs were written on top
		// of a table that is gone, after input the table no longer holds.
		i := slices.IndexFunc(st.Epochs, func(e coordinator.RecordedEpoch) bool { return e.Epoch > st.LastCommitted })
		if i < 0 {
			return nil
		}
		dropped := st.Epochs[i:]
		st.Epochs = st.Epochs[:i]
		if err := store.Save(ctx, id+1, coordinator.EncodeState(st)); err != nil {
			return fmt.Errorf("dropping recorded epochs after a rollback: %w", err)
		}
		log.Warn("sink: recorded epochs dropped: the table was rolled back; their input is written again", "epochs", fmt.Sprintf("%d-%d", dropped[0].Epoch, dropped[len(dropped)-1].Epoch), "rolled-back-past", last.RolledBack)
		return nil
	}
	for i, e := range st.Epochs {
		if e.Epoch <= st.LastCommitted {
			continue
		}
		var ps []commit.Payload
		for _, part := range e.Parts {
			if len(part.Payload) == 0 {
				continue
			}
			p, err := commit.UnmarshalPayload(part.Payload)
			if err != nil {
				return fmt.Errorf("recorded epoch %d: %w", e.Epoch, err)
			}
			if err := cm.CheckPayload(&p); err != nil {
				return fmt.Errorf("recorded epoch %d: %w", e.Epoch, err)
			}
			ps = append(ps, p)
		}
		if err := cm.CheckKeyIndexed(ps); errors.Is(err, commit.ErrForeignChange) {
			dropped := st.Epochs[i:]
			st.Epochs = st.Epochs[:i]
			if err := store.Save(ctx, id+1, coordinator.EncodeState(st)); err != nil {
				return fmt.Errorf("dropping recorded epochs after a foreign change: %w", err)
			}
			log.Warn("sink: recorded epochs dropped; their input is written again", "epochs", fmt.Sprintf("%d-%d", dropped[0].Epoch, dropped[len(dropped)-1].Epoch), "reason", err)
			return nil
		} else if err != nil {
			return fmt.Errorf("recorded epoch %d: %w", e.Epoch, err)
		}
	}
	return nil
}

// jobOf is what a sink's writers and coordinator must agree on before any
// file is written: the table (by UUID, so another warehouse's table of the
// same name differs), its schema, partition spec and format, and the sink.
func jobOf(tbl *table.Table, sinkID string) map[string]string {
	meta := tbl.Metadata()
	return map[string]string{
		"table-uuid":     meta.TableUUID().String(),
		"schema-id":      strconv.Itoa(tbl.Schema().ID),
		"spec-id":        strconv.Itoa(meta.DefaultPartitionSpec()),
		"format-version": strconv.Itoa(meta.Version()),
		"sink-id":        sinkID,
	}
}

func (e *epochCommitter) committed() (Position, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pos, e.n
}

// Run writes src into the table. It starts the coordinator (or joins
// cfg.Connect's), lets it recover recorded epochs, skips the input lines
// the table already holds, and then commits every CommitInterval
// checkpoints (or on the size trigger) and at the end of the input. On a
// bad input line or any error the open windows are aborted (their files
// removed) and the error returned; what was committed before stays, and
// Result says so.
func Run(ctx context.Context, cfg Config, src Source) (res Result, err error) {
	cfg = cfg.withDefaults()
	if err := warehouse.CheckName(cfg.SinkID); err != nil {
		return res, fmt.Errorf("sink id: %w", err)
	}
	if err := cfg.Timeouts.check(); err != nil {
		return res, err
	}
	began := time.Now()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	cm, err := commit.NewCommitter(ctx, cfg.Loader, cfg.Ident, cfg.SinkID)
	if err != nil {
		return res, err
	}
	connect := cfg.Connect
	var bitmaps []*roaring.Bitmap
	var ec *epochCommitter
	if connect == nil {
		var coord *coordinator.Coordinator
		var stop func() error
		coord, ec, stop, err = startCoordinator(ctx, cfg, cm)
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, stop()) }()
		defer ec.waitMaintenance() // a compaction round still running
		connect = coord.Connect
		if bitmaps, err = coordinator.SplitVnodes(cfg.Vnodes, cfg.Writers); err != nil {
			return res, err
		}
	} else {
		own := cfg.OwnVnodes
		if own == nil {
			own = roaring.New()
			own.AddRange(0, uint64(cfg.Vnodes))
		}
		bitmaps = []*roaring.Bitmap{own}
	}

	// Connecting waits for the coordinator to commit what it had recorded;
	// only then does the table tell where the input resumes.
	writers := make([]*writer, len(bitmaps))
	defer func() {
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
			if err := cm.Refresh(context.WithoutCancel(ctx)); err == nil {
				if _, err := deltawriter.RemoveStaleKeyIndexes(base, cm.Table(), cfg.SinkID); err != nil {
					log := cfg.Logger
					if log == nil {
						log = slog.Default()
					}
					log.Warn("removing stale key indexes", "err", err)
				}
			}
		}
	}()
	route := make([]int, cfg.Vnodes)
	psrc, byPartition := src.(partitionedSource)
	byPartition = byPartition && psrc.RoutesByPartition()
	if byPartition && cm.Table().Metadata().Version() >= 3 && cfg.Writer.DeleteMode == deltawriter.DeleteByPosition {
		return res, fmt.Errorf("table %v is format v3: processes sharing a topic's partitions may delete rows of one data file in one epoch, and their deletion vectors cannot be merged yet; use a v2 table or --delete-mode equality", cfg.Ident)
	}
	if base := keyIndexBase(cfg); base != "" && cfg.Writer.DeleteMode == deltawriter.DeleteByPosition {
		if err := localdir.Private(base); err != nil {
			return res, fmt.Errorf("the key index folder: %w", err)
		}
	}
	job := jobOf(cm.Table(), cfg.SinkID)
	// Every writer must end its checkpoints at the same input lines.
	job["checkpoint-rows"] = strconv.FormatInt(cfg.CheckpointRows, 10)
	view := &tableView{ec: ec, cm: cm}
	for i, b := range bitmaps {
		sess, err := connect(ctx, b, coordinator.WithVnodeCount(cfg.Vnodes), coordinator.WithJob(job))
		if err != nil {
			return res, fmt.Errorf("connecting writer %d (vnodes %s): %w", i, coordinator.FormatVnodes(b), err)
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
				return res, err
			}
			owned, vnodes := b.Clone(), uint64(cfg.Vnodes)
			wopts.Owns = func(h uint64) bool { return owned.Contains(uint32(h % vnodes)) }
			if byPartition {
				wopts.Owns = nil // a partition's keys are not known by hash
			}
			wopts.KeyIndexDir = keyIndexDir(cfg, cm.Table(), b)
		}
		dw, err := deltawriter.New(ctx, cm.Table(), wopts)
		if err != nil {
			sess.Close()
			return res, err
		}
		writers[i] = &writer{dw: dw, sess: sess, in: make(chan batch, 4), current: func(ctx context.Context) (*table.Table, error) {
			if ec != nil {
				return ec.table(), nil
			}
			if err := cm.Refresh(ctx); err != nil {
				return nil, err
			}
			return cm.Table(), nil
		}}
		// Each window follows the table as it is before the window's
		// positions are resolved: the sink's commits and compactions, and
		// other writers' changes (the key index is rebuilt), so that the
		// committer's check passes and the index's base stays inside the
		// retained history.
		writers[i].follow = view.at
		for it := b.Iterator(); it.HasNext(); {
			route[it.Next()] = i + 1
		}
	}
	if cfg.Registerer != nil {
		m := newRunMetrics(cfg.Writer.MemoryLimit)
		m.writers = writers
		for _, w := range writers {
			w.metrics = m
		}
		// Under a remote coordinator the first writer counts the commits.
		writers[0].countCommits = ec == nil
		if err := cfg.Registerer.Register(m); err != nil {
			return res, fmt.Errorf("registering the run's metrics: %w", err)
		}
		defer cfg.Registerer.Unregister(m)
		if ec != nil {
			ec.mu.Lock()
			ec.metrics = m.commitMetrics
			ec.mu.Unlock()
		}
	}
	if err := cm.Refresh(ctx); err != nil {
		return res, err
	}
	if cfg.Connect == nil {
		// This process holds every writer of the sink, none has written
		// yet, and recorded epochs are committed: what is left of the
		// sink's files outside the table is from windows that crashed.
		// Only the sink's own files (deltawriter.SinkFile): another
		// writer's are not ours to judge.
		n, err := commit.RemoveOrphanFiles(ctx, cm.Table(), commit.OrphanFiles{DataOnly: true,
			Remove: func(p string) bool { return deltawriter.SinkFile(p, cfg.SinkID) }})
		if err != nil {
			return res, fmt.Errorf("removing the files of uncommitted windows: %w", err)
		}
		res.OrphansRemoved = n
	}
	start, err := positionOf(cm)
	if err != nil {
		return res, err
	}
	if resume := writers[0].sess.Resume(); resume > start.Epoch {
		// Epochs the coordinator committed with no file leave no snapshot.
		start.Epoch = resume
	}
	res.Start, res.Committed = start, start
	res.Line, res.Epoch = start.Line, start.Epoch
	if m := writers[0].metrics; m != nil {
		m.ended.Store(start.Epoch)
		m.done.Store(start.Epoch)
	}
	if osrc, ok := src.(OffsetSource); ok {
		if start.InputID != "" && start.InputID != osrc.Identity() {
			return res, fmt.Errorf("the input %s is not the one sink %q committed from (%s): to write it as a new stream, give another --sink-id", osrc.Identity(), cfg.SinkID, start.InputID)
		}
		if err := osrc.Seek(ctx, start.Offsets, start.Line); err != nil {
			return res, fmt.Errorf("resuming after epoch %d: %w", start.Epoch, err)
		}
		if byPartition && psrc.PartitionVnodes() != cfg.Vnodes {
			return res, fmt.Errorf("the input has %d partitions, the sink routes by %d vnodes: with partitions split among processes, the vnode count must be the partition count", psrc.PartitionVnodes(), cfg.Vnodes)
		}
		if n, ok := src.(committedNotifier); ok {
			log := cmp.Or(cfg.Logger, slog.Default())
			notify := func(p Position) {
				if err := n.Committed(ctx, p.Offsets); err != nil && ctx.Err() == nil {
					log.Warn("telling the consumer group the committed offsets (monitoring only)", "epoch", p.Epoch, "err", err)
				}
			}
			if ec != nil {
				ec.mu.Lock()
				ec.onCommit = notify
				ec.mu.Unlock()
			} else {
				// Under a remote coordinator the process learns of the
				// commits of its epochs, and tells its own offsets.
				writers[0].onCommit = notify
			}
		}
	} else if start.Line > 0 {
		if err := src.Skip(start.Line); err != nil {
			return res, fmt.Errorf("resuming after input line %d (epoch %d is committed): %w", start.Line, start.Epoch, err)
		}
		if err := checkInput(cfg, src, start); err != nil {
			return res, err
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, len(writers))
	for _, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(ctx); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	runErr := route_(ctx, cfg, src, writers, route, &res, ec)
	for _, w := range writers {
		close(w.in)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		if runErr == nil || errors.Is(runErr, context.Canceled) {
			runErr = e
		}
	}
	if perr := parent.Err(); perr != nil && runErr != nil && !errors.Is(runErr, perr) {
		// The caller stopped the run: what failed after (a writer whose
		// in-process coordinator stopped with it) is a consequence.
		runErr = fmt.Errorf("%w; while stopping: %v", perr, runErr)
	}
	if ec != nil {
		res.Committed, res.Commits = ec.committed()
		ec.mu.Lock()
		res.Compactions, res.Compacted = ec.compactions, ec.compacted
		ec.mu.Unlock()
	} else if err := cm.Refresh(context.WithoutCancel(ctx)); err == nil {
		// A remote coordinator committed: the table says what. ctx may be
		// cancelled by now (a writer failed), the report is still due.
		res.Committed, _ = positionOf(cm)
		res.Commits = cm.CountSince(start.Epoch)
	}
	if res.Committed.Epoch == 0 {
		res.Committed = start
	}
	res.Elapsed = time.Since(began)
	return res, runErr
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
}

const batchSize = 1024

// route_ reads src, routes each change to the writer owning its vnode,
// and sends every writer every checkpoint.
func route_(ctx context.Context, cfg Config, src Source, writers []*writer, route []int, res *Result, ec *epochCommitter) error {
	kc, err := deltawriter.NewKeyCodec(writers[0].dw.Schema())
	if err != nil {
		return err
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
	followBarriers = followBarriers && byPartition && cfg.Connect != nil
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
	began := time.Now()
	for {
		rec, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
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

// writer is one deltawriter and its coordinator session.
type writer struct {
	dw       *deltawriter.Writer
	sess     coordinator.Session
	in       chan batch
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
	// stats are the writer's counters as the run left them, taken by
	// close before the deltawriter is closed: closing drops its index and
	// with it the spill counters (Stats after Close reads no spills).
	stats deltawriter.Stats
}

func (w *writer) run(ctx context.Context) error {
	for b := range w.in {
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
		if !b.barrier {
			continue
		}
		commitNow, err := w.sess.Checkpoint(ctx, b.epoch, w.dw.BufferedBytes(), b.final)
		if err != nil {
			return fmt.Errorf("checkpoint of epoch %d: %w", b.epoch, err)
		}
		if commitNow {
			if w.follow != nil {
				// The window's positions are resolved on the table as it
				// is now (the last compaction round waited for).
				tbl, err := w.follow(ctx, b.epoch)
				if err != nil {
					return err
				}
				if err := w.dw.Follow(ctx, tbl); err != nil {
					return err
				}
			}
			p, err := w.dw.PrepareCommit(ctx)
			if err != nil {
				return err
			}
			p.InputPosition, p.InputID, p.InputOffsets = b.line, b.inputID, b.offsets
			data, err := p.Marshal()
			if err != nil {
				return err
			}
			w.inCommit = true
			if err := w.sess.Commit(ctx, b.epoch, data); err != nil {
				if errors.Is(err, coordinator.ErrAborted) {
					w.inCommit = false
					_ = w.dw.Discard(ctx, p)
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
			if w.onCommit != nil && len(b.offsets) > 0 {
				go w.onCommit(Position{Epoch: b.epoch, Line: b.line, InputID: b.inputID, Offsets: b.offsets})
			}
		}
		if b.final {
			w.done = true
		}
	}
	return nil
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
	if w.follow != nil && !failed {
		// The last round: saved with the index.
		if tbl, err := w.follow(sctx, ^uint64(0)); err != nil {
			kerr = err
		} else {
			kerr = w.dw.Follow(sctx, tbl)
		}
	}
	if tbl, err := w.current(sctx); err != nil {
		kerr = errors.Join(kerr, err)
	} else {
		_, serr := w.dw.SaveKeyIndex(sctx, tbl)
		kerr = errors.Join(kerr, serr)
	}
	cancel()
	w.stats = w.dw.Stats()
	serr := w.sess.Close()
	if w.done && !failed {
		serr = nil
	}
	return errors.Join(serr, kerr, w.dw.Close(ctx))
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
	return filepath.Join(base, fmt.Sprintf("w-%x", h.Sum(nil)[:12]))
}

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
