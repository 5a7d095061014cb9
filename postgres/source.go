package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
)

// PropTruncated is the table property saying which TRUNCATE the table was
// last emptied for: the commit LSN of its source transaction (a decimal
// number), and after a colon which of the transaction's truncates of the
// table it was (1 for the first).
const PropTruncated = "icesink.postgres.truncated-at"

// TruncatedError ends a table's run at a TRUNCATE of its source table:
// Run empties the Iceberg table (PropTruncated) and the next round goes on
// after the truncate.
type TruncatedError struct {
	Table TableName
	At    pglogrepl.LSN // the commit LSN of the truncating transaction
	N     int           // which of its truncates of the table (1: the first)
}

// truncatedValue is e as PropTruncated spells it.
func (e *TruncatedError) truncatedValue() string {
	return strconv.FormatUint(uint64(e.At), 10) + ":" + strconv.Itoa(e.N)
}

// parseTruncated parses a PropTruncated value.
func parseTruncated(v string) (pglogrepl.LSN, int, error) {
	at, n, _ := strings.Cut(v, ":")
	lsn, err := parseLSN(at)
	if err != nil {
		return 0, 0, err
	}
	k := 1
	if n != "" {
		if k, err = strconv.Atoi(n); err != nil {
			return 0, 0, err
		}
	}
	return lsn, k, nil
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("table %s was truncated at the source (the transaction committed at %s)", e.Table, e.At)
}

// errStreamEnded ends a table's input whose stream failed (the sink
// commits what it read whole; a new run goes on from there).
var errStreamEnded = errors.New("the replication stream ended")

// PropLSN is the offset property a table's commits record: every source
// transaction that ended at or below it is in the table, none above. It
// is the LSN as a decimal number (offsets are numbers that never go
// back). Offsets carry commit.PropOffsetPrefix, whose name is Kafka's
// from before there was another source.
const PropLSN = commit.PropOffsetPrefix + "postgres.lsn"

// PropSnapshotPage and PropSnapshotFile are the offset properties of a
// table whose snapshot is committed in part: the first heap page not
// read, and the table's storage then (pg_relation_filenode; offsets are
// numbers). A run goes on reading from that page in a snapshot of its
// own, and applies the stream from PropLSN (the first snapshot's
// position) on top: a row the new snapshot holds already changed is
// changed to the same end again. A table rewritten since (VACUUM FULL,
// CLUSTER: another filenode) is read again from its first page. File 0:
// no snapshot in part.
const (
	PropSnapshotPage = commit.PropOffsetPrefix + "postgres.snapshot-page"
	PropSnapshotFile = commit.PropOffsetPrefix + "postgres.snapshot-file"
)

// parseSnapshotProgress parses the PropSnapshotFile and PropSnapshotPage
// of offsets (ok false: the snapshot was not committed in part).
func parseSnapshotProgress(offsets map[string]string) (file, page uint32, ok bool, err error) {
	f, ok := offsets[PropSnapshotFile]
	if !ok || f == "0" {
		return 0, 0, false, nil // none, or read whole
	}
	fn, err := strconv.ParseUint(f, 10, 32)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%s %q: %w", PropSnapshotFile, f, err)
	}
	p := offsets[PropSnapshotPage]
	pn, err := strconv.ParseUint(p, 10, 32)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%s %q: %w", PropSnapshotPage, p, err)
	}
	return uint32(fn), uint32(pn), true, nil
}

// parseLSN parses a PropLSN value.
func parseLSN(v string) (pglogrepl.LSN, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	return pglogrepl.LSN(n), err
}

// change is one decoded row change.
type change = deltawriter.Change

// Source is one table's input of a Replication, for a sink run
// (sink.OffsetSource): its snapshot's rows as inserts, then its changes
// from the stream. A checkpoint ends only between two source
// transactions, so a commit never holds part of one.
type Source struct {
	r    *Replication
	t    *sourceTable
	q    chan item
	wake chan struct{}
	want atomic.Bool // a barrier was asked for
	// dead is set (and died closed) when the table's sink stopped: the
	// stream no longer queues its changes.
	dead     atomic.Bool
	died     chan struct{}
	dieOnce  sync.Once
	seekOnce sync.Once
	// from is the position the stream applies from: transactions that
	// committed below it are in the table (or in its snapshot).
	from pglogrepl.LSN
	// committed is the position the table's last commit holds (0: none).
	committed atomic.Uint64
	// truncatedAt is the commit LSN of the transaction whose
	// truncatedN-th TRUNCATE of the table it was emptied for
	// (PropTruncated; 0: none): that transaction's changes of the table
	// before it are skipped.
	truncatedAt pglogrepl.LSN
	truncatedN  int

	pos   pglogrepl.LSN // the end of the last transaction read whole
	inTxn bool          // a transaction is read in part
	line  int64
	recs  []deltawriter.Change

	// lay maps the stream's rows onto the table's schema; pending are
	// columns waiting for the table's schema to follow them.
	lay     *layout
	schema  *iceberg.Schema
	pending []column

	snap     *snapshot // the rows to read first (nil: none, or read)
	snapRows int64
	// snapBegan and snapLogged time the snapshot's progress lines.
	snapBegan, snapLogged time.Time
	// snapRowsRead and snapEstimate are the snapshot's progress, for
	// the metrics.
	snapRowsRead, snapEstimate atomic.Int64
}

