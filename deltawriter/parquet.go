package deltawriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/icesink/icesink/internal/arrowval"
)

// WriterProperties returns the Parquet writer properties iceberg-go uses
// for a table with properties props (compression, page version, sizes,
// dictionary with Java's cost-based fallback), so that our files are
// encoded as iceberg-go's own writer would encode them, but for the write
// batch (see writeBatch).
func WriterProperties(props iceberg.Properties, sc *arrow.Schema) *parquet.WriterProperties {
	return parquet.NewWriterProperties(writerPropertyList(props, sc)...)
}

// writerPropertyList is what WriterProperties is made of.
func writerPropertyList(props iceberg.Properties, sc *arrow.Schema) []parquet.WriterProperty {
	dp := parquet.DataPageV2
	if props.Get(table.ParquetPageVersionKey, "2") == "1" {
		dp = parquet.DataPageV1
	}
	codec := compress.Codecs.Zstd
	switch props.Get(table.ParquetCompressionKey, "zstd") {
	case "snappy":
		codec = compress.Codecs.Snappy
	case "uncompressed":
		codec = compress.Codecs.Uncompressed
	case "gzip":
		codec = compress.Codecs.Gzip
	case "lz4raw":
		codec = compress.Codecs.Lz4Raw
	}
	wp := []parquet.WriterProperty{
		parquet.WithMaxRowGroupLength(int64(props.GetInt(table.ParquetRowGroupLimitKey, 1048576))),
		parquet.WithDataPageSize(int64(props.GetInt(table.ParquetPageSizeBytesKey, 1<<20))),
		parquet.WithDataPageVersion(dp),
		parquet.WithBatchSize(int64(min(props.GetInt(table.ParquetPageRowLimitKey, 20000), writeBatch))),
		parquet.WithDictionaryPageSizeLimit(int64(props.GetInt(table.ParquetDictSizeBytesKey, 2<<20))),
		parquet.WithCompression(codec),
		parquet.WithCompressionLevel(props.GetInt(table.ParquetCompressionLevelKey, -1)),
	}
	for _, f := range sc.Fields() {
		wp = append(wp, parquet.WithDictionaryCostFallbackFor(f.Name, true))
	}
	return wp
}

// positionDeleteProperties are the Parquet properties of position-delete
// files: those of the table, with pos delta-encoded (the positions of
// one data file ascend, often by one).
func positionDeleteProperties(props iceberg.Properties) *parquet.WriterProperties {
	return parquet.NewWriterProperties(append(writerPropertyList(props, table.PositionalDeleteArrowSchema),
		parquet.WithDictionaryFor("pos", false),
		parquet.WithEncodingFor("pos", parquet.Encodings.DeltaBinaryPacked))...)
}

// writeBatch is the most values a column writer takes at a time
// (arrow-go's default). iceberg-go passes write.parquet.page-row-limit
// (20,000) there, but arrow-go cuts pages by size only, after a batch, and
// decides whether a column's dictionary pays after the first batch of each
// row group: with 20,000 a column of distinct values (a key, a position)
// hashed its first 20,000 values into a dictionary it then dropped, in
// every row group, and a bounded writer's row groups are small (2 MiB at
// a 32 MiB budget: almost every value). A smaller page-row-limit is kept.
const writeBatch = 1024

// CheckProperties refuses values of the write.* table properties the
// writer honours that it could not apply (WriterProperties would fall
// back to a default without a word): the Parquet codec, its level, the
// page version, and the sizes, which must be positive integers.
func CheckProperties(props iceberg.Properties) error {
	for k, v := range props {
		switch k {
		case table.ParquetCompressionKey:
			switch v {
			case "zstd", "snappy", "gzip", "lz4raw", "uncompressed":
			default:
				return fmt.Errorf("table property %s=%q: want zstd, snappy, gzip, lz4raw or uncompressed", k, v)
			}
		case table.ParquetPageVersionKey:
			if v != "1" && v != "2" {
				return fmt.Errorf("table property %s=%q: want 1 or 2", k, v)
			}
		case table.ParquetCompressionLevelKey:
			if _, err := strconv.Atoi(v); err != nil {
				return fmt.Errorf("table property %s=%q: want an integer", k, v)
			}
		case table.ParquetRowGroupLimitKey, table.ParquetPageSizeBytesKey, table.ParquetPageRowLimitKey,
			table.ParquetDictSizeBytesKey, table.WriteTargetFileSizeBytesKey:
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
				return fmt.Errorf("table property %s=%q: want a positive integer", k, v)
			}
		}
	}
	return nil
}

