package deltawriter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/dedup"
)

// Mode says how inserts are trusted.
type Mode uint8

const (
	// Upsert: +I and +U replace whatever row the key has, in this window or
	// in an earlier snapshot (one equality delete on the key's first touch
	// in a window).
	Upsert Mode = iota
	// Changelog: the stream is trusted to send -U/-D before a +U/+I of an
	// existing key, so inserts write no equality delete.
	Changelog
)

// ParseMode parses "upsert" or "changelog".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "upsert", "":
		return Upsert, nil
	case "changelog":
		return Changelog, nil
	}
	return 0, fmt.Errorf("unknown mode %q (want upsert or changelog)", s)
}

// Options configure a Writer. Zero values take the defaults.
type Options struct {
	// Mode is how inserts are trusted. Default Upsert.
	Mode Mode
	// SinkID names the sink in file names and commit payloads. Default "icesink".
	SinkID string
	// Writer is this writer's index among the sink's parallel writers.
	Writer int
	// TargetFileSize is the data-file size at which a new file starts.
	// Default: the table's write.target-file-size-bytes, else 512 MiB.
	TargetFileSize int64
	// BatchRows is the number of rows buffered in Arrow builders before
	// they go to the Parquet writer. Default 8192.
	BatchRows int
	// RowGroupBytes bounds a buffered Parquet row group. Default 64 MiB.
	RowGroupBytes int64
	// DeleteBufferRows bounds each buffered delete kind (rows) before it
	// is written as a file. Default 4M position deletes / 1M equality deletes.
	DeleteBufferRows int
	// RewriteDeleted, if > 0, makes PrepareCommit rewrite each data file of
	// the window of which at least this share of rows was deleted in the
	// window (and whose position deletes are all still buffered): the new
	// file holds only its live rows and the position deletes of the old
	// one are dropped, so readers scan live rows only. It costs reading the
	// file back and encoding its live rows again. 0 (default) never does.
	RewriteDeleted float64
	// MemoryLimit is the writer's memory budget in bytes: the inserted-row
	// index's memory tier, the delete buffers, the open Parquet writers'
	// buffered row groups and the spill read cache. When the window grows
	// past it, the writer flushes locally (spills the index to SpillDir,
	// writes delete files) and keeps going. Zero means unbounded: the
	// index stays wholly in memory until the commit, as in today's writers.
	MemoryLimit int64
	// SpillDir is where the index spills its sorted runs; each writer
	// takes a private subfolder. Default: the OS temp dir.
	SpillDir string
	// Index configures the inserted-row index. Its memory limit is
	// derived from MemoryLimit when that is set.
	Index dedup.Options
	// DeleteMode is how rows of earlier commits are deleted. Default
	// DeleteByPosition: a table-wide key index built from the table at
	// New; the caller confirms each prepared window with Committed.
	DeleteMode DeleteMode
	// Owns, when set, reports the keys (by Hash) this writer is given: the
	// key index holds only those. Default: every key.
	Owns func(hash uint64) bool
	// KeyIndexDir, if set, is the folder where a DeleteByPosition writer
	// keeps its key index (runs and a manifest) between runs: New reuses
	// what SaveKeyIndex left there when the table has not changed since,
	// and otherwise rebuilds into it. One folder per table and key set
	// (Owns); a folder another process holds is left alone (the writer
	// then builds a private index). Default: none, New always rebuilds.
	KeyIndexDir string
	// Failpoint, if set, is called with the name of each point a crash
	// test may stop the process at: keyindex-rebuild (after each data file
	// a rebuild read), keyindex-load (a saved index taken),
	// keyindex-resolve (the window's old rows looked up, their deletes not
	// yet written), keyindex-ingest (a committed window in the key index,
	// the window not yet reset), keyindex-save (runs saved, the manifest
	// not yet written); sink.Database adds database-table-committed (one
	// table's commit of an epoch done, the others' maybe not), the sink's
	// coordinator epoch-committed (an epoch in the table, its writers not
	// yet told) and compaction-committed (a round in the table, the
	// writers not yet following it).
	Failpoint func(name string)

	parquetBytes int64         // the open Parquet writers' share of MemoryLimit
	poolBytes    int64         // the builders' buffer pool's (see bufferPool)
	tableIndex   dedup.Options // the key index's (DeleteByPosition)
}

func (o Options) withDefaults(props iceberg.Properties) Options {
	if o.SinkID == "" {
		o.SinkID = "icesink"
	}
	if o.TargetFileSize <= 0 {
		o.TargetFileSize = int64(props.GetInt(table.WriteTargetFileSizeBytesKey, 512<<20))
	}
	if o.BatchRows <= 0 {
		o.BatchRows = 8192
	}
	if o.RowGroupBytes <= 0 {
		o.RowGroupBytes = 64 << 20
	}
	if o.MemoryLimit > 0 {
		o.shareBudget()
		o.Index.CacheBytes = o.MemoryLimit / 16
		if o.DeleteMode == DeleteByPosition {
			o.Index.CacheBytes = o.MemoryLimit / 32
			o.tableIndex.CacheBytes = o.MemoryLimit / 32
		}
		o.Index.SpillDir = o.SpillDir
	}
	if o.DeleteBufferRows <= 0 {
		o.DeleteBufferRows = 4 << 20
	}
	o.tableIndex.SpillDir, o.tableIndex.FS = o.SpillDir, o.Index.FS
	o.tableIndex.Dir = o.KeyIndexDir
	return o
}

// shareBudget splits MemoryLimit into its shares: half for the
// inserted-row index (of it a sixteenth of the whole for the spill read
// cache, which New sizes), an eighth for buffered position deletes, a
// quarter for the open Parquet writers (a sixteenth per row group), a
// sixteenth for the buffers the builders take back from the encoder
// (bufferPool), a sixteenth of headroom for what the accounting does not
// see exactly. With DeleteByPosition the window's index keeps 3/8 and the
// table's key index takes 1/8 (it takes each committed window as one
// sorted run, so its memory tier stays small), the cache split likewise.
// MinMemoryLimit is the smallest Options.MemoryLimit a bounded writer
// takes: its window index's share (3/8 of it in position mode) must hold
// the 64 KiB memory tier an index needs. A shared budget's writer whose
// share falls below it runs at it.
const MinMemoryLimit = 176 << 10

