// Package tablelint checks an Iceberg table's current snapshot against its
// files, as an independent reader would: every manifest entry's counts,
// null counts and bounds against the Parquet file it names, sequence
// numbers, where each delete points and whether it can apply, and the
// snapshot summary's totals. Tests run it after writes and maintenance.
package tablelint

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/icesink/icesink/internal/arrowval"
)

// Report is what Lint found: problems, and counts for the caller's log.
type Report struct {
	DataFiles, DeleteFiles int
	// Dangling counts position deletes of data files the snapshot no
	// longer holds (a compaction removed them, and the delete file also
	// names files it kept): allowed, and harmless.
	Dangling int64
	Problems []string
}

// Err returns the problems as one error, or nil.
func (r Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	errs := make([]error, len(r.Problems))
	for i, p := range r.Problems {
		errs[i] = errors.New(p)
	}
	return errors.Join(errs...)
}

type dataInfo struct {
	seq  int64
	rows int64
}

// Lint checks tbl's current snapshot. An error is an I/O failure; what is
// wrong with the table is in the Report.
func Lint(ctx context.Context, tbl *table.Table) (Report, error) {
	var r Report
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return r, nil
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return r, err
	}
	mans, err := snap.Manifests(fsys)
	if err != nil {
		return r, err
	}
	problem := func(format string, a ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, a...)) }
	data := map[string]dataInfo{}
	type del struct {
		f   iceberg.DataFile
		seq int64
	}
	var dels []del
	var records, posDeletes int64
	for _, m := range mans {
		entries, err := m.FetchEntries(fsys, true)
		if err != nil {
			return r, err
		}
		for _, e := range entries {
			df := e.DataFile()
			if seq := e.SequenceNum(); seq <= 0 || seq > snap.SequenceNumber {
				problem("%s: data sequence number %d outside (0, %d]", df.FilePath(), seq, snap.SequenceNumber)
			}
			if fs := e.FileSequenceNum(); fs != nil && (*fs < e.SequenceNum() || *fs > snap.SequenceNumber) {
				problem("%s: file sequence number %d, data sequence number %d, snapshot %d", df.FilePath(), *fs, e.SequenceNum(), snap.SequenceNumber)
			}
			switch df.ContentType() {
			case iceberg.EntryContentData:
				r.DataFiles++
				records += df.Count()
				data[df.FilePath()] = dataInfo{seq: e.SequenceNum(), rows: df.Count()}
				if err := lintDataFile(ctx, fsys, tbl.Schema(), df, problem); err != nil {
					return r, err
				}
			default:
				r.DeleteFiles++
				if df.ContentType() == iceberg.EntryContentPosDeletes {
					posDeletes += df.Count()
				}
				dels = append(dels, del{df, e.SequenceNum()})
			}
		}
	}
	for _, d := range dels {
		if err := lintDeleteFile(ctx, fsys, d.f, d.seq, data, &r.Dangling, problem); err != nil {
			return r, err
		}
	}
	if s := snap.Summary; s != nil {
		check := func(key string, want int64) {
			if v, ok := s.Properties[key]; ok {
				if got, err := strconv.ParseInt(v, 10, 64); err != nil || got != want {
					problem("snapshot %d summary %s=%s, the manifests hold %d", snap.SnapshotID, key, v, want)
				}
			}
		}
		check("total-data-files", int64(r.DataFiles))
		check("total-records", records)
		check("total-delete-files", int64(r.DeleteFiles))
		check("total-position-deletes", posDeletes)
	}
	return r, nil
}

// lintDataFile compares a data file's entry with its Parquet file: row
// count, and for every top-level int, long and string column its value
// and null counts and bounds.
func lintDataFile(ctx context.Context, fsys iceio.IO, schema *iceberg.Schema, df iceberg.DataFile, problem func(string, ...any)) error {
	pr, fr, done, err := openParquet(fsys, df, problem)
	if err != nil {
		return err
	}
	defer done()
	psc := pr.MetaData().Schema
	for c := 0; c < psc.NumColumns(); c++ {
		id := int(psc.Column(c).SchemaNode().FieldID())
		fld, ok := schema.FindFieldByID(id)
		if !ok {
			continue
		}
		switch fld.Type.(type) {
		case iceberg.Int32Type, iceberg.Int64Type, iceberg.StringType:
		default:
			continue
		}
		rr, err := fr.GetRecordReader(ctx, []int{c}, nil)
		if err != nil {
			return err
		}
		var min, max any
		var values, nulls int64
		for rr.Next() {
			col := rr.RecordBatch().Column(0)
			for i := 0; i < col.Len(); i++ {
				values++
				v, err := arrowval.At(col, i)
				if err != nil {
					rr.Release()
					return err
				}
				if v == nil {
					nulls++
					continue
				}
				if min == nil || less(v, min) {
					min = v
				}
				if max == nil || less(max, v) {
					max = v
				}
			}
		}
		err = rr.Err()
		rr.Release()
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		name := fld.Name
		if n, ok := df.ValueCounts()[id]; ok && n != values {
			problem("%s column %s: value count %d, the file has %d", df.FilePath(), name, n, values)
		}
		if n, ok := df.NullValueCounts()[id]; ok && n != nulls {
			problem("%s column %s: null count %d, the file has %d", df.FilePath(), name, n, nulls)
		}
		if b, ok := df.LowerBoundValues()[id]; ok && min != nil {
			if lo := decode(fld.Type, b); lo == nil || less(min, lo) {
				problem("%s column %s: lower bound %v above the minimum %v", df.FilePath(), name, lo, min)
			}
		}
		if b, ok := df.UpperBoundValues()[id]; ok && max != nil {
			if hi := decode(fld.Type, b); hi == nil || less(hi, max) {
				problem("%s column %s: upper bound %v below the maximum %v", df.FilePath(), name, hi, max)
			}
		}
	}
	return nil
}

