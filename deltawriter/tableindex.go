package deltawriter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/dedup"
	"github.com/icesink/icesink/internal/arrowval"
)

// DeleteMode is how a change removes a key's row that an earlier commit
// wrote.
type DeleteMode uint8

const (
	// DeleteByPosition (the default) keeps a table-wide key index: where
	// every live row of the writer's keys sits (data file, position). A
	// change of a key committed before is recorded, and at PrepareCommit
	// the window's touched keys, in (hash, key) order, are looked up in the
	// index: each old row found gets a position delete; a new key gets no
	// delete at all. The table ends with no equality deletes.
	DeleteByPosition DeleteMode = iota
	// DeleteByEquality writes an equality delete on a key's first touch
	// per window: no index of the table, but every reader pays for the
	// deletes on every older data file.
	DeleteByEquality
)

// ParseDeleteMode parses "position" or "equality".
func ParseDeleteMode(s string) (DeleteMode, error) {
	switch s {
	case "position", "":
		return DeleteByPosition, nil
	case "equality":
		return DeleteByEquality, nil
	}
	return 0, fmt.Errorf("unknown delete mode %q (want position or equality)", s)
}

// String returns the flag spelling of m.
func (m DeleteMode) String() string {
	if m == DeleteByEquality {
		return "equality"
	}
	return "position"
}

// ErrUnconfirmed is returned by a writer in DeleteByPosition mode that is
// asked to write after PrepareCommit without Committed or Abort: its key
// index must first learn the window's fate.
var ErrUnconfirmed = errors.New("deltawriter: the prepared window is neither committed nor aborted (call Committed or Abort)")

// tableIndex is the writer's table-wide key index: key -> (file id, pos)
// of the live row of every key the writer owns. It is a cache of the table
// built from it at New (and kept by Committed), never the truth: a table
// changed by another writer makes the committer refuse the commit (see
// commit.Payload.BaseSnapshot) and the next run rebuilds.
type tableIndex struct {
	ix    *dedup.Index
	files []string          // file id -> path
	lanes []string          // file id -> lane (partition) key
	ids   map[string]uint32 // path -> file id
	base  int64             // the snapshot the index was built from (-1: none)
	// dups holds every row of the keys the rebuild found live more than
	// once (another writer appended a live key again): a change of such a
	// key deletes them all. Rare, so kept in memory.
	dups map[string][]dedup.Ref
}

func (t *tableIndex) fileID(path, lane string) (uint32, error) {
	if id, ok := t.ids[path]; ok {
		return id, nil
	}
	if len(t.files) > dedup.MaxFile {
		return 0, fmt.Errorf("deltawriter: the key index holds more than %d data files", dedup.MaxFile)
	}
	id := uint32(len(t.files))
	t.files = append(t.files, path)
	t.lanes = append(t.lanes, lane)
	t.ids[path] = id
	return id, nil
}

// buildTableIndex reads the live rows of tbl's current snapshot whose keys
// the writer owns: for each data file the key columns, minus the rows its
// position deletes, deletion vector and equality deletes remove.
func (w *Writer) buildTableIndex(ctx context.Context, tbl *table.Table, ix *dedup.Index) error {
	t := &tableIndex{ids: map[string]uint32{}, base: -1}
	if ix == nil {
		var err error
		opts := w.opts.tableIndex
		opts.Dir = ""
		if ix, err = dedup.New(opts); err != nil {
			return err
		}
	}
	t.ix = ix
	w.tidx = t
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return nil
	}
	t.base = snap.SnapshotID
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	plan, err := planRebuild(fsys, snap)
	if err != nil {
		return fmt.Errorf("deltawriter: planning the key index's rebuild: %w", err)
	}
	r := &rebuilder{w: w, fs: fsys, eqDels: map[string]eqSet{}, pos: newPosDeletes(plan.posDels, plan.paths())}
	// Each row is looked up (a key live twice is kept twice) in file
	// order: the runs keep their filters while the rebuild runs.
	t.ix.SetMaxFilterBytes(-1)
	defer t.ix.SetMaxFilterBytes(0)
	for i := range plan.data {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.task = i
		task := plan.task(i)
		if err := r.dataFile(ctx, task); err != nil {
			return fmt.Errorf("deltawriter: rebuilding the key index from %s: %w", task.File.FilePath(), err)
		}
		w.failpoint("keyindex-rebuild")
	}
	w.stats.IndexRebuildRows += r.rows
	w.stats.IndexRebuildFiles += len(plan.data)
	w.stats.IndexDuplicateKeys += len(t.dups)
	return nil
}