// Name is the source table's name.
func (s *Source) Name() TableName { return s.t.name }

// Schema is the Iceberg schema of the source table's columns (at Open).
func (s *Source) Schema() *iceberg.Schema { return s.t.schema }

// SchemaChanges are the changes table schema needs to hold the source
// table's columns (for commit.EvolveSchema; none: it holds them).
func (s *Source) SchemaChanges(schema *iceberg.Schema) []iceberg.NestedField {
	return schemaChanges(s.t.cols, schema)
}

// SetSchema sets the table's schema the rows are laid out in: at the
// start, and after the sink evolved it to hold the source's columns.
func (s *Source) SetSchema(schema *iceberg.Schema) error {
	var cols []column
	switch {
	case s.pending != nil: // the columns the stream changed to
		cols = s.pending
	case s.lay != nil:
		cols = s.lay.cols
	default: // the stream has not started (it owns t.cols after)
		cols = s.t.cols
	}
	lay, err := newLayout(cols, schema)
	if err != nil {
		return fmt.Errorf("table %s: %w", s.t.name, err)
	}
	s.lay, s.schema, s.pending = lay, schema, nil
	return nil
}

// Identity names the server, database and table.
func (s *Source) Identity() string { return s.r.system + "/" + s.t.name.String() }

// Offsets says how far the table's input is read: the end of its last
// transaction read whole.
func (s *Source) Offsets() map[string]string {
	// Commits carry offsets forward: a snapshot read whole says so (0).
	file, page := uint32(0), uint32(0)
	if s.snap != nil {
		// Called between two chunks (checkpoints end only there).
		file, page = s.snap.file, s.snap.next
	}
	return map[string]string{
		PropLSN:          strconv.FormatUint(uint64(s.pos), 10),
		PropSnapshotFile: strconv.FormatUint(uint64(file), 10),
		PropSnapshotPage: strconv.FormatUint(uint64(page), 10),
	}
}

// RequestBarrier makes Next end the checkpoint at the next transaction
// boundary (at once when none is open and nothing is queued).
func (s *Source) RequestBarrier() {
	s.want.Store(true)
	s.wakeUp()
}

