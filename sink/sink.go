// Package sink is the pipeline of one icesink job: input records are routed
// by key vnode to the writers, every writer reports every checkpoint to the
// vnode-aligned coordinator, and on a commit epoch all writers' windows go
// into one snapshot that records the sink id, the epoch and the input
// position, so that a rerun after a crash continues where the table left
// off.
//
// It wires changelog, deltawriter, commit and coordinator together; the
// upsert rules, the commit protocol and the catalog live in those packages.
//
// The files by role: sink.go (Config, Run), route.go (the router: input to
// writers by vnode, checkpoints), writer.go (a writer goroutine: window,
// checkpoint, commit, its key index folder), epochcommit.go (the
// in-process coordinator's epoch commits and the table the writers
// follow), recovery.go (where a run resumes, the input check, recorded
// epochs), budget.go (one memory budget shared by many tables' writers),
// database.go (one coordinator and epoch for many tables' sinks, in this
// process or served to others), metrics.go.
package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/localdir"
	"github.com/icesink/icesink/warehouse"
)

// Source yields input records in order; *changelog.Decoder is one.
type Source interface {
	Next() (changelog.Record, error)
	// Skip consumes n lines without decoding them (resuming after a commit).
	Skip(n int64) error
}

// startingSource is an OffsetSource whose start without a commit moves
// (kafka.Source with Latest): StartOffsets says where it would start now,
// and the run keeps that in the table (commit.Committer.KeepStart).
type startingSource interface {
	StartOffsets(ctx context.Context) (map[string]string, error)
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

// SchemaSetter is a Source whose decoding follows the table's schema
// (changelog.Decoder, kafka.Source): after SetSchema its Next decodes the
// input the last *changelog.SchemaChangeError refused again.
type SchemaSetter interface {
	SetSchema(schema *iceberg.Schema) error
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

// lineNotifier is a Source told of the last input line each commit
// holds (a journal of a pipe frees what it kept of them).
type lineNotifier interface {
	CommittedLine(line int64)
}

// onCommit makes notify hear of each commit of the run's epochs: from
// the epoch committer, or under a remote coordinator (which commits) from
// the first writer, which learns of the commits of its epochs.
func onCommit(ec *epochCommitter, writers []*writer, notify func(Position)) {
	if ec != nil {
		ec.mu.Lock()
		ec.onCommit = notify
		ec.mu.Unlock()
	} else {
		writers[0].onCommit = notify
	}
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
	// Budget, if set, is the process's memory budget that this sink's
	// writers share with other sinks' (a database's tables): each
	// writer's Writer.MemoryLimit is then its share, which follows its
	// traffic, and a compaction round is sized like a writer's even share
	// (Compaction.MemoryLimit). The Budget must be positive.
	Budget *Budget
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
	// Database, when set (and Connect is not), joins the coordinator of a
	// database's tables in this process (StartDatabase) instead of
	// starting one of the table's own: the table's epochs are the
	// database's, its commits its own transactions. Vnodes is then the
	// database's per table; with a barrier source (Kafka) the
	// database's barriers end the epochs (besides CheckpointRows).
	Database *Database
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
	// EvolveSchema makes the table follow the events' schema: when the
	// source reports a *changelog.SchemaChangeError (a decoder with
	// evolution on), the table's schema is changed (commit.EvolveSchema:
	// columns added, widened, made optional) in a commit of its own before
	// any row that needs it, every writer switches to it in its open
	// window, and the source (a SchemaSetter) decodes the same input again.
	// A change Iceberg cannot express stops the run naming the column.
	// Off: the error stops the run.
	EvolveSchema bool
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

// Result is what a Run did.
type Result struct {
	Start     Position // where the run started
	Committed Position // what the table holds for the sink when the run ended
	// CommittedKnown reports that Committed was read from the table: a
	// run that failed before it could read the table leaves it false.
	CommittedKnown bool
	Progress       // the final counters
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
	// SchemaChanges counts the changes of the table's schema the run
	// made (Config.EvolveSchema).
	SchemaChanges int
}

// compaction is cfg.Compaction with its rounds' folder (the sink's own)
// and memory bound settled: one writer's even share of a shared Budget
// (not the whole of it, the Writer.MemoryLimit of a database run: every
// table may compact at once), else, when the policy names none, one
// writer's budget. The caller's Compaction is not changed.
func (c Config) compaction() *commit.Compaction {
	if c.Compaction == nil {
		return nil
	}
	p := *c.Compaction
	// The rounds write into the sink's folder, which its start-up sweep
	// clears of what a killed round left.
	p.Folder = commit.CompactionFolder(c.SinkID)
	switch {
	case c.Budget != nil:
		p.MemoryLimit = c.Budget.initial()
	case p.MemoryLimit == 0:
		p.MemoryLimit = c.Writer.MemoryLimit
	}
	return &p
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
	if cfg.Budget != nil && cfg.Budget.Total() <= 0 {
		return res, fmt.Errorf("sink: a shared memory budget of %d bytes", cfg.Budget.Total())
	}
	cfg.Compaction = cfg.compaction()
	began := time.Now()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	cm, err := commit.NewCommitter(ctx, cfg.Loader, cfg.Ident, cfg.SinkID)
	if err != nil {
		return res, err
	}
	// What the table holds, for a run that fails before it resumes.
	if pos, err := positionOf(cm); err == nil {
		res.Committed, res.CommittedKnown = pos, true
	}
	connect := cfg.Connect
	var bitmaps []*roaring.Bitmap
	var ec *epochCommitter
	if db := cfg.Database; connect == nil && db != nil {
		cfg.Vnodes = db.cfg.Vnodes
		if bitmaps, err = coordinator.SplitVnodes(cfg.Vnodes, cfg.Writers); err != nil {
			return res, err
		}
		// This run is the table's one committer from now on.
		if err := cm.Claim(ctx, newRunID()); err != nil {
			return res, err
		}
		if ec, connect, err = db.join(ctx, cfg, cm); err != nil {
			return res, err
		}
		defer db.leave(cfg.Ident) // after the writers closed their sessions (deferred later)
		defer ec.waitMaintenance()
	} else if connect == nil {
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
	defer func() { err = closeWriters(ctx, cfg, cm, ec, writers, &res, err) }()
	route := make([]int, cfg.Vnodes)
	psrc, byPartition := src.(partitionedSource)
	byPartition = byPartition && psrc.RoutesByPartition()
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
		w, err := openWriter(ctx, cfg, writerSetup{index: i, vnodes: b, cm: cm, ec: ec, connect: connect, job: job, view: view, byPartition: byPartition})
		if err != nil {
			return res, err
		}
		writers[i] = w
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
	if cfg.Database != nil && cfg.Connect == nil {
		// The database may have committed a recorded epoch of the table
		// since its committer was made.
		ec.mu.Lock()
		ec.pos, _ = positionOf(cm)
		ec.mu.Unlock()
	}
	if cfg.Connect == nil {
		// This process holds every writer of the sink, none has written
		// yet, and recorded epochs are committed: what is left of the
		// sink's files outside the table is from windows or compaction
		// rounds that crashed. Only the sink's own files (its writers',
		// deltawriter.SinkFile, and its rounds' folder's,
		// commit.CompactionFile): another writer's are not ours to judge.
		n, err := commit.RemoveOrphanFiles(ctx, cm.Table(), commit.OrphanFiles{DataOnly: true,
			Remove: func(p string) bool {
				return deltawriter.SinkFile(p, cfg.SinkID) || commit.CompactionFile(p, cfg.SinkID)
			}})
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
	res.Start, res.Committed, res.CommittedKnown = start, start, true
	res.Line, res.Epoch = start.Line, start.Epoch
	if m := writers[0].metrics; m != nil {
		m.ended.Store(start.Epoch)
		m.done.Store(start.Epoch)
	}
	if osrc, ok := src.(OffsetSource); ok {
		if start.InputID != "" && start.InputID != osrc.Identity() {
			return res, fmt.Errorf("the input %s is not the one sink %q committed from (%s): to write it as a new stream, give another --sink-id", osrc.Identity(), cfg.SinkID, start.InputID)
		}
		offsets := start.Offsets
		if ss, ok := src.(startingSource); ok && len(offsets) == 0 {
			// No commit says where the input is: a moving start (Kafka's
			// latest) is decided once and kept in the table.
			if offsets = cm.KeptStart(); offsets == nil {
				now, err := ss.StartOffsets(ctx)
				if err != nil {
					return res, err
				}
				if offsets, err = cm.KeepStart(ctx, now); err != nil {
					return res, err
				}
			}
		}
		if err := osrc.Seek(ctx, offsets, start.Line); err != nil {
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
			onCommit(ec, writers, notify)
		}
	} else {
		if start.Line > 0 {
			if err := src.Skip(start.Line); err != nil {
				return res, fmt.Errorf("resuming after input line %d (epoch %d is committed): %w", start.Line, start.Epoch, err)
			}
			if err := checkInput(cfg, src, start); err != nil {
				return res, err
			}
		}
		if n, ok := src.(lineNotifier); ok {
			onCommit(ec, writers, func(p Position) { n.CommittedLine(p.Line) })
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
	runErr := routeInput(ctx, cfg, src, writers, route, &res, ec)
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
	if runErr == nil && parent.Err() == nil && ec != nil && cfg.Database == nil {
		// The input ended (a file, or a bounded read): one more round
		// leaves the table with no delete to apply, the writers follow it
		// as they close.
		ec.finish()
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