// rebuilder reads a table into a tableIndex. Equality-delete files are
// read once each and kept while they fit; position-delete files are read
// once each (see posDeletes).
type rebuilder struct {
	w      *Writer
	fs     iceio.IO
	eqDels map[string]eqSet // delete file -> its keys
	cached int64            // the bytes eqDels hold (about)
	pos    *posDeletes      // nil: a task's position deletes are read for it alone
	task   int              // the index of the data file being read, in pos's order
	rows   int64
	// follow: the rows are a compaction's, moved from files the index
	// points at (not duplicates); moved collects the new rows of keys
	// the index holds as duplicates.
	follow bool
	moved  map[string][]dedup.Ref
}

func (r *rebuilder) dataFile(ctx context.Context, task table.FileScanTask) error {
	w := r.w
	path := task.File.FilePath()
	var deleted []int64
	var eqSets []eqSet
	if r.pos != nil {
		var err error
		if deleted, err = r.pos.of(ctx, r, r.task); err != nil {
			return err
		}
	} else if len(task.DeleteFiles) > 0 {
		// A file read on its own (a compaction's output, followed).
		p := newPosDeletes(task.DeleteFiles, []string{path})
		var err error
		if deleted, err = p.of(ctx, r, 0); err != nil {
			return err
		}
	}
	for _, df := range task.DeletionVectorFiles {
		bm, err := dv.ReadDV(r.fs, df)
		if err != nil {
			return err
		}
		for p := range bm.Positions() {
			deleted = append(deleted, int64(p))
		}
		if w.dvs.live == nil {
			w.dvs.live = map[string]iceberg.DataFile{}
		}
		w.dvs.live[path] = df
	}
	cols := w.keys.Columns()
	for _, df := range task.EqualityDeleteFiles {
		set, err := r.readEqDeletes(ctx, df)
		if err != nil {
			return err
		}
		eqSets = append(eqSets, set)
		if set.codec != nil {
			for _, c := range set.codec.Columns() {
				if !slices.Contains(cols, c) {
					cols = append(slices.Clip(cols), c)
				}
			}
		}
	}
	slices.Sort(deleted)
	lane := ""
	laneKnown := w.part == nil
	var id uint32
	var pos int64
	keyBuf := make([]byte, 0, 64)
	var eqBuf []byte
	return readRows(ctx, r.fs, path, w.schema, cols, func(row []any) error {
		p := pos
		pos++
		if len(deleted) > 0 && deleted[0] <= p {
			for len(deleted) > 0 && deleted[0] < p {
				deleted = deleted[1:]
			}
			if len(deleted) > 0 && deleted[0] == p {
				deleted = deleted[1:]
				return nil
			}
		}
		key, err := w.keys.Append(keyBuf[:0], row)
		if err != nil {
			return err
		}
		keyBuf = key
		for _, set := range eqSets {
			k := key
			if set.codec != nil {
				if eqBuf, err = set.codec.Append(eqBuf[:0], row); err != nil {
					return err
				}
				k = eqBuf
			}
			if _, gone := set.keys[string(k)]; gone {
				return nil
			}
		}
		h := Hash(key)
		if w.opts.Owns != nil && !w.opts.Owns(h) {
			return nil
		}
		if !laneKnown {
			lk, _, _, err := w.part.partitionOf(row, nil)
			if err != nil {
				return err
			}
			lane, laneKnown = lk, true
		}
		if id, err = w.tidx.fileID(path, lane); err != nil {
			return err
		}
		if p > 1<<32-1 {
			return fmt.Errorf("row %d: past the positions the key index holds", p)
		}
		r.rows++
		ref := dedup.Ref{File: id, Pos: uint32(p)}
		if r.follow {
			if _, dup := w.tidx.dups[string(key)]; dup {
				r.moved[string(key)] = append(r.moved[string(key)], ref)
			}
			return w.tidx.ix.Put(h, key, dedup.State{Row: ref, HasRow: true})
		}
		if old, ok, err := w.tidx.ix.Get(h, key); err != nil {
			return err
		} else if ok && old.HasRow {
			t := w.tidx
			if t.dups == nil {
				t.dups = map[string][]dedup.Ref{}
			}
			refs := t.dups[string(key)]
			if refs == nil {
				refs = []dedup.Ref{old.Row}
			}
			t.dups[string(key)] = append(refs, ref)
		}
		return w.tidx.ix.Put(h, key, dedup.State{Row: ref, HasRow: true})
	})
}

