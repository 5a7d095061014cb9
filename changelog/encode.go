package changelog

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/icesink/icesink/deltawriter"
)

// BarrierLine is the line (without its '\n') that ends a checkpoint, in
// both formats.
const BarrierLine = `{"barrier":true}`

// Encoder writes changes as input lines that a Decoder of the same schema
// decodes back to equal values. It writes every column, in schema order, a
// nil value as null, and refuses a change the Decoder would reject (a
// wrong Go type, a value out of its column's range, a missing key, a nil
// required column in an insert or update).
//
// Value spellings: numbers as JSON numbers (floats in the shortest form
// that round-trips; NaN and ±Inf as "NaN", "Infinity", "-Infinity"),
// decimals as strings ("1.50"), dates as "YYYY-MM-DD" (outside years
// 0000-9999 as a number of days), times as "HH:MM:SS[.ffffff]",
// timestamps as "YYYY-MM-DDTHH:MM:SS[.ffffff]" (timestamptz with a "Z"),
// UUIDs in lower case, binary and fixed as padded standard base64.
type Encoder struct {
	plan *plan
}

// NewEncoder returns an encoder for rows of schema, which must meet the
// same conditions as for NewDecoder.
func NewEncoder(schema *iceberg.Schema) (*Encoder, error) {
	p, err := newPlan(schema)
	if err != nil {
		return nil, err
	}
	return &Encoder{plan: p}, nil
}

// EncodeChangelogJSON returns ch as one changelog-json line, without the
// line terminator. It is NewEncoder and AppendChangelogJSON in one call.
func EncodeChangelogJSON(schema *iceberg.Schema, ch deltawriter.Change) ([]byte, error) {
	e, err := NewEncoder(schema)
	if err != nil {
		return nil, err
	}
	return e.AppendChangelogJSON(nil, ch)
}

// AppendChangelogJSON appends ch as one changelog-json line,
// {"op":"+I","data":{...}}, without the line terminator. On error dst is
// returned as it was.
func (e *Encoder) AppendChangelogJSON(dst []byte, ch deltawriter.Change) ([]byte, error) {
	switch ch.Op {
	case deltawriter.Insert, deltawriter.UpdateBefore, deltawriter.UpdateAfter, deltawriter.Delete:
	default:
		return dst, fmt.Errorf("changelog: encode: invalid op %v", ch.Op)
	}
	n := len(dst)
	dst = append(dst, `{"op":"`...)
	dst = append(dst, ch.Op.String()...)
	dst = append(dst, `","data":`...)
	dst, err := e.appendRow(dst, ch.Row, !ch.Op.IsDelete())
	if err != nil {
		return dst[:n], err
	}
	return append(dst, '}'), nil
}

// AppendDebeziumJSON appends one debezium-json event line without the line
// terminator. The op follows from which images are given: after only is a
// create ("c"), both an update ("u"), before only a delete ("d"). On
// error dst is returned as it was.
func (e *Encoder) AppendDebeziumJSON(dst []byte, before, after []any) ([]byte, error) {
	n := len(dst)
	out, err := e.appendDebezium(dst, before, after)
	if err != nil {
		return dst[:n], err
	}
	return out, nil
}

// debeziumOp is the op of an event with these images: after only is a
// create, both an update, before only a delete.
func debeziumOp(before, after []any) (string, error) {
	switch {
	case before == nil && after == nil:
		return "", errors.New("changelog: encode: a Debezium event needs a before or an after image")
	case before == nil:
		return "c", nil
	case after == nil:
		return "d", nil
	}
	return "u", nil
}

func (e *Encoder) appendDebezium(dst []byte, before, after []any) ([]byte, error) {
	op, err := debeziumOp(before, after)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `{"before":`...)
	if before == nil {
		dst = append(dst, "null"...)
	} else if dst, err = e.appendRow(dst, before, false); err != nil {
		return dst, err
	}
	dst = append(dst, `,"after":`...)
	if after == nil {
		dst = append(dst, "null"...)
	} else if dst, err = e.appendRow(dst, after, true); err != nil {
		return dst, err
	}
	dst = append(dst, `,"op":"`...)
	dst = append(dst, op...)
	return append(dst, `"}`...), nil
}

func (e *Encoder) appendRow(dst []byte, row []any, full bool) ([]byte, error) {
	cols := e.plan.cols
	if len(row) != len(cols) {
		return dst, fmt.Errorf("changelog: encode: row has %d values, the schema %d columns", len(row), len(cols))
	}
	dst = append(dst, '{')
	for i := range cols {
		c := &cols[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, c.name)
		dst = append(dst, ':')
		if row[i] == nil {
			if c.key || full && c.required {
				return dst, fmt.Errorf("changelog: encode: column %q: nil in a required column", c.name)
			}
			dst = append(dst, "null"...)
			continue
		}
		var err error
		if dst, err = appendValue(dst, c, row[i]); err != nil {
			return dst, fmt.Errorf("changelog: encode: column %q: %w", c.name, err)
		}
	}
	return append(dst, '}'), nil
}