func (o *Options) shareBudget() {
	l := o.MemoryLimit
	o.Index.MemoryLimit = l / 2
	if o.DeleteMode == DeleteByPosition {
		o.Index.MemoryLimit = l * 3 / 8
		o.tableIndex.MemoryLimit = max(l/8, 128<<10)
	}
	o.DeleteBufferRows = int(max(l/8/8, 1024))
	o.RowGroupBytes = max(l/16, 256<<10)
	o.parquetBytes = l / 4
	o.poolBytes = l / 16
}

// SoftMemoryLimit is the Go runtime's soft memory limit
// (debug.SetMemoryLimit) for a process that runs writers writers of
// budget bytes each: 1.25 x their budgets, room for the garbage between
// collections, plus 24 MiB per writer for what no budget share covers (one
// zstd encoder's state, ~19 MiB at the default level) and 24 MiB for the
// rest of the process. (At 1.5 x, `icesink bench` measured the same CPU
// time and 10% more peak RSS.) `icesink run` holds it as the ceiling of
// the limit its membound.Governor sets from the process bound.
func SoftMemoryLimit(budget int64, writers int) int64 {
	w := int64(max(writers, 1))
	return budget*w*5/4 + w*24<<20 + 24<<20
}

// ErrBadChange marks a change that does not fit the table; the writer is
// still usable after it (nothing of the change was written).
var ErrBadChange = errors.New("bad change")

// Stats are the writer's counters since it was created.
type Stats struct {
	Changes            int64
	DataFiles          int
	DataRows           int64
	PositionDeleteFile int
	PositionDeletes    int64
	EqualityDeleteFile int
	EqualityDeletes    int64
	Commits            int
	// PeakAccountedBytes is the most memory the window's accounting saw
	// at once: index, delete buffers, open Parquet writers, spill cache.
	PeakAccountedBytes int64
	// AccountedBytes is what the accounting saw at its last check.
	AccountedBytes int64
	// LocalFlushes counts the times the writer closed its open files or
	// wrote its delete buffer early to stay under its memory budget.
	LocalFlushes int64
	// RewrittenFiles counts the data files PrepareCommit rewrote without
	// their deleted rows (Options.RewriteDeleted), RewrittenDeletes the
	// position deletes that this made unnecessary. DataFiles and DataRows
	// count the files as committed.
	RewrittenFiles   int
	RewrittenDeletes int64
	// DroppedUnencoded counts the window's rows deleted while still in
	// the Arrow builders, left out of their files instead (format v3,
	// where a deletion vector may not name a file of its own snapshot).
	DroppedUnencoded int64
	Index            dedup.Stats
	// DeleteByPosition: IndexLookups counts the window keys looked up in
	// the key index at PrepareCommit, OldRowsDeleted the rows of earlier
	// commits found and position-deleted; IndexRebuildRows and
	// IndexRebuildFiles what New read from the table to build the index.
	IndexLookups      int64
	OldRowsDeleted    int64
	IndexRebuildRows  int64
	IndexRebuildFiles int
	// IndexDuplicateKeys counts keys the rebuild found live more than once
	// (another writer appended them again); a change of one deletes all.
	IndexDuplicateKeys int
	// IndexFollowedRows counts the rows Follow read from the files of
	// this sink's compactions.
	IndexFollowedRows int64
	// IndexRebuildDeleteRereads counts the times a rebuild read a delete
	// file again: the positions it deletes in later data files, or its
	// equality deletes, did not fit the budget's delete share.
	IndexRebuildDeleteRereads int
	// SchemaChanges counts the schema changes Evolve took.
	SchemaChanges int
	// IndexForeignRebuilds counts the key index rebuilds Follow did after
	// other writers changed the table's rows (their rows are counted in
	// IndexRebuildRows).
	IndexForeignRebuilds int
	// IndexesReused counts the key indexes New took from
	// Options.KeyIndexDir without a rebuild (0 or 1 for one writer);
	// otherwise IndexRebuildReason says why it rebuilt ("" without a
	// folder).
	IndexesReused int
	// IndexCheckpoints counts the key index saves CheckpointKeyIndex did
	// after commits (and New after a rebuild does not count).
	IndexCheckpoints   int
	IndexRebuildReason string
	// IndexNotSaved is why SaveKeyIndex did not save the key index ("" if
	// it did, or was not called).
	IndexNotSaved string
	TableIndex    dedup.Stats
}

// Writer is one writer's commit window over a table. It is not safe for
// concurrent use. After an I/O error every call returns that error until
// Abort.
type Writer struct {
	opts      Options
	schema    *iceberg.Schema
	spec      iceberg.PartitionSpec
	props     iceberg.Properties
	version   int
	tableUUID string
	fs        iceio.WriteFileIO
	locs      table.LocationProvider
	keys      *KeyCodec
	check     rowChecker
	part      *partitioner
	arrow     *arrow.Schema
	cur       *fileSchema // schema, arrow and dataProps, for new data files
	eqSchema  *iceberg.Schema
	eqArrow   *arrow.Schema
	dataProps *parquet.WriterProperties
	eqProps   *parquet.WriterProperties
	posProps  *parquet.WriterProperties
	index     *dedup.Index
	tidx      *tableIndex    // DeleteByPosition: the table-wide key index
	saved     bool           // SaveKeyIndex wrote the manifest of tidx as it is
	savedSnap int64          // the snapshot that manifest names (when saved)
	pending   *pendingWindow // DeleteByPosition: prepared, not yet confirmed
	dvs       dvState        // format v3: deletion vectors
	enc       *encoder       // encodes the open files' batches; stopped by Close

	window string // unique id of the window, part of file names
	lanes  map[string]*lane
	single *lane // the lane of an unpartitioned table
	files  []*fileInfo
	done   []commit.File
	// doneBytes is what the window's finished files' records hold (path,
	// manifest entry): only a commit frees it, so it is outside the
	// budget, but BufferedBytes reports it (a commit-bytes trigger sees
	// a window of many small files).
	doneBytes int64
	seq       int
	posDels   int // buffered position deletes over all lanes
	// eqHeld are the equality deletes of partial keys (deferred.go);
	// eqNext is the next to settle once sorted.
	eqHeld   []pendingEq
	eqNow    []pendingEq // the current change's, until its Put
	eqSorted bool
	eqNext   int
	eqRow    []any
	keyBuf   []byte
	partBuf  []byte
	err      error
	stats    Stats
}

