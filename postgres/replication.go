package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Config says which database, publication and slot a Replication reads.
type Config struct {
	// URL is the database's postgres:// URL (TLS through its sslmode and
	// sslrootcert; the password from PGPASSWORD or a password file, never
	// a flag).
	URL string
	// Publication names the publication whose tables are read. When it
	// does not exist it is created for Tables.
	Publication string
	// Tables are schema.table names (schema.* for all tables of a
	// schema) a missing publication is created for.
	Tables []string
	// Slot names the logical replication slot (pgoutput), created on the
	// first run with the snapshot the tables are first read in.
	Slot string
	// Keys returns the key columns of a table in place of its primary key
	// (nil: the primary key); a table with neither is refused.
	Keys func(TableName) []string
	// StatusInterval is how often the slot's confirmed position is sent
	// (default 10 s).
	StatusInterval time.Duration
	// SnapshotChunk is how much of a table (bytes of its heap, default
	// 64 MiB) one query of its snapshot reads: a commit may come between
	// two, and a run stopped or killed mid-snapshot goes on from the
	// first chunk not committed.
	SnapshotChunk int64
	// RefreshInterval is how often the publication is looked at for
	// tables that joined it (default 1 min; negative: never): a table that
	// joins ends the round, every table commits what it read, and the next
	// round reads the new one in a snapshot of its own, then streams it too.
	RefreshInterval time.Duration

	// skip names tables a round leaves out (refused when they joined);
	// with goOn, Open leaves out a table it cannot read (Replication.refused)
	// instead of failing.
	skip map[TableName]bool
	goOn bool
	// Logger receives what the replication does (default slog.Default).
	Logger *slog.Logger
}

// Replication reads the tables of a publication: first each table's rows
// in a snapshot consistent with the slot, then the slot's changes, one
// stream for every table, handed to each table's Source. The slot's
// confirmed position moves to what every table's commits hold.
type Replication struct {
	cfg     Config
	log     *slog.Logger
	conn    *pgx.Conn      // catalog queries
	repl    *pgconn.PgConn // the replication connection
	system  string         // the server's system identifier and database: the input's identity
	tables  []*Source
	byName  map[TableName]*Source
	byRel   map[uint32]*Source // relation id -> table (nil: not ours)
	created bool               // the slot was created by this run
	// commitWake is poked when a table commits (the slot's position may
	// move): the stream sends its status.
	commitWake chan struct{}
	// refused are the published tables Open left out (Config.goOn).
	refused map[TableName]error
	// slotFlushed is the position the slot had confirmed at the start.
	slotFlushed pglogrepl.LSN
	// snapshot and consistent are the slot's exported snapshot and the
	// position it holds (created only).
	snapshot   string
	consistent pglogrepl.LSN

	mu      sync.Mutex
	pending int           // tables not sought yet
	sought  chan struct{} // closed when every table is sought
	stopped chan struct{} // closed by Stop
	stopOne sync.Once
	// serverEnd is the server's WAL end the stream last told of;
	// lastCommit the source commit time (unix ns) of the newest
	// transaction delivered, 0 once a keepalive showed nothing newer.
	serverEnd  atomic.Uint64
	lastCommit atomic.Int64
	// ended is closed when Run returns; streamErr is why (nil: stopped).
	ended     chan struct{}
	streamErr error
}