// countingWriter counts the bytes that reach the file. The encoder
// goroutine writes; the writer reads n.
type countingWriter struct {
	w io.WriteCloser
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// Close makes the file durable and complete: the Parquet writer closes its
// sink through this once the footer is written. A local file is synced
// first (a crash must not leave a committed file short); on object
// storage the close is what completes the upload. Its error is the
// file's.
func (c *countingWriter) Close() error {
	var err error
	if s, ok := c.w.(interface{ Sync() error }); ok {
		err = s.Sync()
	}
	return errors.Join(err, c.w.Close())
}

// parquetFile is one Parquet file being written: rows go to an Arrow
// builder; a full batch goes to the writer's encoder, a goroutine that
// encodes it into the file's buffered row group while the writer goes on
// with the next rows (so index work and Parquet encoding use two cores).
type parquetFile struct {
	fs        iceio.WriteFileIO
	path      string
	sc        *arrow.Schema
	props     *parquet.WriterProperties
	out       *countingWriter     // nil until open
	fw        *pqarrow.FileWriter // the encoder's until stop; nil until open
	bld       *array.RecordBuilder
	app       []appender
	buffered  int   // rows in bld
	rows      int64 // rows appended in total
	batchRows int
	handed    int64 // Arrow bytes handed to the encoder in total
	enc       *encoder
	stopped   bool
	// dead are the positions (in the numbering of appended rows) of rows
	// still in the builders that a later change of the window deleted:
	// flushBatch leaves them out (format v3: a deletion vector may not
	// name a file of its own snapshot, so such a row would cost a rewrite
	// of the file at PrepareCommit). dropped are all the positions left
	// out so far, ascending: a row's place in the file is its position
	// less the dropped ones before it.
	dead    []uint32
	dropped []uint32
	// plainFooter: the footer keeps no Arrow schema (a file whose Arrow
	// types are for writing only, see createPositionDeleteFile).
	plainFooter bool

	// The encoder's side: rgRaw is its own, the rest it publishes.
	rgBytes  int64        // row-group size at which a new row group starts
	rgRaw    int64        // Arrow bytes handed to the current row group
	consumed atomic.Int64 // Arrow bytes of the batches encoded so far
	held     atomic.Int64 // the row group's encoded pages and unencoded values
	err      atomic.Pointer[error]
}

// encoder is a writer's encoding goroutine. It encodes the batches of all
// the writer's open files in the order they were handed over, one at a
// time, so a writer holds one zstd encoder's state (~19 MiB at the default
// level) however many files it has open. At most encoderQueue batches
// wait; the writer blocks beyond that, so what the files hold stays
// bounded, and it is accounted (parquetFile.bufferedBytes).
type encoder struct {
	jobs    chan encodeJob
	stopped chan struct{}
	// ctx is the context of the writer's current call (Write,
	// PrepareCommit, Flush): a hand-off blocked on a full queue, and a
	// barrier, give up when it is done. Abort waits regardless.
	ctx context.Context
	// mem is the allocator of the builders of the writer's files: a batch
	// the encoder has written gives its buffers back for the next one.
	mem *bufferPool
}

// unboundedPool is the buffer pool of an unbounded writer.
const unboundedPool = 16 << 20

// encoderQueue is the number of batches that may wait for the encoder.
const encoderQueue = 2

// encodeJob is a batch of a file, or (rec nil) a barrier: done is closed
// once every earlier job has been encoded.
type encodeJob struct {
	f    *parquetFile
	rec  arrow.RecordBatch
	done chan struct{}
}

// newEncoder starts the encoder of a writer whose buffer pool keeps up to
// pool bytes (0: unboundedPool).
func newEncoder(pool int64) *encoder {
	if pool <= 0 {
		pool = unboundedPool
	}
	e := &encoder{jobs: make(chan encodeJob, encoderQueue), stopped: make(chan struct{}), ctx: context.Background(), mem: newBufferPool(pool)}
	go e.run()
	return e
}

func (e *encoder) run() {
	defer close(e.stopped)
	for j := range e.jobs {
		if j.rec == nil {
			close(j.done)
			continue
		}
		j.f.encode(j.rec)
	}
}

// send hands a job to the encoder, waiting while the queue is full unless
// the current call's context ends first.
func (e *encoder) send(j encodeJob) error {
	select {
	case e.jobs <- j:
		return nil
	default:
	}
	select {
	case e.jobs <- j:
		return nil
	case <-e.ctx.Done():
		if j.rec != nil {
			j.rec.Release()
		}
		return fmt.Errorf("deltawriter: waiting for the encoder: %w", context.Cause(e.ctx))
	}
}

// barrier returns once every job handed so far has been encoded, or when
// the current call's context ends (with its cause).
func (e *encoder) barrier() error {
	done := make(chan struct{})
	if err := e.send(encodeJob{done: done}); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-e.ctx.Done():
		return fmt.Errorf("deltawriter: waiting for the encoder: %w", context.Cause(e.ctx))
	}
}

