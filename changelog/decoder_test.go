package changelog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/deltawriter"
)

// smallSchema is (id long key, name string, qty int required).
func smallSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.StringType{}},
		iceberg.NestedField{ID: 3, Name: "qty", Type: iceberg.Int32Type{}, Required: true},
	)
}

// compositeSchema is (tenant string key, id long key, v string).
func compositeSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{2, 1},
		iceberg.NestedField{ID: 1, Name: "tenant", Type: iceberg.StringType{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.StringType{}},
	)
}

// rec is a compact expected record.
type rec struct {
	line    int64
	barrier bool
	changes []deltawriter.Change
}

func ch(op deltawriter.Op, row ...any) deltawriter.Change {
	return deltawriter.Change{Op: op, Row: row}
}

func checkRecords(t *testing.T, got []Record, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Line != w.line || g.Barrier != w.barrier || len(g.Changes) != len(w.changes) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, w)
		}
		for j := range w.changes {
			if g.Changes[j].Op != w.changes[j].Op || !sameRow(g.Changes[j].Row, w.changes[j].Row) {
				t.Fatalf("record %d change %d: got %v %v, want %v %v", i, j,
					g.Changes[j].Op, g.Changes[j].Row, w.changes[j].Op, w.changes[j].Row)
			}
		}
	}
}

func TestChangelogJSON(t *testing.T) {
	input := strings.Join([]string{
		`{"op":"+I","data":{"id":1,"name":"a","qty":10}}`,
		`{"data":{"qty":11,"id":2},"op":"+I"}`, // member order is free; absent optional column is nil
		``,
		`   `,
		`{"op":"-U","data":{"id":1,"name":"a","qty":10}}`,
		`{"op":"+U","data":{"id":1,"name":null,"qty":12}, "ts":123, "meta":{"x":[1,2,{"y":null}]}}`, // unknown top-level members are ignored
		`{"barrier":true}`,
		`{"op":"-D","data":{"id":2}}`, // deletes need only the key
		"\t{ \"op\" : \"-U\" , \"data\" : { \"id\" : 3 , \"qty\" : null } }\t",
		`{"barrier":false,"op":"+I","data":{"id":4,"qty":0}}`,
	}, "\n") + "\n"
	got, err := decodeAll(t, ChangelogJSON, smallSchema(), input)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, []rec{
		{line: 1, changes: []deltawriter.Change{ch(deltawriter.Insert, int64(1), "a", int32(10))}},
		{line: 2, changes: []deltawriter.Change{ch(deltawriter.Insert, int64(2), nil, int32(11))}},
		{line: 5, changes: []deltawriter.Change{ch(deltawriter.UpdateBefore, int64(1), "a", int32(10))}},
		{line: 6, changes: []deltawriter.Change{ch(deltawriter.UpdateAfter, int64(1), nil, int32(12))}},
		{line: 7, barrier: true},
		{line: 8, changes: []deltawriter.Change{ch(deltawriter.Delete, int64(2), nil, nil)}},
		{line: 9, changes: []deltawriter.Change{ch(deltawriter.UpdateBefore, int64(3), nil, nil)}},
		{line: 10, changes: []deltawriter.Change{ch(deltawriter.Insert, int64(4), nil, int32(0))}},
	})
}

