package deltawriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/icesink/icesink/commit"
)

// rewriteDeleted rewrites the lane's closed data files of which at least
// Options.RewriteDeleted of the rows were deleted in the window, when all
// those deletes are still in the lane's buffer: each becomes a file of
// its live rows (none when every row was deleted), and its buffered
// position deletes are dropped. The old file is removed; its entry in
// w.done becomes the new file's, or a blank one (Path "") that
// PrepareCommit drops.
func (w *Writer) rewriteDeleted(ctx context.Context, ln *lane, share float64) error {
	pick := map[uint32][]uint32{} // file ordinal -> deleted positions
	for ord, fi := range w.files {
		if fi.lane == ln && fi.done >= 0 && !fi.flushed && fi.deleted > 0 &&
			float64(fi.deleted) >= share*float64(fi.rows) {
			pick[uint32(ord)] = nil
		}
	}
	if len(pick) == 0 {
		return nil
	}
	kept := ln.posDel[:0]
	for _, d := range ln.posDel {
		ord := uint32(d >> 32)
		if ps, ok := pick[ord]; ok {
			pick[ord] = append(ps, uint32(d))
		} else {
			kept = append(kept, d)
		}
	}
	w.posDels -= len(ln.posDel) - len(kept)
	ln.posDel = kept
	ords := make([]uint32, 0, len(pick))
	for ord := range pick {
		ords = append(ords, ord)
	}
	slices.Sort(ords)
	for _, ord := range ords {
		ps := pick[ord]
		slices.Sort(ps)
		fi := w.files[ord]
		if err := w.rewriteFile(ctx, ln, fi, ps); err != nil {
			return err
		}
		// The key index (Committed) finds the rows at their new places.
		fi.dropped = mergeSorted(fi.dropped, ps)
		w.stats.RewrittenFiles++
		w.stats.RewrittenDeletes += int64(len(ps))
	}
	return nil
}

// rewriteFile copies the rows of fi's file whose positions are not in
// deleted (sorted) into a new data file of the lane, through the writer's
// encoder, and replaces fi's entry in w.done with it.
func (w *Writer) rewriteFile(ctx context.Context, ln *lane, fi *fileInfo, deleted []uint32) error {
	old := w.done[fi.done]
	src, err := w.fs.Open(fi.path)
	if err != nil {
		return fmt.Errorf("deltawriter: rewriting %s: %w", fi.path, err)
	}
	defer src.Close()
	pr, err := file.NewParquetReader(src)
	if err != nil {
		return fmt.Errorf("deltawriter: rewriting %s: %w", fi.path, err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: int64(w.opts.BatchRows)}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("deltawriter: rewriting %s: %w", fi.path, err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("deltawriter: rewriting %s: %w", fi.path, err)
	}
	defer rr.Release()

	path := w.newPath(ln, "data")
	fs := fi.schema
	dst, err := createParquetFile(w.fs, w.enc, path, fs.arrow, fs.props, w.opts.BatchRows, w.opts.RowGroupBytes)
	if err != nil {
		return fmt.Errorf("deltawriter: %w", err)
	}
	if len(fi.dropped) > 0 {
		// Rows left out before encoding are not in the file: a deleted
		// row's place is its position less those before it.
		at := make([]uint32, len(deleted))
		for i, d := range deleted {
			n, _ := slices.BinarySearch(fi.dropped, d)
			at[i] = d - uint32(n)
		}
		deleted = at
	}
	var pos int64 // of the batch's first row in the old file
	next := 0     // the first deleted position not yet passed
	for {
		rec, err := rr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			dst.abort(w.fs)
			return fmt.Errorf("deltawriter: rewriting %s: reading: %w", fi.path, err)
		}
		kept, err := liveRows(fs.arrow, rec, pos, deleted, &next)
		pos += rec.NumRows()
		if err == nil {
			err = dst.appendRecord(kept)
			kept.Release()
		}
		if err != nil {
			dst.abort(w.fs)
			return fmt.Errorf("deltawriter: rewriting %s: %w", fi.path, err)
		}
	}
	if pos != fi.rows || next != len(deleted) {
		dst.abort(w.fs)
		return fmt.Errorf("deltawriter: rewriting %s: read %d rows, %d of %d deletes matched; the file has %d rows", fi.path, pos, next, len(deleted), fi.rows)
	}
	w.stats.DataFiles--
	w.stats.DataRows -= fi.rows
	fi.moved = true
	if dst.rows == 0 {
		dst.abort(w.fs)
		w.done[fi.done] = commit.File{}
	} else {
		fi.newPath = path
		md, size, err := dst.close()
		if err != nil {
			return fmt.Errorf("deltawriter: %w", err)
		}
		if err := w.finish(ln, commit.DataFile, path, md, size, fs.schema); err != nil {
			return err
		}
		w.done[fi.done] = w.done[len(w.done)-1]
		w.done = w.done[:len(w.done)-1]
	}
	if err := w.fs.Remove(old.Path); err != nil {
		return fmt.Errorf("deltawriter: removing rewritten %s: %w", old.Path, err)
	}
	return nil
}

// mergeSorted returns the sorted union of two sorted lists without common
// entries.
func mergeSorted(a, b []uint32) []uint32 {
	if len(a) == 0 {
		return b
	}
	out := make([]uint32, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	slices.Sort(out)
	return out
}

// liveRows returns the rows of rec (whose first row is at position pos of
// its file) that are not deleted, as a record of the file's Arrow schema
// asc. *next indexes the first entry of deleted at or after pos.
func liveRows(asc *arrow.Schema, rec arrow.RecordBatch, pos int64, deleted []uint32, next *int) (arrow.RecordBatch, error) {
	n := rec.NumRows()
	if int(rec.NumCols()) != len(asc.Fields()) {
		return nil, fmt.Errorf("%d columns, the table has %d", rec.NumCols(), len(asc.Fields()))
	}
	for i, c := range rec.Columns() {
		if !arrow.TypeEqual(c.DataType(), asc.Field(i).Type) {
			return nil, fmt.Errorf("column %s reads back as %s, written as %s", asc.Field(i).Name, c.DataType(), asc.Field(i).Type)
		}
	}
	same := array.NewRecordBatch(asc, rec.Columns(), n)
	if *next >= len(deleted) || int64(deleted[*next]) >= pos+n {
		return same, nil // nothing deleted in this batch
	}
	defer same.Release()
	// The live rows as ranges [from, to) of the batch.
	var ranges [][2]int64
	from := int64(0)
	for *next < len(deleted) && int64(deleted[*next]) < pos+n {
		at := int64(deleted[*next]) - pos
		if at > from {
			ranges = append(ranges, [2]int64{from, at})
		}
		from = at + 1
		*next++
	}
	if from < n {
		ranges = append(ranges, [2]int64{from, n})
	}
	switch len(ranges) {
	case 0:
		return same.NewSlice(0, 0), nil // every row deleted
	case 1:
		return same.NewSlice(ranges[0][0], ranges[0][1]), nil // no copy
	}
	cols := make([]arrow.Array, len(asc.Fields()))
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	parts := make([]arrow.Array, len(ranges))
	var kept int64
	for _, r := range ranges {
		kept += r[1] - r[0]
	}
	for i, c := range same.Columns() {
		for j, r := range ranges {
			parts[j] = array.NewSlice(c, r[0], r[1])
		}
		out, err := array.Concatenate(parts, memory.DefaultAllocator)
		for _, p := range parts {
			p.Release()
		}
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", asc.Field(i).Name, err)
		}
		cols[i] = out
	}
	return array.NewRecordBatch(asc, cols, kept), nil
}
