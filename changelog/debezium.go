package changelog

import (
	"bytes"

	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// encoding is how a column's JSON value is spelled when it is not the
// default spelling of its Iceberg type (see the package doc): Debezium's
// encodings, known from the event's Kafka Connect schema or from
// DebeziumOptions.
type encoding uint8

const (
	encDefault       encoding = iota
	encDecimalBytes           // base64 of the big-endian two's-complement unscaled value
	encMillis                 // an integer number of milliseconds
	encMicros                 // ... microseconds
	encNanos                  // ... nanoseconds
	encVariableScale          // io.debezium.data.VariableScaleDecimal: refused
)

// DebeziumOptions says how a debezium-json input spells the values whose
// spelling the event does not carry. Events with a Kafka Connect schema
// ({"schema":...,"payload":...}, the JsonConverter with schemas enabled)
// name each column's logical type there, which overrides these options.
type DebeziumOptions struct {
	// DecimalBase64 decodes JSON strings in decimal columns as Debezium's
	// decimal.handling.mode=precise spells them: base64 of the unscaled
	// value, at the Iceberg column's scale. Off: a string holds a number
	// (decimal.handling.mode=string). JSON numbers are numbers either way.
	DecimalBase64 bool
	// TimeUnit, when set (time.Millisecond, time.Microsecond or
	// time.Nanosecond), decodes JSON integers in time and timestamp
	// columns as that many units since midnight or the epoch. Zero:
	// integers there are refused, the unit being unknown.
	TimeUnit time.Duration
}

// Option tunes a Decoder.
type Option func(*Decoder) error

// WithDebezium sets how a debezium-json input spells values its events
// carry no schema for.
func WithDebezium(o DebeziumOptions) Option {
	return func(d *Decoder) error {
		unit := encDefault
		switch o.TimeUnit {
		case 0:
		case time.Millisecond:
			unit = encMillis
		case time.Microsecond:
			unit = encMicros
		case time.Nanosecond:
			unit = encNanos
		default:
			return fmt.Errorf("changelog: Debezium time unit %v: want 1ms, 1µs or 1ns", o.TimeUnit)
		}
		for i := range d.base {
			c := &d.base[i]
			switch c.kind {
			case kDecimal:
				if o.DecimalBase64 {
					c.enc, c.encScale = encDecimalBytes, c.scale
				}
			case kTime, kTimestamp, kTimestampTz:
				c.enc = unit
			}
		}
		d.cols = d.base
		return nil
	}
}

// connectField is a field of a Kafka Connect schema, as the JsonConverter
// writes it.
type connectField struct {
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Field      string            `json:"field"`
	Parameters map[string]string `json:"parameters"`
	Fields     []connectField    `json:"fields"`
	Optional   bool              `json:"optional"`
}

// useSchema makes the columns follow the Kafka Connect schema raw (the
// envelope's "schema" member). It reports whether the encodings changed.
// A schema seen on the line before is not parsed again.
func (d *Decoder) useSchema(raw []byte) (changed bool, err error) {
	d.lineSchema = true
	if d.schemaRaw != nil && bytes.Equal(raw, d.schemaRaw) {
		return false, nil
	}
	var env connectField
	if err := json.Unmarshal(raw, &env); err != nil {
		return false, fieldErr("schema", kindErrf(ErrRecord, "not a Kafka Connect schema: %v", err))
	}
	cols := make([]column, len(d.base))
	copy(cols, d.base)
	for _, img := range env.Fields {
		if img.Field != "before" && img.Field != "after" {
			continue
		}
		for _, f := range img.Fields {
			i, ok := d.plan.byName[f.Field]
			if !ok {
				continue // the row decoder names unknown columns
			}
			c := &cols[i]
			enc, scale, err := connectEncoding(c, f)
			if err != nil {
				return false, fieldErr(f.Field, in("schema", err))
			}
			c.enc, c.encScale = enc, scale
		}
	}
	d.change = nil
	if d.evolve {
		d.change = d.plan.connectDiff(env)
	}
	changed = false
	for i := range cols {
		if cols[i].enc != d.cols[i].enc || cols[i].encScale != d.cols[i].encScale {
			changed = true
		}
	}
	d.cols = cols
	d.schemaRaw = append(d.schemaRaw[:0], raw...)
	return changed, nil
}

// laterSchema finds the top-level "schema" member of the envelope object
// at start and follows it (useSchema). It is the slow path, for a line
// whose rows failed before its schema was reached.
func (d *Decoder) laterSchema(start int) (changed bool, err error) {
	s := &d.sc
	s.pos = start
	empty, err := s.beginObject()
	if err != nil || empty {
		return false, err
	}
	for {
		k, err := s.key()
		if err != nil {
			return false, err
		}
		s.ws()
		at := s.pos
		if err := s.skip(1); err != nil {
			return false, err
		}
		if string(k) == "schema" && s.buf[at] != 'n' {
			return d.useSchema(s.buf[at:s.pos])
		}
		more, err := s.next()
		if err != nil || !more {
			return false, err
		}
	}
}

// dropSchema returns the columns to the options' encodings (a line without
// a schema); it reports whether they changed.
func (d *Decoder) dropSchema() bool {
	if d.schemaRaw == nil {
		return false
	}
	changed := false
	for i := range d.cols {
		if d.cols[i].enc != d.base[i].enc || d.cols[i].encScale != d.base[i].encScale {
			changed = true
		}
	}
	d.cols, d.schemaRaw, d.change = d.base, nil, nil
	return changed
}

// connectEncoding maps a Connect schema field's logical type onto column c.
func connectEncoding(c *column, f connectField) (encoding, int, error) {
	switch f.Name {
	case "org.apache.kafka.connect.data.Decimal":
		if c.kind != kDecimal {
			break
		}
		if f.Type == "bytes" {
			scale, err := strconv.Atoi(f.Parameters["scale"])
			if err != nil || scale < 0 || scale > 38 {
				return 0, 0, kindErrf(ErrRecord, "Decimal without a valid scale parameter (%q)", f.Parameters["scale"])
			}
			return encDecimalBytes, scale, nil
		}
	case "io.debezium.data.VariableScaleDecimal":
		return encVariableScale, 0, nil
	case "io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp", "io.debezium.time.Time", "org.apache.kafka.connect.data.Time":
		return encMillis, 0, nil
	case "io.debezium.time.MicroTimestamp", "io.debezium.time.MicroTime":
		return encMicros, 0, nil
	case "io.debezium.time.NanoTimestamp", "io.debezium.time.NanoTime":
		return encNanos, 0, nil
	}
	return encDefault, 0, nil
}

// encoded decodes a value of column c spelled per c.enc; ok false means the
// value is in its default spelling after all (a string for a time column,
// a number for a decimal one) and the caller decodes it as usual.
func (s *scanner) encoded(c *column, first byte) (v any, ok bool, err error) {
	switch c.enc {
	case encVariableScale:
		if err := s.skip(1); err != nil {
			return nil, true, err
		}
		return nil, true, kindErrf(ErrUnsupported, "io.debezium.data.VariableScaleDecimal (a scale per value) cannot fill %s; set the connector's decimal.handling.mode=string or precise", c.typ)
	case encDecimalBytes:
		if first != '"' {
			return nil, false, nil
		}
		b, err := s.str()
		if err != nil {
			return nil, true, err
		}
		v, err := base64Decimal(b, c, c.encScale)
		return v, true, err
	case encMillis, encMicros, encNanos:
		if first != '-' && (first < '0' || first > '9') {
			return nil, false, nil
		}
		n, err := s.number()
		if err != nil {
			return nil, true, err
		}
		var tmp []byte
		i, err := n.int64(&tmp)
		if err != nil {
			return nil, true, err
		}
		v, err := epochValue(c, i)
		return v, true, err
	}
	return nil, false, nil
}

// base64Decimal decodes Debezium's precise decimal: base64 of the
// big-endian two's-complement unscaled value at scale, converted exactly
// to column c's decimal.
func base64Decimal(b []byte, c *column, scale int) (any, error) {
	raw := make([]byte, b64.DecodedLen(len(b)))
	n, err := b64.Decode(raw, b)
	if err != nil {
		return nil, kindErrf(ErrType, "%s needs base64 of the unscaled value (Debezium's decimal.handling.mode=precise): %v", c.typ, err)
	}
	return unscaledDecimal(raw[:n], c, scale)
}

// unscaledDecimal converts the big-endian two's-complement unscaled value
// raw at scale exactly to column c's decimal.
func unscaledDecimal(raw []byte, c *column, scale int) (any, error) {
	if len(raw) > 0 && len(raw) <= 8 && scale <= c.scale && c.scale-scale <= 18 {
		// The common case without big.Int: 63 bits at a scale the column
		// keeps.
		v := int64(int8(raw[0]))
		for _, b := range raw[1:] {
			v = v<<8 | int64(b)
		}
		n := decimal128.FromI64(v).Mul(decimal128.FromU64(pow10u64[c.scale-scale]))
		if !n.FitsInPrecision(int32(c.prec)) {
			return nil, kindErrf(ErrRange, "%s does not fit: decimal(%d, %d) keeps %s before the point",
				quoteShort([]byte(n.ToString(int32(c.scale)))), c.prec, c.scale, plural(c.prec-c.scale, "digit"))
		}
		return n, nil
	}
	u := new(big.Int).SetBytes(raw)
	if len(raw) > 0 && raw[0]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	txt := u.String()
	num := number{neg: u.Sign() < 0, exp: -int64(scale)}
	num.intPart = []byte(txt)
	if num.neg {
		num.intPart = num.intPart[1:]
	}
	var tmp []byte
	return num.decimal(c.prec, c.scale, &tmp)
}

// epochValue converts an integer count of c.enc's unit into column c's
// value: microseconds since the epoch (timestamps) or since midnight
// (time).
func epochValue(c *column, v int64) (any, error) {
	var us int64
	switch c.enc {
	case encMillis:
		if v > math.MaxInt64/1000 || v < math.MinInt64/1000 {
			return nil, kindErrf(ErrRange, "%d ms is out of range", v)
		}
		us = v * 1000
	case encMicros:
		us = v
	case encNanos:
		if v%1000 != 0 {
			return nil, kindErrf(ErrRange, "%d ns is more precise than a microsecond", v)
		}
		us = v / 1000
	}
	if c.kind == kTime {
		if us < 0 || us >= 86400e6 {
			return nil, kindErrf(ErrRange, "%d µs is not a time of day", us)
		}
		return us, nil
	}
	if us < minTimestamp || us > maxTimestamp {
		return nil, kindErrf(ErrRange, "%d µs since 1970 is outside years 0000-9999", us)
	}
	return us, nil
}