func TestDebeziumJSON(t *testing.T) {
	schemaMember := `"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":true,"name":"x.Value","field":"before"}],"optional":false,"name":"x.Envelope"}`
	source := `"source":{"version":"2.5.0.Final","connector":"postgresql","name":"db","ts_ms":1700000000000,"snapshot":"false","db":"shop","schema":"public","table":"t","txId":1,"lsn":2,"xmin":null}`
	input := strings.Join([]string{
		`{"before":null,"after":{"id":1,"name":"a","qty":1},` + source + `,"op":"c","ts_ms":1700000000001,"transaction":null}`,
		`{"op":"r","after":{"id":2,"name":"b","qty":2}}`,
		`{"before":{"id":1,"name":"a","qty":1},"after":{"id":1,"name":"a2","qty":3},"op":"u"}`,
		`{"before":null,"after":{"id":2,"name":"b2","qty":4},"op":"u"}`,    // no before image (REPLICA IDENTITY DEFAULT)
		`{"before":{"id":2,"name":null,"qty":null},"after":null,"op":"d"}`, // key-only before image
		`null`, // Kafka tombstone
		`{` + schemaMember + `,"payload":{"before":null,"after":{"id":3,"name":"ü","qty":5},"op":"c"}}`,
		`{"schema":null,"payload":null}`, // tombstone through JsonConverter with schemas
		`{"barrier":true}`,
		`{"payload":{"op":"d","before":{"id":3}}}`,
		`{"op":"u","before":{"id":4,"name":"x","qty":1},"after":{"id":5,"name":"y","qty":1}}`, // key change
	}, "\r\n")
	got, err := decodeAll(t, DebeziumJSON, smallSchema(), input)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, []rec{
		{line: 1, changes: []deltawriter.Change{ch(deltawriter.Insert, int64(1), "a", int32(1))}},
		{line: 2, changes: []deltawriter.Change{ch(deltawriter.Insert, int64(2), "b", int32(2))}},
		{line: 3, changes: []deltawriter.Change{
			ch(deltawriter.UpdateBefore, int64(1), "a", int32(1)),
			ch(deltawriter.UpdateAfter, int64(1), "a2", int32(3)),
		}},
		{line: 4, changes: []deltawriter.Change{ch(deltawriter.UpdateAfter, int64(2), "b2", int32(4))}},
		{line: 5, changes: []deltawriter.Change{ch(deltawriter.Delete, int64(2), nil, nil)}},
		{line: 7, changes: []deltawriter.Change{ch(deltawriter.Insert, int64(3), "ü", int32(5))}},
		{line: 9, barrier: true},
		{line: 10, changes: []deltawriter.Change{ch(deltawriter.Delete, int64(3), nil, nil)}},
		{line: 11, changes: []deltawriter.Change{
			ch(deltawriter.UpdateBefore, int64(4), "x", int32(1)),
			ch(deltawriter.UpdateAfter, int64(5), "y", int32(1)),
		}},
	})
}

func TestCompositeKey(t *testing.T) {
	schema := compositeSchema()
	got, err := decodeAll(t, ChangelogJSON, schema, `{"op":"+I","data":{"id":1,"tenant":"acme","v":"x"}}
{"op":"-D","data":{"tenant":"acme","id":1}}
`)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, []rec{
		{line: 1, changes: []deltawriter.Change{ch(deltawriter.Insert, "acme", int64(1), "x")}},
		{line: 2, changes: []deltawriter.Change{ch(deltawriter.Delete, "acme", int64(1), nil)}},
	})
	for _, line := range []string{
		`{"op":"-D","data":{"tenant":"acme"}}`,
		`{"op":"-D","data":{"id":1}}`,
		`{"op":"+I","data":{"id":1,"tenant":null}}`,
	} {
		_, err := decodeAll(t, ChangelogJSON, schema, line)
		if !errors.Is(err, ErrNull) {
			t.Errorf("%s: got %v, want a null key error", line, err)
		}
	}
}