// fileInfo is a data file of the window, by ordinal.
type fileInfo struct {
	path    string
	lane    *lane
	schema  *fileSchema // the schema its rows were written with
	done    int         // index of the file in Writer.done once closed, else -1
	rows    int64       // rows, once closed
	deleted int64       // position deletes of its rows in the window
	flushed bool        // some of them are in a position-delete file already
	// dropped are the positions of rows left out of the file (deleted
	// before they were encoded, or by PrepareCommit's rewrite), sorted;
	// moved: PrepareCommit rewrote the file without its deleted rows into
	// newPath ("" when no row was left).
	moved   bool
	newPath string
	dropped []uint32
}

// lane is one partition's open data file and delete buffers.
type lane struct {
	key       string // the lanes map's key
	path      string // partition path, "" when unpartitioned
	values    map[int]any
	data      *parquetFile
	dataOrd   uint32
	posDel    []uint64 // file ordinal << 32 | pos
	eq        *parquetFile
	eqPending int64
	oldDel    []oldPosDel // position deletes of earlier commits' rows, sorted (PrepareCommit)
	used      int64       // Stats.Changes at the lane's last change
	bytes     int64       // openBytes at the last account
}

// CheckTable reports why a table of schema, partitioned by spec (nil:
// unpartitioned), could not take upserts, as New would; a command checks it
// before it creates the table.
func CheckTable(schema *iceberg.Schema, spec *iceberg.PartitionSpec) error {
	if _, err := NewKeyCodec(schema); err != nil {
		return err
	}
	if spec != nil {
		if _, err := newPartitioner(schema, *spec); err != nil {
			return err
		}
	}
	return nil
}

// New returns a writer for tbl. It fails when the table cannot take
// upserts: no identifier fields, a key type Iceberg does not allow, a
// partition source column that is not a key column, a format version below 2.
func New(ctx context.Context, tbl *table.Table, opts Options) (*Writer, error) {
	if opts.RewriteDeleted < 0 || opts.RewriteDeleted > 1 {
		return nil, fmt.Errorf("deltawriter: RewriteDeleted %v is not a share between 0 and 1", opts.RewriteDeleted)
	}

	meta := tbl.Metadata()
	switch {
	case meta.Version() < 2:
		return nil, fmt.Errorf("deltawriter: table %v has format version %d; row-level deletes need version 2 or later", tbl.Identifier(), meta.Version())
	case meta.Version() > 3:
		return nil, fmt.Errorf("deltawriter: table %v has format version %d; this writer writes versions 2 and 3", tbl.Identifier(), meta.Version())
	case len(meta.PartitionSpecs()) > 1:
		return nil, fmt.Errorf("deltawriter: table %v has %d partition specs (its partitioning evolved): equality deletes apply within one spec's partitions, so rows written under an older spec could not be deleted; this writer takes tables with one spec", tbl.Identifier(), len(meta.PartitionSpecs()))
	}
	schema := tbl.Schema()
	keys, err := NewKeyCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("deltawriter: table %v: %w", tbl.Identifier(), err)
	}
	part, err := newPartitioner(schema, tbl.Spec())
	if err != nil {
		return nil, fmt.Errorf("deltawriter: table %v: %w", tbl.Identifier(), err)
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return nil, fmt.Errorf("deltawriter: table %v: %w", tbl.Identifier(), err)
	}
	wfs, ok := fsys.(iceio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("deltawriter: table %v: its file IO cannot write", tbl.Identifier())
	}
	locs, err := tbl.LocationProvider()
	if err != nil {
		return nil, fmt.Errorf("deltawriter: table %v: %w", tbl.Identifier(), err)
	}
	asc, err := table.SchemaToArrowSchema(schema, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("deltawriter: table %v: %w", tbl.Identifier(), err)
	}
	var keyNames []string
	for _, c := range keys.Columns() {
		keyNames = append(keyNames, schema.Field(c).Name)
	}
	eqSchema, err := schema.Select(true, keyNames...)
	if err != nil {
		return nil, fmt.Errorf("deltawriter: table %v: key schema: %w", tbl.Identifier(), err)
	}
	eqArrow, err := table.SchemaToArrowSchema(eqSchema, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("deltawriter: table %v: %w", tbl.Identifier(), err)
	}
	props := tbl.Properties()
	opts = opts.withDefaults(props)
	var w *Writer
	opts.Index.Merge = func(id uint32, hash uint64, key []byte, old dedup.State, found bool, n dedup.State) (dedup.State, error) {
		return w.merge(id, hash, key, old, found, n)
	}
	index, err := dedup.New(opts.Index)
	if err != nil {
		return nil, err
	}
	w = &Writer{
		opts:      opts,
		schema:    schema,
		spec:      tbl.Spec(),
		props:     props,
		version:   meta.Version(),
		tableUUID: meta.TableUUID().String(),
		fs:        wfs,
		locs:      locs,
		keys:      keys,
		check:     rowChecker{fields: schema.Fields()},
		part:      part,
		arrow:     asc,
		eqSchema:  eqSchema,
		eqArrow:   eqArrow,
		dataProps: WriterProperties(props, asc),
		eqProps:   WriterProperties(props, eqArrow),
		posProps:  positionDeleteProperties(props),
		index:     index,
		enc:       newEncoder(opts.poolBytes),
	}
	w.cur = &fileSchema{schema: schema, arrow: asc, props: w.dataProps}
	w.resetWindow()
	if opts.DeleteMode == DeleteByPosition {
		if err := w.openTableIndex(ctx, tbl); err != nil {
			w.Close(ctx)
			return nil, err
		}
	}
	return w, nil
}