func (s *Source) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Committed records what the table's last commit holds: the slot may
// confirm it once every table holds it.
func (s *Source) Committed(_ context.Context, offsets map[string]string) error {
	if v, ok := offsets[PropLSN]; ok {
		lsn, err := parseLSN(v)
		if err != nil {
			return fmt.Errorf("table %s: committed %s %q: %w", s.t.name, PropLSN, v, err)
		}
		s.committed.Store(uint64(lsn))
		select {
		case s.r.commitWake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Stopped tells the replication that the table's sink stopped: the
// stream goes on without it, and the slot stays where the table
// committed.
func (s *Source) Stopped() {
	s.dieOnce.Do(func() {
		s.dead.Store(true)
		close(s.died)
	})
}

// markSought counts the table sought once.
func (s *Source) markSought() { s.seekOnce.Do(s.r.soughtOne) }

// Skip is not used: the table's position is an LSN (Seek).
func (s *Source) Skip(int64) error {
	return errors.New("postgres: a table's input resumes from its LSN")
}

// Seek starts the table at the position its commits hold; a table
// without one is read whole first, in a snapshot consistent with the
// stream (the slot's own when this run created it, else a temporary
// slot's).
func (s *Source) Seek(ctx context.Context, offsets map[string]string, _ int64) (err error) {
	defer s.markSought()
	if v, ok := offsets[PropLSN]; ok {
		lsn, err := parseLSN(v)
		if err != nil {
			return fmt.Errorf("table %s: the commit's %s %q: %w", s.t.name, PropLSN, v, err)
		}
		if s.r.created {
			return fmt.Errorf("table %s holds the changes up to %s of an earlier replication slot, and slot %s was created now: the changes in between are gone. Write the table anew (drop it, or give another --sink-id) to read it whole again", s.t.name, lsn, s.r.cfg.Slot)
		}
		s.from, s.pos = lsn, lsn
		if s.truncatedAt > lsn {
			// Emptied at a TRUNCATE after its last commit: nothing before
			// it matters.
			s.from, s.pos = s.truncatedAt, s.truncatedAt
		}
		if s.r.slotFlushed > s.from {
			return fmt.Errorf("table %s holds the changes up to %s, and slot %s has confirmed %s: the changes in between are gone (another reader of the slot?). Write the table anew (drop it, or give another --sink-id)", s.t.name, s.from, s.r.cfg.Slot, s.r.slotFlushed)
		}
		s.committed.Store(uint64(s.from))
		file, page, inPart, err := parseSnapshotProgress(offsets)
		if err != nil {
			return fmt.Errorf("table %s: the commit's %w", s.t.name, err)
		}
		if inPart && s.from == lsn {
			// The snapshot was committed in part: the rest is read in a
			// snapshot of now, the stream applied from lsn on top.
			if s.snap, _, err = s.r.openSnapshot(ctx, s.t, &s.snapEstimate, file, page); err != nil {
				return fmt.Errorf("table %s: %w", s.t.name, err)
			}
		}
		return nil
	}
	if s.truncatedAt != 0 {
		// Emptied at a TRUNCATE before its first commit: the stream goes
		// on from it, no snapshot.
		s.from, s.pos = s.truncatedAt, s.truncatedAt
		s.committed.Store(uint64(s.from))
		return nil
	}
	snap, at, err := s.r.openSnapshot(ctx, s.t, &s.snapEstimate, 0, 0)
	if err != nil {
		return fmt.Errorf("table %s: %w", s.t.name, err)
	}
	s.snap, s.from, s.pos = snap, at, at
	// Until its first commit, the table holds the slot at its snapshot.
	s.committed.Store(uint64(at))
	return nil
}

// Next returns the next record: a snapshot row, a change, or a barrier
// (asked for, at a transaction boundary); io.EOF once the replication
// stops, between two transactions.
func (s *Source) Next() (changelog.Record, error) {
	if s.snap != nil {
		rec, err := s.nextSnapshot()
		if err != io.EOF {
			return rec, err
		}
		if !s.snap.done {
			return rec, err // stopped between two chunks
		}
		s.r.log.Info("table read in the snapshot; its changes follow", "table", s.t.name.String(), "rows", s.snapRows, "lsn", s.from)
		s.closeSnapshot()
	}
	for {
		if !s.inTxn {
			if s.want.Load() && len(s.q) == 0 {
				return s.barrier(), nil
			}
			select {
			case <-s.r.stopped:
				return changelog.Record{}, io.EOF
			default:
			}
		}
		select {
		case it := <-s.q:
			switch {
			case it.err != nil:
				return changelog.Record{}, it.err
			case it.ch != nil:
				s.inTxn = true
				s.line++
				s.recs = append(s.recs[:0], deltawriter.Change{Op: it.ch.Op, Row: s.lay.row(it.ch.Row)})
				return changelog.Record{Line: s.line, Changes: s.recs}, nil
			case it.cols != nil:
				if changes := schemaChanges(it.cols, s.schema); len(changes) > 0 {
					// The sink evolves the table and calls SetSchema.
					s.pending = it.cols
					return changelog.Record{}, &changelog.SchemaChangeError{Columns: changes}
				}
				lay, err := newLayout(it.cols, s.schema)
				if err != nil {
					return changelog.Record{}, fmt.Errorf("table %s: %w", s.t.name, err)
				}
				s.lay = lay
				continue
			case it.end != 0:
				s.inTxn, s.pos = false, it.end
			case it.mark > s.pos && !s.inTxn:
				s.pos = it.mark
			}
			if s.want.Load() && !s.inTxn {
				return s.barrier(), nil
			}
		case <-s.wake:
		case <-s.r.stopped:
			if s.inTxn {
				// The stream stops between transactions: the rest of
				// this one is queued.
				continue
			}
			return changelog.Record{}, io.EOF
		case <-s.r.ended:
			if len(s.q) > 0 {
				continue
			}
			if s.inTxn {
				return changelog.Record{}, fmt.Errorf("table %s: the replication stream ended inside a transaction: %w", s.t.name, cmp.Or(s.r.streamErr, errStreamEnded))
			}
			// What was read whole is committed; the replication's
			// caller says why the stream ended, and runs again.
			return changelog.Record{}, io.EOF
		}
	}
}

func (s *Source) barrier() changelog.Record {
	s.want.Store(false)
	s.line++
	return changelog.Record{Line: s.line, Barrier: true}
}

// logProgress says, every 10 seconds, how far the table's snapshot is:
// rows read, of the estimate, and the time left at the rate so far.
func (s *Source) logProgress() {
	now := time.Now()
	if s.snapBegan.IsZero() {
		s.snapBegan, s.snapLogged = now, now
		return
	}
	if now.Sub(s.snapLogged) < 10*time.Second {
		return
	}
	s.snapLogged = now
	rate := float64(s.snapRows) / now.Sub(s.snapBegan).Seconds()
	args := []any{"table", s.t.name.String(), "rows", s.snapRows, "rows_per_second", int64(rate)}
	if est := s.snapEstimate.Load(); est > s.snapRows && rate > 0 {
		args = append(args, "rows_estimated", est, "left", time.Duration(float64(est-s.snapRows)/rate*float64(time.Second)).Round(time.Second))
	}
	s.r.log.Info("reading a table in its snapshot", args...)
}

// snapshot is a table's rows in a snapshot consistent with the stream,
// read a chunk of heap pages at a time (TID range scans, PostgreSQL 14+;
// older servers read the table in one query).
type snapshot struct {
	ctx  context.Context
	conn *pgx.Conn
	rows pgx.Rows       // the chunk being read (nil: between two)
	temp *pgconn.PgConn // the temporary slot's connection, kept until the rows are read
	// query selects the table's columns; file is its storage's filenode.
	query string
	file  uint32
	// next is the first page not read; pages the table's size when the
	// snapshot began (rows of the snapshot lie below it); chunk the pages
	// a query reads (0: the whole table in one).
	next, pages, chunk uint32
	done               bool // every chunk is read
}

// openSnapshot starts reading t's rows in the slot's exported snapshot
// (created by this run), or in a temporary slot's: at is the position
// the snapshot holds (transactions ending at or below it are in it).
// From file and page (non-zero: a snapshot committed in part) it reads
// on from page when the table's storage is still file.
func (r *Replication) openSnapshot(ctx context.Context, t *sourceTable, estimate *atomic.Int64, file, page uint32) (_ *snapshot, at pglogrepl.LSN, err error) {
	sn := &snapshot{ctx: ctx}
	defer func() {
		if err != nil {
			sn.close()
		}
	}()
	name := r.snapshot
	at = r.consistent
	if !r.created {
		// A temporary slot exports a snapshot of now; the stream from the
		// main slot applies what committed after its position.
		pc, err := connConfig(r.cfg.URL, true)
		if err != nil {
			return nil, 0, err
		}
		if sn.temp, err = pgconn.ConnectConfig(ctx, pc); err != nil {
			return nil, 0, fmt.Errorf("opening a replication connection for the snapshot: %w", err)
		}
		slot := fmt.Sprintf("icesink_snapshot_%d", time.Now().UnixNano())
		res, err := pglogrepl.CreateReplicationSlot(ctx, sn.temp, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
		if err != nil {
			return nil, 0, fmt.Errorf("creating a temporary slot for the snapshot: %w", err)
		}
		if at, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
			return nil, 0, err
		}
		name = res.SnapshotName
	}
	if sn.conn, err = connect(ctx, r.cfg.URL); err != nil {
		return nil, 0, err
	}
	if _, err := sn.conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return nil, 0, fmt.Errorf("starting the snapshot: %w", err)
	}
	if _, err := sn.conn.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(name)); err != nil {
		return nil, 0, fmt.Errorf("importing snapshot %s: %w", name, err)
	}
	// No column change while the table is read (one made between the
	// snapshot and this lock fails the read: a new run reads the table
	// in a snapshot of its own), and no rewrite (VACUUM FULL) moving rows
	// between chunks.
	if _, err := sn.conn.Exec(ctx, "LOCK TABLE "+t.name.quoted()+" IN ACCESS SHARE MODE"); err != nil {
		return nil, 0, fmt.Errorf("locking the table against column changes while it is read: %w", err)
	}
	var (
		est        float64
		version    int
		pages, bsz int64
	)
	err = sn.conn.QueryRow(ctx, `SELECT c.reltuples, pg_relation_filenode(c.oid), pg_relation_size(c.oid), current_setting('block_size')::int, current_setting('server_version_num')::int
		FROM pg_class c WHERE c.oid = $1::regclass`, t.name.quoted()).Scan(&est, &sn.file, &pages, &bsz, &version)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the table's size: %w", err)
	}
	// Rows of the snapshot lie in pages that existed when it was taken,
	// all below the size read now (the table grows; VACUUM truncates
	// none our snapshot still sees).
	sn.pages = uint32(pages / bsz)
	if version >= 140000 {
		sn.chunk = uint32(max(r.cfg.SnapshotChunk/bsz, 1))
	}
	if file != 0 && page > 0 {
		if file == sn.file && sn.chunk > 0 {
			sn.next = page
			r.log.Info("reading on in a table's snapshot committed in part", "table", t.name.String(), "page", page, "pages", sn.pages)
		} else {
			r.log.Info("reading a table's snapshot committed in part again from its start: the table was rewritten (VACUUM FULL, CLUSTER) since", "table", t.name.String())
		}
	}
	cols := make([]string, len(t.cols))
	for i, c := range t.cols {
		cols[i] = pgx.Identifier{c.name}.Sanitize()
	}
	sn.query = "SELECT " + strings.Join(cols, ", ") + " FROM " + t.name.quoted()
	if est > 0 && sn.pages > 0 {
		est *= float64(sn.pages-min(sn.next, sn.pages)) / float64(sn.pages)
	}
	estimate.Store(int64(max(est, 0)))
	r.log.Info("reading a table in its snapshot", "table", t.name.String(), "rows_estimated", int64(max(est, 0)), "lsn", at)
	return sn, at, nil
}

