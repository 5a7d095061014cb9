package deltawriter

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// WriterProperties returns the Parquet writer properties iceberg-go uses
// for a table with properties props (compression, page version, sizes,
// dictionary with Java's cost-based fallback), so that our files are
// encoded as iceberg-go's own writer would encode them.
func WriterProperties(props iceberg.Properties, sc *arrow.Schema) *parquet.WriterProperties {
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
		parquet.WithBatchSize(int64(props.GetInt(table.ParquetPageRowLimitKey, 20000))),
		parquet.WithDictionaryPageSizeLimit(int64(props.GetInt(table.ParquetDictSizeBytesKey, 2<<20))),
		parquet.WithCompression(codec),
		parquet.WithCompressionLevel(props.GetInt(table.ParquetCompressionLevelKey, -1)),
	}
	for _, f := range sc.Fields() {
		wp = append(wp, parquet.WithDictionaryCostFallbackFor(f.Name, true))
	}
	return parquet.NewWriterProperties(wp...)
}

// countingWriter counts the bytes that reach the file.
type countingWriter struct {
	w io.WriteCloser
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// parquetFile is one Parquet file being written: rows go to an Arrow
// builder, a full batch goes to the file's buffered row group.
type parquetFile struct {
	path      string
	out       *countingWriter
	fw        *pqarrow.FileWriter
	bld       *array.RecordBuilder
	app       []appender
	buffered  int   // rows in bld
	rows      int64 // rows appended in total
	batchRows int
	rgBytes   int64 // row-group size at which a new row group starts
	rgRaw     int64 // Arrow bytes handed to the current row group
}

func createParquetFile(fs iceio.WriteFileIO, path string, sc *arrow.Schema, props *parquet.WriterProperties, batchRows int, rgBytes int64) (*parquetFile, error) {
	f, err := fs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	out := &countingWriter{w: f}
	fw, err := pqarrow.NewFileWriter(sc, out, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		f.Close()
		_ = fs.Remove(path)
		return nil, fmt.Errorf("opening a Parquet writer on %s: %w", path, err)
	}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	pf := &parquetFile{path: path, out: out, fw: fw, bld: bld, batchRows: batchRows, rgBytes: rgBytes}
	for i, b := range bld.Fields() {
		a, err := appenderFor(b, sc.Field(i).Type)
		if err != nil {
			pf.abort(fs)
			return nil, err
		}
		pf.app = append(pf.app, a)
	}
	return pf, nil
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

func (f *parquetFile) flushBatch() error {
	if f.buffered == 0 {
		return nil
	}
	rec := f.bld.NewRecordBatch()
	defer rec.Release()
	f.buffered = 0
	for _, c := range rec.Columns() {
		for _, b := range c.Data().Buffers() {
			if b != nil {
				f.rgRaw += int64(b.Len())
			}
		}
	}
	if err := f.fw.WriteBuffered(rec); err != nil {
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	if f.rgBytes > 0 && f.rgRaw >= f.rgBytes {
		if err := f.fw.NewBufferedRowGroupChecked(); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		f.rgRaw = 0
	}
	return nil
}

// unpaged estimates the bytes of the current row group that the column
// writers still hold unencoded (not yet cut into pages).
func (f *parquetFile) unpaged() int64 {
	return max(f.rgRaw-f.fw.RowGroupTotalBytesWritten(), 0)
}

// bufferedBytes estimates the memory the file holds: the builder's rows,
// the encoded pages of the buffered row group and its unencoded values.
func (f *parquetFile) bufferedBytes() int64 {
	return int64(f.buffered)*64 + f.fw.RowGroupTotalCompressedBytes() + f.unpaged()
}

// size estimates the file's size so far (an upper bound: unencoded values
// are counted raw).
func (f *parquetFile) size() int64 {
	return f.out.n + f.fw.RowGroupTotalCompressedBytes() + f.unpaged()
}

// close finishes the file and returns its footer and size.
func (f *parquetFile) close() (*metadata.FileMetaData, int64, error) {
	err := f.flushBatch()
	f.bld.Release()
	if cerr := f.fw.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", f.path, cerr)
	}
	if err != nil {
		return nil, 0, err
	}
	md, err := f.fw.FileMetadata()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the footer of %s: %w", f.path, err)
	}
	return md, f.out.n, nil
}

// abort drops the file.
func (f *parquetFile) abort(fs iceio.WriteFileIO) {
	f.bld.Release()
	_ = f.out.w.Close()
	_ = fs.Remove(f.path)
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