func (w *Writer) resetWindow() {
	w.window = uuid.NewString()
	w.lanes = map[string]*lane{}
	w.single = nil
	w.files = nil
	w.done = nil
	w.doneBytes = 0
	w.seq = 0
	w.posDels = 0
	w.eqHeld, w.eqNext, w.eqSorted = nil, 0, false // their memory is the window's
	w.enc.mem.drain()                              // so are the builders' buffers
}

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats {
	if w.tidx != nil {
		w.stats.TableIndex = w.tidx.ix.Stats()
	}
	s := w.stats
	s.Index = w.index.Stats()
	return s
}

// Err returns the writer's sticky error, if any.
func (w *Writer) Err() error { return w.err }

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

// ErrClosed is returned by a writer's calls after Close.
var ErrClosed = errors.New("deltawriter: writer is closed")

// begin starts a call: the writer's error, if any, else the encoder
// follows ctx for the call.
func (w *Writer) begin(ctx context.Context) error {
	if w.err != nil {
		return w.err
	}
	if w.enc == nil {
		return ErrClosed
	}
	if w.pending != nil {
		return ErrUnconfirmed
	}
	w.enc.ctx = ctx
	return nil
}

// Write applies one change to the window. A change that does not fit the
// table returns an error wrapping ErrBadChange and writes nothing.
func (w *Writer) Write(ctx context.Context, ch Change) error {
	if err := w.begin(ctx); err != nil {
		return err
	}
	key, err := w.keys.Append(w.keyBuf[:0], ch.Row)
	w.keyBuf = key
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadChange, err)
	}
	insert := false
	switch ch.Op {
	case Insert, UpdateAfter:
		insert = true
		if err := w.check.check(ch.Row); err != nil {
			return fmt.Errorf("%w: %w", ErrBadChange, err)
		}
	case Delete, UpdateBefore:
	default:
		return fmt.Errorf("%w: unknown op %v", ErrBadChange, ch.Op)
	}
	ln, err := w.laneOf(ch.Row)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadChange, err)
	}
	w.stats.Changes++
	ln.used = w.stats.Changes
	h := Hash(key)
	// Touch answers from memory: a key the spill runs may hold comes back
	// partial, to be completed in sorted order later (deferred.go).
	st, found, err := w.index.Touch(h, key)
	if err != nil {
		return w.fail(fmt.Errorf("deltawriter: index lookup: %w", err))
	}
	removes := !insert || w.opts.Mode == Upsert
	if st.HasRow {
		// The key's live row was written in this window: only a position
		// delete can remove it (an equality delete would not apply).
		if err := w.positionDelete(st.Row); err != nil {
			return w.fail(err)
		}
		st.HasRow = false
	} else {
		if !st.EqDeleted && removes {
			// The key's row, if any, is in an earlier snapshot. With a key
			// index it is found at PrepareCommit (EqDeleted then means "to
			// be resolved"); without, an equality delete removes it.
			if err := w.deleteOlder(ln, ch.Row, h, st.Partial, false); err != nil {
				return w.fail(err)
			}
			st.EqDeleted = true
		}
		if st.Partial && found && !st.EqDeletedIfRow && removes {
			// The same, had the key's older state been a live row (which
			// the chain's first change position-deleted instead).
			if err := w.deleteOlder(ln, ch.Row, h, true, true); err != nil {
				return w.fail(err)
			}
			st.EqDeletedIfRow = true
		}
	}
	if insert {
		ref, err := w.appendRow(ln, ch.Row)
		if err != nil {
			return w.fail(err)
		}
		st.Row, st.HasRow = ref, true
	}
	id, err := w.index.PutID(h, key, st)
	if err != nil {
		return w.fail(fmt.Errorf("deltawriter: index: %w", err))
	}
	if len(w.eqNow) > 0 {
		w.hold(id)
	}
	if w.stats.Changes&255 == 0 {
		if err := ctx.Err(); err != nil {
			return w.fail(fmt.Errorf("deltawriter: %w", context.Cause(ctx)))
		}
		if err := w.account(); err != nil {
			return w.fail(err)
		}
	}
	return nil
}

// account samples the window's memory and, when the open Parquet writers
// hold more than their share, closes the files of the least recently used
// partitions (a local flush: the files stay in the window until the
// commit) until they hold at most 3/4 of it.
func (w *Writer) account() error {
	var dels int64
	for _, ln := range w.lanes {
		dels += int64(cap(ln.posDel)) * 8
	}
	pq := w.openBytes()
	held := w.heldEqBytes()
	total := pq + w.index.MemoryBytes() + dels + held + w.enc.mem.idleBytes()
	w.stats.AccountedBytes = total
	if total > w.stats.PeakAccountedBytes {
		w.stats.PeakAccountedBytes = total
	}
	// Held equality deletes count against the index's share: it spills
	// (and settles them) sooner.
	w.index.SetOutside(held)
	if w.opts.parquetBytes <= 0 || pq <= w.opts.parquetBytes {
		return nil
	}
	// Batches waiting for the encoder may be what is over: closing a
	// file would not encode them sooner, only leave a small file. Wait for
	// them (the encoder is the slower side), then look again.
	if err := w.enc.barrier(); err != nil {
		return err
	}
	if pq = w.openBytes(); pq <= w.opts.parquetBytes {
		return nil
	}
	open := make([]*lane, 0, len(w.lanes))
	for _, ln := range w.lanes {
		if ln.bytes > 0 {
			open = append(open, ln)
		}
	}
	slices.SortFunc(open, func(a, b *lane) int { return cmp.Compare(a.used, b.used) })
	for _, ln := range open {
		if pq <= w.opts.parquetBytes*3/4 {
			break
		}
		pq -= ln.bytes
		w.stats.LocalFlushes++
		if ln.data != nil {
			if err := w.closeData(ln); err != nil {
				return err
			}
		}
		if ln.eq != nil {
			if err := w.closeEq(ln); err != nil {
				return err
			}
		}
	}
	return nil
}

