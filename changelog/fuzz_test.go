package changelog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/icesink/icesink/deltawriter"
)

// Run with e.g.
//
//	go test ./changelog -run '^$' -fuzz FuzzChangelogJSON -fuzztime 60s
//	go test ./changelog -run '^$' -fuzz FuzzDebeziumJSON -fuzztime 60s

var changelogSeeds = []string{
	`{"op":"+I","data":{"k":1,"k2":"a","req":0}}`,
	`{"op":"+I","data":{"k":1,"k2":"a","req":0,"b":true,"i":-5,"l":1e3,"f":"NaN","d":-0.0,"dec":"-1.50","dec38":1e-10,"dt":"2024-02-29","t":"23:59:59.999999","ts":"2024-01-02 03:04:05+01:00","tz":"2024-01-02T03:04:05Z","s":"\u00e9\ud83c\udf89\n","u":"123e4567-e89b-12d3-a456-426614174000","bin":"AAEC/w==","fx":"AAECAw=="}}`,
	`{"data":{"k":"9223372036854775807","k2":"","req":2147483647},"op":"+U"}`,
	`{"op":"-D","data":{"k":-9223372036854775808,"k2":"x"}}`,
	`{"op":"-U","data":{"k":0,"k2":"x","req":null,"dt":-1}}`,
	`{"barrier":true}`,
	"\r\n\n  \t\r\n",
	`{"op":"+I","data":{"k":1.5,"k2":"a","req":0}}`,
	`{"op":"+I","data":{"k":1,"k2":"a","req":0,"dec":1.55}}`,
	`{"op":"+I","data":{"k":1,"k2":null,"req":0}}`,
	`{"op":"+X","data":{}}`,
	`{"op":"+I","data":{"k":1,"k2":"a","req":0,"zz":1}}`,
	`{"op":"+I","data":{"k":1,"k2":"a","req":0,"k":2}}`,
	`{"op":"+I","data":{"k":1,"k2":"a"}}`,
	`{"op":"+I"`,
	`[]`,
	"{\"op\":\"+I\",\"data\":{\"k\":1,\"k2\":\"\xff\",\"req\":0}}",
	`{"x":[[[[{"y":[true,false,null,"s",-1.5e-3]}]]]],"op":"-D","data":{"k":1,"k2":"a"}}`,
}

var debeziumSeeds = []string{
	`{"before":null,"after":{"k":1,"k2":"a","req":0},"op":"c","source":{"x":1},"ts_ms":1}`,
	`{"op":"r","after":{"k":1,"k2":"a","req":0,"s":"\u0000"}}`,
	`{"before":{"k":1,"k2":"a"},"after":{"k":2,"k2":"b","req":1},"op":"u"}`,
	`{"after":{"k":2,"k2":"b","req":1},"op":"u"}`,
	`{"before":{"k":1,"k2":"a","req":null},"after":null,"op":"d"}`,
	`{"schema":{"type":"struct","fields":[]},"payload":{"before":null,"after":{"k":1,"k2":"a","req":0,"ts":"2024-01-02T03:04:05"},"op":"c"}}`,
	`{"schema":null,"payload":null}`,
	`null`,
	`{"barrier":true}`,
	`{"op":"t"}`,
	`{"op":"c","after":null}`,
	`{"op":"u","after":{"k":1,"k2":"a","req":null}}`,
	`{"payload":"x"}`,
	`{"op":"c","payload":{}}`,
}

// countLines counts lines as the decoder does: every '\n' ends one, and a
// final unterminated line counts too.
func countLines(data []byte) int64 {
	n := int64(bytes.Count(data, []byte("\n")))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

func nthLine(data []byte, n int64) []byte {
	lines := bytes.Split(data, []byte("\n"))
	return lines[n-1]
}

func addSeeds(f *testing.F, seeds []string, debezium bool) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	var all []byte
	for _, s := range seeds {
		all = append(append(all, s...), '\n')
	}
	f.Add(all)
	// Encoder output of random rows.
	enc, err := NewEncoder(allTypesSchema())
	if err != nil {
		f.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		var line []byte
		if debezium {
			line, err = enc.AppendDebeziumJSON(nil, randRow(r, enc.plan, false), randRow(r, enc.plan, true))
		} else {
			line, err = enc.AppendChangelogJSON(nil, deltawriter.Change{Op: deltawriter.Insert, Row: randRow(r, enc.plan, true)})
		}
		if err != nil {
			f.Fatal(err)
		}
		f.Add(line)
	}
}

func FuzzChangelogJSON(f *testing.F) {
	addSeeds(f, changelogSeeds, false)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, ChangelogJSON, data) })
}

func FuzzDebeziumJSON(f *testing.F) {
	addSeeds(f, debeziumSeeds, true)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecode(t, DebeziumJSON, data) })
}