// keep reports whether a delete file read of size bytes may stay cached
// for the data files after this one. The cache holds at most the delete
// buffer's share of the budget (Options.MemoryLimit / 8; unbounded
// without a limit): past it, what is cached is dropped, and a file larger
// than the share alone is read again for each data file it applies to.
func (r *rebuilder) keep(size int64) bool {
	limit := r.w.opts.MemoryLimit / 8
	if limit <= 0 {
		return true
	}
	if size > limit {
		r.w.stats.IndexRebuildDeleteRereads++
		return false
	}
	if r.cached+size > limit {
		clear(r.eqDels)
		r.cached = 0
	}
	r.cached += size
	return true
}

// eqSet is one equality-delete file's rows, each encoded by codec, the
// codec of the file's own equality_ids (nil: they are the table's key, and
// the keys are canonical keys).
type eqSet struct {
	codec *KeyCodec
	keys  map[string]struct{}
}

func (r *rebuilder) readEqDeletes(ctx context.Context, df iceberg.DataFile) (eqSet, error) {
	path := df.FilePath()
	if s, ok := r.eqDels[path]; ok {
		return s, nil
	}
	w := r.w
	s := eqSet{keys: map[string]struct{}{}}
	ids := df.EqualityFieldIDs()
	if len(ids) > 0 && !sameSet(ids, w.keyFieldIDs()) {
		// Another engine's delete of other columns (part of the key, say):
		// matched by its own columns, nulls included.
		var err error
		if s.codec, err = newEqualityCodec(w.schema, ids); err != nil {
			return s, fmt.Errorf("equality-delete file %s: %w", path, err)
		}
	}
	codec := s.codec
	if codec == nil {
		codec = w.keys
	}
	var size int64
	err := readRows(ctx, r.fs, path, w.schema, codec.Columns(), func(row []any) error {
		k, err := codec.Append(nil, row)
		if err != nil {
			return err
		}
		s.keys[string(k)] = struct{}{}
		size += int64(len(k)) + 48 // the key and its map entry
		return nil
	})
	if err != nil {
		return s, err
	}
	if r.keep(size) {
		r.eqDels[path] = s
	}
	return s, nil
}

// sameSet reports whether a and b hold the same field ids.
func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// readRows calls fn with a row of schema's width holding the columns at
// positions cols of each row of the Parquet file at path, in file order;
// the other columns are nil. The row is reused between calls.
func readRows(ctx context.Context, fs iceio.IO, path string, schema *iceberg.Schema, cols []int, fn func(row []any) error) error {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = schema.Field(c).Name
	}
	row := make([]any, len(schema.Fields()))
	return readParquet(ctx, fs, path, schema, func(vals []any) error {
		for i, c := range cols {
			row[c] = vals[i]
		}
		return fn(row)
	}, names...)
}