// close stops the goroutine after the jobs handed so far.
func (e *encoder) close() {
	close(e.jobs)
	<-e.stopped
}

// createParquetFile returns a file whose rows are buffered in Arrow
// builders; the file itself is created, and its Parquet writer (several
// KiB per column) allocated, only when its first batch goes to the
// encoder or it is closed: a writer with many partitions open pays that
// only for those that fill a batch or are flushed.
func createParquetFile(fs iceio.WriteFileIO, enc *encoder, path string, sc *arrow.Schema, props *parquet.WriterProperties, batchRows int, rgBytes int64) (*parquetFile, error) {
	bld := array.NewRecordBuilder(enc.mem, sc)
	pf := &parquetFile{fs: fs, path: path, sc: sc, props: props, bld: bld, batchRows: batchRows, enc: enc, rgBytes: rgBytes}
	for i, b := range bld.Fields() {
		a, err := appenderFor(b, sc.Field(i).Type)
		if err != nil {
			bld.Release()
			return nil, err
		}
		pf.app = append(pf.app, a)
	}
	return pf, nil
}

// open creates the file and its Parquet writer, once.
func (f *parquetFile) open() error {
	if f.fw != nil {
		return nil
	}
	w, err := f.fs.Create(f.path)
	if err != nil {
		return fmt.Errorf("creating %s: %w", f.path, err)
	}
	out := &countingWriter{w: w}
	var aprops []pqarrow.WriterOption
	if !f.plainFooter {
		aprops = append(aprops, pqarrow.WithStoreSchema())
	}
	fw, err := pqarrow.NewFileWriter(f.sc, out, f.props, pqarrow.NewArrowWriterProperties(aprops...))
	if err != nil {
		_ = w.Close()
		_ = f.fs.Remove(f.path)
		return fmt.Errorf("opening a Parquet writer on %s: %w", f.path, err)
	}
	f.out, f.fw = out, fw
	return nil
}

// encode writes one batch into the buffered row group (on the encoder's
// goroutine). After an error it drops the file's later batches; the
// writer sees the error at its next hand-off.
func (f *parquetFile) encode(rec arrow.RecordBatch) {
	raw := recordBytes(rec)
	if f.err.Load() == nil {
		fixed := arrowval.WithValueBuffers(rec)
		err := f.fw.WriteBuffered(fixed)
		fixed.Release()
		f.rgRaw += raw
		if err == nil && f.rgBytes > 0 && f.rgRaw >= f.rgBytes {
			err = f.fw.NewBufferedRowGroupChecked()
			f.rgRaw = 0
		}
		if err != nil {
			err = fmt.Errorf("writing %s: %w", f.path, err)
			f.err.Store(&err)
		}
		f.held.Store(f.fw.RowGroupTotalCompressedBytes() + max(f.rgRaw-f.fw.RowGroupTotalBytesWritten(), 0))
	}
	rec.Release()
	f.consumed.Add(raw)
}

