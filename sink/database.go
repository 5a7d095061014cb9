package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/warehouse"
)

// Database is one coordinator for the sinks of many tables in this
// process (a database's change feed): one epoch covers every table, each
// table is committed in its own Iceberg transaction with its own input
// offsets, and one state folder records the epochs of all. A table's
// sink joins it through Config.Database and holds a range of vnodes of its
// own (a slot) while it runs: tables join at an epoch boundary, and a
// table whose run ended, cleanly or not, leaves without holding the
// others' epochs back.
//
// A table whose commit fails for good (a foreign change, a fence) is told
// through its writers, and the other tables' commits of the epoch stand:
// the failed table's window is read again from its own offsets.
type Database struct {
	cfg        Config
	slots      int
	coord      *coordinator.Coordinator
	closeStore func() error

	mu       sync.Mutex
	tables   map[string]*dbTable // by NS.NAME
	nextSlot int                 // slots are handed out in order, never back
}

// dbTable is one table of a Database.
type dbTable struct {
	ident    table.Identifier
	slot     int
	ec       *epochCommitter // nil until it commits or joins
	attached bool
	claimMu  sync.Mutex        // one claim at a time
	claimed  bool              // the database claimed the table (writers of other processes)
	job      map[string]string // what its remote writers agree on
	sessions int               // open sessions of its writers
	// broken holds the epochs whose commit failed for good, until every
	// writer of the table heard of it.
	broken map[uint64]*brokenEpoch
}

// brokenEpoch is why a table's commit of an epoch failed for good, and
// how many of its writers' sessions have yet to hear it.
type brokenEpoch struct {
	err  error
	left int
}

// databaseCommitters is how many tables of an epoch commit at once.
const databaseCommitters = 8

// StartDatabase starts the coordinator of up to slots tables' sinks, with
// cfg's settings (Ident is ignored; Vnodes is each table's vnode count,
// StateDir the database's state folder). The epochs its state recorded
// are checked table by table and committed before any table's writer is
// let in (Connect waits for them). known names tables that may already hold
// epochs of cfg.SinkID: without a saved state, the epochs go on after the
// highest of theirs.
func StartDatabase(ctx context.Context, cfg Config, slots int, known []table.Identifier) (*Database, error) {
	cfg = cfg.withDefaults()
	if err := warehouse.CheckName(cfg.SinkID); err != nil {
		return nil, fmt.Errorf("sink id: %w", err)
	}
	if err := cfg.Timeouts.check(); err != nil {
		return nil, err
	}
	if slots < 1 || slots*cfg.Vnodes > 1<<20 {
		return nil, fmt.Errorf("sink: a database of %d tables of %d vnodes each: at most %d vnodes in all", slots, cfg.Vnodes, 1<<20)
	}
	d := &Database{cfg: cfg, slots: slots, tables: map[string]*dbTable{}}
	store, closeStore, err := openStateStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d.closeStore = closeStore
	fail := func(err error) (*Database, error) {
		closeStore()
		return nil, err
	}
	var after uint64
	switch _, _, err := store.Latest(ctx); {
	case errors.Is(err, coordinator.ErrNoState):
		for _, ident := range known {
			cm, err := commit.NewCommitter(ctx, cfg.Loader, ident, cfg.SinkID)
			if errors.Is(err, catalog.ErrNoSuchTable) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			if last, ok := cm.Last(); ok {
				after = max(after, last.Epoch)
			}
		}
	case err != nil:
		return fail(fmt.Errorf("loading the database's coordinator state: %w", err))
	default:
		if err := d.checkRecorded(ctx, store); err != nil {
			return fail(fmt.Errorf("the coordinator's state in %s: %w (move that folder away to start afresh; the files of its epochs are then left as orphans)", cfg.StateDir, err))
		}
	}
	var opts []coordinator.Option
	if cfg.Logger != nil {
		opts = append(opts, coordinator.WithLogger(cfg.Logger))
	}
	if cfg.Timeouts.Commit > 0 {
		opts = append(opts, coordinator.WithCommitTimeout(cfg.Timeouts.Commit))
	}
	all := roaring.New()
	all.AddRange(0, uint64(slots*cfg.Vnodes))
	d.coord, err = coordinator.Start(ctx, coordinator.Config{
		Vnodes: slots * cfg.Vnodes, Vacant: all, After: after,
		CommitInterval: cfg.CommitInterval, CommitBytes: cfg.CommitBytes,
		AlignTimeout: ticks(cfg.Timeouts.Align), PayloadTimeout: ticks(cfg.Timeouts.Payload),
		BarrierInterval: ticks(cfg.BarrierInterval),
		Job:             map[string]string{"sink-id": cfg.SinkID, "database": "1"},
	}, d, store, opts...)
	if err != nil {
		return fail(err)
	}
	return d, nil
}

