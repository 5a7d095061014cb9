package changelog

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/hamba/avro/v2"

	"github.com/icesink/icesink/deltawriter"
)

// mapSchemas is a registry held in a map; kafka's tests run the decoder
// against an in-process registry over HTTP.
type mapSchemas map[int]string

func (m mapSchemas) Schema(_ context.Context, id int) (string, error) {
	s, ok := m[id]
	if !ok {
		return "", fmt.Errorf("id %d: %w", id, ErrUnknownSchema)
	}
	return s, nil
}

var testSource = DebeziumSource{Server: "srv", DB: "shop", Schema: "public", Table: "t"}

// register adds the value and key schemas of schema to reg under ids
// base and base+1.
func register(t testing.TB, reg mapSchemas, schema *iceberg.Schema, base int) {
	t.Helper()
	v, k, err := DebeziumAvroSchema(schema, testSource)
	if err != nil {
		t.Fatal(err)
	}
	reg[base], reg[base+1] = v, k
}

// randEvent returns random before and after images (a create, an update
// or a delete) and the changes they decode to. Required columns are set in
// before images too (Avro has no null for them).
func randEvent(r *rand.Rand, p *plan) (before, after []any, want []deltawriter.Change) {
	switch r.IntN(3) {
	case 0:
		after = randRow(r, p, true)
		return nil, after, []deltawriter.Change{{Op: deltawriter.Insert, Row: after}}
	case 1:
		before, after = randRow(r, p, true), randRow(r, p, true)
		return before, after, []deltawriter.Change{{Op: deltawriter.UpdateBefore, Row: before}, {Op: deltawriter.UpdateAfter, Row: after}}
	}
	before = randRow(r, p, true)
	return before, nil, []deltawriter.Change{{Op: deltawriter.Delete, Row: before}}
}

// TestAvroMatchesJSON decodes the same random Debezium events written in
// Avro and in JSON; the changes must be equal, value for value, across a
// change of the events' schema (a column the first schema lacks, an int
// widened to a long).
func TestAvroMatchesJSON(t *testing.T) {
	table := allTypesSchema()
	// The source's first schema: no "l" column, "i" an int; the second
	// has every column.
	var older []iceberg.NestedField
	for _, f := range table.Fields() {
		if f.Name != "l" {
			older = append(older, f)
		}
	}
	oldSchema := iceberg.NewSchemaWithIdentifiers(0, table.IdentifierFieldIDs, older...)
	reg := mapSchemas{}
	register(t, reg, oldSchema, 10)
	register(t, reg, table, 20)

	jsonEnc, _ := NewEncoder(table)
	oldAvro, err := NewAvroEncoder(oldSchema, testSource)
	if err != nil {
		t.Fatal(err)
	}
	newAvro, _ := NewAvroEncoder(table, testSource)
	dec, err := NewAvroDecoder(table, reg)
	if err != nil {
		t.Fatal(err)
	}
	jdec, _ := NewDecoder(strings.NewReader(""), DebeziumJSON, table)
	r := rand.New(rand.NewPCG(5, 6))
	lIdx := colIndex(t, table, "l")
	for i := range 3000 {
		enc, id := newAvro, 20
		before, after, want := randEvent(r, jsonEnc.plan)
		if i < 1500 {
			enc, id = oldAvro, 10
			for _, img := range [][]any{before, after} {
				if img != nil {
					img[lIdx] = nil
				}
			}
		}
		drop := func(img []any) []any {
			if img == nil || id == 20 {
				return img
			}
			return append(append([]any{}, img[:lIdx]...), img[lIdx+1:]...)
		}
		msg, err := enc.AppendDebeziumAvro(nil, id, drop(before), drop(after))
		if err != nil {
			t.Fatal(err)
		}
		line, err := jsonEnc.AppendDebeziumJSON(nil, before, after)
		if err != nil {
			t.Fatal(err)
		}
		got, skip, err := dec.DecodeKeyedMessage(nil, msg)
		if err != nil || skip {
			t.Fatalf("event %d (schema %d): %v (skip %v)", i, id, err, skip)
		}
		fromJSON, _, err := jdec.DecodeMessage(line)
		if err != nil {
			t.Fatalf("event %d: JSON: %v", i, err)
		}
		if len(got.Changes) != len(want) || len(fromJSON.Changes) != len(want) {
			t.Fatalf("event %d: %d Avro and %d JSON changes, want %d", i, len(got.Changes), len(fromJSON.Changes), len(want))
		}
		for j := range want {
			g, js := got.Changes[j], fromJSON.Changes[j]
			if g.Op != js.Op || !sameRow(g.Row, js.Row) || !sameRow(g.Row, want[j].Row) {
				t.Fatalf("event %d change %d:\n Avro %v %#v\n JSON %v %#v\n want %#v", i, j, g.Op, g.Row, js.Op, js.Row, want[j].Row)
			}
		}
	}
}

