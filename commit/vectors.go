package commit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// foldEntries is the size (live entries) up to which a delete manifest
// that loses no entry is folded into the snapshot's new delete manifest
// anyway: small manifests do not pile up, large ones are not rewritten
// for nothing.
const foldEntries = 4096

// vectorKey is the identity of a deletion vector entry: its Puffin file
// and the data file it deletes from (a Puffin file holds the vectors of
// many data files).
type vectorKey struct{ path, ref string }

func keyOf(df iceberg.DataFile) vectorKey {
	k := vectorKey{path: df.FilePath()}
	if ref := df.ReferencedDataFile(); ref != nil {
		k.ref = *ref
	}
	return k
}

// replacesVectors reports whether the payloads replace a live deletion
// vector (a format v3 window that deleted more rows of a data file that
// had a vector already).
func replacesVectors(payloads []Payload) bool {
	for i := range payloads {
		for _, f := range payloads[i].Files {
			if f.Kind == ReplacedDeletionVector {
				return true
			}
		}
	}
	return false
}

// vectorDelta is what one epoch changes in a format v3 table.
type vectorDelta struct {
	data    map[int][]iceberg.DataFile // partition spec id -> data files added
	deletes map[int][]iceberg.DataFile // spec id -> delete files added (vectors, equality deletes)
	removed map[vectorKey]struct{}     // the live vectors replaced
}

func decodeDelta(meta table.Metadata, payloads []Payload) (vectorDelta, error) {
	d := vectorDelta{data: map[int][]iceberg.DataFile{}, deletes: map[int][]iceberg.DataFile{}, removed: map[vectorKey]struct{}{}}
	err := eachFile(meta, payloads, func(_ *Payload, f File, df iceberg.DataFile) error {
		switch f.Kind {
		case DataFile:
			if df.ContentType() != iceberg.EntryContentData {
				return fmt.Errorf("data file %s has content %s", f.Path, df.ContentType())
			}
			d.data[int(df.SpecID())] = append(d.data[int(df.SpecID())], df)
		case ReplacedDeletionVector:
			k := keyOf(df)
			if _, dup := d.removed[k]; dup {
				return fmt.Errorf("deletion vector %s of %s is replaced twice", k.path, k.ref)
			}
			d.removed[k] = struct{}{}
		default:
			if df.ContentType() == iceberg.EntryContentData {
				return fmt.Errorf("delete file %s has content %s", f.Path, df.ContentType())
			}
			if df.ContentType() == iceberg.EntryContentPosDeletes && !table.IsDeletionVector(df) {
				return fmt.Errorf("position delete file %s must be a deletion vector in a format v3 table", f.Path)
			}
			d.deletes[int(df.SpecID())] = append(d.deletes[int(df.SpecID())], df)
		}
		return nil
	})
	return d, err
}

