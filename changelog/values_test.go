package changelog

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/google/uuid"
)

func days(s string) int32 {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		panic(err)
	}
	return int32(t.Unix() / 86400)
}

func micros(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMicro()
}

func dec(s string) decimal128.Num {
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic(s)
	}
	return decimal128.FromBigInt(b)
}

// decodeValue decodes one +I line whose column col holds the JSON text v
// and returns the decoded value.
func decodeValue(t *testing.T, col, v string) (any, error) {
	t.Helper()
	schema := allTypesSchema()
	line := fmt.Sprintf(`{"op":"+I","data":{"k":1,"k2":"a","req":0,%q:%s}}`, col, v)
	recs, err := decodeAll(t, ChangelogJSON, schema, line)
	if err != nil {
		return nil, err
	}
	if len(recs) != 1 || len(recs[0].Changes) != 1 {
		t.Fatalf("decoded %+v, want one change", recs)
	}
	return recs[0].Changes[0].Row[colIndex(t, schema, col)], nil
}

func TestValuesAccepted(t *testing.T) {
	u := uuid.MustParse("123e4567-e89b-12d3-a456-426614174000")
	tests := []struct {
		col, json string
		want      any
	}{
		{"b", `true`, true},
		{"b", `false`, false},
		{"b", `null`, nil},

		{"i", `0`, int32(0)},
		{"i", `-0`, int32(0)},
		{"i", `42`, int32(42)},
		{"i", `1.0`, int32(1)},
		{"i", `1e2`, int32(100)},
		{"i", `1E+2`, int32(100)},
		{"i", `100e-2`, int32(1)},
		{"i", `0.000e999999999999999999999`, int32(0)},
		{"i", `2147483647`, int32(math.MaxInt32)},
		{"i", `-2147483648`, int32(math.MinInt32)},
		{"i", `"17"`, int32(17)},
		{"i", `"-1.0e1"`, int32(-10)},

		{"l", `9223372036854775807`, int64(math.MaxInt64)},
		{"l", `-9223372036854775808`, int64(math.MinInt64)},
		{"l", `9.223372036854775807e18`, int64(math.MaxInt64)},
		{"l", `922337203685477580.7e1`, int64(math.MaxInt64)},
		{"l", `12345678901234567890000e-4`, int64(1234567890123456789)},
		{"l", `"9223372036854775807"`, int64(math.MaxInt64)},
		{"l", `1000000000000000000`, int64(1e18)},

		{"f", `1.5`, float32(1.5)},
		{"f", `-0`, float32(math.Copysign(0, -1))},
		{"f", `3.4028234663852886e38`, float32(math.MaxFloat32)},
		{"f", `1e-50`, float32(0)},
		{"f", `0.1`, float32(0.1)},
		{"f", `"NaN"`, float32(math.NaN())},
		{"f", `"Infinity"`, float32(math.Inf(1))},
		{"f", `"-Infinity"`, float32(math.Inf(-1))},
		{"f", `"2.5"`, float32(2.5)},
		{"d", `0.1`, 0.1},
		{"d", `1e308`, 1e308},
		{"d", `-1.7976931348623157e308`, -math.MaxFloat64},
		{"d", `5e-324`, 5e-324},
		{"d", `1e-400`, 0.0},
		{"d", `123456789012345678901234567890`, 123456789012345678901234567890.0},
		{"d", `"NaN"`, math.NaN()},
		{"d", `"-Infinity"`, math.Inf(-1)},

		{"dec", `1.5`, dec("15")},
		{"dec", `1.50`, dec("15")},
		{"dec", `-1.5`, dec("-15")},
		{"dec", `1234.5`, dec("12345")},
		{"dec", `-9999.9`, dec("-99999")},
		{"dec", `"1.5"`, dec("15")},
		{"dec", `"-0.0"`, dec("0")},
		{"dec", `0`, dec("0")},
		{"dec", `1e3`, dec("10000")},
		{"dec", `15e-1`, dec("15")},
		{"dec", `0.00000000000000000000000000000000000000000000000000000000000`, dec("0")},
		{"dec", `1.5000000000000000000000000000000000000000000000000000000000`, dec("15")},
		{"dec38", `9999999999999999999999999999.9999999999`, dec("99999999999999999999999999999999999999")},
		{"dec38", `-9999999999999999999999999999.9999999999`, dec("-99999999999999999999999999999999999999")},
		{"dec38", `"0.0000000001"`, dec("1")},
		{"dec38", `123456789012345678.9`, dec("1234567890123456789000000000")},

		{"dt", `"2024-01-02"`, days("2024-01-02")},
		{"dt", `"1970-01-01"`, int32(0)},
		{"dt", `"1969-12-31"`, int32(-1)},
		{"dt", `"2000-02-29"`, days("2000-02-29")},
		{"dt", `"0000-01-01"`, int32(minDay)},
		{"dt", `"9999-12-31"`, int32(maxDay)},
		{"dt", `19724`, days("2024-01-02")},
		{"dt", `-1`, int32(-1)},
		{"dt", `2147483647`, int32(math.MaxInt32)},

		{"t", `"00:00:00"`, int64(0)},
		{"t", `"03:04:05"`, int64((3*3600 + 4*60 + 5) * 1e6)},
		{"t", `"03:04:05.1"`, int64((3*3600+4*60+5)*1e6 + 100000)},
		{"t", `"03:04:05.123456"`, int64((3*3600+4*60+5)*1e6 + 123456)},
		{"t", `"23:59:59.999999000"`, int64(86400e6 - 1)},

		{"ts", `"2024-01-02T03:04:05.123456"`, micros("2024-01-02T03:04:05.123456Z")},
		{"ts", `"2024-01-02 03:04:05"`, micros("2024-01-02T03:04:05Z")},
		{"ts", `"2024-01-02t03:04:05z"`, micros("2024-01-02T03:04:05Z")},
		{"ts", `"2024-01-02T03:04:05+02:00"`, micros("2024-01-02T01:04:05Z")},
		{"ts", `"1969-12-31T23:59:59.999999"`, int64(-1)},
		{"ts", `"0000-01-01T00:00:00"`, int64(minTimestamp)},
		{"ts", `"9999-12-31T23:59:59.999999Z"`, int64(maxTimestamp)},
		{"tz", `"2024-01-02T03:04:05.5Z"`, micros("2024-01-02T03:04:05.5Z")},
		{"tz", `"2024-01-02T03:04:05-07:30"`, micros("2024-01-02T10:34:05Z")},
		{"tz", `"2024-01-02T03:04:05-00:00"`, micros("2024-01-02T03:04:05Z")},

		{"s", `""`, ""},
		{"s", `"héllo, 世界 🎉"`, "héllo, 世界 🎉"},
		{"s", `"\u00e9\u4e16\ud83c\udf89"`, "é世🎉"},
		{"s", `"a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t"},
		{"s", `"\u0000"`, "\x00"},

		{"u", `"123e4567-e89b-12d3-a456-426614174000"`, u},
		{"u", `"123E4567-E89B-12D3-A456-426614174000"`, u},

		{"bin", `""`, []byte{}},
		{"bin", `"AAEC/w=="`, []byte{0, 1, 2, 255}},
		{"bin", `"aGVsbG8="`, []byte("hello")},
		{"fx", `"AAEC/w=="`, []byte{0, 1, 2, 255}},
		{"fx", `"AAEC\/w=="`, []byte{0, 1, 2, 255}},
	}
	for _, tt := range tests {
		t.Run(tt.col+"="+tt.json, func(t *testing.T) {
			got, err := decodeValue(t, tt.col, tt.json)
			if err != nil {
				t.Fatal(err)
			}
			if !sameValue(got, tt.want) {
				t.Fatalf("got %#v (%T), want %#v (%T)", got, got, tt.want, tt.want)
			}
		})
	}
}

func TestValuesRejected(t *testing.T) {
	tests := []struct {
		col, json string
		kind      error
		msg       string // a substring of the message
	}{
		{"b", `1`, ErrType, "boolean needs true or false, got a number"},
		{"b", `"true"`, ErrType, "got a string"},
		{"b", `tru`, ErrSyntax, ""},

		{"i", `1.5`, ErrType, "is not an integer"},
		{"i", `1e-1`, ErrType, "is not an integer"},
		{"i", `2147483648`, ErrRange, "does not fit an int"},
		{"i", `-2147483649`, ErrRange, "does not fit an int"},
		{"i", `"abc"`, ErrType, `int needs a JSON number or a string holding one, got the string "abc"`},
		{"i", `" 1"`, ErrType, ""},
		{"i", `"+1"`, ErrType, ""},
		{"i", `""`, ErrType, ""},
		{"i", `true`, ErrType, "got a boolean"},
		{"i", `{}`, ErrType, "got an object"},
		{"i", `[1]`, ErrType, "got an array"},
		{"i", `01`, ErrSyntax, "leading zero"},
		{"i", `+1`, ErrSyntax, ""},
		{"i", `.5`, ErrSyntax, ""},
		{"i", `1.`, ErrSyntax, "no digits after the decimal point"},
		{"i", `1e`, ErrSyntax, "no digits in the exponent"},
		{"i", `-`, ErrSyntax, ""},
		{"i", `NaN`, ErrSyntax, ""},
		{"l", `9223372036854775808`, ErrRange, "does not fit a 64-bit integer"},
		{"l", `-9223372036854775809`, ErrRange, ""},
		{"l", `1e19`, ErrRange, ""},
		{"l", `1e999999999999999999999`, ErrRange, ""},
		{"l", `18446744073709551616`, ErrRange, ""},
		{"l", `99999999999999999999`, ErrRange, ""},

		{"f", `1e39`, ErrRange, "does not fit a float"},
		{"f", `"nan"`, ErrType, ""},
		{"f", `"Inf"`, ErrType, ""},
		{"f", `"0x1p3"`, ErrType, ""},
		{"f", `"1_0"`, ErrType, ""},
		{"d", `1e309`, ErrRange, "does not fit a double"},
		{"d", `-1e309`, ErrRange, ""},
		{"d", `false`, ErrType, ""},

		{"dec", `1.55`, ErrRange, `"1.55" would need rounding: decimal(5, 1) keeps 1 digit after the point`},
		{"dec", `10000`, ErrRange, "keeps 4 digits before the point"},
		{"dec", `-10000.0`, ErrRange, ""},
		{"dec", `1e4`, ErrRange, ""},
		{"dec", `0.01`, ErrRange, ""},
		{"dec", `"1,5"`, ErrType, ""},
		{"dec", `"1.5 "`, ErrType, ""},
		{"dec", `true`, ErrType, ""},
		{"dec38", `10000000000000000000000000000`, ErrRange, ""},
		{"dec38", `0.00000000001`, ErrRange, ""},

		{"dt", `"2024-1-02"`, ErrType, `"2024-1-02" is not a date (YYYY-MM-DD)`},
		{"dt", `"2024-02-30"`, ErrType, ""},
		{"dt", `"2023-02-29"`, ErrType, ""},
		{"dt", `"1900-02-29"`, ErrType, ""},
		{"dt", `"2024-13-01"`, ErrType, ""},
		{"dt", `"2024-00-01"`, ErrType, ""},
		{"dt", `"2024-01-00"`, ErrType, ""},
		{"dt", `"2024-01-02T00:00:00"`, ErrType, ""},
		{"dt", `"-001-01-01"`, ErrType, ""},
		{"dt", `2147483648`, ErrRange, ""},
		{"dt", `1.5`, ErrType, ""},
		{"dt", `true`, ErrType, ""},

		{"t", `"24:00:00"`, ErrType, ""},
		{"t", `"12:60:00"`, ErrType, ""},
		{"t", `"12:00:60"`, ErrType, ""},
		{"t", `"12:00"`, ErrType, ""},
		{"t", `"12:00:00."`, ErrType, ""},
		{"t", `"12:00:00.1234567891"`, ErrType, ""},
		{"t", `"12:00:00.0000001"`, ErrRange, "more precise than a microsecond"},
		{"t", `"12:00:00Z"`, ErrType, ""},
		{"t", `3600000000`, ErrType, "time needs an \"HH:MM:SS[.ffffff]\" string, got a number"},

		{"ts", `"2024-01-02"`, ErrType, "is not an RFC 3339 timestamp"},
		{"ts", `"2024-01-02T03:04"`, ErrType, ""},
		{"ts", `"2024-01-02X03:04:05"`, ErrType, ""},
		{"ts", `"2024-01-02T03:04:05+0200"`, ErrType, ""},
		{"ts", `"2024-01-02T03:04:05+24:00"`, ErrType, ""},
		{"ts", `"2024-01-02T03:04:05 Z"`, ErrType, ""},
		{"ts", `"2024-02-30T03:04:05"`, ErrType, ""},
		{"ts", `"0000-01-01T00:00:00+00:01"`, ErrRange, "outside years 0000-9999"},
		{"ts", `"9999-12-31T23:59:59-00:01"`, ErrRange, ""},
		{"ts", `"2024-01-02T03:04:05.0000001"`, ErrRange, "more precise than a microsecond"},
		{"ts", `1704164645000000`, ErrType, "timestamp needs an RFC 3339 string, got a number"},
		{"tz", `"2024-01-02T03:04:05"`, ErrType, "has no UTC offset; timestamptz needs one"},
		{"tz", `"2024-01-02T03:04:05.123456789+00:00"`, ErrRange, ""},

		{"s", `1`, ErrType, "string needs a string, got a number"},
		{"s", `"\x"`, ErrSyntax, `invalid escape`},
		{"s", `"\u12"`, ErrSyntax, `invalid \u escape`},
		{"s", `"\ud800"`, ErrSyntax, "unpaired UTF-16 surrogate"},
		{"s", `"\udc00"`, ErrSyntax, "unpaired UTF-16 surrogate"},
		{"s", `"\ud800\u0041"`, ErrSyntax, "unpaired UTF-16 surrogate"},
		{"s", "\"a\x01b\"", ErrSyntax, "control character"},
		{"s", "\"a\tb\"", ErrSyntax, "control character"},
		{"s", "\"\xff\"", ErrSyntax, "invalid UTF-8"},
		{"s", "\"\xed\xa0\x80\"", ErrSyntax, "invalid UTF-8"}, // an encoded surrogate
		{"s", "\"\xc0\x80\"", ErrSyntax, "invalid UTF-8"},     // overlong NUL
		{"s", `"abc`, ErrSyntax, ""},

		{"u", `"123e4567e89b12d3a456426614174000"`, ErrType, "not a canonical UUID"},
		{"u", `"{123e4567-e89b-12d3-a456-426614174000}"`, ErrType, ""},
		{"u", `"urn:uuid:123e4567-e89b-12d3-a456-426614174000"`, ErrType, ""},
		{"u", `"123e4567-e89b-12d3-a456-42661417400g"`, ErrType, ""},
		{"u", `123`, ErrType, ""},

		{"bin", `"AAEC/w"`, ErrType, "not standard padded base64"},
		{"bin", `"AAEC_w=="`, ErrType, ""},
		{"bin", `"AAEC/x=="`, ErrType, ""}, // non-zero trailing bits
		{"bin", `[0,1]`, ErrType, ""},
		{"fx", `"AAEC"`, ErrRange, "3 bytes, fixed[4] needs exactly 4"},
		{"fx", `"AAECAwQ="`, ErrRange, ""},
	}
	for _, tt := range tests {
		t.Run(tt.col+"="+tt.json, func(t *testing.T) {
			got, err := decodeValue(t, tt.col, tt.json)
			if err == nil {
				t.Fatalf("decoded %#v, want an error", got)
			}
			le := lineErr(t, err)
			if le.Line != 1 {
				t.Errorf("line %d, want 1", le.Line)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error %q is not %v", err, tt.kind)
			}
			if tt.kind != ErrSyntax && le.Field != tt.col {
				t.Errorf("field %q, want %q (error %q)", le.Field, tt.col, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

func TestCivilDays(t *testing.T) {
	for _, d := range []int64{minDay, minDay + 1, -146097, -1, 0, 1, 59, 60, 365, 11016, 19724, maxDay - 1, maxDay} {
		y, m, dd := civilFromDays(d)
		if got := daysFromCivil(y, m, dd); got != d {
			t.Errorf("day %d -> %04d-%02d-%02d -> %d", d, y, m, dd, got)
		}
		want := time.Unix(d*86400, 0).UTC()
		if want.Year() != y || int(want.Month()) != m || want.Day() != dd {
			t.Errorf("day %d: got %04d-%02d-%02d, time package says %s", d, y, m, dd, want.Format("2006-01-02"))
		}
	}
	if got := daysFromCivil(0, 1, 1); got != minDay {
		t.Errorf("0000-01-01 is day %d, minDay is %d", got, minDay)
	}
	if got := daysFromCivil(9999, 12, 31); got != maxDay {
		t.Errorf("9999-12-31 is day %d, maxDay is %d", got, maxDay)
	}
}