// nextChunk starts the query of the next chunk of pages.
func (sn *snapshot) nextChunk() error {
	sql := sn.query
	switch {
	case sn.chunk == 0:
	case sn.next+sn.chunk >= sn.pages:
		// The last chunk: every page from next on.
		sql += fmt.Sprintf(" WHERE ctid >= '(%d,0)'::tid", sn.next)
	default:
		sql += fmt.Sprintf(" WHERE ctid >= '(%d,0)'::tid AND ctid < '(%d,0)'::tid", sn.next, sn.next+sn.chunk)
	}
	rows, err := sn.conn.Query(sn.ctx, sql, pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		return fmt.Errorf("reading the table: %w", err)
	}
	sn.rows = rows
	return nil
}

// chunkRead moves past the chunk just read.
func (sn *snapshot) chunkRead() {
	sn.rows.Close()
	sn.rows = nil
	if sn.chunk == 0 || sn.next+sn.chunk >= sn.pages {
		sn.done = true
		return
	}
	sn.next += sn.chunk
}

func (sn *snapshot) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sn.rows != nil {
		sn.rows.Close()
	}
	if sn.conn != nil {
		sn.conn.Close(ctx)
	}
	if sn.temp != nil {
		sn.temp.Close(ctx)
	}
}

func (s *Source) closeSnapshot() {
	if s.snap != nil {
		s.snap.close()
		s.snap = nil
	}
}

