package changelog

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
)

// TestJSONEvolution: with WithEvolution, a line whose Connect schema adds
// a column and widens another is refused with a *SchemaChangeError naming
// both, and decoded again (same line number) after SetSchema; a line of
// the old schema then decodes into the new one. Without it, the new
// column is a bad line.
func TestJSONEvolution(t *testing.T) {
	old := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "qty", Type: iceberg.Int32Type{}, Required: true},
	)
	evolved := iceberg.NewSchemaWithIdentifiers(1, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "qty", Type: iceberg.Int64Type{}},
		iceberg.NestedField{ID: 3, Name: "note", Type: iceberg.StringType{}},
	)
	env := func(fields, after string) string {
		return `{"schema":{"type":"struct","fields":[{"type":"struct","optional":true,"field":"after","fields":[` + fields +
			`]},{"type":"string","field":"op"}]},"payload":{"before":null,"after":` + after + `,"op":"c"}}`
	}
	v1 := `{"type":"int64","field":"id"},{"type":"int32","field":"qty"}`
	v2 := `{"type":"int64","field":"id"},{"type":"int64","optional":true,"field":"qty"},{"type":"string","optional":true,"field":"note"}`
	input := env(v1, `{"id":1,"qty":5}`) + "\n" + env(v2, `{"id":2,"qty":5000000000,"note":"n"}`) + "\n" + env(v1, `{"id":3,"qty":7}`) + "\n"

	d, err := NewDecoder(strings.NewReader(input), DebeziumJSON, old, WithEvolution())
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := d.Next(); err != nil || rec.Changes[0].Row[1] != int32(5) {
		t.Fatalf("line 1: %v %v", rec, err)
	}
	_, err = d.Next()
	var sc *SchemaChangeError
	var le *LineError
	if !errors.As(err, &sc) || !errors.As(err, &le) || le.Line != 2 || len(sc.Columns) != 2 ||
		sc.Columns[0].Name != "qty" || !sc.Columns[0].Type.Equals(iceberg.Int64Type{}) || sc.Columns[0].Required ||
		sc.Columns[1].Name != "note" || sc.Columns[1].Required {
		t.Fatalf("line 2: %v, want a schema change of qty (long, optional) and note at line 2", err)
	}
	if err := d.SetSchema(evolved); err != nil {
		t.Fatal(err)
	}
	rec, err := d.Next()
	if err != nil || rec.Line != 2 || !sameRow(rec.Changes[0].Row, []any{int64(2), int64(5000000000), "n"}) {
		t.Fatalf("line 2 again: %+v %v", rec, err)
	}
	rec, err = d.Next()
	if err != nil || rec.Line != 3 || !sameRow(rec.Changes[0].Row, []any{int64(3), int64(7), nil}) {
		t.Fatalf("line 3 (the old schema): %+v %v", rec, err)
	}

	plain, _ := NewDecoder(strings.NewReader(input), DebeziumJSON, old)
	plain.Next()
	if _, err := plain.Next(); !errors.Is(err, ErrRange) {
		t.Fatalf("without evolution: %v, want qty out of range", err)
	}
}

