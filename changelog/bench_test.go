package changelog

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
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

// BenchmarkDecodeMessage decodes the same changelog-json events as lines
// of a stream and as separate messages (a Kafka record's value each):
// the per-record cost of the Kafka input's decoding against the file's.
func BenchmarkDecodeMessage(b *testing.B) {
	var buf bytes.Buffer
	var msgs [][]byte
	for i := range 10000 {
		m := fmt.Appendf(nil, `{"op":"+U","data":{"id":%d,"name":"n%d","v":%d}}`, i, i%50, i*7)
		msgs = append(msgs, m)
		buf.Write(m)
		buf.WriteByte('\n')
	}
	sc := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	b.Run("lines", func(b *testing.B) {
		for b.Loop() {
			dec, _ := NewDecoder(bytes.NewReader(buf.Bytes()), ChangelogJSON, sc)
			for {
				if _, err := dec.Next(); err != nil {
					break
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/record")
	})
	b.Run("messages", func(b *testing.B) {
		dec, _ := NewDecoder(bytes.NewReader(nil), ChangelogJSON, sc)
		for b.Loop() {
			for _, m := range msgs {
				if _, _, err := dec.DecodeMessage(m); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/record")
	})
}

// BenchmarkDebeziumAvroVsJSON decodes the same Debezium feed (an orders
// table: long key, strings, a decimal, timestamps, a date; creates,
// updates with before images, deletes) as Kafka messages in debezium-json
// (without a schema envelope) and in debezium-avro, in the same run, and
// reports each one's records/s and their ratio avro/json.
func BenchmarkDebeziumAvroVsJSON(b *testing.B) {
	table := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "order_id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "customer", Type: iceberg.StringType{}},
		iceberg.NestedField{ID: 3, Name: "status", Type: iceberg.StringType{}, Required: true},
		iceberg.NestedField{ID: 4, Name: "amount", Type: iceberg.DecimalTypeOf(10, 2)},
		iceberg.NestedField{ID: 5, Name: "updated_at", Type: iceberg.TimestampTzType{}, Required: true},
		iceberg.NestedField{ID: 6, Name: "placed", Type: iceberg.DateType{}},
		iceberg.NestedField{ID: 7, Name: "shipped_at", Type: iceberg.TimestampType{}},
	)
	reg := mapSchemas{}
	register(b, reg, table, 1)
	jenc, _ := NewEncoder(table)
	aenc, _ := NewAvroEncoder(table, testSource)
	r := rand.New(rand.NewPCG(9, 9))
	var jmsgs, amsgs [][]byte
	for i := range 20000 {
		row := func() []any {
			return []any{int64(i % 5000), fmt.Sprintf("customer-%d", r.IntN(1000)), []string{"new", "paid", "shipped"}[r.IntN(3)],
				decimal128.FromI64(r.Int64N(1e8)), 1_700_000_000_000_000 + r.Int64N(1e13), int32(19000 + r.IntN(1000)), 1_700_000_000_000_000 + r.Int64N(1e13)}
		}
		var before, after []any
		switch i % 4 {
		case 0, 1:
			after = row()
		case 2:
			before, after = row(), row()
		case 3:
			before = row()
		}
		j, err := jenc.AppendDebeziumJSON(nil, before, after)
		if err != nil {
			b.Fatal(err)
		}
		a, err := aenc.AppendDebeziumAvro(nil, 1, before, after)
		if err != nil {
			b.Fatal(err)
		}
		jmsgs, amsgs = append(jmsgs, j), append(amsgs, a)
	}
	jdec, _ := NewDecoder(strings.NewReader(""), DebeziumJSON, table)
	adec, err := NewAvroDecoder(table, reg)
	if err != nil {
		b.Fatal(err)
	}
	decode := func(msgs [][]byte, dec interface {
		DecodeKeyedMessage(key, msg []byte) (Record, bool, error)
	}) time.Duration {
		start := time.Now()
		for _, m := range msgs {
			if _, _, err := dec.DecodeKeyedMessage(nil, m); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	var tj, ta time.Duration
	for b.Loop() {
		tj += decode(jmsgs, jdec)
		ta += decode(amsgs, adec)
	}
	n := float64(b.N * len(jmsgs))
	b.ReportMetric(n/tj.Seconds(), "json-records/s")
	b.ReportMetric(n/ta.Seconds(), "avro-records/s")
	b.ReportMetric(tj.Seconds()/ta.Seconds(), "avro/json")
}
