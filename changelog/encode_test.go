package changelog

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/icesink/icesink/deltawriter"
)

// randValue returns a random value of column c, biased to edge cases.
func randValue(r *rand.Rand, c *column) any {
	edge := r.IntN(4) == 0
	switch c.kind {
	case kBool:
		return r.IntN(2) == 0
	case kInt:
		if edge {
			return []int32{0, -1, math.MaxInt32, math.MinInt32}[r.IntN(4)]
		}
		return int32(r.Uint32())
	case kLong:
		if edge {
			return []int64{0, -1, math.MaxInt64, math.MinInt64}[r.IntN(4)]
		}
		return int64(r.Uint64())
	case kFloat:
		if edge {
			return []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
				math.MaxFloat32, math.SmallestNonzeroFloat32, -math.MaxFloat32}[r.IntN(8)]
		}
		return math.Float32frombits(r.Uint32())
	case kDouble:
		if edge {
			return []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1),
				math.MaxFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, 0.1}[r.IntN(9)]
		}
		return math.Float64frombits(r.Uint64())
	case kDecimal:
		maxv := decimal128.GetMaxValue(int32(c.prec))
		if edge {
			return []decimal128.Num{{}, maxv, maxv.Negate(), decimal128.FromI64(1), decimal128.FromI64(-1)}[r.IntN(5)]
		}
		v := decimal128.New(int64(r.Uint64()), r.Uint64())
		_, rem := v.Div(maxv.Add(decimal128.FromI64(1)))
		return rem
	case kDate:
		if edge {
			return []int32{0, minDay, maxDay, minDay - 1, maxDay + 1, math.MinInt32, math.MaxInt32}[r.IntN(7)]
		}
		return int32(minDay + r.IntN(maxDay-minDay+1))
	case kTime:
		if edge {
			return []int64{0, microsPerDay - 1, 1, 1_000_000}[r.IntN(4)]
		}
		return r.Int64N(microsPerDay)
	case kTimestamp, kTimestampTz:
		if edge {
			return []int64{0, -1, minTimestamp, maxTimestamp}[r.IntN(4)]
		}
		return minTimestamp + r.Int64N(maxTimestamp-minTimestamp+1)
	case kString:
		if edge {
			return []string{"", "\x00", `"\/`, "\u2028\u2029", "\x7f", "🎉 日本 é", "\t\r\n\b\f\x1f"}[r.IntN(7)]
		}
		var b strings.Builder
		for range r.IntN(20) {
			rs := []rune("aé世🎉\"\\\n\x01 ~")
			b.WriteRune(rs[r.IntN(len(rs))])
		}
		return b.String()
	case kUUID:
		var u uuid.UUID
		for i := range u {
			u[i] = byte(r.Uint32())
		}
		return u
	case kBinary, kFixed:
		n := c.size
		if c.kind == kBinary {
			n = r.IntN(12)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	panic("kind")
}

func randRow(r *rand.Rand, p *plan, full bool) []any {
	row := make([]any, len(p.cols))
	for i := range p.cols {
		c := &p.cols[i]
		if !c.key && !(full && c.required) && r.IntN(5) == 0 {
			continue // nil
		}
		row[i] = randValue(r, c)
	}
	return row
}

func TestEncodeRoundTrip(t *testing.T) {
	schema := allTypesSchema()
	enc, err := NewEncoder(schema)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ops := []deltawriter.Op{deltawriter.Insert, deltawriter.UpdateBefore, deltawriter.UpdateAfter, deltawriter.Delete}
	var input []byte
	var want []deltawriter.Change
	for range 5000 {
		op := ops[r.IntN(4)]
		c := deltawriter.Change{Op: op, Row: randRow(r, enc.plan, !op.IsDelete())}
		if input, err = enc.AppendChangelogJSON(input, c); err != nil {
			t.Fatal(err)
		}
		input = append(input, '\n')
		want = append(want, c)
	}
	got, err := decodeAll(t, ChangelogJSON, schema, string(input))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d records, want %d", len(got), len(want))
	}
	for i, rec := range got {
		g, w := rec.Changes[0], want[i]
		if g.Op != w.Op || !sameRow(g.Row, w.Row) {
			line := strings.Split(string(input), "\n")[i]
			t.Fatalf("line %d %s\n got %v %#v\nwant %v %#v", i+1, line, g.Op, g.Row, w.Op, w.Row)
		}
	}
}

func TestEncodeDebeziumRoundTrip(t *testing.T) {
	schema := allTypesSchema()
	enc, _ := NewEncoder(schema)
	r := rand.New(rand.NewPCG(3, 4))
	var input []byte
	var want [][]deltawriter.Change
	for range 2000 {
		var before, after []any
		switch r.IntN(3) {
		case 0:
			after = randRow(r, enc.plan, true)
			want = append(want, []deltawriter.Change{{Op: deltawriter.Insert, Row: after}})
		case 1:
			before, after = randRow(r, enc.plan, false), randRow(r, enc.plan, true)
			want = append(want, []deltawriter.Change{{Op: deltawriter.UpdateBefore, Row: before}, {Op: deltawriter.UpdateAfter, Row: after}})
		case 2:
			before = randRow(r, enc.plan, false)
			want = append(want, []deltawriter.Change{{Op: deltawriter.Delete, Row: before}})
		}
		var err error
		if input, err = enc.AppendDebeziumJSON(input, before, after); err != nil {
			t.Fatal(err)
		}
		input = append(input, '\n')
	}
	got, err := decodeAll(t, DebeziumJSON, schema, string(input))
	if err != nil {
		t.Fatal(err)
	}
	for i, rec := range got {
		if len(rec.Changes) != len(want[i]) {
			t.Fatalf("record %d: %d changes, want %d", i, len(rec.Changes), len(want[i]))
		}
		for j, g := range rec.Changes {
			if w := want[i][j]; g.Op != w.Op || !sameRow(g.Row, w.Row) {
				t.Fatalf("record %d change %d: got %v %v, want %v %v", i, j, g.Op, g.Row, w.Op, w.Row)
			}
		}
	}
}