// TestAvroFromHamba decodes an event marshalled by hamba/avro from Go
// values, under a schema spelled with Avro logical types (no Kafka Connect
// names), as other producers than Debezium write it.
func TestAvroFromHamba(t *testing.T) {
	table := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "price", Type: iceberg.DecimalTypeOf(10, 3)},
		iceberg.NestedField{ID: 3, Name: "day", Type: iceberg.DateType{}},
		iceberg.NestedField{ID: 4, Name: "at", Type: iceberg.TimestampTzType{}},
		iceberg.NestedField{ID: 5, Name: "ms", Type: iceberg.TimestampType{}},
		iceberg.NestedField{ID: 6, Name: "state", Type: iceberg.StringType{}},
	)
	const schema = `{"type":"record","name":"Envelope","namespace":"x","fields":[
	 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
	   {"name":"id","type":"long"},
	   {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
	   {"name":"day","type":{"type":"int","logicalType":"date"}},
	   {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
	   {"name":"ms","type":{"type":"long","logicalType":"timestamp-millis"}},
	   {"name":"state","type":{"type":"enum","name":"State","symbols":["NEW","PAID"]}}]}],"default":null},
	 {"name":"after","type":["null","Value"],"default":null},
	 {"name":"op","type":"string"}]}`
	at := time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.UTC)
	row := map[string]any{
		"id": int64(7), "price": big.NewRat(-12345, 100), "day": time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC),
		"at": at, "ms": at.Truncate(time.Millisecond), "state": "PAID",
	}
	body, err := avro.Marshal(avro.MustParse(schema), map[string]any{"before": nil, "after": map[string]any{"x.Value": row}, "op": "c"})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := NewAvroDecoder(table, mapSchemas{3: schema})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := dec.DecodeKeyedMessage(nil, appendWire(nil, 3, body))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(7), decimal128.FromI64(-123450), int32(-1), at.UnixMicro(), at.Truncate(time.Millisecond).UnixMicro(), "PAID"}
	if len(got.Changes) != 1 || got.Changes[0].Op != deltawriter.Insert || !sameRow(got.Changes[0].Row, want) {
		t.Fatalf("got %v, want +I %v", got.Changes, want)
	}
}

type downRegistry struct{}

func (downRegistry) Schema(context.Context, int) (string, error) {
	return "", errors.New("connection refused")
}