// Close stops the coordinator and closes its state folder. The tables'
// runs must have ended.
func (d *Database) Close() error {
	return errors.Join(d.coord.Close(), d.closeStore())
}

// Done is closed when the database's coordinator has stopped (Close, or
// a failure: Err says which).
func (d *Database) Done() <-chan struct{} { return d.coord.Done() }

// Err returns why the coordinator stopped (coordinator.ErrFailed after a
// commit that kept failing), or nil while it runs.
func (d *Database) Err() error { return d.coord.Err() }

// logger is the database's log.
func (d *Database) logger() *slog.Logger {
	if d.cfg.Logger != nil {
		return d.cfg.Logger
	}
	return slog.Default()
}

// table returns the entry of table name, creating it.
func (d *Database) table(name string) (*dbTable, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.tables[name]; ok {
		return t, nil
	}
	ident, err := warehouse.ParseIdent(name)
	if err != nil {
		return nil, err
	}
	t := &dbTable{ident: ident, slot: -1}
	d.tables[name] = t
	return t, nil
}

// committer returns t's epoch committer, opening one on the table's
// catalog entry for a table whose sink has not joined (a recorded epoch
// committed at start).
func (d *Database) committer(ctx context.Context, t *dbTable) (*epochCommitter, error) {
	d.mu.Lock()
	ec := t.ec
	d.mu.Unlock()
	if ec != nil {
		return ec, nil
	}
	cm, err := commit.NewCommitter(ctx, d.cfg.Loader, t.ident, d.cfg.SinkID)
	if err != nil {
		return nil, err
	}
	cfg := d.cfg
	cfg.Ident, cfg.Compaction = t.ident, nil
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.ec == nil {
		t.ec = newEpochCommitter(ctx, cfg, cm)
	}
	return t.ec, nil
}

// CommitEpoch commits each table's payloads of epoch in its own
// transaction, a few tables at a time. A table whose commit fails for good
// (coordinator.ErrPermanent, ErrStale) is marked for its writers and does not fail
// the epoch; any other failure does, and the retry skips the tables
// committed already (commits are idempotent per epoch).
func (d *Database) CommitEpoch(ctx context.Context, epoch uint64, payloads [][]byte) error {
	byTable := map[string][][]byte{}
	for _, b := range payloads {
		if len(b) == 0 {
			continue
		}
		name, p, err := unframePayload(b)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", epoch, err)
		}
		byTable[name] = append(byTable[name], p)
	}
	names := slices.Sorted(maps.Keys(byTable))
	errs := make([]error, len(names))
	sem := make(chan struct{}, databaseCommitters)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = d.commitTable(ctx, epoch, name, byTable[name])
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// commitTable commits one table's payloads of epoch.
func (d *Database) commitTable(ctx context.Context, epoch uint64, name string, ps [][]byte) error {
	t, err := d.table(name)
	if err != nil {
		return err
	}
	ec, err := d.committer(ctx, t)
	if err == nil {
		err = ec.CommitEpoch(ctx, epoch, ps)
	}
	if err == nil {
		if fp := d.cfg.Writer.Failpoint; fp != nil {
			fp("database-table-committed") // a crash between two tables' commits
		}
		return nil
	}
	err = fmt.Errorf("table %s: %w", name, err)
	if !errors.Is(err, coordinator.ErrPermanent) && !errors.Is(err, coordinator.ErrStale) {
		return err
	}
	// The other tables' commits stand; this table's window is dropped
	// (its offsets did not move) and its writers hear why.
	d.markBroken(t, epoch, err)
	d.logger().Error("a table's commit failed for good; the other tables' commits of the epoch stand, and the table's window is read again", "table", name, "epoch", epoch, "err", err)
	return nil
}

// markBroken records that t's commit of epoch failed for good with err,
// for each of its writers' sessions open now to hear.
func (d *Database) markBroken(t *dbTable, epoch uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.broken == nil {
		t.broken = map[uint64]*brokenEpoch{}
	}
	t.broken[epoch] = &brokenEpoch{err: err, left: max(t.sessions, 1)}
}

// brokenAt returns why table name's commit of epoch failed for good, if it
// did: every writer's session that asks hears it (each writer of the table
// commits every commit epoch), not only the first.
func (d *Database) brokenAt(name string, epoch uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tables[name]
	if t == nil {
		return nil
	}
	b := t.broken[epoch]
	if b == nil {
		return nil
	}
	if b.left--; b.left <= 0 {
		delete(t.broken, epoch)
	}
	return b.err
}