// readParquet calls fn with the values of the named top-level columns of
// each row of the Parquet file at path. With schema set, columns are found
// by the schema's field ids (files of other writers may order or name
// them otherwise), else by name.
func readParquet(ctx context.Context, fs iceio.IO, path string, schema *iceberg.Schema, fn func(vals []any) error, names ...string) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	psc := pr.MetaData().Schema
	idx := make([]int, len(names))
	for i, name := range names {
		idx[i] = -1
		id := -1
		if schema != nil {
			if fld, ok := schema.FindFieldByName(name); ok {
				id = fld.ID
			}
		}
		for c := 0; c < psc.NumColumns(); c++ {
			col := psc.Column(c)
			if (id >= 0 && int(col.SchemaNode().FieldID()) == id) || (id < 0 && col.Path() == name) {
				idx[i] = c
				break
			}
		}
		if idx[i] < 0 {
			return fmt.Errorf("%s has no column %q", path, name)
		}
	}
	rr, err := fr.GetRecordReader(ctx, idx, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	vals := make([]any, len(names))
	for rr.Next() {
		rec := rr.RecordBatch()
		for r := 0; r < int(rec.NumRows()); r++ {
			for c := range names {
				v, err := arrowval.At(rec.Column(c), r)
				if err != nil {
					return fmt.Errorf("%s column %q: %w", path, names[c], err)
				}
				vals[c] = v
			}
			if err := fn(vals); err != nil {
				return err
			}
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return ctx.Err()
}

// resolveOld gives every key of the window whose earlier row is to go
// (the states marked EqDeleted: "deferred" in this mode) a position delete
// of that row, found in the table index in (hash, key) order. Keys not in
// the index are new: no delete.
func (w *Writer) resolveOld() error {
	type oldDel struct {
		file uint32
		pos  uint32
	}
	var dels []oldDel
	var lookErr error
	err := w.index.Each(func(h uint64, key []byte, s dedup.State) bool {
		if !s.EqDeleted {
			return true
		}
		w.stats.IndexLookups++
		if refs, dup := w.tidx.dups[string(key)]; dup {
			for _, r := range refs {
				dels = append(dels, oldDel{r.File, r.Pos})
			}
			return true
		}
		old, ok, err := w.tidx.ix.Get(h, key)
		if err != nil {
			lookErr = err
			return false
		}
		if ok && old.HasRow {
			dels = append(dels, oldDel{old.Row.File, old.Row.Pos})
		}
		return true
	})
	if err == nil {
		err = lookErr
	}
	if err != nil {
		return fmt.Errorf("deltawriter: resolving the window's deletes in the key index: %w", err)
	}
	w.failpoint("keyindex-resolve")
	if len(dels) == 0 {
		return nil
	}
	w.stats.OldRowsDeleted += int64(len(dels))
	t := w.tidx
	for _, d := range dels {
		if t.files[d.file] == "" {
			return fmt.Errorf("deltawriter: the key index points at row %d of data file %d, which a compaction removed", d.pos, d.file)
		}
	}
	slices.SortFunc(dels, func(a, b oldDel) int {
		if c := strings.Compare(t.lanes[a.file], t.lanes[b.file]); c != 0 {
			return c
		}
		if c := strings.Compare(t.files[a.file], t.files[b.file]); c != 0 {
			return c
		}
		return int(int64(a.pos) - int64(b.pos))
	})
	if w.version >= 3 {
		for len(dels) > 0 {
			id := dels[0].file
			n := 1
			for n < len(dels) && dels[n].file == id {
				n++
			}
			ln, ok := w.lanes[t.lanes[id]]
			if !ok {
				return fmt.Errorf("deltawriter: no partition %q for the deletes of %s", t.lanes[id], t.files[id])
			}
			pos := make([]int64, n)
			for i, d := range dels[:n] {
				pos[i] = int64(d.pos)
			}
			if err := w.dvAdd(t.files[id], ln, pos); err != nil {
				return err
			}
			dels = dels[n:]
		}
		return nil
	}
	for len(dels) > 0 {
		lk := t.lanes[dels[0].file]
		n := 1
		for n < len(dels) && t.lanes[dels[n].file] == lk {
			n++
		}
		ln, ok := w.lanes[lk]
		if !ok {
			return fmt.Errorf("deltawriter: no partition %q for the deletes of %s", lk, t.files[dels[0].file])
		}
		// The lane's position-delete file at PrepareCommit takes them
		// with the window's own: one file per partition and commit.
		for _, d := range dels[:n] {
			ln.oldDel = append(ln.oldDel, oldPosDel{path: t.files[d.file], pos: int64(d.pos)})
		}
		dels = dels[n:]
	}
	return nil
}

// Committed tells a DeleteByPosition writer that the window it prepared
// last is in the table: the key index takes the window's rows (and drops
// the keys it deleted), and the next Write opens a new window. In
// DeleteByEquality mode it does nothing.
func (w *Writer) Committed(ctx context.Context) error {
	if w.pending == nil {
		return nil
	}
	if err := w.unsave(); err != nil {
		return w.fail(err)
	}
	p := w.pending
	t := w.tidx
	ids := make([]uint32, len(p.paths))
	for i, path := range p.paths {
		if path == "" {
			continue // rewritten without any row
		}
		id, err := t.fileID(path, p.lanes[i])
		if err != nil {
			return w.fail(err)
		}
		ids[i] = id
	}
	// The window index is read in (hash, key) order: the key index takes
	// its states as one sorted run (a bounded index) or in memory.
	var perr error
	err := t.ix.Ingest(-1, func(put func(uint64, []byte, dedup.State) bool) error {
		return w.index.Each(func(h uint64, key []byte, s dedup.State) bool {
			if len(t.dups) > 0 && (s.HasRow || s.EqDeleted) {
				delete(t.dups, string(key)) // all its rows were deleted
			}
			switch {
			case s.HasRow:
				ord, pos := s.Row.File, s.Row.Pos
				if p.paths[ord] == "" {
					perr = fmt.Errorf("a live row in a rewritten file that kept none")
					return false
				}
				if d := p.dropped[ord]; d != nil {
					// Rows before it that the rewrite dropped move it up.
					n, _ := slices.BinarySearch(d, pos)
					pos -= uint32(n)
				}
				return put(h, key, dedup.State{Row: dedup.Ref{File: ids[ord], Pos: pos}, HasRow: true})
			case s.EqDeleted:
				return put(h, key, dedup.State{})
			}
			return true
		})
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return w.fail(fmt.Errorf("deltawriter: updating the key index with the committed window: %w", err))
	}
	w.failpoint("keyindex-ingest")
	w.pending = nil
	w.dvCommitted()
	if err := w.index.Reset(); err != nil {
		return w.fail(fmt.Errorf("deltawriter: resetting the index: %w", err))
	}
	return nil
}

// pendingWindow is a prepared window awaiting Committed or Abort: its data
// files by ordinal, with their lanes.
type pendingWindow struct {
	paths   []string
	lanes   []string
	dropped [][]uint32 // the positions a rewrite dropped, sorted (nil: none)
}

// Follow brings a DeleteByPosition writer's key index up to tbl, which
// holds the commits it confirmed (Committed) and possibly compactions that
// this sink's own maintenance committed after them (snapshots with
// commit.PropMaintainedBy = Options.SinkID): the rows a compaction moved
// are read from its new files, and the index points at them from then on.
// After a snapshot of another writer that changed rows (an append, a
// delete, a compaction by another engine) the index is rebuilt from tbl.
// A base the history no longer reaches (expired, rolled back past) fails
// with commit.ErrForeignChange.
// Call it after Committed and before the next Write. In DeleteByEquality
// mode it does nothing.
func (w *Writer) Follow(ctx context.Context, tbl *table.Table) error {
	if w.tidx == nil || w.err != nil || w.pending != nil {
		return w.err
	}
	meta := tbl.Metadata()
	cur := meta.CurrentSnapshot()
	if cur == nil || cur.SnapshotID == w.tidx.base {
		return nil
	}
	steps, err := commit.History(meta, w.opts.SinkID, w.tidx.base)
	if err != nil {
		return w.fail(fmt.Errorf("deltawriter: following the table: %w: the key index's base: %w", commit.ErrForeignChange, err))
	}
	var follow []*table.Snapshot // newest first
	for _, st := range steps {
		switch st.Kind {
		case commit.OwnMaintenance:
			follow = append(follow, st.Snapshot)
		case commit.OwnEpoch, commit.MetadataOnly:
		default:
			// Another writer changed rows (an append, a delete, a
			// compaction): the index is read again from the table.
			if err := w.rebuildTableIndex(ctx, tbl); err != nil {
				return w.fail(fmt.Errorf("deltawriter: following snapshot %d (%s) of another writer: %w", st.Snapshot.SnapshotID, st.Kind, err))
			}
			return nil
		}
	}
	if len(follow) > 0 {
		if err := w.unsave(); err != nil {
			return w.fail(err)
		}
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	for i := len(follow) - 1; i >= 0; i-- {
		if err := w.followRewrite(ctx, fsys, follow[i]); err != nil {
			return w.fail(fmt.Errorf("deltawriter: following compaction snapshot %d: %w", follow[i].SnapshotID, err))
		}
	}
	w.tidx.base = cur.SnapshotID
	return nil
}

// rebuildTableIndex reads the key index again from tbl's current snapshot
// (a foreign change the index cannot follow row by row), in place: the
// open window is resolved against it at PrepareCommit.
func (w *Writer) rebuildTableIndex(ctx context.Context, tbl *table.Table) error {
	if err := w.unsave(); err != nil {
		return err
	}
	ix := w.tidx.ix
	if err := ix.Reset(); err != nil {
		return err
	}
	w.dvs.live = nil
	w.stats.IndexForeignRebuilds++
	return w.buildTableIndex(ctx, tbl, ix)
}

// followRewrite points the key index at the rows of the data files
// snapshot s added (a compaction: every live row of the files it removed,
// deletes applied), and forgets the deletion vectors of the files it
// removed.
func (w *Writer) followRewrite(ctx context.Context, fsys iceio.IO, s *table.Snapshot) error {
	mans, err := s.Manifests(fsys)
	if err != nil {
		return err
	}
	r := &rebuilder{w: w, fs: fsys, follow: true, moved: map[string][]dedup.Ref{}}
	removed := map[uint32]bool{} // file ids of the files s removed
	for _, m := range mans {
		if m.ManifestContent() != iceberg.ManifestContentData || m.SnapshotID() != s.SnapshotID {
			continue
		}
		entries, err := m.FetchEntries(fsys, false)
		if err != nil {
			return err
		}
		for _, e := range entries {
			df := e.DataFile()
			switch e.Status() {
			case iceberg.EntryStatusADDED:
				if err := r.dataFile(ctx, table.FileScanTask{File: df}); err != nil {
					return fmt.Errorf("reading %s: %w", df.FilePath(), err)
				}
			case iceberg.EntryStatusDELETED:
				delete(w.dvs.live, df.FilePath())
				if id, ok := w.tidx.ids[df.FilePath()]; ok {
					removed[id] = true
				}
			}
		}
	}
	// Keys live more than once: the rows of removed files now sit in the
	// new files.
	for k, refs := range w.tidx.dups {
		kept := r.moved[k]
		for _, ref := range refs {
			if !removed[ref.File] {
				kept = append(kept, ref)
			}
		}
		if len(kept) > 1 {
			w.tidx.dups[k] = kept
		} else {
			delete(w.tidx.dups, k)
		}
	}
	// The removed files' entries of the file table are emptied (their ids
	// stay taken: ids are positions in it), so that the table and the
	// saved KEYINDEX do not grow with every file ever compacted away.
	for id := range removed {
		delete(w.tidx.ids, w.tidx.files[id])
		w.tidx.files[id], w.tidx.lanes[id] = "", ""
	}
	w.stats.IndexFollowedRows += r.rows
	return nil
}
