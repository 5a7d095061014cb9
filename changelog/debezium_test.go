package changelog

import (
	"encoding/base64"
	"errors"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/deltawriter"
)

// debeziumSchema is a table as a Debezium MySQL source maps onto it:
// a decimal(10,2), a DATETIME(3), a DATETIME(6), a TIME(6), a TIMESTAMP.
func debeziumSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "price", Type: iceberg.DecimalTypeOf(10, 2)},
		iceberg.NestedField{ID: 3, Name: "created", Type: iceberg.TimestampType{}},
		iceberg.NestedField{ID: 4, Name: "updated", Type: iceberg.TimestampType{}},
		iceberg.NestedField{ID: 5, Name: "at", Type: iceberg.TimeType{}},
		iceberg.NestedField{ID: 6, Name: "zoned", Type: iceberg.TimestampTzType{}},
		iceberg.NestedField{ID: 7, Name: "nanos", Type: iceberg.TimestampType{}},
	)
}

// connectSchema is the JsonConverter's schema (schemas.enable=true) of
// debeziumSchema's events, with the price at scale.
func connectSchema(scale string) string {
	row := `{"type":"struct","optional":true,"fields":[` +
		`{"type":"int64","optional":false,"field":"id"},` +
		`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"` + scale + `","connect.decimal.precision":"10"},"field":"price"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"created"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"updated"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"at"},` +
		`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"zoned"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.NanoTimestamp","version":1,"field":"nanos"}]`
	return `{"type":"struct","fields":[` + row + `,"field":"before"},` + row + `,"field":"after"},` +
		`{"type":"struct","fields":[],"optional":false,"name":"io.debezium.connector.mysql.Source","field":"source"},` +
		`{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"db.inv.t.Envelope"}`
}

// unscaled spells v as Debezium's precise decimal: base64 of the
// big-endian two's-complement bytes.
func unscaled(v int64) string {
	b := big.NewInt(v).Bytes()
	if v < 0 {
		n := len(big.NewInt(-v).Bytes()) + 1
		m := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(8*n)), big.NewInt(v))
		b = m.Bytes()
	} else if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// Debezium's default encodings, named by the event's Kafka Connect schema:
// precise decimals (base64, scale from the schema), epoch milli-, micro-
// and nanosecond timestamps, microsecond times, zoned timestamps as
// strings. Before, every one of these integer and base64 values was
// refused.
func TestDebeziumConnectSchema(t *testing.T) {
	const createdMs = 1_700_000_000_123
	ts := time.Date(2023, 11, 14, 22, 13, 20, 123_000_000, time.UTC).UnixMicro()
	after := func(price string) string {
		return `{"id":1,"price":"` + price + `","created":1700000000123,"updated":1700000000123456,"at":3723000001,` +
			`"zoned":"2023-11-14T22:13:20.5+01:00","nanos":1700000000123456000}`
	}
	// The first line has its schema after the payload: it is decoded
	// again with it.
	input := `{"payload":{"op":"c","after":` + after(unscaled(-12345)) + `},"schema":` + connectSchema("2") + `}` + "\n" +
		`{"schema":` + connectSchema("2") + `,"payload":{"op":"c","before":null,"after":` + after(unscaled(99)) + `}}` + "\n" +
		// a schema with another scale: 1.5 at scale 1 is 150 at scale 2
		`{"schema":` + connectSchema("1") + `,"payload":{"op":"c","after":` + after(unscaled(15)) + `}}` + "\n" +
		`null` + "\n" + `{"schema":` + connectSchema("2") + `,"payload":null}` + "\n"
	recs, err := decodeAll(t, DebeziumJSON, debeziumSchema(), input)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3 (tombstones skipped)", len(recs))
	}
	zoned := time.Date(2023, 11, 14, 21, 13, 20, 500_000_000, time.UTC).UnixMicro()
	for i, price := range []int64{-12345, 99, 150} {
		want := []any{int64(1), decimal128.FromI64(price), int64(createdMs * 1000), ts + 456, int64(3723000001), zoned, ts + 456}
		if got := recs[i].Changes[0].Row; !sameRow(got, want) {
			t.Errorf("record %d: %v, want %v", i, got, want)
		}
	}
	// A line without a schema after lines with one is spelled by the
	// options again (here: none, so the integer timestamp is refused).
	_, err = decodeAll(t, DebeziumJSON, debeziumSchema(), input+`{"op":"c","after":{"id":2,"created":1700000000123}}`+"\n")
	if le := lineErr(t, err); le.Line != 6 || le.Field != "created" || !errors.Is(err, ErrType) {
		t.Fatalf("a line without a schema: got %v, want a type error on line 6, field created", err)
	}
}

