package arrowval

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// emptyStrings is ["", null] as a filter kernel leaves it: offsets and
// a value buffer without bytes.
func emptyStrings(typ arrow.DataType) arrow.Array {
	offsets := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0, 0, 0}))
	valid := memory.NewBufferBytes([]byte{0b01})
	return array.MakeFromData(array.NewData(typ, 2, []*memory.Buffer{valid, offsets, memory.NewBufferBytes(nil)}, nil, 1, 0))
}

// TestWithValueBuffers writes ["", null] (no value buffer) then
// ["c", "d"] and reads the file's statistics: the lower bound is "".
func TestWithValueBuffers(t *testing.T) {
	for _, typ := range []arrow.DataType{arrow.BinaryTypes.String, arrow.BinaryTypes.Binary} {
		inner := arrow.StructOf(arrow.Field{Name: "s", Type: typ, Nullable: true})
		sc := arrow.NewSchema([]arrow.Field{
			{Name: "s", Type: typ, Nullable: true},
			{Name: "n", Type: inner, Nullable: true},
		}, nil)
		var buf bytes.Buffer
		fw, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(parquet.WithDictionaryDefault(false)), pqarrow.DefaultWriterProps())
		if err != nil {
			t.Fatal(err)
		}
		empty := emptyStrings(typ)
		nested := array.NewStructData(array.NewData(inner, 2, []*memory.Buffer{nil}, []arrow.ArrayData{empty.Data()}, 0, 0))
		first := array.NewRecordBatch(sc, []arrow.Array{empty, nested}, 2)
		b := array.NewBuilder(memory.DefaultAllocator, typ)
		for _, v := range []string{"c", "d"} {
			switch b := b.(type) {
			case *array.StringBuilder:
				b.Append(v)
			case *array.BinaryBuilder:
				b.Append([]byte(v))
			}
		}
		cd := b.NewArray()
		second := array.NewRecordBatch(sc, []arrow.Array{cd, array.NewStructData(array.NewData(inner, 2, []*memory.Buffer{nil}, []arrow.ArrayData{cd.Data()}, 0, 0))}, 2)
		for _, rec := range []arrow.RecordBatch{first, second} {
			fixed := WithValueBuffers(rec)
			if err := fw.WriteBuffered(fixed); err != nil {
				t.Fatal(err)
			}
			fixed.Release()
		}
		if err := fw.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		for c := range 2 {
			cc, err := r.MetaData().RowGroup(0).ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			st, err := cc.Statistics()
			if err != nil {
				t.Fatal(err)
			}
			bs := st.(*metadata.ByteArrayStatistics)
			if string(bs.Min()) != "" || string(bs.Max()) != "d" {
				t.Errorf("%s column %d: bounds [%q, %q], want [\"\", \"d\"]", typ, c, bs.Min(), bs.Max())
			}
		}
	}
}