// MemoryLimit is the writer's budget now (Options.MemoryLimit, or what
// SetMemoryLimit last gave); 0 is unbounded.
func (w *Writer) MemoryLimit() int64 { return w.opts.MemoryLimit }

// SetMemoryLimit gives a bounded writer a new budget from now on: its
// shares are split again (the spill read caches keep the size New gave
// them), and what is over the new shares is flushed locally at once — the
// window's index spills, buffered position deletes are written, open
// files of the least recently used partitions are closed — so that a
// writer whose budget shrinks gives the memory back before its next
// change. A writer created unbounded stays so.
func (w *Writer) SetMemoryLimit(ctx context.Context, n int64) error {
	if w.opts.MemoryLimit == 0 || n <= 0 {
		return fmt.Errorf("deltawriter: memory limit %d: only a bounded writer takes a new (positive) limit", n)
	}
	if err := w.begin(ctx); err != nil {
		return err
	}
	if n == w.opts.MemoryLimit {
		return nil
	}
	shrink := n < w.opts.MemoryLimit
	w.opts.MemoryLimit = n
	w.opts.shareBudget()
	w.enc.mem.setMax(w.opts.poolBytes)
	if err := w.index.SetMemoryLimit(w.opts.Index.MemoryLimit); err != nil {
		return w.fail(err)
	}
	if w.tidx != nil && w.tidx.ix != nil {
		if err := w.tidx.ix.SetMemoryLimit(w.opts.tableIndex.MemoryLimit); err != nil {
			return w.fail(err)
		}
	}
	if !shrink {
		return nil
	}
	if err := w.flushFullPositionDeletes(); err != nil {
		return w.fail(err)
	}
	for _, ln := range w.lanes {
		if len(ln.posDel) == 0 && cap(ln.posDel) > w.opts.DeleteBufferRows {
			ln.posDel = nil // the buffer's room goes back too
		}
	}
	if err := w.account(); err != nil {
		return w.fail(err)
	}
	return nil
}

// openBytes is what the lanes' open Parquet writers hold in memory; it
// records each lane's in lane.bytes.
func (w *Writer) openBytes() int64 {
	var pq int64
	for _, ln := range w.lanes {
		ln.bytes = ln.openBytes()
		pq += ln.bytes
	}
	return pq
}

// openBytes is what the lane's open Parquet writers hold in memory.
func (ln *lane) openBytes() int64 {
	var b int64
	if ln.data != nil {
		b += ln.data.bufferedBytes()
	}
	if ln.eq != nil {
		b += ln.eq.bufferedBytes()
	}
	return b
}

func (w *Writer) laneOf(row []any) (*lane, error) {
	if w.part == nil {
		if w.single == nil {
			w.single = &lane{}
			w.lanes[""] = w.single
		}
		return w.single, nil
	}
	lk, vals, path, err := w.part.partitionOf(row, w.partBuf)
	if err != nil {
		return nil, err
	}
	if ln, ok := w.lanes[lk]; ok {
		return ln, nil
	}
	ln := &lane{key: lk, path: path, values: vals}
	w.lanes[lk] = ln
	return ln, nil
}

// doneFileBytes is the memory a finished file's record holds: its path,
// its manifest entry, the record and its fileInfo.
func doneFileBytes(f *commit.File) int64 {
	return int64(len(f.Path)+cap(f.Entry)) + 160
}

// fileName is the name of the seq'th file of a window: the sink id, the
// writer, the window's UUID, the kind (data, pos, eq) and the sequence.
// SinkFile recognises it.
func fileName(sinkID string, writer int, window, kind string, seq int) string {
	return fmt.Sprintf("%s-%03d-%s-%s-%06d.parquet", sinkID, writer, window, kind, seq)
}

// SinkFile reports whether the file at path (a location or a plain name)
// is named as the writers of sinkID name their files.
func SinkFile(path, sinkID string) bool {
	name := path[strings.LastIndexByte(path, '/')+1:]
	rest, ok := strings.CutPrefix(name, sinkID+"-")
	if !ok {
		return false
	}
	// WRITER-UUID-KIND-SEQ.parquet
	parts := strings.Split(strings.TrimSuffix(rest, ".parquet"), "-")
	if len(parts) != 8 || !strings.HasSuffix(rest, ".parquet") {
		return false
	}
	if _, err := uuid.Parse(strings.Join(parts[1:6], "-")); err != nil {
		return false
	}
	switch parts[6] {
	case "data", "pos", "eq":
	default:
		return false
	}
	for _, p := range []string{parts[0], parts[7]} {
		if _, err := strconv.ParseUint(p, 10, 32); err != nil {
			return false
		}
	}
	return true
}

func (w *Writer) newPath(ln *lane, kind string) string {
	w.seq++
	name := fileName(w.opts.SinkID, w.opts.Writer, w.window, kind, w.seq)
	if ln.path != "" {
		name = ln.path + "/" + name
	}
	return w.locs.NewDataLocation(name)
}

func (w *Writer) appendRow(ln *lane, row []any) (dedup.Ref, error) {
	if ln.data == nil {
		if len(w.files) > dedup.MaxFile {
			return dedup.Ref{}, fmt.Errorf("deltawriter: window has %d data files, the most it can hold", len(w.files))
		}
		path := w.newPath(ln, "data")
		f, err := createParquetFile(w.fs, w.enc, path, w.arrow, w.dataProps, w.opts.BatchRows, w.opts.RowGroupBytes)
		if err != nil {
			return dedup.Ref{}, fmt.Errorf("deltawriter: %w", err)
		}
		ln.data = f
		ln.dataOrd = uint32(len(w.files))
		w.files = append(w.files, &fileInfo{path: path, lane: ln, done: -1, schema: w.cur})
	}
	pos, err := ln.data.appendRow(row, nil)
	if err != nil {
		return dedup.Ref{}, fmt.Errorf("deltawriter: %w", err)
	}
	ref := dedup.Ref{File: ln.dataOrd, Pos: uint32(pos)}
	if ln.data.rows >= 1<<32-1 || ln.data.size() >= w.opts.TargetFileSize {
		if err := w.closeData(ln); err != nil {
			return ref, err
		}
	}
	return ref, nil
}

