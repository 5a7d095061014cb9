package sink_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

var fuzzSchema = iceberg.NewSchemaWithIdentifiers(0, []int{1, 2},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "k", Type: iceberg.PrimitiveTypes.String, Required: true},
	iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.Int32},
	iceberg.NestedField{ID: 4, Name: "d", Type: iceberg.DecimalTypeOf(6, 2), Required: true},
)

// modelUpTo decodes input and applies its changes up to and including
// line n to a key -> row map.
func modelUpTo(t *testing.T, input []byte, format changelog.Format, n int64) map[string][]any {
	dec, err := changelog.NewDecoder(bytes.NewReader(input), format, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	kc, _ := deltawriter.NewKeyCodec(fuzzSchema)
	m := map[string][]any{}
	for {
		rec, err := dec.Next()
		if err != nil || rec.Line > n {
			return m
		}
		for _, ch := range rec.Changes {
			k, err := kc.Append(nil, ch.Row)
			if err != nil {
				t.Fatalf("the decoder passed a change without a key: %v", err)
			}
			if ch.Op.IsDelete() {
				delete(m, string(k))
			} else {
				m[string(k)] = ch.Row
			}
		}
	}
}

// fuzzSink runs input through the sink into a fresh table. The run either
// succeeds, or fails with a line-numbered error; either way the table
// equals the model of the input up to the committed position.
func fuzzSink(t *testing.T, input []byte, format changelog.Format) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	ident := table.Identifier{"db", "t"}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
		t.Fatal(err)
	}
	dec, err := changelog.NewDecoder(bytes.NewReader(input), format, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "fuzz", CheckpointRows: 3}
	res, err := sink.Run(ctx, cfg, dec)
	if err != nil {
		var le *changelog.LineError
		if !errors.As(err, &le) && !strings.HasPrefix(err.Error(), "line ") {
			t.Fatalf("run failed without naming a line: %v", err)
		}
	} else if res.Committed.Line != res.Line {
		t.Fatalf("a successful run committed up to line %d of %d", res.Committed.Line, res.Line)
	}
	want := modelUpTo(t, input, format, res.Committed.Line)
	tbl, err := wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	got := liveRows(t, ctx, tbl)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("table (committed up to line %d, err %v)\n%v\nwant\n%v", res.Committed.Line, err, got, want)
	}
}

func FuzzChangelogJSONSink(f *testing.F) {
	f.Add([]byte(`{"op":"+I","data":{"id":1,"k":"a","v":1,"d":"1.25"}}
{"op":"+U","data":{"id":1,"k":"a","v":2,"d":1.5}}
{"barrier":true}
{"op":"-D","data":{"id":1,"k":"a"}}
{"op":"+I","data":{"id":1,"k":"a","v":null,"d":"0"}}
{"op":"-U","data":{"id":2,"k":"b"}}
{"op":"+I","data":{"id":2,"k":"日本","d":"-9.99"}}`))
	f.Add([]byte(`{"op":"+I","data":{"id":1,"k":"a","d":"1"}}
{"op":"+I","data":{"id":1.0,"k":"a","d":"2"}}
{"op":"+I","data":{"id":1,"k":"a"}}`))
	f.Add([]byte(`{"op":"+I","data":{"id":3,"k":"x","d":"1"}}
{"op":"-D","data":{"id":3,"k":"x"}}
{"op":"-D","data":{"id":3,"k":"x"}}
{"op":"+U","data":{"id":3,"k":"x","d":"123.4"}}
{"op":"+I","data":{"id":3,"k":"x","d":"99999.99"}}
{"op":"+I","data":{"id":3,"k":"x","d":"1.001"}}`))
	f.Fuzz(func(t *testing.T, input []byte) { fuzzSink(t, input, changelog.ChangelogJSON) })
}

func FuzzDebeziumJSONSink(f *testing.F) {
	f.Add([]byte(`{"op":"c","after":{"id":1,"k":"a","v":1,"d":"1.25"}}
{"payload":{"op":"u","before":{"id":1,"k":"a","d":"1.25"},"after":{"id":1,"k":"a","v":2,"d":"2"}}}
{"barrier":true}
{"op":"r","after":{"id":2,"k":"b","d":"0"}}
null
{"op":"d","before":{"id":1,"k":"a","d":"0"}}
{"op":"u","before":null,"after":{"id":2,"k":"b","v":7,"d":"3"}}`))
	f.Add([]byte(`{"op":"c","after":{"id":1,"k":"a","d":"1"}}
{"op":"t"}`))
	f.Fuzz(func(t *testing.T, input []byte) { fuzzSink(t, input, changelog.DebeziumJSON) })
}

// liveRows reads tbl back through iceberg-go's scanner as a key -> row map,
// failing on a key read twice.
func liveRows(t *testing.T, ctx context.Context, tbl *table.Table) map[string][]any {
	t.Helper()
	kc, _ := deltawriter.NewKeyCodec(fuzzSchema)
	got := map[string][]any{}
	for row, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			t.Fatal(err)
		}
		k, _ := kc.Append(nil, row)
		if _, dup := got[string(k)]; dup {
			t.Fatalf("key %q read twice", k)
		}
		got[string(k)] = append([]any(nil), row...)
	}
	return got
}
