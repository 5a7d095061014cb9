package changelog

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
	"github.com/hamba/avro/v2"
)

// AvroEncoder writes Debezium change events in Avro, in the schema
// registry's wire format, as Debezium's AvroConverter writes them for a
// table of the encoder's schema (DebeziumAvroSchema): the counterpart of
// Encoder, used to generate test and benchmark streams. An AvroDecoder of
// the same Iceberg schema decodes them back to equal values.
type AvroEncoder struct {
	plan   *plan
	source DebeziumSource
	w      *avro.Writer
	tmp    []byte
}

// DebeziumSource names the table a Debezium event comes from, as its
// source block does.
type DebeziumSource struct {
	Server, DB, Schema, Table string
}

// NewAvroEncoder returns an encoder for rows of schema (which must meet
// NewDecoder's conditions), naming src in the events' source block.
func NewAvroEncoder(schema *iceberg.Schema, src DebeziumSource) (*AvroEncoder, error) {
	p, err := newPlan(schema)
	if err != nil {
		return nil, err
	}
	return &AvroEncoder{plan: p, source: src, w: avro.NewWriter(nil, 512)}, nil
}

// DebeziumAvroSchema returns the value (envelope) and key schemas, as JSON
// text to register, of the Debezium events of a table of schema from src:
// columns spelled as Debezium's defaults spell them (decimal.handling.mode
// precise, time.precision.mode adaptive_time_microseconds; timestamptz as
// io.debezium.time.ZonedTimestamp), optional columns as ["null", T].
func DebeziumAvroSchema(schema *iceberg.Schema, src DebeziumSource) (value, key string, err error) {
	p, err := newPlan(schema)
	if err != nil {
		return "", "", err
	}
	ns := src.Server + "." + src.DB + "." + src.Table
	row := func(name string, keyOnly bool) map[string]any {
		var fields []any
		for i := range p.cols {
			c := &p.cols[i]
			if keyOnly && !c.key {
				continue
			}
			var t any = avroType(c)
			f := map[string]any{"name": c.name, "type": t}
			if !c.required {
				f["type"], f["default"] = []any{"null", t}, nil
			}
			fields = append(fields, f)
		}
		return map[string]any{"type": "record", "name": name, "namespace": ns, "fields": fields, "connect.name": ns + "." + name}
	}
	env := map[string]any{
		"type": "record", "name": "Envelope", "namespace": ns, "connect.name": ns + ".Envelope",
		"fields": []any{
			map[string]any{"name": "before", "type": []any{"null", row("Value", false)}, "default": nil},
			map[string]any{"name": "after", "type": []any{"null", "Value"}, "default": nil},
			map[string]any{"name": "source", "type": map[string]any{
				"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
				"fields": []any{
					map[string]any{"name": "version", "type": "string"},
					map[string]any{"name": "connector", "type": "string"},
					map[string]any{"name": "name", "type": "string"},
					map[string]any{"name": "ts_ms", "type": "long"},
					map[string]any{"name": "db", "type": "string"},
					map[string]any{"name": "schema", "type": []any{"null", "string"}, "default": nil},
					map[string]any{"name": "table", "type": "string"},
				},
			}},
			map[string]any{"name": "op", "type": "string"},
			map[string]any{"name": "ts_ms", "type": []any{"null", "long"}, "default": nil},
			map[string]any{"name": "transaction", "type": []any{"null", map[string]any{
				"type": "record", "name": "block", "namespace": "event",
				"fields": []any{
					map[string]any{"name": "id", "type": "string"},
					map[string]any{"name": "total_order", "type": "long"},
					map[string]any{"name": "data_collection_order", "type": "long"},
				},
			}}, "default": nil},
		},
	}
	v, err := json.Marshal(env)
	if err != nil {
		return "", "", err
	}
	k, err := json.Marshal(row("Key", true))
	if err != nil {
		return "", "", err
	}
	return string(v), string(k), nil
}