// nextSnapshot returns the snapshot's next row as an insert; between two
// chunks a barrier asked for, or io.EOF once the replication stops (the
// sink commits the chunks read) or every chunk is read.
func (s *Source) nextSnapshot() (changelog.Record, error) {
	sn := s.snap
	for sn.rows == nil || !sn.rows.Next() {
		if sn.rows != nil {
			if err := sn.rows.Err(); err != nil {
				return changelog.Record{}, fmt.Errorf("table %s: reading its snapshot: %w", s.t.name, err)
			}
			sn.chunkRead()
		}
		if sn.done {
			return changelog.Record{}, io.EOF
		}
		if s.want.Load() {
			return s.barrier(), nil
		}
		select {
		case <-s.r.stopped:
			return changelog.Record{}, io.EOF
		default:
		}
		if err := sn.nextChunk(); err != nil {
			return changelog.Record{}, fmt.Errorf("table %s: %w", s.t.name, err)
		}
	}
	raw := sn.rows.RawValues()
	row := make([]any, len(s.lay.cols))
	for i, c := range s.lay.cols {
		if raw[i] == nil {
			continue
		}
		v, err := c.decode(string(raw[i]))
		if err != nil {
			return changelog.Record{}, fmt.Errorf("table %s, snapshot row %d, column %s (%s): %w", s.t.name, s.snapRows+1, c.name, c.typname, err)
		}
		row[i] = v
	}
	s.snapRows++
	s.snapRowsRead.Store(s.snapRows)
	if s.snapRows%4096 == 0 {
		s.logProgress()
	}
	s.line++
	s.recs = append(s.recs[:0], deltawriter.Change{Op: deltawriter.Insert, Row: s.lay.row(row)})
	return changelog.Record{Line: s.line, Changes: s.recs}, nil
}