func (w *Writer) positionDelete(ref dedup.Ref) error {
	fi := w.files[ref.File]
	ln := fi.lane
	if w.version >= 3 && ln.data != nil && ln.dataOrd == ref.File && ln.data.drop(int64(ref.Pos)) {
		// Not encoded yet: left out of the file instead.
		w.stats.DroppedUnencoded++
		return nil
	}
	fi.deleted++
	ln.posDel = append(ln.posDel, uint64(ref.File)<<32|uint64(ref.Pos))
	w.posDels++
	return w.flushFullPositionDeletes()
}

// flushFullPositionDeletes writes the buffered position deletes of every
// lane once they fill their share (DeleteBufferRows). Format v3 keeps
// them for the rewrite at PrepareCommit: 8 bytes per deleted row of the
// window, past the share.
func (w *Writer) flushFullPositionDeletes() error {
	if w.posDels < w.opts.DeleteBufferRows || w.version >= 3 {
		return nil
	}
	w.stats.LocalFlushes++
	for _, ln := range w.lanes {
		if err := w.flushPositionDeletes(ln); err != nil {
			return err
		}
	}
	return nil
}

func (w *Writer) equalityDelete(ln *lane, row []any) error {
	if ln.eq == nil {
		f, err := createParquetFile(w.fs, w.enc, w.newPath(ln, "eq"), w.eqArrow, w.eqProps, w.opts.BatchRows, w.opts.RowGroupBytes)
		if err != nil {
			return fmt.Errorf("deltawriter: %w", err)
		}
		ln.eq = f
	}
	if _, err := ln.eq.appendRow(row, w.keys.Columns()); err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	if ln.eq.size() >= w.opts.TargetFileSize {
		return w.closeEq(ln)
	}
	return nil
}

// finish turns a closed file into a commit.File of the window.
func (w *Writer) finish(ln *lane, kind commit.FileKind, path string, md *metadata.FileMetaData, size int64, schema *iceberg.Schema) error {
	args := table.DataFileArgs{
		Schema:          schema,
		Spec:            w.spec,
		Format:          iceberg.ParquetFile,
		Metadata:        md,
		FilePath:        path,
		FileSize:        size,
		PartitionValues: ln.values,
		Properties:      w.props,
		FormatVersion:   w.version,
	}
	switch kind {
	case commit.DataFile:
		args.Content = iceberg.EntryContentData
	case commit.EqualityDeleteFile:
		args.Content = iceberg.EntryContentEqDeletes
		args.EqualityFieldIDs = w.schema.IdentifierFieldIDs
	case commit.PositionDeleteFile:
		args.Content = iceberg.EntryContentPosDeletes
	}
	df, err := table.DataFileFromMetadata(args)
	if err != nil {
		return fmt.Errorf("deltawriter: describing %s: %w", path, err)
	}
	entry, err := commit.EncodeEntry(df, w.spec, w.schema, w.version)
	if err != nil {
		return err
	}
	w.done = append(w.done, commit.File{Kind: kind, Path: path, Rows: md.NumRows, Bytes: size, Entry: entry})
	w.doneBytes += doneFileBytes(&w.done[len(w.done)-1])
	switch kind {
	case commit.DataFile:
		w.stats.DataFiles++
		w.stats.DataRows += md.NumRows
	case commit.EqualityDeleteFile:
		w.stats.EqualityDeleteFile++
		w.stats.EqualityDeletes += md.NumRows
	case commit.PositionDeleteFile:
		w.stats.PositionDeleteFile++
		w.stats.PositionDeletes += md.NumRows
	}
	return nil
}

func (w *Writer) closeData(ln *lane) error {
	f := ln.data
	ln.data = nil
	md, size, err := f.close()
	if err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	fi := w.files[ln.dataOrd]
	fi.dropped = f.dropped
	if md.NumRows == 0 && len(f.dropped) > 0 {
		// Every row was deleted before it was encoded.
		fi.moved = true
		if err := w.fs.Remove(f.path); err != nil {
			return fmt.Errorf("deltawriter: removing %s, whose rows the window deleted: %w", f.path, err)
		}
		return nil
	}
	if err := w.finish(ln, commit.DataFile, f.path, md, size, fi.schema.schema); err != nil {
		return err
	}
	fi.done, fi.rows = len(w.done)-1, md.NumRows
	return nil
}

func (w *Writer) closeEq(ln *lane) error {
	f := ln.eq
	ln.eq = nil
	md, size, err := f.close()
	if err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	return w.finish(ln, commit.EqualityDeleteFile, f.path, md, size, w.eqSchema)
}

// oldPosDel is a position delete of a row of an earlier commit.
type oldPosDel struct {
	path string
	pos  int64
}