func TestUnicode(t *testing.T) {
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "clé", Type: iceberg.StringType{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "名前", Type: iceberg.StringType{}},
		iceberg.NestedField{ID: 3, Name: `we"ird\`, Type: iceberg.StringType{}},
	)
	input := `{"op":"+I","data":{"clé":"🎉","名前":"日本語テキスト","we\"ird\\":"a\u0000b"}}` + "\n" +
		`{"op":"+I","data":{"cl\u00e9":"\ud83c\udf89x","\u540d\u524d":"Ω"}}` + "\n"
	got, err := decodeAll(t, ChangelogJSON, schema, input)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, []rec{
		{line: 1, changes: []deltawriter.Change{ch(deltawriter.Insert, "🎉", "日本語テキスト", "a\x00b")}},
		{line: 2, changes: []deltawriter.Change{ch(deltawriter.Insert, "🎉x", "Ω", nil)}},
	})
}

func TestLineErrors(t *testing.T) {
	small := smallSchema()
	tests := []struct {
		name   string
		format Format
		input  string
		want   string // the exact message
		kind   error
		field  string
	}{
		{"malformed", ChangelogJSON, `{"op":"+I","data":{"id":1,}}`, `line 1: malformed JSON at byte 27: unexpected '}', expected a member name`, ErrSyntax, ""},
		{"truncated", ChangelogJSON, `{"op":"+I","data":{"id":1`, `line 1: malformed JSON at byte 26: unexpected end of line, expected ',' or '}'`, ErrSyntax, ""},
		{"trailing", ChangelogJSON, `{"op":"+I","data":{"id":1,"qty":1}} x`, `line 1: malformed JSON at byte 37: unexpected 'x' after the top-level value`, ErrSyntax, ""},
		{"two objects", ChangelogJSON, `{"barrier":true}{"barrier":true}`, `line 1: malformed JSON at byte 17: unexpected '{' after the top-level value`, ErrSyntax, ""},
		{"not an object", ChangelogJSON, ` [1,2]`, `line 1: a changelog-json line must be a JSON object, got an array`, ErrRecord, ""},
		{"null line", ChangelogJSON, `null`, `line 1: a changelog-json line must be a JSON object, got null`, ErrRecord, ""},
		{"unknown op", ChangelogJSON, `{"op":"+X","data":{"id":1}}`, `line 1: field "op": unknown op "+X" (want +I, -U, +U or -D)`, ErrUnknownOp, "op"},
		{"op not a string", ChangelogJSON, `{"op":1,"data":{"id":1}}`, `line 1: field "op": op must be one of the strings +I, -U, +U, -D, got a number`, ErrUnknownOp, "op"},
		{"missing op", ChangelogJSON, `{"data":{"id":1,"qty":1}}`, `line 1: field "op": missing op`, ErrRecord, "op"},
		{"missing data", ChangelogJSON, `{"op":"+I"}`, `line 1: field "data": missing data`, ErrRecord, "data"},
		{"null data", ChangelogJSON, `{"op":"-D","data":null}`, `line 1: field "data": data is null`, ErrRecord, "data"},
		{"data not an object", ChangelogJSON, `{"op":"-D","data":[1]}`, `line 1: field "data": must be an object, got an array`, ErrRecord, "data"},
		{"unknown column", ChangelogJSON, `{"op":"+I","data":{"id":1,"qty":1,"colour":"red"}}`, `line 1: field "colour": no such column in the table schema`, ErrUnknownColumn, "colour"},
		{"column case", ChangelogJSON, `{"op":"+I","data":{"ID":1,"qty":1}}`, `line 1: field "ID": no such column in the table schema`, ErrUnknownColumn, "ID"},
		{"duplicate column", ChangelogJSON, `{"op":"+I","data":{"id":1,"qty":1,"id":2}}`, `line 1: field "id": column appears twice`, ErrDuplicateKey, "id"},
		{"duplicate op", ChangelogJSON, `{"op":"+I","op":"-D","data":{"id":1}}`, `line 1: field "op": member appears twice`, ErrDuplicateKey, "op"},
		{"wrong type", ChangelogJSON, `{"op":"+I","data":{"id":"x","qty":1}}`, `line 1: field "id": long needs a JSON number or a string holding one, got the string "x"`, ErrType, "id"},
		{"out of range", ChangelogJSON, `{"op":"+I","data":{"id":1,"qty":3000000000}}`, `line 1: field "qty": 3000000000 does not fit an int (32-bit)`, ErrRange, "qty"},
		{"missing key", ChangelogJSON, `{"op":"-D","data":{"name":"a"}}`, `line 1: field "id": key column is missing`, ErrNull, "id"},
		{"null key", ChangelogJSON, `{"op":"+I","data":{"id":null,"qty":1}}`, `line 1: field "id": key column is null`, ErrNull, "id"},
		{"null required", ChangelogJSON, `{"op":"+U","data":{"id":1,"qty":null}}`, `line 1: field "qty": required column is null`, ErrNull, "qty"},
		{"missing required", ChangelogJSON, `{"op":"+I","data":{"id":1}}`, `line 1: field "qty": required column is missing`, ErrNull, "qty"},
		{"barrier with data", ChangelogJSON, `{"barrier":true,"op":"+I","data":{"id":1,"qty":1}}`, `line 1: field "barrier": a barrier line carries no op or data`, ErrRecord, "barrier"},
		{"barrier not bool", ChangelogJSON, `{"barrier":"yes"}`, `line 1: field "barrier": must be true or false`, ErrRecord, "barrier"},
		{"deep ignored member", ChangelogJSON, `{"x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, `line 1: malformed JSON at byte 517: nesting deeper than 512`, ErrSyntax, ""},
		{"line number", ChangelogJSON, "\n{\"op\":\"+I\",\"data\":{\"id\":1,\"qty\":1}}\r\n\r\n{\"op\":\"+I\",\"data\":{\"id\":null}}\n", `line 4: field "id": key column is null`, ErrNull, "id"},

		{"dbz truncate", DebeziumJSON, `{"op":"t","source":{}}`, `line 1: field "op": truncate events (op "t") are not supported`, ErrUnsupported, "op"},
		{"dbz unknown op", DebeziumJSON, `{"op":"x","after":{"id":1,"qty":1}}`, `line 1: field "op": unknown op "x" (want c, r, u or d)`, ErrUnknownOp, "op"},
		{"dbz message op", DebeziumJSON, `{"op":"m"}`, `line 1: field "op": unknown op "m" (want c, r, u or d)`, ErrUnknownOp, "op"},
		{"dbz missing op", DebeziumJSON, `{"after":{"id":1,"qty":1}}`, `line 1: field "op": missing op`, ErrRecord, "op"},
		{"dbz create without after", DebeziumJSON, `{"op":"c","before":{"id":1}}`, `line 1: field "after": op 'c' needs a non-null after`, ErrRecord, "after"},
		{"dbz update without after", DebeziumJSON, `{"op":"u","before":{"id":1},"after":null}`, `line 1: field "after": op "u" needs a non-null after`, ErrRecord, "after"},
		{"dbz delete without before", DebeziumJSON, `{"op":"d","after":null}`, `line 1: field "before": op "d" needs a non-null before`, ErrRecord, "before"},
		{"dbz null key in before", DebeziumJSON, `{"op":"d","before":{"id":null}}`, `line 1: field "id": in before: key column is null`, ErrNull, "id"},
		{"dbz required in after", DebeziumJSON, `{"op":"c","after":{"id":1,"qty":null}}`, `line 1: field "qty": in after: required column is null`, ErrNull, "qty"},
		{"dbz unknown column", DebeziumJSON, `{"op":"c","after":{"id":1,"qty":1,"zz":1}}`, `line 1: field "zz": in after: no such column in the table schema`, ErrUnknownColumn, "zz"},
		{"dbz wrong type", DebeziumJSON, `{"op":"c","after":{"id":1,"qty":true}}`, `line 1: field "qty": in after: int needs a JSON number or a string holding one, got a boolean`, ErrType, "qty"},
		{"dbz payload not object", DebeziumJSON, `{"schema":{},"payload":"x"}`, `line 1: field "payload": payload must be an object or null, got a string`, ErrRecord, "payload"},
		{"dbz both levels", DebeziumJSON, `{"op":"c","payload":{"op":"c","after":{"id":1,"qty":1}}}`, `line 1: field "payload": op, before or after both inside and outside payload`, ErrRecord, "payload"},
		{"dbz not an object", DebeziumJSON, "\t\"c\"", `line 1: a debezium-json line must be a JSON object or null, got a string`, ErrRecord, ""},
		{"dbz barrier with event", DebeziumJSON, `{"barrier":true,"op":"c","after":{"id":1,"qty":1}}`, `line 1: field "barrier": a barrier line carries no event`, ErrRecord, "barrier"},
		{"dbz malformed null", DebeziumJSON, `nul`, `line 1: malformed JSON at byte 1: unexpected 'n', expected a JSON value`, ErrSyntax, ""},
		{"dbz duplicate after", DebeziumJSON, `{"op":"c","after":{"id":1,"qty":1},"after":{"id":1,"qty":1}}`, `line 1: field "after": member appears twice`, ErrDuplicateKey, "after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeAll(t, tt.format, small, tt.input)
			if err == nil {
				t.Fatal("no error")
			}
			le := lineErr(t, err)
			if err.Error() != tt.want {
				t.Errorf("error\n  %s\nwant\n  %s", err, tt.want)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error is not %v", tt.kind)
			}
			if le.Field != tt.field {
				t.Errorf("field %q, want %q", le.Field, tt.field)
			}
		})
	}
}

func TestDeletesNeedOnlyKeys(t *testing.T) {
	// Required non-key columns may be null or absent in -D and -U.
	got, err := decodeAll(t, ChangelogJSON, smallSchema(), `{"op":"-D","data":{"id":1,"qty":null}}
{"op":"-U","data":{"id":2}}
{"op":"-D","data":{"id":3,"name":"x","qty":4}}
`)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, []rec{
		{line: 1, changes: []deltawriter.Change{ch(deltawriter.Delete, int64(1), nil, nil)}},
		{line: 2, changes: []deltawriter.Change{ch(deltawriter.UpdateBefore, int64(2), nil, nil)}},
		{line: 3, changes: []deltawriter.Change{ch(deltawriter.Delete, int64(3), "x", int32(4))}},
	})
	// Present values are still type-checked.
	_, err = decodeAll(t, ChangelogJSON, smallSchema(), `{"op":"-D","data":{"id":1,"qty":"x"}}`)
	if !errors.Is(err, ErrType) {
		t.Fatalf("got %v, want a type error", err)
	}
}

func TestLineNumbersAndContinue(t *testing.T) {
	input := "\n\r\n" + // lines 1, 2: empty
		`{"op":"+I","data":{"id":1,"qty":1}}` + "\r\n" + // 3
		"   \t \r\n" + // 4: blank
		`{"op":"+I","data":{"id":"bad","qty":1}}` + "\n" + // 5: bad
		`{"op":"+I","data":{"id":2,"qty":1}}` + "\n" + // 6
		`{broken` + "\n" + // 7: bad
		`{"op":"-D","data":{"id":2}}` // 8: no final newline
	d, err := NewDecoder(strings.NewReader(input), ChangelogJSON, smallSchema())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for {
		rec, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			lines = append(lines, fmt.Sprintf("err@%d", lineErr(t, err).Line))
			if d.Line() != lineErr(t, err).Line {
				t.Errorf("Line() = %d after an error on line %d", d.Line(), lineErr(t, err).Line)
			}
			continue
		}
		lines = append(lines, fmt.Sprintf("%v@%d", rec.Changes[0].Op, rec.Line))
	}
	if got, want := strings.Join(lines, " "), "+I@3 err@5 +I@6 err@7 -D@8"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if d.Line() != 8 {
		t.Fatalf("Line() = %d at the end, want 8", d.Line())
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("Next after EOF: %v", err)
	}
}