// join attaches the sink of cfg.Ident, committing through cm, to the
// database: it takes the table's slot (vnodes slot*Vnodes onwards) and
// returns the table's epoch committer and how its writers connect.
func (d *Database) join(ctx context.Context, cfg Config, cm *commit.Committer) (*epochCommitter, func(context.Context, *roaring.Bitmap, ...coordinator.ConnectOption) (coordinator.Session, error), error) {
	name := strings.Join(cfg.Ident, ".")
	t, err := d.table(name)
	if err != nil {
		return nil, nil, err
	}
	if err := d.checkBehind(ctx, cm); err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	if t.attached {
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("sink: table %s joined the database twice", name)
	}
	if err := d.takeSlot(t, name); err != nil {
		d.mu.Unlock()
		return nil, nil, err
	}
	// A commit of a recorded epoch of the table may still run on the
	// committer it had: the run's takes over for the epochs after (Run
	// reads the position again once its writers joined).
	ec := newEpochCommitter(ctx, cfg, cm)
	t.attached, t.broken, t.ec = true, nil, ec
	d.mu.Unlock()
	connect := func(ctx context.Context, vnodes *roaring.Bitmap, _ ...coordinator.ConnectOption) (coordinator.Session, error) {
		// The job is the database's: every table's writers run in this
		// process, configured alike.
		return d.connect(ctx, t, name, vnodes)
	}
	return ec, connect, nil
}

// takeSlot gives t the next slot, unless it has one (a table keeps its
// slot while the database runs). Called with d.mu held.
func (d *Database) takeSlot(t *dbTable, name string) error {
	if t.slot >= 0 {
		return nil
	}
	if d.nextSlot == d.slots {
		return fmt.Errorf("sink: table %s: the database's %d tables are all taken", name, d.slots)
	}
	t.slot = d.nextSlot
	d.nextSlot++
	return nil
}

// checkBehind refuses a table that holds a later epoch of the sink than
// the database decided (written by a coordinator of its own since): its
// epochs would never align with the others'.
func (d *Database) checkBehind(ctx context.Context, cm *commit.Committer) error {
	last, ok := cm.Last()
	if !ok {
		return nil
	}
	st, err := d.coord.Status(ctx)
	if err != nil {
		return err
	}
	if last.Epoch > st.LastDecided {
		return fmt.Errorf("sink: table %v holds epoch %d of sink %q, later than the database's epoch %d (written by a run of the table alone since): run it alone, or move the database's state folder away so that it starts after its tables' epochs", cm.Table().Identifier(), last.Epoch, cm.SinkID(), st.LastDecided)
	}
	return nil
}

// connect registers a writer of table t for its vnodes (the table's own
// numbering) in t's slot.
func (d *Database) connect(ctx context.Context, t *dbTable, name string, vnodes *roaring.Bitmap) (coordinator.Session, error) {
	d.mu.Lock()
	base := uint32(t.slot * d.cfg.Vnodes)
	t.sessions++
	d.mu.Unlock()
	shifted := roaring.New()
	for it := vnodes.Iterator(); it.HasNext(); {
		shifted.Add(base + it.Next())
	}
	sess, err := d.coord.Connect(ctx, shifted)
	if err != nil {
		d.closed(t)
		return nil, err
	}
	return &dbSession{LocalSession: sess.(*coordinator.LocalSession), d: d, t: t, name: name}, nil
}

// closed counts a session of t gone; when it was the table's last, the
// table's slot becomes vacant, so that the other tables' epochs align
// without it until a writer of it joins again.
func (d *Database) closed(t *dbTable) {
	d.mu.Lock()
	t.sessions--
	last := t.sessions == 0
	slot := t.slot
	d.mu.Unlock()
	if !last {
		return
	}
	vn := roaring.New()
	vn.AddRange(uint64(slot*d.cfg.Vnodes), uint64((slot+1)*d.cfg.Vnodes))
	// Refused only when a new writer of the table holds some already.
	if err := d.coord.Vacate(context.Background(), vn); err != nil && !errors.Is(err, coordinator.ErrClosed) && !errors.Is(err, coordinator.ErrFailed) {
		d.logger().Debug("a table's slot stays taken", "table", strings.Join(t.ident, "."), "err", err)
	}
}

// RemoteTable is a table of a Database whose writers run in other
// processes and join over a transport (coordgrpc.ServeLookup): its
// Connect registers them in the table's slot.
type RemoteTable struct {
	d    *Database
	t    *dbTable
	name string
}