// Open connects to the database, creates the publication and the slot
// when missing, and describes every published table. Each table's Source
// goes to a sink run; Run streams once every one of them is sought.
func Open(ctx context.Context, cfg Config) (*Replication, error) {
	if cfg.Publication == "" || cfg.Slot == "" {
		return nil, errors.New("postgres: a publication and a slot are required")
	}
	if cfg.SnapshotChunk <= 0 {
		cfg.SnapshotChunk = 64 << 20
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = time.Minute
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replication{cfg: cfg, log: cfg.Logger, byName: map[TableName]*Source{}, byRel: map[uint32]*Source{},
		sought: make(chan struct{}), stopped: make(chan struct{}), ended: make(chan struct{}), commitWake: make(chan struct{}, 1)}
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	var err error
	if r.conn, err = connect(ctx, cfg.URL); err != nil {
		return nil, err
	}
	names, err := ensurePublication(ctx, r.conn, cfg.Publication, cfg.Tables)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("publication %s publishes no table", cfg.Publication)
	}
	names = slices.DeleteFunc(names, func(n TableName) bool { return cfg.skip[n] })
	for _, n := range names {
		t, err := r.describe(ctx, n)
		if err != nil && cfg.goOn {
			if r.refused == nil {
				r.refused = map[TableName]error{}
			}
			r.refused[n] = err
			continue
		}
		if err != nil {
			return nil, err
		}
		s := &Source{r: r, t: t, q: make(chan item, queueLen), wake: make(chan struct{}, 1), died: make(chan struct{})}
		r.tables = append(r.tables, s)
		r.byName[n] = s
	}
	r.pending = len(r.tables)
	pc, err := connConfig(cfg.URL, true)
	if err != nil {
		return nil, err
	}
	if r.repl, err = pgconn.ConnectConfig(ctx, pc); err != nil {
		return nil, fmt.Errorf("opening a replication connection (the role needs REPLICATION, the server wal_level=logical): %w", err)
	}
	sys, err := pglogrepl.IdentifySystem(ctx, r.repl)
	if err != nil {
		return nil, fmt.Errorf("identifying the server: %w", err)
	}
	r.system = "postgres:" + sys.SystemID + "/" + sys.DBName
	var plugin, flushed string
	err = r.conn.QueryRow(ctx, `SELECT coalesce(plugin, ''), coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&plugin, &flushed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		res, err := pglogrepl.CreateReplicationSlot(ctx, r.repl, cfg.Slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
		if err != nil {
			return nil, fmt.Errorf("creating replication slot %s: %w", cfg.Slot, err)
		}
		if r.consistent, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
			return nil, fmt.Errorf("slot %s: consistent point %q: %w", cfg.Slot, res.ConsistentPoint, err)
		}
		r.created, r.snapshot = true, res.SnapshotName
		r.log.Info("replication slot created; the tables are read in its snapshot", "slot", cfg.Slot, "lsn", r.consistent)
	case err != nil:
		return nil, fmt.Errorf("reading replication slot %s: %w", cfg.Slot, err)
	case plugin != "pgoutput":
		return nil, fmt.Errorf("replication slot %s uses plugin %q, not pgoutput: give another --slot", cfg.Slot, plugin)
	default:
		if r.slotFlushed, err = pglogrepl.ParseLSN(flushed); err != nil {
			return nil, fmt.Errorf("slot %s: confirmed position %q: %w", cfg.Slot, flushed, err)
		}
	}
	ok = true
	return r, nil
}

// Tables are the published tables' sources, by name.
func (r *Replication) Tables() []*Source { return slices.Clone(r.tables) }

// Stop ends the input: each table's Next returns io.EOF at its next
// transaction boundary, after which the sink commits what it read.
func (r *Replication) Stop() { r.stopOne.Do(func() { close(r.stopped) }) }

// joined lists the published tables this round does not read (joined
// since Open, or left out as unreadable), each with why it cannot be
// read (nil: it can now).
func (r *Replication) joined(ctx context.Context) (map[TableName]error, error) {
	names, err := publicationTables(ctx, r.conn, r.cfg.Publication)
	if err != nil {
		return nil, err
	}
	out := map[TableName]error{}
	for _, n := range names {
		if _, ok := r.byName[n]; ok {
			continue
		}
		_, out[n] = r.describe(ctx, n)
	}
	return out, nil
}

// describe reads n's columns, key (Config.Keys, else its primary key)
// and replica identity, or says why the table cannot be read.
func (r *Replication) describe(ctx context.Context, n TableName) (*sourceTable, error) {
	var key []string
	if r.cfg.Keys != nil {
		key = r.cfg.Keys(n)
	}
	return describe(ctx, r.conn, n, key)
}

// errWake cancels a receive of the stream to send a status after a commit.
var errWake = errors.New("a table committed")

// Close closes the connections.
func (r *Replication) Close() error {
	r.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if r.repl != nil {
		errs = append(errs, r.repl.Close(ctx))
	}
	if r.conn != nil {
		errs = append(errs, r.conn.Close(ctx))
	}
	for _, s := range r.tables {
		s.closeSnapshot()
	}
	return errors.Join(errs...)
}

// soughtOne counts a table sought; the last one lets Run stream.
func (r *Replication) soughtOne() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending--; r.pending == 0 {
		close(r.sought)
	}
}

// queueLen is how many changes a table's queue holds before the stream
// waits for its sink (which bounds what the stream holds in memory).
const queueLen = 1024

// item is one entry of a table's queue: a change (its row in the
// stream's columns), new columns, the end of a transaction, or a
// position every earlier transaction is below.
type item struct {
	ch   *change
	cols []column
	end  pglogrepl.LSN // a transaction's end (ch nil)
	mark pglogrepl.LSN // no transaction of the table below it is left (ch nil, end 0)
	err  error
}

// Run streams the slot's changes to the tables until ctx ends or Stop;
// it waits until every table's sink has sought its position (and read
// its snapshot's start). A connection lost is an error: the caller runs
// again from what the tables hold.
func (r *Replication) Run(ctx context.Context) (err error) {
	defer func() {
		r.streamErr = err
		close(r.ended)
	}()
	select {
	case <-r.sought:
	case <-ctx.Done():
		return nil
	case <-r.stopped:
		return nil
	}
	err = pglogrepl.StartReplication(ctx, r.repl, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names " + quoteLiteral(r.cfg.Publication)}})
	if err != nil {
		return fmt.Errorf("starting replication from slot %s: %w", r.cfg.Slot, err)
	}
	st := &streamState{r: r, truncates: map[*Source]int{}}
	next := time.Now()
	// One deadline context per status interval, not per message.
	var (
		rctx    context.Context
		rnext   time.Time
		rcancel = func() {}
	)
	defer func() { rcancel() }()
	var sent time.Time
	for {
		if time.Now().After(next) {
			if err := r.sendStatus(ctx); err != nil {
				return err
			}
			sent, next = time.Now(), time.Now().Add(r.cfg.StatusInterval)
		}
		select {
		case <-r.stopped:
			if st.txn == nil {
				// Every table sees the end at a transaction boundary.
				for _, s := range r.tables {
					s.wakeUp()
				}
				return nil
			}
		default:
		}
		if rctx == nil || !rnext.Equal(next) || rctx.Err() != nil {
			rcancel()
			dctx, cancelDeadline := context.WithDeadline(ctx, next)
			cctx, cancelWake := context.WithCancelCause(dctx)
			// A commit wakes the receive (a quiet stream sends nothing
			// until the server's keepalive), a tenth of a second later so
			// that the tables committing one epoch are told in one status.
			go func(since time.Time) {
				select {
				case <-r.commitWake:
				case <-cctx.Done():
					return
				}
				select {
				case <-time.After(max(100*time.Millisecond-time.Since(since), 0)):
					cancelWake(errWake)
				case <-cctx.Done():
				}
			}(sent)
			rctx, rnext = cctx, next
			rcancel = func() { cancelWake(nil); cancelDeadline() }
		}
		msg, err := r.repl.ReceiveMessage(rctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(context.Cause(rctx), errWake) {
				// A table committed: the slot may let its WAL go now, not
				// at the next interval.
				if err := r.sendStatus(ctx); err != nil {
					return err
				}
				sent = time.Now()
				continue
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("reading the replication stream: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("the replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("a keepalive: %w", err)
				}
				r.serverEnd.Store(uint64(ka.ServerWALEnd))
				if st.txn == nil {
					// Every transaction below the server's sent position
					// has come: idle tables move there.
					st.markAll(ctx, ka.ServerWALEnd)
					r.lastCommit.Store(0)
				}
				if ka.ReplyRequested {
					next = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("a WAL message: %w", err)
				}
				if uint64(xld.ServerWALEnd) > r.serverEnd.Load() {
					r.serverEnd.Store(uint64(xld.ServerWALEnd))
				}
				if err := st.handle(ctx, xld.WALData); err != nil {
					return err
				}
			}
		}
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// sendStatus tells the server how far every table's commits hold the
// stream: the slot keeps the WAL after that, and frees what is before.
func (r *Replication) sendStatus(ctx context.Context) error {
	flush := r.flushed()
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, r.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: flush, WALFlushPosition: flush, WALApplyPosition: flush}); err != nil {
		return fmt.Errorf("sending the slot's position: %w", err)
	}
	return nil
}

// flushed is the least position the tables' commits hold (0 while a
// table has none: nothing is confirmed).
func (r *Replication) flushed() pglogrepl.LSN {
	var least pglogrepl.LSN
	for i, s := range r.tables {
		c := pglogrepl.LSN(s.committed.Load())
		if c == 0 {
			return 0
		}
		if i == 0 || c < least {
			least = c
		}
	}
	return least
}

// streamState is the decoding state of the stream.
type streamState struct {
	r       *Replication
	txn     *pglogrepl.BeginMessage
	touched []*Source
	// truncates counts each table's truncates in the open transaction.
	truncates map[*Source]int
}

// handle decodes one pgoutput message.
func (st *streamState) handle(ctx context.Context, data []byte) error {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("decoding a replication message: %w", err)
	}
	r := st.r
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		n := TableName{m.Namespace, m.RelationName}
		s := r.byName[n]
		r.byRel[m.RelationID] = s
		if s != nil {
			// Changes after it come in its columns; the table's sink
			// follows them (an added column, a wider type, a dropped one
			// made optional) when it reads this far.
			if cols := s.t.relationColumns(m); !sameColumns(cols, s.t.cols) {
				s.t.cols = cols
				return st.push(ctx, s, item{cols: cols})
			}
		}
	case *pglogrepl.BeginMessage:
		st.txn, st.touched = m, st.touched[:0]
		clear(st.truncates)
	case *pglogrepl.CommitMessage:
		for _, s := range st.touched {
			if err := st.push(ctx, s, item{end: m.TransactionEndLSN}); err != nil {
				return err
			}
		}
		st.txn = nil
		r.lastCommit.Store(m.CommitTime.UnixNano())
		st.markAll(ctx, m.TransactionEndLSN)
	case *pglogrepl.InsertMessage:
		return st.change(ctx, m.RelationID, func(t *sourceTable) ([]*change, error) { return t.insert(m) })
	case *pglogrepl.UpdateMessage:
		return st.change(ctx, m.RelationID, func(t *sourceTable) ([]*change, error) { return t.update(m) })
	case *pglogrepl.DeleteMessage:
		return st.change(ctx, m.RelationID, func(t *sourceTable) ([]*change, error) { return t.delete(m) })
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			s := r.byRel[id]
			if s == nil || !st.applies(s) {
				continue
			}
			skipped := st.skipping(s)
			st.truncates[s]++
			if skipped {
				continue // a truncate the table was already emptied for
			}
			// The table's run ends here, without committing its window;
			// Run empties the table at this truncate of this transaction.
			if err := st.push(ctx, s, item{err: &TruncatedError{Table: s.t.name, At: st.txn.FinalLSN, N: st.truncates[s]}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// skipping reports whether the open transaction's changes of s come
// before the truncate s's table was emptied for (Source.truncatedAt, the
// truncatedN-th truncate of the table in that transaction).
func (st *streamState) skipping(s *Source) bool {
	return st.txn != nil && s.truncatedAt != 0 && st.txn.FinalLSN == s.truncatedAt && st.truncates[s] < s.truncatedN
}

// applies reports whether the open transaction is one s's table does not
// hold yet (its snapshot or its commits hold every transaction that
// committed below its position).
func (st *streamState) applies(s *Source) bool {
	return st.txn != nil && st.txn.FinalLSN >= s.from
}

// change decodes a row change of relation rel for its table.
func (st *streamState) change(ctx context.Context, rel uint32, decode func(*sourceTable) ([]*change, error)) error {
	s := st.r.byRel[rel]
	if s == nil || !st.applies(s) || st.skipping(s) {
		return nil
	}
	chs, err := decode(s.t)
	if err != nil {
		return st.push(ctx, s, item{err: fmt.Errorf("table %s, transaction %d: %w", s.t.name, st.txn.Xid, err)})
	}
	if !slices.Contains(st.touched, s) {
		st.touched = append(st.touched, s)
	}
	for _, ch := range chs {
		if err := st.push(ctx, s, item{ch: ch}); err != nil {
			return err
		}
	}
	return nil
}

// markAll tells the tables with nothing queued that no transaction of
// theirs below at is left, so that an idle table's commits move on too
// (a busy table moves with its own transactions' ends).
func (st *streamState) markAll(_ context.Context, at pglogrepl.LSN) {
	for _, s := range st.r.tables {
		if at < s.from || len(s.q) > 0 {
			continue
		}
		select {
		case s.q <- item{mark: at}:
		default:
		}
	}
}

// push queues it for s, waiting for room while keeping the connection
// alive (the slot's position is sent while the stream waits).
func (st *streamState) push(ctx context.Context, s *Source, it item) error {
	if s.dead.Load() {
		return nil
	}
	select {
	case s.q <- it: // room: no timer
		return nil
	default:
	}
	for {
		if s.dead.Load() {
			return nil // its sink stopped: the table keeps the slot where it committed
		}
		select {
		case s.q <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-s.died:
		case <-time.After(st.r.cfg.StatusInterval):
			if err := st.r.sendStatus(ctx); err != nil {
				return err
			}
		}
	}
}