func TestTrailingBlankLinesCount(t *testing.T) {
	d, err := NewDecoder(strings.NewReader(`{"barrier":true}`+"\n\n\n"), ChangelogJSON, smallSchema())
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := d.Next(); err != nil || rec.Line != 1 || !rec.Barrier {
		t.Fatalf("got %+v, %v", rec, err)
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatal(err)
	}
	if d.Line() != 3 {
		t.Fatalf("Line() = %d, want 3", d.Line())
	}
}

func TestByteOrderMark(t *testing.T) {
	got, err := decodeAll(t, ChangelogJSON, smallSchema(), "\xef\xbb\xbf"+`{"op":"+I","data":{"id":1,"qty":1}}`+"\n\xef\xbb\xbf{}")
	le := lineErr(t, err) // a BOM is only skipped at the start of the input
	if le.Line != 2 || !errors.Is(err, ErrSyntax) || len(got) != 1 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestRowsAreIndependent(t *testing.T) {
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, `{"op":"+I","data":{"id":%d,"qty":%d}}`+"\n", i, i)
	}
	d, err := NewDecoder(strings.NewReader(b.String()), ChangelogJSON, smallSchema())
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]any
	for {
		rec, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		row := rec.Changes[0].Row
		if len(row) != 3 || cap(row) != 3 {
			t.Fatalf("row len %d cap %d", len(row), cap(row))
		}
		rows = append(rows, row)
	}
	for i, row := range rows {
		if row[0] != int64(i) || row[2] != int32(i) {
			t.Fatalf("row %d was overwritten: %v", i, row)
		}
	}
	_ = append(rows[0], "x") // must not reach the next row's slots
	if rows[1][0] != int64(1) {
		t.Fatal("append to a row clobbered the next one")
	}
}

