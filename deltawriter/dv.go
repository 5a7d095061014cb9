package deltawriter

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/icesink/icesink/commit"
)

// dvState is a format v3 writer's deletion vectors: every position delete
// of a window (of its own rows and of rows of earlier commits) goes to one
// vector per data file, written at PrepareCommit as blobs of one Puffin
// file. A data file that already has a vector in the table gets a new one
// holding the old one's positions too, and the old one is removed in the
// same snapshot (the v3 rule: at most one live vector per data file).
type dvState struct {
	live    map[string]iceberg.DataFile // data file -> its live vector (key index mode)
	w       *dv.DVWriter                // the window's vectors; nil until the first delete
	lanes   map[string]*lane            // data file -> its lane, for the window's vectors
	pending map[string]iceberg.DataFile // written by PrepareCommit, live once Committed
}

// dvAdd records deleted positions of the data file at path in lane ln.
func (w *Writer) dvAdd(path string, ln *lane, positions []int64) error {
	d := &w.dvs
	if d.w == nil {
		spec := w.spec
		d.w = dv.NewDVWriter(w.fs, func(id int32) *iceberg.PartitionSpec {
			if int(id) == spec.ID() {
				return &spec
			}
			return nil
		})
		d.lanes = map[string]*lane{}
	}
	if err := d.w.Add(path, positions, int32(w.spec.ID()), ln.values); err != nil {
		return fmt.Errorf("deltawriter: deletion vector of %s: %w", path, err)
	}
	d.lanes[path] = ln
	return nil
}

// flushDVs writes the window's deletion vectors (merged with the data
// files' live ones, which the payload then replaces) as one Puffin file.
func (w *Writer) flushDVs(ctx context.Context) error {
	d := &w.dvs
	if d.w == nil {
		return nil
	}
	paths := make([]string, 0, len(d.lanes))
	for p := range d.lanes {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	// The live vectors to merge, read a Puffin file at a time: a window's
	// vectors share one file, whose footer is then decoded once.
	byFile := map[string][]string{} // Puffin file -> data files
	var files []string
	for _, p := range paths {
		prev, ok := d.live[p]
		if !ok {
			continue
		}
		if byFile[prev.FilePath()] == nil {
			files = append(files, prev.FilePath())
		}
		byFile[prev.FilePath()] = append(byFile[prev.FilePath()], p)
	}
	for _, f := range files {
		prevs := make([]iceberg.DataFile, len(byFile[f]))
		for i, p := range byFile[f] {
			prevs[i] = d.live[p]
		}
		bms, err := dv.ReadDVs(w.fs, prevs)
		if err != nil {
			return fmt.Errorf("deltawriter: reading the deletion vectors of %s: %w", f, err)
		}
		for i, p := range byFile[f] {
			prev := prevs[i]
			d.w.Load(p, bms[i], int32(w.spec.ID()), d.lanes[p].values)
			entry, err := commit.EncodeEntry(prev, w.spec, w.schema, w.version)
			if err != nil {
				return err
			}
			w.done = append(w.done, commit.File{Kind: commit.ReplacedDeletionVector, Path: prev.FilePath(), Rows: prev.Count(), Entry: entry, Ref: p})
		}
	}
	// Any lane names the file: vectors are written with the table's data.
	path := w.newPath(d.lanes[paths[0]], "dv")
	path = path[:len(path)-len(".parquet")] + ".puffin"
	dfs, err := d.w.Flush(ctx, path)
	if err != nil {
		return fmt.Errorf("deltawriter: writing deletion vectors to %s: %w", path, err)
	}
	d.pending = map[string]iceberg.DataFile{}
	for _, df := range dfs {
		entry, err := commit.EncodeEntry(df, w.spec, w.schema, w.version)
		if err != nil {
			return err
		}
		w.done = append(w.done, commit.File{Kind: commit.DeletionVector, Path: df.FilePath(), Rows: df.Count(), Bytes: df.FileSizeBytes(), Entry: entry, Ref: referencedDataFile(df)})
		w.doneBytes += doneFileBytes(&w.done[len(w.done)-1])
		w.stats.PositionDeletes += df.Count()
		if ref := referencedDataFile(df); ref != "" {
			d.pending[ref] = df
		}
	}
	w.stats.PositionDeleteFile++
	d.w, d.lanes = nil, nil
	return nil
}

// referencedDataFile is the data file a deletion vector applies to.
func referencedDataFile(df iceberg.DataFile) string {
	if r, ok := df.(interface{ ReferencedDataFile() *string }); ok {
		if p := r.ReferencedDataFile(); p != nil {
			return *p
		}
	}
	return ""
}

// dvCommitted makes the vectors of the committed window the live ones.
func (w *Writer) dvCommitted() {
	d := &w.dvs
	if d.live == nil {
		d.live = map[string]iceberg.DataFile{}
	}
	for p, df := range d.pending {
		d.live[p] = df
	}
	d.pending = nil
}

// dvReset drops the window's vectors (an abort).
func (w *Writer) dvReset() {
	w.dvs.w, w.dvs.lanes, w.dvs.pending = nil, nil, nil
}
