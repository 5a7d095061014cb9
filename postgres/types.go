package postgres

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
)

// Type OIDs of PostgreSQL's built-in types (pg_type.oid, stable across
// versions).
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidFloat4      = 700
	oidFloat8      = 701
	oidBPChar      = 1042
	oidVarchar     = 1043
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidUUID        = 2950
)

// column is a source table's column as icesink reads it.
type column struct {
	name    string
	oid     uint32
	typmod  int32
	typname string // pg_type.typname (e.g. "int4", "_int4", "mood")
	notNull bool
	key     bool // part of the primary key (or of the --tables key)
	// typ is the column's Iceberg type; decode turns its text form (the
	// server's output function, DateStyle ISO, TimeZone UTC,
	// IntervalStyle iso_8601) into the Go value deltawriter.Change wants.
	typ    iceberg.Type
	decode func(string) (any, error)
}

// numericPrecision returns the precision and scale of a numeric column's
// type modifier (ok false: unconstrained numeric).
func numericPrecision(typmod int32) (p, s int, ok bool) {
	if typmod < 4 {
		return 0, 0, false
	}
	m := typmod - 4
	return int(m>>16) & 0xffff, int(int16(m & 0xffff)), true
}

// mapType sets c.typ and c.decode from c's PostgreSQL type. Types with no
// exact Iceberg counterpart become strings holding PostgreSQL's own text
// form (never a rounded or reformatted value): an unconstrained numeric
// (any precision and scale), numeric with a precision above 38 or a
// negative scale, interval (ISO 8601, e.g. P1Y2M3DT4H5M6S), json and jsonb
// (the document as PostgreSQL prints it), arrays ({1,2,3}), enums (the
// label), money, xml, timetz and any type it does not know.
func (c *column) mapType() {
	str := func(s string) (any, error) { return s, nil }
	c.typ, c.decode = iceberg.PrimitiveTypes.String, str
	switch c.oid {
	case oidBool:
		c.typ, c.decode = iceberg.PrimitiveTypes.Bool, decodeBool
	case oidInt2, oidInt4:
		c.typ, c.decode = iceberg.PrimitiveTypes.Int32, func(s string) (any, error) {
			n, err := strconv.ParseInt(s, 10, 32)
			return int32(n), err
		}
	case oidInt8, oidOID:
		c.typ, c.decode = iceberg.PrimitiveTypes.Int64, func(s string) (any, error) {
			return strconv.ParseInt(s, 10, 64)
		}
	case oidFloat4:
		c.typ, c.decode = iceberg.PrimitiveTypes.Float32, func(s string) (any, error) {
			f, err := parseFloat(s, 32)
			return float32(f), err
		}
	case oidFloat8:
		c.typ, c.decode = iceberg.PrimitiveTypes.Float64, func(s string) (any, error) { return parseFloat(s, 64) }
	case oidNumeric:
		if p, s, ok := numericPrecision(c.typmod); ok && p >= 1 && p <= 38 && s >= 0 && s <= p {
			c.typ, c.decode = iceberg.DecimalTypeOf(p, s), func(v string) (any, error) { return decodeDecimal(v, p, s) }
		}
	case oidBytea:
		c.typ, c.decode = iceberg.PrimitiveTypes.Binary, decodeBytea
	case oidDate:
		c.typ, c.decode = iceberg.PrimitiveTypes.Date, decodeDate
	case oidTime:
		c.typ, c.decode = iceberg.PrimitiveTypes.Time, decodeTime
	case oidTimestamp:
		c.typ, c.decode = iceberg.PrimitiveTypes.Timestamp, func(s string) (any, error) { return decodeTimestamp(s, false) }
	case oidTimestamptz:
		c.typ, c.decode = iceberg.PrimitiveTypes.TimestampTz, func(s string) (any, error) { return decodeTimestamp(s, true) }
	case oidUUID:
		c.typ, c.decode = iceberg.PrimitiveTypes.UUID, func(s string) (any, error) { return uuid.Parse(s) }
	}
}

func decodeBool(s string) (any, error) {
	switch s {
	case "t":
		return true, nil
	case "f":
		return false, nil
	}
	return nil, fmt.Errorf("not a boolean: %q", s)
}

func parseFloat(s string, bits int) (float64, error) {
	switch s {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, bits)
}

// decodeDecimal parses numeric text of at most scale s digits after the
// point into an unscaled value: a value needing rounding, or NaN and
// infinities (which decimal has no room for), is refused, not changed.
func decodeDecimal(v string, p, s int) (any, error) {
	intPart, frac, _ := strings.Cut(v, ".")
	if len(frac) > s {
		return nil, fmt.Errorf("numeric %s has more than %d digits after the point", v, s)
	}
	digits := intPart + frac + strings.Repeat("0", s-len(frac))
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return nil, fmt.Errorf("numeric %q does not fit decimal(%d,%d)", v, p, s)
	}
	d := decimal128.FromBigInt(n)
	if !d.FitsInPrecision(int32(p)) {
		return nil, fmt.Errorf("numeric %s does not fit decimal(%d,%d)", v, p, s)
	}
	return d, nil
}

// decodeBytea parses bytea's hex output (\x0a1b...).
func decodeBytea(s string) (any, error) {
	h, ok := strings.CutPrefix(s, `\x`)
	if !ok {
		return nil, fmt.Errorf("bytea not in hex output (set bytea_output = hex): %.20q", s)
	}
	return hex.DecodeString(h)
}

const (
	dateLayout = "2006-01-02"
	timeLayout = "15:04:05.999999"
)

// decodeDate parses an ISO date into days since 1970-01-01. PostgreSQL's
// infinity and dates BC have no Iceberg date: refused.
func decodeDate(s string) (any, error) {
	t, err := time.Parse(dateLayout, s)
	if err != nil {
		return nil, fmt.Errorf("date %q (infinity and dates BC have no Iceberg date): %w", s, err)
	}
	return int32(t.Unix() / 86400), nil
}

// decodeTime parses a time of day into microseconds since midnight.
func decodeTime(s string) (any, error) {
	if s == "24:00:00" {
		return int64(86400_000_000), nil
	}
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return nil, fmt.Errorf("time %q: %w", s, err)
	}
	return int64(t.Hour())*3600e6 + int64(t.Minute())*60e6 + int64(t.Second())*1e6 + int64(t.Nanosecond()/1000), nil
}

// decodeTimestamp parses a timestamp (ISO, with a UTC offset for
// timestamptz: connections run with TimeZone UTC) into microseconds since
// the epoch.
func decodeTimestamp(s string, tz bool) (any, error) {
	layout := dateLayout + " " + timeLayout
	if tz {
		layout += "Z07"
		if i := strings.LastIndexAny(s, "+-"); i > 10 && len(s)-i > 3 {
			layout += ":00" // an offset with minutes (+05:30)
		}
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		return nil, fmt.Errorf("timestamp %q (infinity and dates BC have no Iceberg timestamp): %w", s, err)
	}
	return t.UnixMicro(), nil
}