// Remote returns table name's view for writers of other processes, which
// registered job (the table, its UUID, spec and format, the sink, their
// checkpoint settings: the first writer's bind the later ones) and route
// with vnodeCount vnodes (at most the database's per table). The first
// call claims the table for the database's sink (a run elsewhere is
// fenced off at its next commit).
func (d *Database) Remote(ctx context.Context, name string, job map[string]string, vnodeCount int) (*RemoteTable, error) {
	if vnodeCount > d.cfg.Vnodes {
		return nil, fmt.Errorf("%w: table %s routes with %d vnodes (its topic's partitions), more than the coordinator's %d a table: give the coordinator a larger --vnode-count", coordinator.ErrJobMismatch, name, vnodeCount, d.cfg.Vnodes)
	}
	t, err := d.table(name)
	if err != nil {
		return nil, err
	}
	ec, err := d.committer(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := d.claim(ctx, t, ec, name, vnodeCount); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if diff := coordinator.JobDiff(t.job, job); diff != "" {
		return nil, fmt.Errorf("%w: a writer of table %s writes into another job than the table's other writers: %s", coordinator.ErrJobMismatch, name, diff)
	}
	if t.job == nil {
		t.job = map[string]string{}
	}
	maps.Copy(t.job, job)
	if err := d.takeSlot(t, name); err != nil {
		return nil, err
	}
	return &RemoteTable{d: d, t: t, name: name}, nil
}

// claim makes the database the table's one committer, once: a run of it
// elsewhere is fenced off at its next commit.
func (d *Database) claim(ctx context.Context, t *dbTable, ec *epochCommitter, name string, vnodeCount int) error {
	t.claimMu.Lock()
	defer t.claimMu.Unlock()
	d.mu.Lock()
	claimed := t.claimed
	d.mu.Unlock()
	if claimed {
		return nil
	}
	ec.waitMaintenance()
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if err := d.checkBehind(ctx, ec.cm); err != nil {
		return err
	}
	if err := ec.cm.Claim(ctx, newRunID()); err != nil {
		return err
	}
	if d.cfg.Registerer != nil {
		// The table's commits, labelled with its name.
		m := newCommitMetrics()
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"table": name}, d.cfg.Registerer).Register(m); err == nil {
			ec.metrics = m
		}
	}
	d.mu.Lock()
	t.claimed = true
	d.mu.Unlock()
	d.logger().Info("coordinating a table", "table", name, "vnodes", vnodeCount)
	return nil
}

// Connect registers a writer of the table for vnodes (the table's own
// numbering); the options' vnode count and job were checked by Remote.
func (r *RemoteTable) Connect(ctx context.Context, vnodes *roaring.Bitmap, _ ...coordinator.ConnectOption) (coordinator.Session, error) {
	if vnodes == nil || vnodes.IsEmpty() || vnodes.Maximum() >= uint32(r.d.cfg.Vnodes) {
		return nil, fmt.Errorf("%w: a writer of table %s registered vnodes %s, beyond the %d a table has", coordinator.ErrProtocol, r.name, coordinator.FormatVnodes(vnodes), r.d.cfg.Vnodes)
	}
	return r.d.connect(ctx, r.t, r.name, vnodes)
}

// leave detaches table ident's sink, whose writers have closed their
// sessions (the last one gave the slot back).
func (d *Database) leave(ident table.Identifier) {
	name := strings.Join(ident, ".")
	d.mu.Lock()
	t := d.tables[name]
	if t == nil || !t.attached {
		d.mu.Unlock()
		return
	}
	t.attached = false
	ec := t.ec
	d.mu.Unlock()
	if ec != nil {
		// Recorded epochs of the table may still commit after its run:
		// without the run's compaction, metrics and notices.
		ec.waitMaintenance()
		ec.mu.Lock()
		ec.compact, ec.metrics, ec.onCommit = nil, nil, nil
		ec.mu.Unlock()
	}
}

// dbSession is a table writer's session with the database's coordinator:
// its payloads are framed with the table's name, a commit that failed
// for good for its table alone is its error, and the table's last
// session to close gives its slot back.
type dbSession struct {
	*coordinator.LocalSession
	d         *Database
	t         *dbTable
	name      string
	closeOnce sync.Once
}

// Commit implements coordinator.Session.
func (s *dbSession) Commit(ctx context.Context, epoch uint64, payload []byte) error {
	if err := s.LocalSession.Commit(ctx, epoch, framePayload(s.name, payload)); err != nil {
		return err
	}
	return s.d.brokenAt(s.name, epoch)
}

