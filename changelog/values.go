package changelog

import (
	"encoding/base64"
	"math"
	"math/bits"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/google/uuid"
)

// b64 decodes binary and fixed values: standard alphabet, padded, canonical
// (non-zero trailing bits rejected). Like all of encoding/base64 it ignores
// '\r' and '\n' in the input.
var b64 = base64.StdEncoding.Strict()

const (
	microsPerSecond = 1_000_000
	microsPerDay    = 86_400 * microsPerSecond
	// minTimestamp and maxTimestamp bound the timestamps the text forms can
	// spell: 0000-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z.
	minDay       = -719_528  // 0000-01-01
	maxDay       = 2_932_896 // 9999-12-31
	minTimestamp = minDay * microsPerDay
	maxTimestamp = (maxDay+1)*microsPerDay - 1
)

// jsonKind names the kind of the JSON value starting with c, for messages.
func jsonKind(c byte) string {
	switch c {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// value decodes the JSON value at the cursor as a value of column c. JSON
// null decodes to nil. The returned error carries no field name.
func (s *scanner) value(c *column, tmp *[]byte) (any, error) {
	first := s.peek()
	if first == 'n' {
		if err := s.literal("null"); err != nil {
			return nil, err
		}
		return nil, nil
	}
	if c.enc != encDefault {
		if v, ok, err := s.encoded(c, first); ok {
			return v, err
		}
	}
	if first == '"' {
		b, err := s.str()
		if err != nil {
			return nil, err
		}
		return textValue(c, b, tmp)
	}
	switch c.kind {
	case kBool:
		switch first {
		case 't':
			return true, s.literal("true")
		case 'f':
			return false, s.literal("false")
		}
		return nil, s.wrongType(c, first, "true or false")
	case kInt, kLong:
		n, err := s.numeric(c, first)
		if err != nil {
			return nil, err
		}
		v, err := n.int64(tmp)
		if err != nil {
			return nil, err
		}
		return intValue(c, v)
	case kFloat, kDouble:
		return s.float(c, first)
	case kDecimal:
		n, err := s.numeric(c, first)
		if err != nil {
			return nil, err
		}
		return n.decimal(c.prec, c.scale, tmp)
	case kDate:
		if first != '-' && (first < '0' || first > '9') {
			return nil, s.wrongType(c, first, `a "YYYY-MM-DD" string or a number of days since 1970-01-01`)
		}
		n, err := s.number()
		if err != nil {
			return nil, err
		}
		v, err := n.int64(tmp)
		if err != nil {
			return nil, err
		}
		return intValue(c, v)
	}
	return nil, s.wrongType(c, first, wants(c))
}

// wants says what spelling column c takes, for messages.
func wants(c *column) string {
	switch c.kind {
	case kBool:
		return "true or false"
	case kInt, kLong, kDecimal:
		return "a JSON number or a string holding one"
	case kFloat, kDouble:
		return "a JSON number"
	case kDate:
		return `a "YYYY-MM-DD" string or a number of days since 1970-01-01`
	case kTime:
		return `an "HH:MM:SS[.ffffff]" string`
	case kTimestamp, kTimestampTz:
		return "an RFC 3339 string"
	case kString:
		return "a string"
	case kUUID:
		return "a UUID string"
	case kBinary, kFixed:
		return "a base64 string"
	}
	panic("changelog: unhandled column kind")
}

// intValue converts an integer to column c's value the way an integral JSON
// number decodes: int and long within their range, date as days since
// 1970-01-01, time and timestamp in c.enc's unit (refused without one),
// decimal exactly, float and double rounded to the nearest value.
func intValue(c *column, v int64) (any, error) {
	switch c.kind {
	case kInt:
		if v < math.MinInt32 || v > math.MaxInt32 {
			return nil, kindErrf(ErrRange, "%d does not fit an int (32-bit)", v)
		}
		return int32(v), nil
	case kLong:
		return v, nil
	case kDate:
		if v < math.MinInt32 || v > math.MaxInt32 {
			return nil, kindErrf(ErrRange, "%d days does not fit a date (32-bit)", v)
		}
		return int32(v), nil
	case kTime, kTimestamp, kTimestampTz:
		if c.enc == encMillis || c.enc == encMicros || c.enc == encNanos {
			return epochValue(c, v)
		}
	case kDecimal:
		var tmp []byte
		n, _, _ := parseNumber(strconv.AppendInt(nil, v, 10), 0)
		return n.decimal(c.prec, c.scale, &tmp)
	case kFloat:
		return float32(v), nil
	case kDouble:
		return float64(v), nil
	}
	return nil, kindErrf(ErrType, "%s needs %s, got the integer %d", c.typ, wants(c), v)
}

// textValue decodes the contents of a JSON string (unescaped) as a value
// of column c.
func textValue(c *column, b []byte, tmp *[]byte) (any, error) {
	switch c.kind {
	case kInt, kLong, kDecimal:
		n, end, msg := parseNumber(b, 0)
		if msg != "" || end != len(b) {
			return nil, kindErrf(ErrType, "%s needs %s, got the string %s", c.typ, wants(c), quoteShort(b))
		}
		if c.kind == kDecimal {
			return n.decimal(c.prec, c.scale, tmp)
		}
		v, err := n.int64(tmp)
		if err != nil {
			return nil, err
		}
		return intValue(c, v)
	case kFloat, kDouble:
		return floatText(c, b)
	case kDate:
		d, err := parseDate(b)
		if err != nil {
			return nil, err
		}
		return int32(d), nil
	case kTime:
		return parseTime(b)
	case kTimestamp, kTimestampTz:
		return parseTimestamp(b, c.kind == kTimestampTz)
	case kString:
		return string(b), nil
	case kUUID:
		u, ok := parseUUID(b)
		if !ok {
			return nil, kindErrf(ErrType, "%s is not a canonical UUID (8-4-4-4-12 hex digits)", quoteShort(b))
		}
		return u, nil
	case kBinary, kFixed:
		out := make([]byte, b64.DecodedLen(len(b)))
		n, err := b64.Decode(out, b)
		if err != nil {
			return nil, kindErrf(ErrType, "not standard padded base64: %v", err)
		}
		return bytesValue(c, out[:n:n])
	}
	return nil, kindErrf(ErrType, "%s needs %s, got a string", c.typ, wants(c))
}

// bytesValue checks a binary value against column c (a fixed column takes
// exactly its length).
func bytesValue(c *column, b []byte) (any, error) {
	if c.kind == kFixed && len(b) != c.size {
		return nil, kindErrf(ErrRange, "%d bytes, %s needs exactly %d", len(b), c.typ, c.size)
	}
	return b, nil
}

// wrongType reports the value at the cursor as not of column c's type,
// unless it is not even valid JSON, which is reported as such.
func (s *scanner) wrongType(c *column, first byte, want string) error {
	if err := s.skip(1); err != nil {
		return err
	}
	return kindErrf(ErrType, "%s needs %s, got %s", c.typ, want, jsonKind(first))
}

// numeric reads a JSON number (a string holding one is textValue's).
func (s *scanner) numeric(c *column, first byte) (number, error) {
	if first == '-' || first >= '0' && first <= '9' {
		return s.number()
	}
	return number{}, s.wrongType(c, first, wants(c))
}

func (s *scanner) float(c *column, first byte) (any, error) {
	if first != '-' && (first < '0' || first > '9') {
		return nil, s.wrongType(c, first, "a JSON number")
	}
	start := s.pos
	if _, err := s.number(); err != nil {
		return nil, err
	}
	return parseFloat(c, s.buf[start:s.pos])
}

// floatText decodes a string's contents as a float or double: "NaN",
// "Infinity", "-Infinity" or a JSON number.
func floatText(c *column, b []byte) (any, error) {
	var f float64
	switch string(b) {
	case "NaN":
		f = math.NaN()
	case "Infinity":
		f = math.Inf(1)
	case "-Infinity":
		f = math.Inf(-1)
	default:
		if _, end, msg := parseNumber(b, 0); msg != "" || end != len(b) {
			return nil, kindErrf(ErrType, `%s needs a JSON number, "NaN", "Infinity" or "-Infinity", got the string %s`, c.typ, quoteShort(b))
		}
		return parseFloat(c, b)
	}
	if c.kind == kFloat {
		return float32(f), nil
	}
	return f, nil
}

// parseFloat converts the text of a JSON number to c's float or double,
// rounding to the nearest value.
func parseFloat(c *column, text []byte) (any, error) {
	bitSize := 64
	if c.kind == kFloat {
		bitSize = 32
	}
	f, err := strconv.ParseFloat(string(text), bitSize)
	if err != nil {
		// The grammar was checked, so this is overflow; underflow rounds to
		// zero without an error.
		return nil, kindErrf(ErrRange, "%s does not fit a %s", quoteShort(text), c.typ)
	}
	if c.kind == kFloat {
		return float32(f), nil
	}
	return f, nil
}

// digits returns the significant digits of n (no leading or trailing
// zeros; empty for zero) and the power of ten they are scaled by. tmp is a
// reused buffer for when the digits span the decimal point.
func (n *number) digits(tmp *[]byte) ([]byte, int64) {
	var d []byte
	if len(n.frac) == 0 {
		d = n.intPart
	} else {
		*tmp = append(append((*tmp)[:0], n.intPart...), n.frac...)
		d = *tmp
	}
	e := n.exp - int64(len(n.frac))
	i := 0
	for i < len(d) && d[i] == '0' {
		i++
	}
	d = d[i:]
	j := len(d)
	for j > 0 && d[j-1] == '0' {
		j--
	}
	e += int64(len(d) - j)
	return d[:j], e
}

// pow10u64 holds 10^0 .. 10^19.
var pow10u64 = func() (t [20]uint64) {
	t[0] = 1
	for i := 1; i < len(t); i++ {
		t[i] = t[i-1] * 10
	}
	return t
}()

// int64 converts n to an integer: a number with a non-zero fractional part
// is an error, as is one beyond the int64 range.
func (n *number) int64(tmp *[]byte) (int64, error) {
	d, e := n.digits(tmp)
	if len(d) == 0 {
		return 0, nil
	}
	if e < 0 {
		return 0, kindErrf(ErrType, "%s is not an integer", n.text())
	}
	if int64(len(d))+e > 19 {
		return 0, kindErrf(ErrRange, "%s does not fit a 64-bit integer", n.text())
	}
	var u uint64
	for _, c := range d {
		u = u*10 + uint64(c-'0')
	}
	hi, u := bits.Mul64(u, pow10u64[e])
	limit := uint64(math.MaxInt64)
	if n.neg {
		limit++
	}
	if hi != 0 || u > limit {
		return 0, kindErrf(ErrRange, "%s does not fit a 64-bit integer", n.text())
	}
	if n.neg {
		return int64(-u), nil
	}
	return int64(u), nil
}

// decimal converts n to the unscaled value of a decimal(prec, scale),
// exactly: a value that needs rounding or more than prec digits is an error.
func (n *number) decimal(prec, scale int, tmp *[]byte) (any, error) {
	d, e := n.digits(tmp)
	if len(d) == 0 {
		return decimal128.Num{}, nil
	}
	k := e + int64(scale)
	if k < 0 {
		return nil, kindErrf(ErrRange, "%s would need rounding: decimal(%d, %d) keeps %s after the point", n.text(), prec, scale, plural(scale, "digit"))
	}
	if int64(len(d))+k > int64(prec) {
		return nil, kindErrf(ErrRange, "%s does not fit: decimal(%d, %d) keeps %s before the point", n.text(), prec, scale, plural(prec-scale, "digit"))
	}
	var v decimal128.Num
	for len(d) > 0 {
		chunk := min(len(d), 18)
		var u uint64
		for _, c := range d[:chunk] {
			u = u*10 + uint64(c-'0')
		}
		v = v.Mul(decimal128.FromU64(pow10u64[chunk])).Add(decimal128.FromU64(u))
		d = d[chunk:]
	}
	if k > 0 {
		v = v.Mul(decimal128.GetScaleMultiplier(int(k)))
	}
	if n.neg {
		v = v.Negate()
	}
	return v, nil
}

// text re-spells n for an error message.
func (n *number) text() string {
	var b []byte
	if n.neg {
		b = append(b, '-')
	}
	b = append(b, n.intPart...)
	if len(n.frac) > 0 {
		b = append(b, '.')
		b = append(b, n.frac...)
	}
	if n.exp != 0 {
		b = append(b, 'e')
		b = strconv.AppendInt(b, n.exp, 10)
	}
	return quoteShort(b)
}

// quoteShort quotes b for a message, eliding the middle of long values.
func quoteShort(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max/2])+"…"+string(b[len(b)-max/2:])) + " (" + strconv.Itoa(len(b)) + " bytes)"
	}
	return strconv.Quote(string(b))
}

