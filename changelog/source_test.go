package changelog

import (
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
)

// TestSourceOf: the table an event comes from, read from the source
// block of Debezium JSON (with and without its schema envelope, MySQL's
// without a schema) and of Debezium Avro; an event without one, or not
// JSON, is an error saying so.
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  DebeziumSource
	}{
		{`{"schema":{},"payload":{"before":null,"after":{"id":1},"source":{"name":"srv","db":"shop","schema":"public","table":"orders"},"op":"c"}}`,
			DebeziumSource{Server: "srv", DB: "shop", Schema: "public", Table: "orders"}},
		{`{"before":null,"after":{"id":1},"source":{"name":"mysql1","db":"inventory","table":"customers","schema":null},"op":"c"}`,
			DebeziumSource{Server: "mysql1", DB: "inventory", Table: "customers"}},
	} {
		got, err := SourceOfJSON([]byte(tc.value))
		if err != nil || got != tc.want {
			t.Errorf("SourceOfJSON(%s) = %+v, %v; want %+v", tc.value, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{"payload":{"after":{"id":1}}}`, `{"payload":`} {
		if _, err := SourceOfJSON([]byte(bad)); err == nil || !strings.Contains(err.Error(), "source block") {
			t.Errorf("SourceOfJSON(%s): %v, want an error naming the source block", bad, err)
		}
	}

	sch := iceberg.NewSchemaWithIdentifiers(1, []int{1}, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	src := DebeziumSource{Server: "srv", DB: "shop", Schema: "public", Table: "orders"}
	value, _, err := DebeziumAvroSchema(sch, src)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewAvroEncoder(sch, src)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := enc.AppendDebeziumAvro(nil, 7, nil, []any{int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := SourceOfAvro(value, ev[5:]); err != nil || got != src {
		t.Errorf("SourceOfAvro = %+v, %v; want %+v", got, err, src)
	}
	if _, err := SourceOfAvro(`{"type":"record","name":"E","fields":[{"name":"op","type":"string"}]}`, []byte{2, 'c'}); err == nil || !strings.Contains(err.Error(), "source block") {
		t.Errorf("an Avro event without a source block: %v", err)
	}
}