// avroType is column c's Avro type as Debezium writes it.
func avroType(c *column) any {
	named := func(typ, name string) map[string]any {
		return map[string]any{"type": typ, "connect.version": 1, "connect.name": name}
	}
	switch c.kind {
	case kBool:
		return "boolean"
	case kInt:
		return "int"
	case kLong:
		return "long"
	case kFloat:
		return "float"
	case kDouble:
		return "double"
	case kDecimal:
		t := named("bytes", "org.apache.kafka.connect.data.Decimal")
		t["logicalType"], t["precision"], t["scale"] = "decimal", c.prec, c.scale
		t["connect.parameters"] = map[string]string{"scale": fmt.Sprint(c.scale), "connect.decimal.precision": fmt.Sprint(c.prec)}
		return t
	case kDate:
		return named("int", "io.debezium.time.Date")
	case kTime:
		return named("long", "io.debezium.time.MicroTime")
	case kTimestamp:
		return named("long", "io.debezium.time.MicroTimestamp")
	case kTimestampTz:
		return named("string", "io.debezium.time.ZonedTimestamp")
	case kString:
		return "string"
	case kUUID:
		return named("string", "io.debezium.data.Uuid")
	}
	return "bytes"
}

// AppendDebeziumAvro appends one event under value schema id: after only
// is a create, both an update, before only a delete. On error dst is
// returned as it was.
func (e *AvroEncoder) AppendDebeziumAvro(dst []byte, id int, before, after []any) ([]byte, error) {
	op, err := debeziumOp(before, after)
	if err != nil {
		return dst, err
	}
	w := e.w
	w.Reset(nil)
	for i, img := range [2][]any{before, after} {
		if img == nil {
			w.WriteLong(0)
			continue
		}
		w.WriteLong(1)
		if err := e.writeRow(img, i == 1, false); err != nil {
			return dst, err
		}
	}
	src := e.source
	w.WriteString("2.7.0.Final")
	w.WriteString("icesink")
	w.WriteString(src.Server)
	w.WriteLong(0)
	w.WriteString(src.DB)
	w.WriteLong(1)
	w.WriteString(src.Schema)
	w.WriteString(src.Table)
	w.WriteString(op)
	w.WriteLong(0) // ts_ms
	w.WriteLong(0) // transaction
	return appendWire(dst, id, w.Buffer()), nil
}

// AppendKeyAvro appends the record key of row under key schema id.
func (e *AvroEncoder) AppendKeyAvro(dst []byte, id int, row []any) ([]byte, error) {
	e.w.Reset(nil)
	if err := e.writeRow(row, false, true); err != nil {
		return dst, err
	}
	return appendWire(dst, id, e.w.Buffer()), nil
}

func appendWire(dst []byte, id int, body []byte) []byte {
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(id))
	return append(dst, body...)
}

func (e *AvroEncoder) writeRow(row []any, full, keyOnly bool) error {
	cols := e.plan.cols
	if len(row) != len(cols) {
		return fmt.Errorf("changelog: encode: row has %d values, the schema %d columns", len(row), len(cols))
	}
	w := e.w
	for i := range cols {
		c := &cols[i]
		if keyOnly && !c.key {
			continue
		}
		v := row[i]
		if v == nil {
			if c.required {
				return fmt.Errorf("changelog: encode: column %q: nil in a required column (Avro has no null for it)", c.name)
			}
			w.WriteLong(0)
			continue
		}
		var err error
		// appendValue checks v as the JSON encoder does.
		if e.tmp, err = appendValue(e.tmp[:0], c, v); err != nil {
			return fmt.Errorf("changelog: encode: column %q: %w", c.name, err)
		}
		if !c.required {
			w.WriteLong(1)
		}
		switch c.kind {
		case kBool:
			w.WriteBool(v.(bool))
		case kInt, kDate:
			w.WriteInt(v.(int32))
		case kLong, kTime, kTimestamp:
			w.WriteLong(v.(int64))
		case kFloat:
			w.WriteFloat(v.(float32))
		case kDouble:
			w.WriteDouble(v.(float64))
		case kDecimal:
			w.WriteBytes(twosComplement(v.(decimal128.Num).BigInt()))
		case kString:
			w.WriteString(v.(string))
		case kTimestampTz:
			w.WriteString(strings.Trim(string(e.tmp), `"`)) // RFC 3339 with a Z
		case kUUID:
			w.WriteString(v.(uuid.UUID).String())
		default:
			w.WriteBytes(v.([]byte))
		}
	}
	return nil
}

// twosComplement is the big-endian two's-complement form of x in the
// fewest bytes.
func twosComplement(x *big.Int) []byte {
	if x.Sign() >= 0 {
		b := x.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	n := (x.BitLen() + 8) / 8
	m := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	b := new(big.Int).Add(m, x).Bytes()
	for len(b) < n {
		b = append([]byte{0xff}, b...)
	}
	return b
}