// lintDeleteFile checks where a delete file's rows point: a position
// delete names a data file of the snapshot, within its rows, whose data
// sequence number is at most the delete's (else the delete applies to
// nothing); a deletion vector likewise, its cardinality its record count.
func lintDeleteFile(ctx context.Context, fsys iceio.IO, df iceberg.DataFile, seq int64, data map[string]dataInfo, dangling *int64, problem func(string, ...any)) error {
	target := func(path string, pos int64) {
		d, ok := data[path]
		switch {
		case !ok:
			*dangling++
		case pos < 0 || pos >= d.rows:
			problem("%s: deletes row %d of %s, which has %d rows", df.FilePath(), pos, path, d.rows)
		case d.seq > seq:
			problem("%s (sequence %d): deletes a row of %s (sequence %d), to which it does not apply", df.FilePath(), seq, path, d.seq)
		}
	}
	if df.ContentType() == iceberg.EntryContentEqDeletes {
		return nil
	}
	if df.FileFormat() == iceberg.PuffinFile {
		ref := df.ReferencedDataFile()
		if ref == nil {
			problem("%s: a deletion vector without a referenced data file", df.FilePath())
			return nil
		}
		bm, err := dv.ReadDV(fsys, df)
		if err != nil {
			return err
		}
		var n int64
		for p := range bm.Positions() {
			n++
			target(*ref, int64(p))
		}
		if n != df.Count() {
			problem("%s: entry says %d deleted rows, the vector holds %d", df.FilePath(), df.Count(), n)
		}
		return nil
	}
	_, fr, done, err := openParquet(fsys, df, problem)
	if err != nil {
		return err
	}
	defer done()
	rr, err := fr.GetRecordReader(ctx, []int{0, 1}, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			p, _ := arrowval.At(rec.Column(0), i)
			pos, _ := arrowval.At(rec.Column(1), i)
			path, _ := p.(string)
			n, _ := pos.(int64)
			if ref := df.ReferencedDataFile(); ref != nil && *ref != path {
				problem("%s: referenced data file %s, a row deletes from %s", df.FilePath(), *ref, path)
			}
			target(path, n)
		}
	}
	return rr.Err()
}

// openParquet opens the Parquet file of df and checks its row count
// against the entry's; done closes it.
func openParquet(fsys iceio.IO, df iceberg.DataFile, problem func(string, ...any)) (*file.Reader, *pqarrow.FileReader, func(), error) {
	f, err := fsys.Open(df.FilePath())
	if err != nil {
		return nil, nil, nil, err
	}
	pr, err := file.NewParquetReader(f)
	if err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("%s: %w", df.FilePath(), err)
	}
	done := func() { pr.Close(); f.Close() }
	if n := pr.NumRows(); n != df.Count() {
		problem("%s: entry says %d rows, the file has %d", df.FilePath(), df.Count(), n)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return pr, fr, done, nil
}

func less(a, b any) bool {
	if x, ok := asInt(a); ok {
		y, _ := asInt(b)
		return x < y
	}
	if x, ok := a.(string); ok {
		return x < b.(string)
	}
	return false
}

// asInt widens an int32 (a column written before it became a long) or
// int64 value.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

func decode(t iceberg.Type, b []byte) any {
	switch t.(type) {
	case iceberg.Int32Type:
		if len(b) == 4 {
			return int32(binary.LittleEndian.Uint32(b))
		}
	case iceberg.Int64Type:
		switch len(b) {
		case 8:
			return int64(binary.LittleEndian.Uint64(b))
		case 4:
			// Written while the column was an int: the spec has readers
			// infer the write-time type from the bound's length.
			return int64(int32(binary.LittleEndian.Uint32(b)))
		}
	case iceberg.StringType:
		return string(bytes.Clone(b))
	}
	return nil
}