func digits2(b []byte, i int) (int, bool) {
	c0, c1 := b[i]-'0', b[i+1]-'0'
	if c0 > 9 || c1 > 9 {
		return 0, false
	}
	return int(c0)*10 + int(c1), true
}

func digits4(b []byte, i int) (int, bool) {
	hi, ok1 := digits2(b, i)
	lo, ok2 := digits2(b, i+2)
	return hi*100 + lo, ok1 && ok2
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, m int) int {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (H. Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int) {
	z += 719468
	era := z
	if era < 0 {
		era -= 146096
	}
	era /= 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	yy := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	if m <= 2 {
		yy++
	}
	return int(yy), m, d
}

// parseDateAt parses YYYY-MM-DD at b[0:10].
func parseDateAt(b []byte) (int64, bool) {
	if len(b) < 10 || b[4] != '-' || b[7] != '-' {
		return 0, false
	}
	y, ok1 := digits4(b, 0)
	m, ok2 := digits2(b, 5)
	d, ok3 := digits2(b, 8)
	if !ok1 || !ok2 || !ok3 || m < 1 || m > 12 || d < 1 || d > daysIn(y, m) {
		return 0, false
	}
	return daysFromCivil(y, m, d), true
}

func parseDate(b []byte) (int64, error) {
	if len(b) == 10 {
		if d, ok := parseDateAt(b); ok {
			return d, nil
		}
	}
	return 0, kindErrf(ErrType, "%s is not a date (YYYY-MM-DD)", quoteShort(b))
}

// parseClock parses HH:MM:SS[.f{1,9}] at the start of b and returns the
// microseconds since midnight and the bytes consumed. Fraction digits past
// the microsecond must be zero.
func parseClock(b []byte) (micros int64, n int, ok bool, subMicro bool) {
	if len(b) < 8 || b[2] != ':' || b[5] != ':' {
		return 0, 0, false, false
	}
	h, ok1 := digits2(b, 0)
	m, ok2 := digits2(b, 3)
	sec, ok3 := digits2(b, 6)
	if !ok1 || !ok2 || !ok3 || h > 23 || m > 59 || sec > 59 {
		return 0, 0, false, false
	}
	micros = (int64(h)*3600 + int64(m)*60 + int64(sec)) * microsPerSecond
	n = 8
	if n < len(b) && b[n] == '.' {
		n++
		start := n
		var frac int64
		for n < len(b) && b[n] >= '0' && b[n] <= '9' {
			if n-start < 6 {
				frac = frac*10 + int64(b[n]-'0')
			} else if b[n] != '0' {
				subMicro = true
			}
			n++
		}
		digits := n - start
		if digits == 0 || digits > 9 {
			return 0, 0, false, false
		}
		for i := digits; i < 6; i++ {
			frac *= 10
		}
		micros += frac
	}
	return micros, n, true, subMicro
}

func parseTime(b []byte) (int64, error) {
	t, n, ok, sub := parseClock(b)
	if !ok || n != len(b) {
		return 0, kindErrf(ErrType, "%s is not a time (HH:MM:SS[.ffffff])", quoteShort(b))
	}
	if sub {
		return 0, kindErrf(ErrRange, "%s is more precise than a microsecond", quoteShort(b))
	}
	return t, nil
}

// parseTimestamp parses an RFC 3339 date-time:
// YYYY-MM-DD('T'|'t'|' ')HH:MM:SS[.f{1,9}][('Z'|'z'|±HH:MM)].
// An offset converts the value to UTC; withZone requires one.
func parseTimestamp(b []byte, withZone bool) (int64, error) {
	bad := func() (int64, error) {
		if withZone {
			return 0, kindErrf(ErrType, "%s is not an RFC 3339 timestamp with an offset (YYYY-MM-DDTHH:MM:SS[.ffffff](Z|±HH:MM))", quoteShort(b))
		}
		return 0, kindErrf(ErrType, "%s is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM])", quoteShort(b))
	}
	days, ok := parseDateAt(b)
	if !ok || len(b) < 11 || (b[10] != 'T' && b[10] != 't' && b[10] != ' ') {
		return bad()
	}
	clock, n, ok, sub := parseClock(b[11:])
	if !ok {
		return bad()
	}
	rest := b[11+n:]
	var offset int64 // seconds east of UTC
	switch {
	case len(rest) == 0:
		if withZone {
			return 0, kindErrf(ErrType, "%s has no UTC offset; timestamptz needs one (Z or ±HH:MM)", quoteShort(b))
		}
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := digits2(rest, 1)
		om, ok2 := digits2(rest, 4)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return bad()
		}
		offset = int64(oh)*3600 + int64(om)*60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return bad()
	}
	if sub {
		return 0, kindErrf(ErrRange, "%s is more precise than a microsecond", quoteShort(b))
	}
	ts := days*microsPerDay + clock - offset*microsPerSecond
	if ts < minTimestamp || ts > maxTimestamp {
		return 0, kindErrf(ErrRange, "%s is outside years 0000-9999 in UTC", quoteShort(b))
	}
	return ts, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseUUID parses the canonical 36-character form, hex digits of either case.
func parseUUID(b []byte) (u uuid.UUID, ok bool) {
	if len(b) != 36 || b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(b[i])
		lo, ok2 := unhex(b[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return u, true
}

// plural spells "1 digit", "2 digits".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