// commitVectors commits an epoch that replaces deletion vectors of a
// format v3 table as one snapshot whose manifests it writes itself,
// straight through the catalog. iceberg-go's RowDelta reads every delete
// manifest twice and every data manifest once for such a commit (an Avro
// schema parse each); this reads each delete manifest once and no data
// manifest:
//
//   - the data files go into a new data manifest; the data manifests of
//     the parent are listed as they are;
//   - the added vectors, and the live entries of every delete manifest
//     that loses a replaced vector (or holds fewer than foldEntries),
//     go into one new delete manifest per partition spec, the replaced
//     vectors as DELETED entries, the others as EXISTING with their
//     sequence numbers;
//   - the manifest list assigns row ids to the new data manifest (v3 row
//     lineage), and the summary carries the parent's totals moved by
//     what was added and removed.
//
// As RowDelta does, it refuses a replaced vector the table does not hold
// and an added vector whose data file keeps another live one. That the
// vectors' data files are live is what CheckKeyIndexed established on
// this snapshot, which the commit asserts is still the branch's head.
func (c *Committer) commitVectors(ctx context.Context, cat tableCommitter, wfs icebergio.WriteFileIO, payloads []Payload, summary, kept iceberg.Properties) (*table.Table, error) {
	meta := c.tbl.Metadata()
	cur := c.tbl.CurrentSnapshot()
	if cur == nil {
		return nil, errors.New("replacing deletion vectors of a table without a snapshot")
	}
	d, err := decodeDelta(meta, payloads)
	if err != nil {
		return nil, err
	}
	locs, err := table.LoadLocationProvider(meta.Location(), meta.Properties())
	if err != nil {
		return nil, err
	}
	mans, err := cur.Manifests(wfs)
	if err != nil {
		return nil, fmt.Errorf("reading the manifest list of snapshot %d: %w", cur.SnapshotID, err)
	}
	keep, folded, gone, err := d.fold(wfs, mans)
	if err != nil {
		return nil, err
	}

	sw := &snapshotWriter{wfs: wfs, locs: locs, meta: meta, schema: c.tbl.Schema(), id: newSnapshotID(meta), name: "vectors"}
	snapID := sw.id
	var sum updateCounts
	for _, specID := range slices.Sorted(maps.Keys(d.data)) {
		err := sw.manifest(specID, iceberg.ManifestContentData, func(w *iceberg.ManifestWriter) error {
			for _, df := range d.data[specID] {
				sum.added.count(df)
				if err := w.Add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &snapID, nil, nil, df)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			sw.cleanup()
			return nil, err
		}
	}
	specs := map[int]bool{}
	for id := range d.deletes {
		specs[id] = true
	}
	for _, m := range []map[int][]iceberg.ManifestEntry{folded, gone} {
		for id := range m {
			specs[id] = true
		}
	}
	for _, specID := range slices.Sorted(maps.Keys(specs)) {
		err := sw.manifest(specID, iceberg.ManifestContentDeletes, func(w *iceberg.ManifestWriter) error {
			for _, df := range d.deletes[specID] {
				sum.added.count(df)
				if err := w.Add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &snapID, nil, nil, df)); err != nil {
					return err
				}
			}
			for _, e := range gone[specID] {
				sum.removed.count(e.DataFile())
				if err := w.Delete(e); err != nil {
					return err
				}
			}
			for _, e := range folded[specID] {
				if err := w.Existing(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			sw.cleanup()
			return nil, err
		}
	}
	parent := cur.SnapshotID
	seq, firstRowID := meta.LastSequenceNumber()+1, meta.NextRowID()
	listPath, addedRows, err := sw.list(seq, firstRowID, parent, keep)
	if err != nil {
		sw.cleanup()
		return nil, err
	}

	props := sum.props()
	for k, v := range summary {
		props[k] = v
	}
	var prev iceberg.Properties
	if cur.Summary != nil {
		prev = cur.Summary.Properties
	}
	sum.totals(props, prev)
	op := table.OpDelete
	if len(d.data) > 0 {
		op = table.OpOverwrite
	}
	schemaID := sw.schema.ID
	snap := table.Snapshot{
		SnapshotID:       snapID,
		ParentSnapshotID: &parent,
		SequenceNumber:   seq,
		TimestampMs:      max(time.Now().UnixMilli(), meta.LastUpdatedMillis()),
		ManifestList:     listPath,
		Summary:          &table.Summary{Operation: op, Properties: props},
		SchemaID:         &schemaID,
		FirstRowID:       &firstRowID,
		AddedRows:        &addedRows,
	}
	kept[sinkProp(c.sinkID, propSnapshotID)] = strconv.FormatInt(snapID, 10)
	kept[sinkProp(c.sinkID, propSequence)] = strconv.FormatInt(seq, 10)
	updates := []table.Update{
		table.NewAddSnapshotUpdate(&snap),
		table.NewSetSnapshotRefUpdate(table.MainBranch, snapID, table.BranchRef, -1, -1, -1),
		table.NewSetPropertiesUpdate(kept),
	}
	reqs := []table.Requirement{table.AssertTableUUID(meta.TableUUID()), table.AssertRefSnapshotID(table.MainBranch, &parent)}
	committed, loc, err := cat.CommitTable(ctx, c.ident, reqs, updates)
	if err != nil {
		if Retryable(err) {
			sw.cleanup() // refused before anything was written to the catalog
		}
		return nil, err
	}
	removeOldMetadata(wfs, meta, committed)
	return table.New(c.ident, committed, loc, c.fsF, c.cat), nil
}

// fold reads the delete manifests among mans: it returns the manifests
// the new snapshot lists as they are (the data manifests, and the delete
// manifests that lose no entry and hold foldEntries or more), and per
// partition spec the live entries of the others (folded) and the replaced
// vectors' entries (gone). A replaced vector the manifests do not hold,
// and a live vector of a data file that gets a new one without its old
// one replaced, are refused.
func (d *vectorDelta) fold(fsys icebergio.IO, mans []iceberg.ManifestFile) (keep []iceberg.ManifestFile, folded, gone map[int][]iceberg.ManifestEntry, err error) {
	replaced := map[string]bool{} // data files that get a vector now
	for _, dfs := range d.deletes {
		for _, df := range dfs {
			if table.IsDeletionVector(df) {
				replaced[keyOf(df).ref] = true
			}
		}
	}
	folded, gone = map[int][]iceberg.ManifestEntry{}, map[int][]iceberg.ManifestEntry{}
	found := 0
	for _, m := range mans {
		if m.ManifestContent() != iceberg.ManifestContentDeletes {
			keep = append(keep, m)
			continue
		}
		spec := int(m.PartitionSpecID())
		var entries []iceberg.ManifestEntry
		loses := false
		for e, err := range m.Entries(fsys, true) {
			if err != nil {
				return nil, nil, nil, fmt.Errorf("reading delete manifest %s: %w", m.FilePath(), err)
			}
			df := e.DataFile()
			k := keyOf(df)
			if _, ok := d.removed[k]; ok && table.IsDeletionVector(df) {
				found++
				loses = true
				gone[spec] = append(gone[spec], e)
				continue
			}
			if table.IsDeletionVector(df) && replaced[k.ref] {
				return nil, nil, nil, fmt.Errorf("data file %s gets a new deletion vector while its vector in %s stays live", k.ref, k.path)
			}
			entries = append(entries, e)
		}
		if loses || len(entries) < foldEntries {
			folded[spec] = append(folded[spec], entries...)
		} else {
			keep = append(keep, m)
		}
	}
	if found != len(d.removed) {
		var missing []string
		for k := range d.removed {
			missing = append(missing, k.path+" ("+k.ref+")")
		}
		slices.Sort(missing)
		return nil, nil, nil, fmt.Errorf("cannot replace deletion vectors the table does not hold: %d of %d found, e.g. %s", found, len(d.removed), missing[0])
	}
	return keep, folded, gone, nil
}

// snapshotWriter writes the manifests (and, on a format v3 table, the
// manifest list) of snapshot id, remembering the files for a clean-up.
// Its files are named after the snapshot and name.
type snapshotWriter struct {
	wfs     icebergio.WriteFileIO
	locs    table.LocationProvider
	meta    table.Metadata
	schema  *iceberg.Schema
	id      int64
	name    string
	n       int                    // manifests written
	added   []iceberg.ManifestFile // the manifests written
	written []string               // every file written
}

// cleanup removes what the writer wrote (the catalog surely refused the
// snapshot, or it was never offered).
func (sw *snapshotWriter) cleanup() {
	for _, p := range sw.written {
		_ = sw.wfs.Remove(p)
	}
}

// manifest writes a manifest of content for partition spec specID with
// the entries fill adds; one that gets none is not kept.
func (sw *snapshotWriter) manifest(specID int, content iceberg.ManifestContent, fill func(w *iceberg.ManifestWriter) error) error {
	spec := sw.meta.PartitionSpecByID(specID)
	if spec == nil {
		return fmt.Errorf("partition spec %d is not the table's", specID)
	}
	sw.n++
	path := sw.locs.NewMetadataLocation(fmt.Sprintf("%d-m%d-%s.avro", sw.id, sw.n, sw.name))
	f, err := sw.wfs.Create(path)
	if err != nil {
		return fmt.Errorf("creating manifest %s: %w", path, err)
	}
	sw.written = append(sw.written, path)
	cw := &countingWriter{w: f}
	w, err := iceberg.NewManifestWriter(sw.meta.Version(), cw, *spec, sw.schema, sw.id, iceberg.WithManifestWriterContent(content))
	if err == nil {
		err = fill(w)
	}
	if w != nil {
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, iceberg.ErrEmptyManifest) {
		sw.written = sw.written[:len(sw.written)-1]
		_ = sw.wfs.Remove(path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing manifest %s: %w", path, err)
	}
	mf, err := w.ToManifestFile(path, cw.n)
	if err != nil {
		return fmt.Errorf("writing manifest %s: %w", path, err)
	}
	sw.added = append(sw.added, mf)
	return nil
}

// list writes the snapshot's manifest list: the manifests written, then
// keep. The list assigns the new data manifests' first row ids from
// firstRowID; it returns its path and the rows it assigned ids to.
func (sw *snapshotWriter) list(seq, firstRowID, parent int64, keep []iceberg.ManifestFile) (string, int64, error) {
	path := sw.locs.NewMetadataLocation(fmt.Sprintf("snap-%d-0-%s.avro", sw.id, sw.name))
	out, err := sw.wfs.Create(path)
	if err != nil {
		return "", 0, fmt.Errorf("creating manifest list %s: %w", path, err)
	}
	sw.written = append(sw.written, path)
	lw, err := iceberg.NewManifestListWriterV3(out, sw.id, seq, firstRowID, &parent)
	if err == nil {
		err = lw.AddManifests(append(slices.Clip(sw.added), keep...))
		if cerr := lw.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("writing manifest list %s: %w", path, err)
	}
	return path, *lw.NextRowID() - firstRowID, nil
}

// newSnapshotID returns a snapshot id meta does not hold.
func newSnapshotID(meta table.Metadata) int64 {
	for {
		if id := rand.Int64N(1<<62) + 1; meta.SnapshotByID(id) == nil {
			return id
		}
	}
}

// removeOldMetadata removes the metadata files that base's log listed and
// committed's no longer does, when the table asks for it
// (write.metadata.delete-after-commit.enabled), as iceberg-go's own
// commits do. A file already gone is no error: another committer may
// have removed it.
func removeOldMetadata(wfs icebergio.WriteFileIO, base, committed table.Metadata) {
	if !committed.Properties().GetBool(table.MetadataDeleteAfterCommitEnabledKey, table.MetadataDeleteAfterCommitEnabledDefault) {
		return
	}
	still := map[string]bool{}
	for e := range committed.PreviousFiles() {
		still[e.MetadataFile] = true
	}
	for e := range base.PreviousFiles() {
		if !still[e.MetadataFile] {
			_ = wfs.Remove(e.MetadataFile)
		}
	}
}

// fileCounts adds up files as a snapshot summary counts them.
type fileCounts struct {
	size, data, records, deletes, posFiles, pos, eqFiles, eq int64
}

func (f *fileCounts) count(df iceberg.DataFile) {
	f.size += df.FileSizeBytes()
	switch df.ContentType() {
	case iceberg.EntryContentData:
		f.data++
		f.records += df.Count()
	case iceberg.EntryContentPosDeletes:
		f.deletes++
		f.posFiles++
		f.pos += df.Count()
	case iceberg.EntryContentEqDeletes:
		f.deletes++
		f.eqFiles++
		f.eq += df.Count()
	}
}

// updateCounts are a snapshot's added and removed files, as the
// summary's added-*, removed-* and total-* properties (the names and
// rules of iceberg-go's own snapshot summaries).
type updateCounts struct{ added, removed fileCounts }

func (u *updateCounts) props() iceberg.Properties {
	p := iceberg.Properties{}
	set := func(k string, v int64) {
		if v > 0 {
			p[k] = strconv.FormatInt(v, 10)
		}
	}
	a, r := &u.added, &u.removed
	set("added-files-size", a.size)
	set("removed-files-size", r.size)
	set("added-data-files", a.data)
	set("deleted-data-files", r.data)
	set("added-equality-delete-files", a.eqFiles)
	set("removed-equality-delete-files", r.eqFiles)
	set("added-position-delete-files", a.posFiles)
	set("removed-position-delete-files", r.posFiles)
	set("added-delete-files", a.deletes)
	set("removed-delete-files", r.deletes)
	set("added-records", a.records)
	set("deleted-records", r.records)
	set("added-position-deletes", a.pos)
	set("removed-position-deletes", r.pos)
	set("added-equality-deletes", a.eq)
	set("removed-equality-deletes", r.eq)
	return p
}

// totals sets the total-* properties of p from the parent's prev.
func (u *updateCounts) totals(p, prev iceberg.Properties) {
	total := func(k string, delta int64) {
		if n := prev.GetInt64(k, 0) + delta; n >= 0 {
			p[k] = strconv.FormatInt(n, 10)
		}
	}
	a, r := &u.added, &u.removed
	total("total-data-files", a.data-r.data)
	total("total-delete-files", a.deletes-r.deletes)
	total("total-records", a.records-r.records)
	total("total-files-size", a.size-r.size)
	total("total-position-deletes", a.pos-r.pos)
	total("total-equality-deletes", a.eq-r.eq)
}