func TestLongLines(t *testing.T) {
	big := strings.Repeat("é", 3<<20) // 6 MiB, over the read buffer
	input := `{"op":"+I","data":{"id":1,"name":"` + big + `","qty":1}}` + "\n" +
		`{"op":"+I","data":{"id":2,"qty":2}}`
	got, err := decodeAll(t, ChangelogJSON, smallSchema(), input)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Changes[0].Row[1] != big || got[1].Line != 2 {
		t.Fatalf("long line decoded wrong")
	}

	// Over the limit, in and beyond the read buffer; the decoder goes on.
	for _, size := range []int{100, 3 << 20} {
		for _, final := range []string{"\n", ""} {
			t.Run(fmt.Sprintf("%d%q", size, final), func(t *testing.T) {
				long := `{"op":"+I","data":{"id":1,"name":"` + strings.Repeat("x", size) + `","qty":1}}`
				input := `{"barrier":true}` + "\n" + long + "\n" + `{"barrier":true}` + "\n" + long + final
				d, err := NewDecoder(strings.NewReader(input), ChangelogJSON, smallSchema())
				if err != nil {
					t.Fatal(err)
				}
				d.maxLine = size
				var got []string
				for {
					rec, err := d.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						le := lineErr(t, err)
						if !errors.Is(err, ErrLineTooLong) {
							t.Fatalf("got %v, want too long", err)
						}
						want := fmt.Sprintf("line %d: line longer than %d bytes", le.Line, size)
						if err.Error() != want {
							t.Fatalf("got %q, want %q", err, want)
						}
						got = append(got, fmt.Sprintf("long@%d", le.Line))
						continue
					}
					got = append(got, fmt.Sprintf("barrier@%d", rec.Line))
				}
				if s := strings.Join(got, " "); s != "barrier@1 long@2 barrier@3 long@4" {
					t.Fatalf("got %s", s)
				}
			})
		}
	}

	// A line of exactly the limit is fine.
	line := `{"barrier":true}`
	d, _ := NewDecoder(strings.NewReader(line+"\n"+line), ChangelogJSON, smallSchema())
	d.maxLine = len(line)
	for range 2 {
		if _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMaxLineSize(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a 64 MiB line")
	}
	pad := MaxLineSize - len(`{"barrier":true,"x":""}`)
	ok := `{"barrier":true,"x":"` + strings.Repeat("a", pad) + `"}`
	input := ok + "\n" + ok + "a\n" + `{"barrier":true}`
	d, err := NewDecoder(strings.NewReader(input), ChangelogJSON, smallSchema())
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := d.Next(); err != nil || !rec.Barrier {
		t.Fatalf("a line of MaxLineSize bytes: %v", err)
	}
	if _, err := d.Next(); !errors.Is(err, ErrLineTooLong) || lineErr(t, err).Line != 2 {
		t.Fatalf("a line of MaxLineSize+1 bytes: %v", err)
	}
	if rec, err := d.Next(); err != nil || rec.Line != 3 {
		t.Fatalf("after a too long line: %+v %v", rec, err)
	}
}