func TestAvroErrors(t *testing.T) {
	table := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "price", Type: iceberg.DecimalTypeOf(5, 1)},
	)
	wider := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "price", Type: iceberg.DecimalTypeOf(5, 2)},
		iceberg.NestedField{ID: 3, Name: "extra", Type: iceberg.StringType{}},
	)
	reg := mapSchemas{}
	register(t, reg, table, 1)
	register(t, reg, wider, 3)
	enc, _ := NewAvroEncoder(table, testSource)
	wenc, _ := NewAvroEncoder(wider, testSource)
	dec, err := NewAvroDecoder(table, reg)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := enc.AppendDebeziumAvro(nil, 1, nil, []any{int64(1), decimal128.FromI64(15)})
	extra, _ := wenc.AppendDebeziumAvro(nil, 3, nil, []any{int64(1), decimal128.FromI64(155), nil})

	// A delete with a null before takes its row from the record key.
	key, _ := enc.AppendKeyAvro(nil, 2, []any{int64(9), nil})
	var bodyless []byte
	bodyless = append(bodyless, good[:5]...)
	bodyless = append(bodyless, 0, 0) // before null, after null; the rest missing

	for _, tc := range []struct {
		name, key, msg string
		kind           error
		field, text    string
	}{
		{name: "not wire format", msg: "{\"op\":\"c\"}", kind: ErrRecord, text: "wire format"},
		{name: "unknown id", msg: string(appendWire(nil, 99, []byte{0})), kind: ErrUnknownSchema, text: "schema id 99"},
		{name: "field not a column", msg: string(extra), kind: ErrUnknownColumn, field: "extra", text: "in after"},
		{name: "truncated", msg: string(bodyless), kind: ErrRecord, text: "does not match schema id 1"},
		{name: "key not wire format", key: "7", msg: string(mustDelete(t, enc)), kind: ErrRecord, field: "key"},
	} {
		_, _, err := dec.DecodeKeyedMessage([]byte(tc.key), []byte(tc.msg))
		var me *MessageError
		if !errors.As(err, &me) || !errors.Is(err, tc.kind) || me.Field != tc.field || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: got %v (field %q), want a %v in field %q mentioning %q", tc.name, err, fieldOf(me), tc.kind, tc.field, tc.text)
		}
	}
	if rec, _, err := dec.DecodeKeyedMessage(key, mustDelete(t, enc)); err != nil || len(rec.Changes) != 1 ||
		rec.Changes[0].Op != deltawriter.Delete || rec.Changes[0].Row[0] != int64(9) {
		t.Errorf("delete by key: %v %v", rec.Changes, err)
	}
	// A value that would need rounding names the column and the image.
	narrow := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "price", Type: iceberg.DecimalTypeOf(5, 2)},
	)
	register(t, reg, narrow, 5)
	nenc, _ := NewAvroEncoder(narrow, testSource)
	msg, _ := nenc.AppendDebeziumAvro(nil, 5, nil, []any{int64(1), decimal128.FromI64(155)})
	_, _, err = dec.DecodeKeyedMessage(nil, msg)
	if !errors.Is(err, ErrRange) || !strings.Contains(err.Error(), `field "price": in after: "155e-2" would need rounding`) {
		t.Errorf("rounding: %v", err)
	}

	// A registry that cannot be reached is not the message's fault.
	down, _ := NewAvroDecoder(table, downRegistry{})
	_, _, err = down.DecodeKeyedMessage(nil, good)
	var me *MessageError
	if err == nil || errors.As(err, &me) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("registry down: got %v, want a plain error", err)
	}
}

// mustDelete is a delete event of table (id, price) without a before image.
func mustDelete(t *testing.T, enc *AvroEncoder) []byte {
	t.Helper()
	// AppendDebeziumAvro needs an image; write a delete by hand: before
	// null, after null, source, op "d".
	full, err := enc.AppendDebeziumAvro(nil, 1, []any{int64(1), nil}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := avro.NewWriter(nil, 64)
	w.WriteLong(0)
	w.WriteLong(0)
	// The rest of the event after the two images: skip the before row in
	// full (union branch, id, null price) and keep what follows.
	rest := full[5+1+1+1+1:]
	return appendWire(nil, 1, append(w.Buffer(), rest...))
}

func fieldOf(me *MessageError) string {
	if me == nil {
		return ""
	}
	return me.Field
}

// TestSchemaFromDebeziumAvro: the schema derived from the Avro schemas
// of a table's events is the table's own schema (the encoder writes them
// from it), and unsupported shapes are refused with the column named.
func TestSchemaFromDebeziumAvro(t *testing.T) {
	table := allTypesSchema()
	v, k, err := DebeziumAvroSchema(table, testSource)
	if err != nil {
		t.Fatal(err)
	}
	got, err := SchemaFromDebeziumAvro(v, k)
	if err != nil {
		t.Fatal(err)
	}
	// Fixed columns travel as Avro bytes (as Debezium sends BINARY(n)).
	var want []iceberg.NestedField
	for _, f := range table.Fields() {
		if f.Name == "fx" {
			f.Type = iceberg.BinaryType{}
		}
		want = append(want, f)
	}
	if w := iceberg.NewSchemaWithIdentifiers(0, table.IdentifierFieldIDs, want...); !got.Equals(w) || !slices.Equal(got.IdentifierFieldIDs, w.IdentifierFieldIDs) {
		t.Fatalf("derived\n%v\nwant\n%v", got, w)
	}
	const env = `{"type":"record","name":"E","fields":[{"name":"op","type":"string"},
	  {"name":"after","type":["null",{"type":"record","name":"V","fields":[{"name":"id","type":"long"},%s]}]}]}`
	const key = `{"type":"record","name":"K","fields":[{"name":"id","type":"long"}]}`
	for col, msg := range map[string]string{
		`{"name":"tags","type":{"type":"array","items":"string"}}`: `column "tags": an Avro array has no column type`,
		`{"name":"x","type":{"type":"record","name":"io.debezium.data.VariableScaleDecimal","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.name":"io.debezium.data.VariableScaleDecimal"}}`: `column "x": io.debezium.data.VariableScaleDecimal`,
		`{"name":"u","type":["null","int","string"]}`: `column "u": a union of 3 types`,
	} {
		if _, err := SchemaFromDebeziumAvro(fmt.Sprintf(env, col), key); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", col, err, msg)
		}
	}
	if _, err := SchemaFromDebeziumAvro(fmt.Sprintf(env, `{"name":"v","type":"int"}`), `{"type":"record","name":"K","fields":[{"name":"nope","type":"long"}]}`); err == nil || !strings.Contains(err.Error(), `key column "nope" is not a column`) {
		t.Errorf("a key field not in the value: %v", err)
	}
}