// failure is the encoder's error on this file, if any.
func (f *parquetFile) failure() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// stop waits until the encoder has encoded every batch of the file handed
// so far and returns its error; the file is the caller's again.
func (f *parquetFile) stop() error {
	if !f.stopped {
		if f.handed > 0 {
			if err := f.enc.barrier(); err != nil {
				return err
			}
		}
		f.stopped = true
	}
	return f.failure()
}

func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		for _, b := range c.Data().Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
	}
	return n
}

// reserve sizes the builders for the next batch after a full one (last),
// the variable-length columns after its data, so that appends do not
// regrow them. A file's first batch, and one after a partial batch, grow
// as rows arrive: a writer with many open files (partitions) that each
// see few rows does not hold a full batch of capacity per file.
func (f *parquetFile) reserve(last arrow.RecordBatch) {
	if last == nil || last.NumRows() < int64(f.batchRows) {
		return
	}
	for i, b := range f.bld.Fields() {
		b.Reserve(f.batchRows)
		bb, ok := b.(interface{ ReserveData(int) })
		if !ok {
			continue
		}
		if bufs := last.Column(i).Data().Buffers(); len(bufs) > 2 && bufs[2] != nil {
			bb.ReserveData(bufs[2].Len() + bufs[2].Len()/8)
		}
	}
}

// builderBytes is the capacity the file's Arrow builders hold.
func (f *parquetFile) builderBytes() int64 {
	var n int64
	for i, b := range f.bld.Fields() {
		c := int64(b.Cap())
		n += c / 8 // validity
		switch t := f.bld.Schema().Field(i).Type.(type) {
		case arrow.FixedWidthDataType:
			n += c * int64(max(t.BitWidth()/8, 1))
		default:
			n += c * 8 // offsets (or views)
		}
		if bb, ok := b.(interface{ DataCap() int }); ok {
			n += int64(bb.DataCap())
		}
	}
	return n
}

// appendRow appends the values of row at the columns cols (all columns
// when cols is nil) and returns the row's position in the file. The row
// must have been checked.
func (f *parquetFile) appendRow(row []any, cols []int) (int64, error) {
	if cols == nil {
		for i, a := range f.app {
			a(row[i])
		}
	} else {
		for i, a := range f.app {
			a(row[cols[i]])
		}
	}
	return f.appended()
}

// positionDeleteSchema is the Arrow schema of the position-delete files
// the writer writes: Iceberg's (file_path, pos) with file_path
// dictionary-encoded, so that a row holds an index into the data file
// paths the file names rather than a copy of one (a hundred bytes a
// row, which Parquet's dictionary encoding then hashed back to an index).
func positionDeleteSchema() *arrow.Schema {
	sc := table.PositionalDeleteArrowSchema
	fields := sc.Fields()
	fields[0].Type = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: fields[0].Type}
	return arrow.NewSchema(fields, nil)
}

// createPositionDeleteFile returns a position-delete file of
// positionDeleteSchema (written by writePositionDeletes). Its footer
// keeps no Arrow schema: readers see file_path as the plain string column
// Iceberg defines.
func createPositionDeleteFile(fs iceio.WriteFileIO, enc *encoder, path string, props *parquet.WriterProperties, batchRows int, rgBytes int64) (*parquetFile, error) {
	f, err := createParquetFile(fs, enc, path, table.PositionalDeleteArrowSchema, props, batchRows, rgBytes)
	if err != nil {
		return nil, err
	}
	f.sc, f.plainFooter = positionDeleteSchema(), true
	return f, nil
}