// flushPositionDeletes writes the lane's buffered position deletes as one
// file sorted by (file_path, pos), file_path being exactly the path the
// data file is recorded under.
func (w *Writer) flushPositionDeletes(ln *lane) error {
	if len(ln.posDel) == 0 && len(ln.oldDel) == 0 {
		return nil
	}
	if w.version >= 3 {
		return fmt.Errorf("deltawriter: %d position deletes of the window's own rows left after its files were rewritten", len(ln.posDel))
	}
	// Rank the window's files by path so that sorting (rank, pos) as one
	// integer sorts by (file_path, pos).
	ords := make([]uint32, len(w.files))
	for i := range ords {
		ords[i] = uint32(i)
	}
	slices.SortFunc(ords, func(a, b uint32) int { return strings.Compare(w.files[a].path, w.files[b].path) })
	rank := make([]uint32, len(w.files))
	for r, o := range ords {
		rank[o] = uint32(r)
	}
	for i, d := range ln.posDel {
		w.files[d>>32].flushed = true
		ln.posDel[i] = uint64(rank[d>>32])<<32 | d&(1<<32-1)
	}
	slices.Sort(ln.posDel)
	// Two sorted streams, the window's files' deletes and those of
	// earlier commits' files, merged in (file_path, pos) order.
	merged := func(yield func(path string, pos int64) bool) {
		old := ln.oldDel
		for i := 0; i < len(ln.posDel) || len(old) > 0; {
			var path string
			var pos int64
			if i < len(ln.posDel) {
				d := ln.posDel[i]
				path, pos = w.files[ords[d>>32]].path, int64(d&(1<<32-1))
			}
			if len(old) > 0 && (i == len(ln.posDel) || old[0].path < path || old[0].path == path && old[0].pos < pos) {
				path, pos = old[0].path, old[0].pos
				old = old[1:]
			} else {
				i++
			}
			if !yield(path, pos) {
				return
			}
		}
	}
	// The distinct paths, ascending: the window's files that have deletes
	// (posDel is sorted by rank) and the earlier commits' files.
	var paths []string
	for i, d := range ln.posDel {
		if i == 0 || d>>32 != ln.posDel[i-1]>>32 {
			paths = append(paths, w.files[ords[d>>32]].path)
		}
	}
	for i, d := range ln.oldDel {
		if i == 0 || d.path != ln.oldDel[i-1].path {
			paths = append(paths, d.path)
		}
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	refs := func(yield func(int32, int64) bool) {
		ref := int32(0)
		for p, pos := range merged {
			if p != paths[ref] {
				ref++
			}
			if !yield(ref, pos) {
				return
			}
		}
	}
	path := w.newPath(ln, "pos")
	f, err := createPositionDeleteFile(w.fs, w.enc, path, w.posProps, w.opts.BatchRows, w.opts.RowGroupBytes)
	if err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	if err := f.writePositionDeletes(paths, len(ln.posDel)+len(ln.oldDel), refs); err != nil {
		f.abort(w.fs)
		return fmt.Errorf("deltawriter: %w", err)
	}
	w.posDels -= len(ln.posDel)
	ln.posDel = ln.posDel[:0]
	ln.oldDel = nil
	md, size, err := f.close()
	if err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	return w.finish(ln, commit.PositionDeleteFile, path, md, size, iceberg.PositionalDeleteSchema)
}

// Flush closes the open data files early; the next row starts new ones.
func (w *Writer) Flush(ctx context.Context) error {
	if err := w.begin(ctx); err != nil {
		return err
	}
	for _, ln := range w.lanes {
		if ln.data != nil {
			if err := w.closeData(ln); err != nil {
				return w.fail(err)
			}
		}
	}
	return nil
}

// BufferedBytes estimates the bytes the window holds in memory: what the
// memory budget covers, and the records of the window's finished files,
// which only a commit frees.
func (w *Writer) BufferedBytes() int64 {
	n := w.index.MemoryBytes() + w.doneBytes + w.enc.mem.idleBytes()
	for _, ln := range w.lanes {
		n += int64(cap(ln.posDel))*8 + ln.openBytes()
	}
	return n
}

// PrepareCommit finishes every file of the window and returns them as a
// payload; the window is reset, the next Write opens a new one. The files
// stay on storage: committing them is the caller's (or the
// coordinator's), removing them on failure is Discard's.
func (w *Writer) PrepareCommit(ctx context.Context) (commit.Payload, error) {
	if err := w.begin(ctx); err != nil {
		return commit.Payload{}, err
	}
	if err := w.account(); err != nil {
		return commit.Payload{}, w.fail(err)
	}
	if err := w.resolve(); err != nil {
		return commit.Payload{}, w.fail(err)
	}
	if w.tidx != nil {
		if err := w.resolveOld(); err != nil {
			return commit.Payload{}, w.fail(err)
		}
	}
	lanes := make([]*lane, 0, len(w.lanes))
	for _, ln := range w.lanes {
		lanes = append(lanes, ln)
	}
	slices.SortFunc(lanes, func(a, b *lane) int { return strings.Compare(a.path, b.path) })
	for _, ln := range lanes {
		if err := ctx.Err(); err != nil {
			return commit.Payload{}, w.fail(fmt.Errorf("deltawriter: preparing the commit: %w", context.Cause(ctx)))
		}
		if ln.data != nil {
			if err := w.closeData(ln); err != nil {
				return commit.Payload{}, w.fail(err)
			}
		}
		if ln.eq != nil {
			if err := w.closeEq(ln); err != nil {
				return commit.Payload{}, w.fail(err)
			}
		}
		switch {
		case w.version >= 3:
			// A deletion vector may not name a data file of its own
			// snapshot (iceberg-go v0.7.0 checks that it exists in the
			// table): the window's files with deleted rows are rewritten
			// without them instead.
			if err := w.rewriteDeleted(ctx, ln, 0); err != nil {
				return commit.Payload{}, w.fail(err)
			}
		case w.opts.RewriteDeleted > 0:
			if err := w.rewriteDeleted(ctx, ln, w.opts.RewriteDeleted); err != nil {
				return commit.Payload{}, w.fail(err)
			}
		}
		if err := w.flushPositionDeletes(ln); err != nil {
			return commit.Payload{}, w.fail(err)
		}
	}
	if w.version >= 3 {
		if err := w.flushDVs(ctx); err != nil {
			return commit.Payload{}, w.fail(err)
		}
		if w.tidx == nil {
			w.dvs.pending = nil // only the key index needs the live vectors
		}
	}
	w.done = slices.DeleteFunc(w.done, func(f commit.File) bool { return f.Path == "" })
	p := commit.Payload{
		Version:       commit.PayloadVersion,
		SinkID:        w.opts.SinkID,
		TableUUID:     w.tableUUID,
		Writer:        w.opts.Writer,
		SchemaID:      w.schema.ID,
		SpecID:        w.spec.ID(),
		FormatVersion: w.version,
		Files:         w.done,
	}
	if w.tidx != nil {
		// The window index stays until Committed moves it into the key
		// index (or Abort drops it).
		pw := &pendingWindow{paths: make([]string, len(w.files)), lanes: make([]string, len(w.files)), dropped: make([][]uint32, len(w.files))}
		for i, fi := range w.files {
			pw.paths[i], pw.lanes[i], pw.dropped[i] = fi.path, fi.lane.key, fi.dropped
			if fi.moved {
				pw.paths[i] = fi.newPath
			}
		}
		w.pending = pw
		p.BaseSnapshot = w.tidx.base
		p.KeyIndexed = true
	} else if err := w.index.Reset(); err != nil {
		return commit.Payload{}, w.fail(fmt.Errorf("deltawriter: resetting the index: %w", err))
	}
	w.stats.Commits++
	w.resetWindow()
	return p, nil
}

// Abort drops the current window: its open and finished files are removed
// and the index is reset. The writer is usable again afterwards.
func (w *Writer) Abort(ctx context.Context) error {
	// Removing a file waits for the encoder to finish with it, whatever
	// the context: the queue is short, and a file must not be removed
	// while the encoder writes it.
	if w.enc != nil {
		w.enc.ctx = context.Background()
	}
	var errs []error
	for _, ln := range w.lanes {
		if ln.data != nil {
			ln.data.abort(w.fs)
		}
		if ln.eq != nil {
			ln.eq.abort(w.fs)
		}
	}
	errs = append(errs, w.Discard(ctx, commit.Payload{Files: w.done}))
	errs = append(errs, w.index.Reset())
	w.pending = nil
	w.dvReset()
	w.resetWindow()
	w.err = nil
	return errors.Join(errs...)
}

// Discard removes the files of a payload that will not be committed.
func (w *Writer) Discard(ctx context.Context, p commit.Payload) error {
	var errs []error
	removed := map[string]bool{}
	for _, f := range p.Files {
		if f.Path == "" || f.Kind == commit.ReplacedDeletionVector || removed[f.Path] {
			// A rewritten file that kept no row; a live vector of the
			// table; a Puffin file holding several vectors.
			continue
		}
		removed[f.Path] = true
		if err := w.fs.Remove(f.Path); err != nil {
			errs = append(errs, fmt.Errorf("deltawriter: removing %s: %w", f.Path, err))
		}
	}
	return errors.Join(errs...)
}

// Close aborts the open window and releases the writer.
func (w *Writer) Close(ctx context.Context) error {
	err := w.Abort(ctx)
	if w.enc != nil {
		w.enc.close()
		w.enc = nil
	}
	if w.tidx != nil {
		if w.saved {
			err = errors.Join(err, w.tidx.ix.Release())
		} else {
			err = errors.Join(err, w.tidx.ix.Close())
		}
	}
	return errors.Join(err, w.index.Close())
}

// DeleteMode returns how the writer deletes rows of earlier commits.
func (w *Writer) DeleteMode() DeleteMode { return w.opts.DeleteMode }

// Schema returns the table schema the writer writes.
func (w *Writer) Schema() *iceberg.Schema { return w.schema }

// fileSchema is the schema a data file's rows are written with.
type fileSchema struct {
	schema *iceberg.Schema
	arrow  *arrow.Schema
	props  *parquet.WriterProperties
}

// Evolve makes the writer take rows of schema from the next change on:
// the table's schema after columns were added at the end, widened or made
// optional (the caller changed the table first). The window stays open
// and exact: its files written so far keep their schema (Iceberg reads
// them by field id), and each partition's open data file is closed, so
// that a file holds rows of one schema. The key columns and the
// partition source columns must keep their ids and types.
func (w *Writer) Evolve(ctx context.Context, schema *iceberg.Schema) error {
	if w.err != nil {
		return w.err
	}
	if err := sameColumns(w.schema, schema, w.schema.IdentifierFieldIDs, "key"); err != nil {
		return err
	}
	if !slices.Equal(w.schema.IdentifierFieldIDs, schema.IdentifierFieldIDs) {
		return fmt.Errorf("deltawriter: the key columns changed (ids %v, now %v); a table's key cannot change under a running sink", w.schema.IdentifierFieldIDs, schema.IdentifierFieldIDs)
	}
	var sources []int
	for _, pf := range w.spec.Fields() {
		sources = append(sources, pf.SourceID())
	}
	if err := sameColumns(w.schema, schema, sources, "partition source"); err != nil {
		return err
	}
	part, err := newPartitioner(schema, w.spec)
	if err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	asc, err := table.SchemaToArrowSchema(schema, nil, true, false)
	if err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	for _, ln := range w.lanes {
		if ln.data != nil {
			if err := w.closeData(ln); err != nil {
				return w.fail(err)
			}
		}
	}
	w.schema, w.arrow, w.part = schema, asc, part
	w.dataProps = WriterProperties(w.props, asc)
	w.check = rowChecker{fields: schema.Fields()}
	w.cur = &fileSchema{schema: schema, arrow: asc, props: w.dataProps}
	w.stats.SchemaChanges++
	return nil
}

// sameColumns reports a column of ids whose type differs between old and
// new.
func sameColumns(old, new *iceberg.Schema, ids []int, what string) error {
	for _, id := range ids {
		a, ok1 := old.FindFieldByID(id)
		b, ok2 := new.FindFieldByID(id)
		if !ok1 || !ok2 || !a.Type.Equals(b.Type) || a.Name != b.Name {
			return fmt.Errorf("deltawriter: %s column %d changed (%v -> %v); it cannot change under a running sink", what, id, a, b)
		}
	}
	return nil
}

// failpoint calls Options.Failpoint.
func (w *Writer) failpoint(name string) {
	if w.opts.Failpoint != nil {
		w.opts.Failpoint(name)
	}
}