// Close implements coordinator.Session.
func (s *dbSession) Close() error { return s.CloseWithError(nil) }

// CloseWithError ends the session because of err (nil: a plain Close).
func (s *dbSession) CloseWithError(err error) error {
	cerr := s.LocalSession.CloseWithError(err)
	s.closeOnce.Do(func() { s.d.closed(s.t) })
	return cerr
}

// dbPayloadVersion leads a database's payload frame: version 1 is the
// byte 0xD1, the table's name (uvarint length, NS.NAME), then the
// table's commit.Payload as its sink encoded it.
const dbPayloadVersion = 0xD1

func framePayload(name string, payload []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+len(payload))
	b = append(b, dbPayloadVersion)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return append(b, payload...)
}

func unframePayload(b []byte) (name string, payload []byte, err error) {
	if len(b) == 0 || b[0] != dbPayloadVersion {
		return "", nil, errors.New("a payload without a database frame (a state folder of another kind of run?)")
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < n {
		return "", nil, errors.New("a database payload frame cut short")
	}
	return string(b[1+k : 1+k+int(n)]), b[1+k+int(n):], nil
}

// checkRecorded checks, table by table, the recorded epochs the
// coordinator will commit at start, as a single table's sink does
// (checkRecorded): a table rolled back, or changed by another writer
// after a window's key index was built, loses its parts of that epoch and
// the later ones (its input is read again); a table that no longer exists
// loses all of them; a payload that is not the table's fails the start.
func (d *Database) checkRecorded(ctx context.Context, store coordinator.StateStore) error {
	id, b, err := store.Latest(ctx)
	if err != nil {
		return err
	}
	st, err := coordinator.DecodeState(b)
	if err != nil {
		return err
	}
	dropped := map[string]bool{} // tables whose parts are dropped from here on
	changed := false
	for i, e := range st.Epochs {
		if e.Epoch <= st.LastCommitted {
			continue
		}
		byTable := map[string][]commit.Payload{}
		for _, part := range e.Parts {
			if len(part.Payload) == 0 {
				continue
			}
			name, raw, err := unframePayload(part.Payload)
			if err != nil {
				return fmt.Errorf("recorded epoch %d: %w", e.Epoch, err)
			}
			p, err := commit.UnmarshalPayload(raw)
			if err != nil {
				return fmt.Errorf("recorded epoch %d, table %s: %w", e.Epoch, name, err)
			}
			byTable[name] = append(byTable[name], p)
		}
		for _, name := range slices.Sorted(maps.Keys(byTable)) {
			if dropped[name] {
				continue
			}
			why, err := d.checkTableRecorded(ctx, name, byTable[name])
			if err != nil {
				return fmt.Errorf("recorded epoch %d, table %s: %w", e.Epoch, name, err)
			}
			if why != "" {
				dropped[name] = true
				d.logger().Warn("sink: a table's recorded epochs dropped; their input is written again", "table", name, "from-epoch", e.Epoch, "reason", why)
			}
		}
		kept := e.Parts[:0]
		for _, part := range e.Parts {
			name, _, _ := unframePayload(part.Payload)
			if dropped[name] && len(part.Payload) > 0 {
				changed = true
				continue
			}
			kept = append(kept, part)
		}
		st.Epochs[i].Parts = kept
	}
	if !changed {
		return nil
	}
	if err := store.Save(ctx, id+1, coordinator.EncodeState(st)); err != nil {
		return fmt.Errorf("dropping recorded epochs of tables: %w", err)
	}
	return nil
}

// checkTableRecorded says why table name's recorded payloads ps must not
// be committed ("" when they may), or fails when they are not the table's.
func (d *Database) checkTableRecorded(ctx context.Context, name string, ps []commit.Payload) (why string, err error) {
	t, err := d.table(name)
	if err != nil {
		return "", err
	}
	cm, err := commit.NewCommitter(ctx, d.cfg.Loader, t.ident, d.cfg.SinkID)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return "the table no longer exists", nil
	}
	if err != nil {
		return "", err
	}
	if last, _ := cm.Last(); last.RolledBack > 0 {
		return fmt.Sprintf("the table was rolled back past epoch %d", last.RolledBack), nil
	}
	for i := range ps {
		if err := cm.CheckPayload(&ps[i]); err != nil {
			return "", err
		}
	}
	if err := cm.CheckKeyIndexed(ps); errors.Is(err, commit.ErrForeignChange) {
		return err.Error(), nil
	} else if err != nil {
		return "", err
	}
	return "", nil
}