// TestAvroRecordSize: one record-size limit for every format: an Avro
// string over hamba/avro's own 1 MiB default decodes, as JSON's would, and
// a message over SetMaxRecordSize is a bad message naming the limit.
func TestAvroRecordSize(t *testing.T) {
	table := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "doc", Type: iceberg.StringType{}},
		iceberg.NestedField{ID: 3, Name: "blob", Type: iceberg.BinaryType{}},
	)
	reg := mapSchemas{}
	register(t, reg, table, 1)
	enc, _ := NewAvroEncoder(table, testSource)
	dec, err := NewAvroDecoder(table, reg)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Repeat("x", 3<<20)
	blob := []byte(strings.Repeat("y", 2<<20))
	msg, err := enc.AppendDebeziumAvro(nil, 1, nil, []any{int64(1), doc, blob})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := dec.DecodeKeyedMessage(nil, msg)
	if err != nil || len(rec.Changes) != 1 || rec.Changes[0].Row[1] != doc || string(rec.Changes[0].Row[2].([]byte)) != string(blob) {
		t.Fatalf("a 3 MiB string and 2 MiB bytes: %v", err)
	}
	dec.SetMaxRecordSize(1 << 20)
	_, _, err = dec.DecodeKeyedMessage(nil, msg)
	var me *MessageError
	if !errors.As(err, &me) || !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), "maximum record size 1048576") {
		t.Errorf("over the limit: %v, want a bad message naming the limit", err)
	}
}

// TestAvroCraftedBlockCount: an array block counting 2^62 items over a
// body of a few bytes is refused at once; walking the count item by item
// never ended.
func TestAvroCraftedBlockCount(t *testing.T) {
	table := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
	)
	reg := mapSchemas{1: `{"type":"record","name":"Envelope","namespace":"x","fields":[
		{"name":"junk","type":{"type":"array","items":"long"}},
		{"name":"nulls","type":{"type":"array","items":"null"}},
		{"name":"op","type":"string"},
		{"name":"after","type":{"type":"record","name":"Row","fields":[{"name":"id","type":"long"}]}}]}`}
	dec, err := NewAvroDecoder(table, reg)
	if err != nil {
		t.Fatal(err)
	}
	zigzag := func(b []byte, v int64) []byte {
		u := uint64(v<<1) ^ uint64(v>>63)
		for u >= 0x80 {
			b = append(b, byte(u)|0x80)
			u >>= 7
		}
		return append(b, byte(u))
	}
	// A legitimate body: 3 nulls in the second array, op "c", id 7.
	ok := zigzag(zigzag(zigzag(zigzag(nil, 0), 3), 0), 1)
	ok = zigzag(append(ok, 'c'), 7)
	crafted := zigzag(zigzag(nil, 1<<62), 2)
	// 2^62 nulls take no bytes: a valid body, decoded without a walk.
	manyNulls := zigzag(zigzag(zigzag(zigzag(nil, 0), 1<<62), 0), 1)
	manyNulls = zigzag(append(manyNulls, 'c'), 7)
	for _, tc := range []struct {
		name string
		body []byte
		bad  bool
	}{{"nulls", ok, false}, {"2^62 nulls", manyNulls, false}, {"crafted count", crafted, true}} {
		done := make(chan error, 1)
		go func() {
			_, _, err := dec.DecodeKeyedMessage(nil, appendWire(nil, 1, tc.body))
			done <- err
		}()
		select {
		case err := <-done:
			var me *MessageError
			if tc.bad != (err != nil) || (tc.bad && !errors.As(err, &me)) {
				t.Errorf("%s: %v", tc.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the decoder still runs after 10 s", tc.name)
		}
	}
}