// fuzzDecode checks: no panic; every error is a *LineError with a line
// number within the input; every accepted line is valid JSON; every decoded
// change re-encodes to a line that decodes to the same change.
func fuzzDecode(t *testing.T, format Format, data []byte) {
	schema := allTypesSchema()
	enc, err := NewEncoder(schema)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(bytes.NewReader(data), format, schema)
	if err != nil {
		t.Fatal(err)
	}
	lines := countLines(data)
	var buf []byte
	for {
		rec, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("error %v (%T) is not a *LineError", err, err)
			}
			matched := 0
			for _, kind := range []error{ErrSyntax, ErrRecord, ErrUnknownOp, ErrUnknownColumn, ErrDuplicateKey, ErrType, ErrRange, ErrNull, ErrUnsupported, ErrLineTooLong} {
				if errors.Is(err, kind) {
					matched++
				}
			}
			if matched != 1 {
				t.Fatalf("error %v matches %d categories, want 1", err, matched)
			}
			if le.Line < 1 || le.Line > lines || le.Line != d.Line() {
				t.Fatalf("error on line %d, input has %d lines, decoder at %d: %v", le.Line, lines, d.Line(), err)
			}
			continue // the decoder goes on after a bad line
		}
		if rec.Line < 1 || rec.Line > lines {
			t.Fatalf("record on line %d, input has %d lines", rec.Line, lines)
		}
		line := nthLine(data, rec.Line)
		if !json.Valid(bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))) {
			t.Fatalf("line %d accepted but not valid JSON: %q", rec.Line, line)
		}
		if rec.Barrier != (len(rec.Changes) == 0) {
			t.Fatalf("line %d: barrier %v with %d changes", rec.Line, rec.Barrier, len(rec.Changes))
		}
		if format == ChangelogJSON && !rec.Barrier {
			compareStrings(t, line, rec.Changes[0].Row)
		}
		for _, c := range rec.Changes {
			buf, err = enc.AppendChangelogJSON(buf[:0], c)
			if err != nil {
				t.Fatalf("line %d: decoded %v %#v does not encode: %v", rec.Line, c.Op, c.Row, err)
			}
			got, err := decodeAll(t, ChangelogJSON, schema, string(buf))
			if err != nil || len(got) != 1 || len(got[0].Changes) != 1 {
				t.Fatalf("line %d: re-encoded %s does not decode: %v", rec.Line, buf, err)
			}
			if g := got[0].Changes[0]; g.Op != c.Op || !sameRow(g.Row, c.Row) {
				t.Fatalf("line %d: round trip through %s\n got %v %#v\nwant %v %#v", rec.Line, buf, g.Op, g.Row, c.Op, c.Row)
			}
		}
		if format == DebeziumJSON && !rec.Barrier {
			debeziumRoundTrip(t, enc, rec)
		}
	}
	if d.Line() != lines {
		t.Fatalf("decoder consumed %d lines, input has %d", d.Line(), lines)
	}
}

// debeziumRoundTrip re-encodes a Debezium record through the encoder.
func debeziumRoundTrip(t *testing.T, enc *Encoder, rec Record) {
	var before, after []any
	switch c := rec.Changes; {
	case len(c) == 2:
		before, after = c[0].Row, c[1].Row
	case c[0].Op == deltawriter.Insert:
		after = c[0].Row
	case c[0].Op == deltawriter.Delete:
		before = c[0].Row
	default:
		return // +U without a before image: the encoder spells it "c"
	}
	line, err := enc.AppendDebeziumJSON(nil, before, after)
	if err != nil {
		t.Fatalf("line %d: does not encode as Debezium: %v", rec.Line, err)
	}
	got, err := decodeAll(t, DebeziumJSON, allTypesSchema(), string(line))
	if err != nil || len(got) != 1 || len(got[0].Changes) != len(rec.Changes) {
		t.Fatalf("line %d: re-encoded %s: %v", rec.Line, line, err)
	}
	for i, g := range got[0].Changes {
		if w := rec.Changes[i]; g.Op != w.Op || !sameRow(g.Row, w.Row) {
			t.Fatalf("line %d: Debezium round trip through %s\n got %v %#v\nwant %v %#v", rec.Line, line, g.Op, g.Row, w.Op, w.Row)
		}
	}
}

// compareStrings checks the decoded string columns against encoding/json.
func compareStrings(t *testing.T, line []byte, row []any) {
	var v struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")), &v); err != nil {
		t.Fatalf("encoding/json rejects accepted line %q: %v", line, err)
	}
	for i, c := range allTypesSchema().Fields() {
		s, ok := row[i].(string)
		if !ok {
			continue
		}
		var want string
		if err := json.Unmarshal(v.Data[c.Name], &want); err != nil || want != s {
			t.Fatalf("column %s: decoded %q, encoding/json %q (%v)", c.Name, s, want, err)
		}
	}
}