// TestWithMaxRecordSize: the limit is the user's (--max-record-size), for
// lines and Kafka messages alike.
func TestWithMaxRecordSize(t *testing.T) {
	const limit = 100
	ok := `{"barrier":true,"x":"` + strings.Repeat("a", limit-len(`{"barrier":true,"x":""}`)) + `"}`
	d, err := NewDecoder(strings.NewReader(ok+"\n"+ok+"a\n"), ChangelogJSON, smallSchema(), WithMaxRecordSize(limit))
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := d.Next(); err != nil || !rec.Barrier {
		t.Fatalf("a line of the limit's length: %v", err)
	}
	if _, err := d.Next(); !errors.Is(err, ErrLineTooLong) || lineErr(t, err).Line != 2 || !strings.Contains(err.Error(), "100 bytes") {
		t.Fatalf("a line one byte over: %v", err)
	}
	if _, _, err := d.DecodeMessage([]byte(ok + " ")); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("a message one byte over: %v", err)
	}
	if _, err := NewDecoder(strings.NewReader(""), ChangelogJSON, smallSchema(), WithMaxRecordSize(0)); err == nil {
		t.Fatal("a limit of 0 accepted")
	}
}

func TestSkip(t *testing.T) {
	lines := []string{
		`{"op":"+I","data":{"id":1,"qty":1}}`,
		``,
		`{"op":"+I","data":{"id":2,"qty":2}}`,
		`not even json`,
		`{"op":"+I","data":{"id":3,"qty":3}}`,
	}
	for _, final := range []string{"", "\n"} {
		input := strings.Join(lines, "\n") + final
		for n := int64(0); n <= 5; n++ {
			d, err := NewDecoder(iotest.OneByteReader(strings.NewReader(input)), ChangelogJSON, smallSchema())
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Skip(n); err != nil {
				t.Fatalf("Skip(%d): %v", n, err)
			}
			if d.Line() != n {
				t.Fatalf("Skip(%d): Line() = %d", n, d.Line())
			}
			var got []int64
			for {
				rec, err := d.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					got = append(got, -lineErr(t, err).Line)
					continue
				}
				got = append(got, rec.Line)
			}
			var want []int64
			for _, l := range []int64{1, 3, -4, 5} {
				if max(l, -l) > n {
					want = append(want, l)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("final %q Skip(%d): got %v, want %v", final, n, got, want)
			}
		}
		d, _ := NewDecoder(strings.NewReader(input), ChangelogJSON, smallSchema())
		if err := d.Skip(6); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("Skip past the end: %v", err)
		}
	}

	// Skipping in steps, over lines longer than the read buffer, and with
	// lines of any length (Skip does not enforce MaxLineSize).
	long := strings.Repeat("z", 3*readBufferSize)
	input := long + "\n" + long + "\n\n" + `{"barrier":true}` + "\n"
	d, _ := NewDecoder(strings.NewReader(input), ChangelogJSON, smallSchema())
	d.maxLine = 20
	if err := d.Skip(1); err != nil {
		t.Fatal(err)
	}
	if err := d.Skip(2); err != nil {
		t.Fatal(err)
	}
	if rec, err := d.Next(); err != nil || rec.Line != 4 || !rec.Barrier {
		t.Fatalf("after Skip: %+v %v", rec, err)
	}
	if err := d.Skip(0); err != nil {
		t.Fatal(err)
	}
	if err := d.Skip(1); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Skip at the end: %v", err)
	}
}