// TestAvroEvolution: the same with Avro records: a schema id whose record
// adds a column and widens a decimal is reported; after SetSchema the
// record decodes; without evolution the added field is a bad record.
func TestAvroEvolution(t *testing.T) {
	old := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "price", Type: iceberg.DecimalTypeOf(6, 2)},
	)
	newer := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "price", Type: iceberg.DecimalTypeOf(12, 2)},
		iceberg.NestedField{ID: 3, Name: "tag", Type: iceberg.StringType{}},
	)
	reg := mapSchemas{}
	register(t, reg, newer, 7)
	enc, _ := NewAvroEncoder(newer, testSource)
	msg, err := enc.AppendDebeziumAvro(nil, 7, nil, []any{int64(1), decimal128.FromI64(123456789), "t"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewAvroDecoder(old, reg)
	if _, _, err := d.DecodeKeyedMessage(nil, msg); !errors.Is(err, ErrUnknownColumn) {
		t.Fatalf("without evolution: %v", err)
	}
	d.SetEvolution(true)
	_, _, err = d.DecodeKeyedMessage(nil, msg)
	var sc *SchemaChangeError
	var me *MessageError
	if !errors.As(err, &sc) || errors.As(err, &me) || len(sc.Columns) != 2 || !sc.Columns[0].Type.Equals(iceberg.DecimalTypeOf(12, 2)) || sc.Columns[1].Name != "tag" {
		t.Fatalf("with evolution: %v, want a schema change (not a bad record) of price and tag", err)
	}
	if err := d.SetSchema(newer); err != nil {
		t.Fatal(err)
	}
	rec, _, err := d.DecodeKeyedMessage(nil, msg)
	if err != nil || !sameRow(rec.Changes[0].Row, []any{int64(1), decimal128.FromI64(123456789), "t"}) {
		t.Fatalf("after SetSchema: %v %v", rec, err)
	}
}

// TestSchemaKeyColumns: named key columns replace the record key's schema
// (a source table without a primary key) and become required; a name
// that is no column is refused.
func TestSchemaKeyColumns(t *testing.T) {
	value := []byte(`{"schema":{"type":"struct","fields":[{"type":"struct","optional":true,"field":"after","fields":[
	  {"type":"string","optional":true,"field":"sku"},{"type":"int64","optional":true,"field":"qty"}]},{"type":"string","field":"op"}]},"payload":{}}`)
	if _, err := SchemaFromConnect(value, nil); err == nil || !strings.Contains(err.Error(), "name its key columns") {
		t.Fatalf("no key schema: %v", err)
	}
	s, err := SchemaFromConnect(value, nil, "sku")
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FindFieldByName("sku"); !f.Required || len(s.IdentifierFieldIDs) != 1 || s.IdentifierFieldIDs[0] != f.ID {
		t.Fatalf("schema %v: want sku the required key", s)
	}
	if _, err := SchemaFromConnect(value, nil, "nope"); err == nil || !strings.Contains(err.Error(), `key column "nope"`) {
		t.Fatalf("a key that is no column: %v", err)
	}
}

// TestDroppedColumnEvolution: events whose rows no longer carry a required
// non-key column of the table (dropped at the source) report it made
// optional, in JSON and Avro; after SetSchema they decode with a null.
// Before, every later event failed "required column is missing" and the
// table stopped for good (issue 46 item 9).
func TestDroppedColumnEvolution(t *testing.T) {
	table := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "qty", Type: iceberg.Int32Type{}, Required: true},
		iceberg.NestedField{ID: 3, Name: "note", Type: iceberg.StringType{}},
	)
	relaxed := iceberg.NewSchemaWithIdentifiers(1, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "qty", Type: iceberg.Int32Type{}},
		iceberg.NestedField{ID: 3, Name: "note", Type: iceberg.StringType{}},
	)
	wantDrop := func(t *testing.T, err error) {
		t.Helper()
		var sc *SchemaChangeError
		if !errors.As(err, &sc) || len(sc.Columns) != 1 || sc.Columns[0].Name != "qty" || sc.Columns[0].Required || !sc.Columns[0].Type.Equals(iceberg.Int32Type{}) {
			t.Fatalf("%v, want a schema change making qty optional", err)
		}
	}
	t.Run("json", func(t *testing.T) {
		line := `{"schema":{"type":"struct","fields":[{"type":"struct","optional":true,"field":"after","fields":[` +
			`{"type":"int64","field":"id"},{"type":"string","optional":true,"field":"note"}]},{"type":"string","field":"op"}]},` +
			`"payload":{"before":null,"after":{"id":1,"note":"n"},"op":"c"}}` + "\n"
		d, err := NewDecoder(strings.NewReader(line), DebeziumJSON, table, WithEvolution())
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Next()
		wantDrop(t, err)
		if err := d.SetSchema(relaxed); err != nil {
			t.Fatal(err)
		}
		rec, err := d.Next()
		if err != nil || !sameRow(rec.Changes[0].Row, []any{int64(1), nil, "n"}) {
			t.Fatalf("after SetSchema: %+v %v", rec, err)
		}
	})
	t.Run("avro", func(t *testing.T) {
		source := iceberg.NewSchemaWithIdentifiers(0, []int{1},
			iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
			iceberg.NestedField{ID: 3, Name: "note", Type: iceberg.StringType{}},
		)
		reg := mapSchemas{}
		register(t, reg, source, 7)
		enc, _ := NewAvroEncoder(source, testSource)
		msg, err := enc.AppendDebeziumAvro(nil, 7, nil, []any{int64(1), "n"})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := NewAvroDecoder(table, reg)
		d.SetEvolution(true)
		_, _, err = d.DecodeKeyedMessage(nil, msg)
		wantDrop(t, err)
		if err := d.SetSchema(relaxed); err != nil {
			t.Fatal(err)
		}
		rec, _, err := d.DecodeKeyedMessage(nil, msg)
		if err != nil || !sameRow(rec.Changes[0].Row, []any{int64(1), nil, "n"}) {
			t.Fatalf("after SetSchema: %v %v", rec, err)
		}
	})
}