// Without a schema in the events, the options say how values are spelled;
// without the options the ambiguous spellings are refused as before.
func TestDebeziumOptions(t *testing.T) {
	line := `{"op":"c","after":{"id":1,"price":"` + unscaled(250) + `","created":1700000000123,"at":1000}}` + "\n"
	d, err := NewDecoder(strings.NewReader(line), DebeziumJSON, debeziumSchema(),
		WithDebezium(DebeziumOptions{DecimalBase64: true, TimeUnit: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.Next()
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(1), decimal128.FromI64(250), int64(1700000000123000), nil, int64(1000_000), nil, nil}
	if !sameRow(rec.Changes[0].Row, want) {
		t.Fatalf("%v, want %v", rec.Changes[0].Row, want)
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatal(err)
	}
	if _, err := decodeAll(t, DebeziumJSON, debeziumSchema(), line); !errors.Is(err, ErrType) {
		t.Fatalf("without options: got %v, want ErrType", err)
	}
	if _, err := NewDecoder(strings.NewReader(""), DebeziumJSON, debeziumSchema(), WithDebezium(DebeziumOptions{TimeUnit: time.Second})); err == nil {
		t.Fatal("a time unit of 1s was accepted")
	}
}

// Values the encodings cannot hold exactly are errors naming the column:
// a decimal needing rounding, sub-microsecond nanoseconds, a time of day
// out of range, a variable-scale decimal, a truncate.
func TestDebeziumEncodingErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		line  string
		field string
		kind  error
	}{
		"rounding":        {`{"schema":` + connectSchema("3") + `,"payload":{"op":"c","after":{"id":1,"price":"` + unscaled(12345) + `"}}}`, "price", ErrRange},
		"sub-microsecond": {`{"schema":` + connectSchema("2") + `,"payload":{"op":"c","after":{"id":1,"nanos":1700000000123456789}}}`, "nanos", ErrRange},
		"time of day":     {`{"schema":` + connectSchema("2") + `,"payload":{"op":"c","after":{"id":1,"at":86400000000}}}`, "at", ErrRange},
		"bad base64":      {`{"schema":` + connectSchema("2") + `,"payload":{"op":"c","after":{"id":1,"price":"1.5"}}}`, "price", ErrType},
		"variable scale":  {`{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"struct","name":"io.debezium.data.VariableScaleDecimal","field":"price"}],"field":"after"}]},"payload":{"op":"c","after":{"id":1,"price":{"scale":2,"value":"AQ=="}}}}`, "price", ErrUnsupported},
		"truncate":        {`{"schema":` + connectSchema("2") + `,"payload":{"op":"t"}}`, "op", ErrUnsupported},
	} {
		_, err := decodeAll(t, DebeziumJSON, debeziumSchema(), tc.line+"\n")
		le := lineErr(t, err)
		if le.Field != tc.field || !errors.Is(err, tc.kind) {
			t.Errorf("%s: got %v (field %q), want a %v error on field %q", name, err, le.Field, tc.kind, tc.field)
		}
	}
}

// A Debezium delete whose before image is null deletes the row its record
// key names (a plain key object or a schema envelope); without a key it is
// refused, and a bad key is named.
func TestDebeziumDeleteByRecordKey(t *testing.T) {
	dec, err := NewDecoder(strings.NewReader(""), DebeziumJSON, compositeSchema())
	if err != nil {
		t.Fatal(err)
	}
	del := []byte(`{"before":null,"after":null,"op":"d"}`)
	for _, key := range []string{
		`{"tenant":"acme","id":7}`,
		`{"schema":{"type":"struct","fields":[{"type":"string","field":"tenant"},{"type":"int64","field":"id"}]},"payload":{"id":7,"tenant":"acme"}}`,
	} {
		rec, skip, err := dec.DecodeKeyedMessage([]byte(key), del)
		if err != nil || skip {
			t.Fatalf("key %s: skip %v, err %v", key, skip, err)
		}
		if len(rec.Changes) != 1 || rec.Changes[0].Op != deltawriter.Delete || !sameRow(rec.Changes[0].Row, []any{"acme", int64(7), nil}) {
			t.Fatalf("key %s: got %+v", key, rec.Changes)
		}
	}
	// A before image wins over the key.
	rec, _, err := dec.DecodeKeyedMessage([]byte(`{"tenant":"acme","id":7}`), []byte(`{"before":{"tenant":"b","id":8},"op":"d"}`))
	if err != nil || !sameRow(rec.Changes[0].Row, []any{"b", int64(8), nil}) {
		t.Fatalf("before and key: %+v, %v", rec.Changes, err)
	}
	for _, c := range []struct{ key, field, want string }{
		{``, "before", "needs a non-null before"},
		{`{"id":7}`, "tenant", "in key: key column is missing"},
		{`{"tenant":"acme","id":7,"zz":1}`, "zz", "no such column"},
		{`7`, "key", "must be an object"},
		{`null`, "key", "record key is null"},
		{`{"tenant":"acme","id":7} x`, "key", "after the top-level value"},
	} {
		_, _, err := dec.DecodeKeyedMessage([]byte(c.key), del)
		var me *MessageError
		if !errors.As(err, &me) || me.Field != c.field || !strings.Contains(err.Error(), c.want) {
			t.Errorf("key %q: got %v, want field %q and %q", c.key, err, c.field, c.want)
		}
	}
	// Other messages leave the key unused.
	rec, _, err = dec.DecodeKeyedMessage([]byte(`garbage`), []byte(`{"op":"c","after":{"tenant":"a","id":1,"v":"x"}}`))
	if err != nil || rec.Changes[0].Op != deltawriter.Insert {
		t.Fatalf("insert with a key: %+v, %v", rec.Changes, err)
	}
}