func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader(`{"barrier":true}`+"\n"+`{"barr`), iotest.ErrReader(boom))
	d, err := NewDecoder(r, ChangelogJSON, smallSchema())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // sticky
		_, err := d.Next()
		var le *LineError
		if !errors.Is(err, boom) || errors.As(err, &le) {
			t.Fatalf("got %v, want the read error, not a LineError", err)
		}
		if !strings.Contains(err.Error(), "reading line 2") {
			t.Fatalf("error %q does not name the line", err)
		}
	}
	if err := d.Skip(1); !errors.Is(err, boom) {
		t.Fatalf("Skip after a read error: %v", err)
	}
	d, _ = NewDecoder(iotest.ErrReader(boom), ChangelogJSON, smallSchema())
	if err := d.Skip(3); !errors.Is(err, boom) {
		t.Fatalf("Skip over a failing reader: %v", err)
	}
}

func TestNewDecoderErrors(t *testing.T) {
	key := iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true}
	tests := []struct {
		name   string
		schema *iceberg.Schema
		format Format
		want   string
	}{
		{"nil schema", nil, ChangelogJSON, "changelog: nil schema"},
		{"bad format", smallSchema(), Format(9), "changelog: unknown input format Format(9)"},
		{"struct", iceberg.NewSchemaWithIdentifiers(0, []int{1}, key,
			iceberg.NestedField{ID: 2, Name: "addr", Type: &iceberg.StructType{FieldList: []iceberg.NestedField{{ID: 3, Name: "city", Type: iceberg.StringType{}}}}}),
			ChangelogJSON, `changelog: column "addr": nested types are not supported yet (struct<3: city: optional string>)`},
		{"list", iceberg.NewSchemaWithIdentifiers(0, []int{1}, key,
			iceberg.NestedField{ID: 2, Name: "tags", Type: &iceberg.ListType{ElementID: 3, Element: iceberg.StringType{}}}),
			DebeziumJSON, `changelog: column "tags": nested types are not supported yet (list<string>)`},
		{"map", iceberg.NewSchemaWithIdentifiers(0, []int{1}, key,
			iceberg.NestedField{ID: 2, Name: "m", Type: &iceberg.MapType{KeyID: 3, KeyType: iceberg.StringType{}, ValueID: 4, ValueType: iceberg.StringType{}}}),
			ChangelogJSON, `changelog: column "m": nested types are not supported yet (map<string, string>)`},
		{"timestamp_ns", iceberg.NewSchemaWithIdentifiers(0, []int{1}, key,
			iceberg.NestedField{ID: 2, Name: "ts", Type: iceberg.TimestampNsType{}}),
			ChangelogJSON, `changelog: column "ts": type timestamp_ns is not supported`},
		{"no key", iceberg.NewSchema(0, key), ChangelogJSON, "changelog: the schema has no identifier fields (identifier-field-ids); an upsert stream needs a key"},
		{"float key", iceberg.NewSchemaWithIdentifiers(0, []int{1},
			iceberg.NestedField{ID: 1, Name: "x", Type: iceberg.Float64Type{}, Required: true}),
			ChangelogJSON, `changelog: key column "x": Iceberg does not allow double identifier fields`},
		{"optional key", iceberg.NewSchemaWithIdentifiers(0, []int{1},
			iceberg.NestedField{ID: 1, Name: "x", Type: iceberg.Int64Type{}}),
			ChangelogJSON, `changelog: key column "x" must be required (Iceberg identifier fields are required)`},
		{"unknown key id", iceberg.NewSchemaWithIdentifiers(0, []int{7}, key), ChangelogJSON,
			"changelog: identifier field id 7 is not a top-level column of the schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewDecoder(strings.NewReader(""), tt.format, tt.schema)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}

func TestSchemaFromJSON(t *testing.T) {
	// The spec's JSON form, as the CLI's --schema reads it.
	var schema iceberg.Schema
	err := schema.UnmarshalJSON([]byte(`{"type":"struct","schema-id":0,"identifier-field-ids":[1],"fields":[
		{"id":1,"name":"id","required":true,"type":"long"},
		{"id":2,"name":"amount","required":false,"type":"decimal(10, 2)"},
		{"id":3,"name":"at","required":false,"type":"timestamptz"},
		{"id":4,"name":"h","required":false,"type":"fixed[2]"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeAll(t, ChangelogJSON, &schema, `{"op":"+I","data":{"id":1,"amount":"12.30","at":"2024-01-02T03:04:05Z","h":"AAE="}}`)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, []rec{{line: 1, changes: []deltawriter.Change{
		ch(deltawriter.Insert, int64(1), dec("1230"), micros("2024-01-02T03:04:05Z"), []byte{0, 1}),
	}}})
}

func TestFormat(t *testing.T) {
	for _, f := range []Format{ChangelogJSON, DebeziumJSON, DebeziumAvro} {
		g, err := ParseFormat(f.String())
		if err != nil || g != f {
			t.Fatalf("ParseFormat(%q) = %v, %v", f.String(), g, err)
		}
		var h Format
		if err := h.Set(f.String()); err != nil || h != f {
			t.Fatalf("Set(%q) = %v, %v", f.String(), h, err)
		}
	}
	if _, err := ParseFormat("avro"); err == nil || err.Error() != `changelog: unknown input format "avro" (want changelog-json, debezium-json or debezium-avro)` {
		t.Fatalf("ParseFormat(avro): %v", err)
	}
	var h Format
	if err := h.Set("json"); err == nil {
		t.Fatal("Set(json) accepted")
	}
}

func TestChangesSliceReuse(t *testing.T) {
	// Documented contract: Changes is reused, the Change values are not.
	d, _ := NewDecoder(bytes.NewReader([]byte(`{"op":"+I","data":{"id":1,"qty":1}}
{"op":"+I","data":{"id":2,"qty":2}}`)), ChangelogJSON, smallSchema())
	r1, _ := d.Next()
	c1 := r1.Changes[0]
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	if c1.Row[0] != int64(1) {
		t.Fatal("a kept Change was overwritten")
	}
}

// The input's identity covers the bytes of the lines consumed (at most 4
// KiB) and is the same whether they were decoded or skipped; another
// input differs.
func TestIdentity(t *testing.T) {
	var in strings.Builder
	for i := range 200 {
		fmt.Fprintf(&in, `{"op":"+I","data":{"id":%d,"name":"n%d","qty":1}}`+"\n", i, i)
	}
	open := func(s string) *Decoder {
		d, err := NewDecoder(strings.NewReader(s), ChangelogJSON, smallSchema())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := open(in.String())
	for range 3 {
		if _, err := a.Next(); err != nil {
			t.Fatal(err)
		}
	}
	id := a.Identity()
	n, _, _ := strings.Cut(id, ":")
	if want := strconv.Itoa(strings.Index(in.String(), `{"op":"+I","data":{"id":3`)); n != want {
		t.Fatalf("identity %s covers %s bytes, want the 3 lines' %s", id, n, want)
	}
	b := open(in.String())
	if err := b.Skip(150); err != nil {
		t.Fatal(err)
	}
	if got := b.IdentityOf(mustAtoi(t, n)); got != id {
		t.Fatalf("after Skip: %s, after Next: %s", got, id)
	}
	if got := b.Identity(); !strings.HasPrefix(got, "4096:") {
		t.Fatalf("identity after 150 lines %s, want it capped at 4096 bytes", got)
	}
	c := open(strings.Replace(in.String(), `"n1"`, `"x1"`, 1))
	if err := c.Skip(150); err != nil {
		t.Fatal(err)
	}
	if c.IdentityOf(mustAtoi(t, n)) == id {
		t.Fatal("another input has the same identity")
	}
	if open("").IdentityOf(10) != "" {
		t.Fatal("identity of bytes never read")
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