// writePositionDeletes writes the n rows of a position-delete file made
// by createPositionDeleteFile, in (file_path, pos) order: each row an
// index into paths (the distinct data file paths the file names,
// ascending) and a position. Batches of batchRows go to the encoder, all
// sharing one dictionary, which Parquet writes once per row group.
func (f *parquetFile) writePositionDeletes(paths []string, n int, rows iter.Seq2[int32, int64]) error {
	pb := array.NewStringBuilder(f.enc.mem)
	pb.AppendValues(paths, nil)
	dict := pb.NewArray()
	pb.Release()
	defer dict.Release()
	dt := f.sc.Field(0).Type.(*arrow.DictionaryType)
	ib, posb := array.NewInt32Builder(f.enc.mem), array.NewInt64Builder(f.enc.mem)
	defer ib.Release()
	defer posb.Release()
	left := n
	flush := func() error {
		rows := ib.Len()
		if rows == 0 {
			return nil
		}
		left -= rows
		idx, pos := ib.NewArray(), posb.NewArray()
		col := array.NewDictionaryArray(dt, idx, dict)
		rec := array.NewRecordBatch(f.sc, []arrow.Array{col, pos}, int64(rows))
		idx.Release()
		col.Release()
		pos.Release()
		err := f.appendRecord(rec)
		rec.Release()
		return err
	}
	for ref, pos := range rows {
		if ib.Len() == 0 {
			ib.Reserve(min(left, f.batchRows))
			posb.Reserve(min(left, f.batchRows))
		}
		ib.UnsafeAppend(ref)
		posb.UnsafeAppend(pos)
		if ib.Len() >= f.batchRows {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// appendRecord hands a whole record (of the file's schema) to the encoder
// after the builders' rows; the caller keeps its own reference.
func (f *parquetFile) appendRecord(rec arrow.RecordBatch) error {
	if err := f.flushBatch(); err != nil {
		return err
	}
	if rec.NumRows() == 0 {
		return nil
	}
	if err := f.open(); err != nil {
		return err
	}
	rec.Retain()
	f.rows += rec.NumRows()
	f.handed += recordBytes(rec)
	return f.enc.send(encodeJob{f: f, rec: rec})
}

// appended counts a row appended to the builders and hands a full batch
// to the encoder.
func (f *parquetFile) appended() (int64, error) {
	pos := f.rows
	f.rows++
	f.buffered++
	if f.buffered >= f.batchRows {
		if err := f.flushBatch(); err != nil {
			return pos, err
		}
	}
	return pos, nil
}

// drop leaves the row at pos out of the file if it is still in the
// builders, and says whether it did.
func (f *parquetFile) drop(pos int64) bool {
	if pos < f.rows-int64(f.buffered) || pos >= f.rows {
		return false
	}
	f.dead = append(f.dead, uint32(pos))
	return true
}

// flushBatch hands the builders' rows, less the dead ones, to the encoder.
func (f *parquetFile) flushBatch() error {
	if err := f.failure(); err != nil {
		return err
	}
	if f.buffered == 0 {
		return nil
	}
	if err := f.open(); err != nil {
		return err
	}
	rec := f.bld.NewRecordBatch()
	first := f.rows - int64(f.buffered)
	f.buffered = 0
	if len(f.dead) > 0 {
		slices.Sort(f.dead)
		next := 0
		kept, err := liveRows(f.sc, rec, first, f.dead, &next)
		rec.Release()
		if err != nil {
			return fmt.Errorf("%s: leaving out deleted rows: %w", f.path, err)
		}
		f.dropped = append(f.dropped, f.dead...)
		f.dead = f.dead[:0]
		if kept.NumRows() == 0 {
			kept.Release()
			return nil
		}
		rec = kept
	}
	f.handed += recordBytes(rec)
	f.reserve(rec)
	return f.enc.send(encodeJob{f: f, rec: rec})
}

// queued is the Arrow bytes handed to the encoder and not yet encoded.
func (f *parquetFile) queued() int64 {
	return max(f.handed-f.consumed.Load(), 0)
}

// bufferedBytes estimates the memory the file holds: the builders'
// capacity, the batches waiting for the encoder, the encoded pages of the
// buffered row group and its unencoded values.
func (f *parquetFile) bufferedBytes() int64 {
	n := f.builderBytes() + f.queued() + f.held.Load()
	if f.fw != nil {
		n += openFileBytes + openColumnBytes*int64(len(f.app))
	}
	return n
}

// What an open file holds besides its rows (its Parquet writer, column
// writers and their encoders, the builders' structure), measured with
// 1024 partitions open: ~14 KiB per partition for a data file of two
// columns and an equality-delete file of one.
const (
	openFileBytes   = 4 << 10
	openColumnBytes = 2 << 10
)

// size estimates the file's size so far (an upper bound: unencoded values
// are counted raw).
func (f *parquetFile) size() int64 {
	n := f.queued() + f.held.Load()
	if f.out != nil {
		n += f.out.n.Load()
	}
	return n
}

// close finishes the file and returns its footer and size. On error the
// file is removed.
func (f *parquetFile) close() (*metadata.FileMetaData, int64, error) {
	err := f.flushBatch()
	if err == nil {
		err = f.open() // a file without rows
	}
	if serr := f.stop(); err == nil {
		err = serr
	}
	f.bld.Release()
	if err != nil {
		if f.out != nil {
			_ = f.out.w.Close()
			_ = f.fs.Remove(f.path)
		}
		return nil, 0, err
	}
	if err := f.fw.Close(); err != nil {
		_ = f.fs.Remove(f.path)
		return nil, 0, fmt.Errorf("closing %s: %w", f.path, err)
	}
	md, err := f.fw.FileMetadata()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the footer of %s: %w", f.path, err)
	}
	return md, f.out.n.Load(), nil
}

// abort drops the file.
func (f *parquetFile) abort(fs iceio.WriteFileIO) {
	_ = f.stop()
	f.bld.Release()
	if f.out != nil {
		_ = f.out.w.Close()
		_ = fs.Remove(f.path)
	}
}

// RowAppender appends rows, typed as Change documents, to an Arrow record
// builder whose schema came from table.SchemaToArrowSchema: the same
// conversion the writer's data files use.
type RowAppender struct{ app []appender }

// NewRowAppender returns an appender for the columns of bld.
func NewRowAppender(bld *array.RecordBuilder) (*RowAppender, error) {
	ra := &RowAppender{}
	for i, b := range bld.Fields() {
		a, err := appenderFor(b, bld.Schema().Field(i).Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", bld.Schema().Field(i).Name, err)
		}
		ra.app = append(ra.app, a)
	}
	return ra, nil
}

// Append appends one row; its values must fit the columns' types.
func (ra *RowAppender) Append(row []any) {
	for i, a := range ra.app {
		a(row[i])
	}
}

// appender appends one checked value (or nil) to a column builder.
type appender func(v any)

func appenderFor(b array.Builder, dt arrow.DataType) (appender, error) {
	switch b := b.(type) {
	case *array.BooleanBuilder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(bool))
			}
		}, nil
	case *array.Int32Builder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(int32))
			}
		}, nil
	case *array.Int64Builder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(int64))
			}
		}, nil
	case *array.Float32Builder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(float32))
			}
		}, nil
	case *array.Float64Builder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(float64))
			}
		}, nil
	case *array.Decimal128Builder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(decimal128.Num))
			}
		}, nil
	case *array.Date32Builder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(arrow.Date32(v.(int32)))
			}
		}, nil
	case *array.Time64Builder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(arrow.Time64(v.(int64)))
			}
		}, nil
	case *array.TimestampBuilder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(arrow.Timestamp(v.(int64)))
			}
		}, nil
	case *array.StringBuilder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(string))
			}
		}, nil
	case *array.LargeStringBuilder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(string))
			}
		}, nil
	case *extensions.UUIDBuilder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(uuid.UUID))
			}
		}, nil
	case *array.FixedSizeBinaryBuilder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.([]byte))
			}
		}, nil
	case *array.BinaryBuilder:
		return func(v any) {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.([]byte))
			}
		}, nil
	}
	return nil, fmt.Errorf("column type %s is not supported", dt)
}
