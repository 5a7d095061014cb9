package changelog

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go"
)

// benchSchema is (id long key, name string, v long).
func benchSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.StringType{}},
		iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.Int64Type{}},
	)
}

func benchInput(rows int) []byte {
	var b []byte
	ops := []string{"+I", "+U", "-U", "-D"}
	for i := 0; i < rows; i++ {
		b = append(b, `{"op":"`...)
		b = append(b, ops[i%len(ops)]...)
		b = append(b, `","data":{"id":`...)
		b = strconv.AppendInt(b, int64(i)*7919, 10)
		b = append(b, `,"name":"user-`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, ` some text","v":`...)
		b = strconv.AppendInt(b, int64(i)*1_000_003, 10)
		b = append(b, "}}\n"...)
	}
	return b
}

// BenchmarkDecodeChangelogJSON decodes a changelog-json stream of a
// (long, string, long) schema; it reports rows/s and input MB/s.
func BenchmarkDecodeChangelogJSON(b *testing.B) {
	const rows = 100_000
	input := benchInput(rows)
	schema := benchSchema()
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		d, err := NewDecoder(bytes.NewReader(input), ChangelogJSON, schema)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			rec, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += len(rec.Changes)
		}
		if n != rows {
			b.Fatalf("decoded %d rows, want %d", n, rows)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