func TestEncodeGolden(t *testing.T) {
	schema := allTypesSchema()
	row := []any{int64(-7), "k\"2", true, int32(1), int64(2), float32(0.1), math.Inf(-1),
		decimal128.FromI64(-15), decimal128.FromI64(5), days("2024-01-02"), int64(3723_000_001),
		micros("2024-01-02T03:04:05.5Z"), micros("1969-12-31T23:59:59Z"), "é\n",
		uuid.MustParse("123E4567-E89B-12D3-A456-426614174000"), []byte{}, []byte{0, 1, 2, 255}, int32(0)}
	got, err := EncodeChangelogJSON(schema, deltawriter.Change{Op: deltawriter.UpdateAfter, Row: row})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"op":"+U","data":{"k":-7,"k2":"k\"2","b":true,"i":1,"l":2,"f":0.1,"d":"-Infinity","dec":"-1.5","dec38":"0.0000000005",` +
		`"dt":"2024-01-02","t":"01:02:03.000001","ts":"2024-01-02T03:04:05.500000","tz":"1969-12-31T23:59:59Z","s":"é\n",` +
		`"u":"123e4567-e89b-12d3-a456-426614174000","bin":"","fx":"AAEC/w==","req":0}}`
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	row[0], row[2], row[17] = int64(1), nil, nil
	got, err = NewEncoderMust(t, schema).AppendDebeziumJSON([]byte("x"), row, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, []byte(`x{"before":{"k":1,"k2":"k\"2","b":null,`)) || !bytes.HasSuffix(got, []byte(`"req":null},"after":null,"op":"d"}`)) {
		t.Fatalf("got %s", got)
	}
	if string(must(EncodeChangelogJSON(smallSchema(), deltawriter.Change{Op: deltawriter.Delete, Row: []any{int64(5), nil, nil}}))) !=
		`{"op":"-D","data":{"id":5,"name":null,"qty":null}}` {
		t.Fatal("delete encoding")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func NewEncoderMust(t *testing.T, s *iceberg.Schema) *Encoder {
	e, err := NewEncoder(s)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEncodeRejects(t *testing.T) {
	schema := allTypesSchema()
	enc := NewEncoderMust(t, schema)
	base := func() []any {
		row := make([]any, len(enc.plan.cols))
		row[0], row[1], row[17] = int64(1), "a", int32(0)
		return row
	}
	set := func(col string, v any) []any {
		row := base()
		row[colIndex(t, schema, col)] = v
		return row
	}
	tests := []struct {
		name string
		ch   deltawriter.Change
		want string
	}{
		{"bad op", deltawriter.Change{Op: 0, Row: base()}, "changelog: encode: invalid op Op(0)"},
		{"short row", deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(1)}}, "changelog: encode: row has 1 values, the schema 18 columns"},
		{"nil key", deltawriter.Change{Op: deltawriter.Delete, Row: set("k", nil)}, `changelog: encode: column "k": nil in a required column`},
		{"nil required", deltawriter.Change{Op: deltawriter.Insert, Row: set("req", nil)}, `changelog: encode: column "req": nil in a required column`},
		{"wrong type", deltawriter.Change{Op: deltawriter.Insert, Row: set("i", 5)}, `changelog: encode: column "i": a int value must be int32, got int`},
		{"wrong time type", deltawriter.Change{Op: deltawriter.Insert, Row: set("ts", "2024-01-01")}, `changelog: encode: column "ts": a timestamp value must be int64, got string`},
		{"decimal too big", deltawriter.Change{Op: deltawriter.Insert, Row: set("dec", decimal128.FromI64(100000))}, `changelog: encode: column "dec": unscaled value 100000 does not fit decimal(5, 1)`},
		{"fixed length", deltawriter.Change{Op: deltawriter.Insert, Row: set("fx", []byte{1})}, `changelog: encode: column "fx": 1 bytes, fixed[4] needs exactly 4`},
		{"bad utf-8", deltawriter.Change{Op: deltawriter.Insert, Row: set("s", "\xff")}, `changelog: encode: column "s": string is not valid UTF-8`},
		{"time range", deltawriter.Change{Op: deltawriter.Insert, Row: set("t", int64(microsPerDay))}, `changelog: encode: column "t": 86400000000 µs is not a time of day`},
		{"timestamp range", deltawriter.Change{Op: deltawriter.Insert, Row: set("tz", int64(maxTimestamp+1))}, `changelog: encode: column "tz": 253402300800000000 µs is outside years 0000-9999`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := enc.AppendChangelogJSON(nil, tt.ch)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
	if _, err := enc.AppendDebeziumJSON(nil, nil, nil); err == nil {
		t.Fatal("an event without images was encoded")
	}
	if _, err := enc.AppendDebeziumJSON(nil, nil, set("req", nil)); err == nil {
		t.Fatal("an after image with a nil required column was encoded")
	}
}