func appendValue(dst []byte, c *column, v any) ([]byte, error) {
	wrong := func() ([]byte, error) {
		return dst, fmt.Errorf("a %s value must be %s, got %T", c.typ, goType(c.kind), v)
	}
	switch c.kind {
	case kBool:
		b, ok := v.(bool)
		if !ok {
			return wrong()
		}
		return strconv.AppendBool(dst, b), nil
	case kInt:
		x, ok := v.(int32)
		if !ok {
			return wrong()
		}
		return strconv.AppendInt(dst, int64(x), 10), nil
	case kLong:
		x, ok := v.(int64)
		if !ok {
			return wrong()
		}
		return strconv.AppendInt(dst, x, 10), nil
	case kFloat:
		x, ok := v.(float32)
		if !ok {
			return wrong()
		}
		return appendFloat(dst, float64(x), 32), nil
	case kDouble:
		x, ok := v.(float64)
		if !ok {
			return wrong()
		}
		return appendFloat(dst, x, 64), nil
	case kDecimal:
		x, ok := v.(decimal128.Num)
		if !ok {
			return wrong()
		}
		if !x.FitsInPrecision(int32(c.prec)) {
			return dst, fmt.Errorf("unscaled value %s does not fit %s", x.BigInt(), c.typ)
		}
		dst = append(dst, '"')
		dst = append(dst, x.ToString(int32(c.scale))...)
		return append(dst, '"'), nil
	case kDate:
		x, ok := v.(int32)
		if !ok {
			return wrong()
		}
		if x < minDay || x > maxDay {
			return strconv.AppendInt(dst, int64(x), 10), nil
		}
		dst = append(dst, '"')
		dst = appendDate(dst, int64(x))
		return append(dst, '"'), nil
	case kTime:
		x, ok := v.(int64)
		if !ok {
			return wrong()
		}
		if x < 0 || x >= microsPerDay {
			return dst, fmt.Errorf("%d µs is not a time of day", x)
		}
		dst = append(dst, '"')
		dst = appendClock(dst, x)
		return append(dst, '"'), nil
	case kTimestamp, kTimestampTz:
		x, ok := v.(int64)
		if !ok {
			return wrong()
		}
		if x < minTimestamp || x > maxTimestamp {
			return dst, fmt.Errorf("%d µs is outside years 0000-9999", x)
		}
		days := floorDiv(x, microsPerDay)
		dst = append(dst, '"')
		dst = appendDate(dst, days)
		dst = append(dst, 'T')
		dst = appendClock(dst, x-days*microsPerDay)
		if c.kind == kTimestampTz {
			dst = append(dst, 'Z')
		}
		return append(dst, '"'), nil
	case kString:
		x, ok := v.(string)
		if !ok {
			return wrong()
		}
		if !utf8.ValidString(x) {
			return dst, errors.New("string is not valid UTF-8")
		}
		return appendString(dst, x), nil
	case kUUID:
		x, ok := v.(uuid.UUID)
		if !ok {
			return wrong()
		}
		dst = append(dst, '"')
		dst = append(dst, x.String()...)
		return append(dst, '"'), nil
	case kBinary, kFixed:
		x, ok := v.([]byte)
		if !ok {
			return wrong()
		}
		if c.kind == kFixed && len(x) != c.size {
			return dst, fmt.Errorf("%d bytes, %s needs exactly %d", len(x), c.typ, c.size)
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, '"'), nil
	}
	panic("changelog: unhandled column kind")
}

func goType(k kind) string {
	switch k {
	case kBool:
		return "bool"
	case kInt, kDate:
		return "int32"
	case kLong, kTime, kTimestamp, kTimestampTz:
		return "int64"
	case kFloat:
		return "float32"
	case kDouble:
		return "float64"
	case kDecimal:
		return "decimal128.Num"
	case kString:
		return "string"
	case kUUID:
		return "uuid.UUID"
	}
	return "[]byte"
}

func appendFloat(dst []byte, f float64, bitSize int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bitSize)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func append2(dst []byte, v int) []byte { return append(dst, byte('0'+v/10), byte('0'+v%10)) }

// appendDate appends YYYY-MM-DD for a day in years 0000-9999.
func appendDate(dst []byte, days int64) []byte {
	y, m, d := civilFromDays(days)
	dst = append2(dst, y/100)
	dst = append2(dst, y%100)
	dst = append(dst, '-')
	dst = append2(dst, m)
	dst = append(dst, '-')
	return append2(dst, d)
}

// appendClock appends HH:MM:SS[.ffffff] for microseconds since midnight.
func appendClock(dst []byte, micros int64) []byte {
	sec := micros / microsPerSecond
	frac := micros % microsPerSecond
	dst = append2(dst, int(sec/3600))
	dst = append(dst, ':')
	dst = append2(dst, int(sec/60%60))
	dst = append(dst, ':')
	dst = append2(dst, int(sec%60))
	if frac != 0 {
		dst = append(dst, '.')
		for div := int64(100_000); div > 0; div /= 10 {
			dst = append(dst, byte('0'+frac/div%10))
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. s must be valid UTF-8.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
