package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/deltawriter"
)

const (
	recordRows    = 8192     // rows per Arrow record, as the writer's BatchRows default
	rowGroupBytes = 64 << 20 // raw bytes per row group, as the writer's RowGroupBytes default
)

// recordSource turns the stream's final rows into Arrow records. The time
// spent generating rows (not building records) is kept in gen, so that
// the runs can leave it out as they leave it out of the writer's.
type recordSource struct {
	fill func([][]any) int // the next rows; 0 at the end
	bld  *array.RecordBuilder
	app  *deltawriter.RowAppender
	rows [][]any
	gen  atomic.Int64 // nanoseconds
	done atomic.Int64 // rows turned into records
	cell *progressCell
	pr   *progress
}

func newRecordSource(sc *arrow.Schema, fill func([][]any) int, cell *progressCell, pr *progress) (*recordSource, error) {
	s := &recordSource{
		fill: fill,
		bld:  array.NewRecordBuilder(memory.DefaultAllocator, sc),
		rows: make([][]any, recordRows),
		cell: cell,
		pr:   pr,
	}
	app, err := deltawriter.NewRowAppender(s.bld)
	if err != nil {
		s.bld.Release()
		return nil, err
	}
	s.app = app
	return s, nil
}

// next returns the next record, or nil at the end.
func (s *recordSource) next() arrow.RecordBatch {
	t0 := time.Now()
	n := s.fill(s.rows)
	s.gen.Add(int64(time.Since(t0)))
	if n == 0 {
		return nil
	}
	for _, row := range s.rows[:n] {
		s.app.Append(row)
	}
	done := s.done.Add(int64(n))
	if s.cell != nil {
		s.cell.changes.Store(done)
	}
	if s.pr != nil {
		s.pr.rows(done)
	}
	return s.bld.NewRecordBatch()
}

func (s *recordSource) release() { s.bld.Release() }

// recordReader is an array.RecordReader over a recordSource.
type recordReader struct {
	src *recordSource
	cur arrow.RecordBatch
	ctx context.Context
	err error
	ref atomic.Int64
}

// Retain, Release, Schema, Next, RecordBatch and Err implement
// array.RecordReader.
func (r *recordReader) Retain()               { r.ref.Add(1) }
func (r *recordReader) Schema() *arrow.Schema { return r.src.bld.Schema() }
func (r *recordReader) Err() error            { return r.err }

func (r *recordReader) Release() {
	if r.ref.Add(-1) == 0 && r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
}

func (r *recordReader) Next() bool {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	if r.err != nil {
		return false
	}
	if err := r.ctx.Err(); err != nil {
		r.err = err
		return false
	}
	r.cur = r.src.next()
	return r.cur != nil
}

func (r *recordReader) RecordBatch() arrow.RecordBatch { return r.cur }

// Record returns the current record (array.RecordReader's deprecated name).
func (r *recordReader) Record() arrow.RecordBatch { return r.cur }

// prepareFinal opens a fresh warehouse with the stream's table and the
// source of its final rows (the replay is not timed).
func prepareFinal(ctx context.Context, e *runEnv) (*table.Table, *recordSource, func() error, error) {
	dirs, err := runDirs(e.dir, "warehouse")
	if err != nil {
		return nil, nil, nil, err
	}
	wh, tbl, err := openTable(ctx, dirs[0], e.opts.Stream, e.opts.FormatVersion)
	if err != nil {
		return nil, nil, nil, err
	}
	final, err := NewFinalRows(e.opts.Stream)
	if err != nil {
		wh.Close()
		return nil, nil, nil, err
	}
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		wh.Close()
		return nil, nil, nil, fmt.Errorf("arrow schema: %w", err)
	}
	src, err := newRecordSource(sc, final.Fill, e.cell, e.pr)
	if err != nil {
		wh.Close()
		return nil, nil, nil, err
	}
	e.res.Rows = final.Len()
	return tbl, src, func() error { src.release(); return wh.Close() }, nil
}

// runAppend writes the final rows with iceberg-go's own write path: one
// Table.Append (table.WriteRecords into data files, then one commit).
func runAppend(ctx context.Context, e *runEnv) (err error) {
	tbl, src, closeFn, err := prepareFinal(ctx, e)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeFn()) }()
	rdr := &recordReader{src: src, ctx: ctx}
	rdr.ref.Store(1)
	defer rdr.Release()

	e.pr.phase("write", e.res.Rows)
	e.startTimed()
	defer e.stopTimed(0)
	began := time.Now()
	tbl, err = tbl.Append(ctx, rdr, iceberg.Properties{"icesink.bench": e.sc.Name})
	gen := time.Duration(src.gen.Load())
	elapsed := time.Since(began) - gen
	e.stopTimed(gen)
	if err != nil {
		return fmt.Errorf("iceberg-go append: %w", err)
	}
	e.res.Seconds = elapsed.Seconds()
	e.res.Commits = 1
	if snap := tbl.CurrentSnapshot(); snap != nil && snap.Summary != nil {
		p := snap.Summary.Properties
		e.res.Data.Files = atoi(p["added-data-files"])
		e.res.Data.Rows = int64(atoi(p["added-records"]))
		e.res.Data.Bytes = int64(atoi(p["added-files-size"]))
	}
	e.pr.phase("scan", 0)
	e.res.Scan, err = scanBest(ctx, tbl, e.opts.Scans)
	return err
}

// runFloor encodes the final rows to one local Parquet file with pqarrow
// and the writer's own properties, buffering row groups as the writer does.
func runFloor(ctx context.Context, e *runEnv) (err error) {
	tbl, src, closeFn, err := prepareFinal(ctx, e)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeFn()) }()
	sc := src.bld.Schema()
	props := deltawriter.WriterProperties(tbl.Properties(), sc)
	path := filepath.Join(e.dir, "floor.parquet")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("parquet floor: %w", err)
	}
	defer f.Close() // the Parquet writer closes it first; this covers errors

	e.pr.phase("write", e.res.Rows)
	e.startTimed()
	defer e.stopTimed(0)
	began := time.Now()
	err = encodeParquet(ctx, f, props, src)
	gen := time.Duration(src.gen.Load())
	elapsed := time.Since(began) - gen
	e.stopTimed(gen)
	if err != nil {
		return fmt.Errorf("parquet floor: %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("parquet floor: %w", err)
	}
	e.res.Seconds = elapsed.Seconds()
	e.res.Data = Files{Files: 1, Rows: src.done.Load(), Bytes: st.Size()}
	return nil
}

// encodeParquet writes src's records to w as one Parquet file with props,
// buffering row groups of rowGroupBytes raw bytes as the writer does.
func encodeParquet(ctx context.Context, w io.Writer, props *parquet.WriterProperties, src *recordSource) error {
	fw, err := pqarrow.NewFileWriter(src.bld.Schema(), w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return err
	}
	var raw int64
	for {
		if err := ctx.Err(); err != nil {
			return errors.Join(err, fw.Close())
		}
		rec := src.next()
		if rec == nil {
			break
		}
		for _, c := range rec.Columns() {
			for _, b := range c.Data().Buffers() {
				if b != nil {
					raw += int64(b.Len())
				}
			}
		}
		err := fw.WriteBuffered(rec)
		rec.Release()
		if err != nil {
			return errors.Join(err, fw.Close())
		}
		if raw >= rowGroupBytes {
			fw.NewBufferedRowGroup()
			raw = 0
		}
	}
	return fw.Close()
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
