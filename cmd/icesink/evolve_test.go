package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/warehouse"
)

// connectField spells one column of a Kafka Connect schema.
func connectField(name, typ string, optional bool) string {
	return fmt.Sprintf(`{"type":%q,"optional":%v,"field":%q}`, typ, optional, name)
}

// connectEnvelope is a Debezium event with its Kafka Connect schema (the
// JsonConverter with schemas enabled): fields are the row's columns.
func connectEnvelope(fields []string, before, after string) []byte {
	row := `{"type":"struct","optional":true,"fields":[` + strings.Join(fields, ",") + `]}`
	schema := `{"type":"struct","fields":[` +
		strings.Replace(row, `"optional":true`, `"optional":true,"field":"before"`, 1) + `,` +
		strings.Replace(row, `"optional":true`, `"optional":true,"field":"after"`, 1) + `,` +
		`{"type":"string","optional":false,"field":"op"}]}`
	op := "u"
	switch {
	case before == "null":
		op = "c"
	case after == "null":
		op = "d"
	}
	return []byte(fmt.Sprintf(`{"schema":%s,"payload":{"before":%s,"after":%s,"op":%q}}`, schema, before, after, op))
}

// TestSchemaEvolutionAgainstModel: a Debezium feed (JSON with schemas)
// whose source adds a column, widens an int to a long and makes a column
// optional mid-stream, then interleaves events of the old and the new
// schema (partitions at their own pace), with deletes, into a table
// created with the old schema; runs are killed with SIGKILL at random
// moments and rerun. The table ends with the new schema and equal to the
// model (old rows read the new column as null). A later change of a
// column's type stops the run naming table, column, both types and line,
// and commits nothing.
func TestSchemaEvolutionAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 5))
	lines, model := evolvingFeed(rng, 3000, true)
	dir := t.TempDir()
	input := filepath.Join(dir, "feed.jsonl")
	if err := os.WriteFile(input, append(bytes.Join(lines, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	schemaFile := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schemaFile, []byte(firstSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	whDir := t.TempDir()
	args := []string{"run", "--warehouse", whDir, "--table", "db.t", "--schema", schemaFile, "--format", "debezium-json",
		"--input", input, "--quiet", "--checkpoint-rows", "400", "--memory-limit", "1MiB"}
	killed := killAndRerun(t, rng, args, 3, 150*time.Millisecond, 600*time.Millisecond)

	ctx := context.Background()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"db", "t"})
	if err != nil {
		t.Fatal(err)
	}
	want := evolvedSchema
	if !tbl.Schema().Equals(want) {
		t.Fatalf("the table's schema is\n%v\nwant\n%v", tbl.Schema(), want)
	}
	got := cliTable(t, wh)
	if len(got) != len(model) {
		t.Errorf("%d rows, the model %d (%d runs killed)", len(got), len(model), killed)
	}
	for id, w := range model {
		if g := got[id]; !reflect.DeepEqual(g, w) {
			t.Fatalf("id %d: table %v, model %v (%d runs killed)", id, g, w, killed)
		}
	}

	// The source changes qty to a double: the run stops at that line,
	// naming what changed, and commits nothing.
	bad := connectEnvelope([]string{connectField("id", "int64", false), connectField("qty", "double", true)}, "null", `{"id":1,"qty":1.5}`)
	more := append(append(bytes.Join(lines, []byte("\n")), '\n'), bad...)
	more = append(more, "\n"+string(lines[0])+"\n"...)
	if err := os.WriteFile(input, more, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := icesink(t, args...)
	wantErr := `table db.t: column "qty" is long, the events now carry double`
	if code != 1 || !strings.Contains(stderr, wantErr) || !strings.Contains(stderr, fmt.Sprintf("line %d", len(lines)+1)) {
		t.Fatalf("a type change: exit %d\n%s\nwant %q at line %d", code, stderr, wantErr, len(lines)+1)
	}
	tbl, _ = wh.Catalog.LoadTable(ctx, table.Identifier{"db", "t"})
	if !tbl.Schema().Equals(want) || !reflect.DeepEqual(cliTable(t, wh), got) {
		t.Fatal("the refused change committed something")
	}
}

// evolvingFeed returns n Debezium events (JSON with schemas, with a
// barrier line every 97 when barriers) whose source adds a column
// ("note"), widens qty from int32 to int64 and makes name optional after
// the first third; in the last third events of both schemas interleave.
// model is the rows they leave: id -> (id, name, qty as long, note).
func evolvingFeed(rng *rand.Rand, n int, barriers bool) (lines [][]byte, model map[int64][]any) {
	v1 := []string{connectField("id", "int64", false), connectField("name", "string", false), connectField("qty", "int32", true)}
	v2 := []string{connectField("id", "int64", false), connectField("name", "string", true), connectField("qty", "int64", true), connectField("note", "string", true)}
	model = map[int64][]any{}
	image := func(id int64, newer bool) (string, []any) {
		name := fmt.Sprint("n", rng.IntN(100))
		qty := int64(rng.Int32N(1000))
		if !newer {
			return fmt.Sprintf(`{"id":%d,"name":%q,"qty":%d}`, id, name, qty), []any{id, name, qty, nil}
		}
		var nameJSON, noteJSON = fmt.Sprintf("%q", name), "null"
		var nameV, noteV any = name, nil
		if rng.IntN(4) == 0 {
			nameJSON, nameV = "null", nil
		}
		if rng.IntN(2) == 0 {
			qty = 1<<40 + rng.Int64N(1000) // needs the long
		}
		if rng.IntN(2) == 0 {
			noteV = fmt.Sprint("note ", rng.IntN(100))
			noteJSON = fmt.Sprintf("%q", noteV)
		}
		return fmt.Sprintf(`{"id":%d,"name":%s,"qty":%d,"note":%s}`, id, nameJSON, qty, noteJSON), []any{id, nameV, qty, noteV}
	}
	for i := range n {
		newer := i >= n/3 && (i >= 2*n/3 && rng.IntN(2) == 0 || i < 2*n/3)
		fields := v1
		if newer {
			fields = v2
		}
		id := int64(rng.IntN(300))
		img, row := image(id, newer)
		before := "null"
		if model[id] != nil {
			before, _ = image(id, newer) // the before image is not checked
		}
		if model[id] != nil && rng.IntN(6) == 0 {
			lines = append(lines, connectEnvelope(fields, before, "null"))
			delete(model, id)
		} else {
			lines = append(lines, connectEnvelope(fields, before, img))
			model[id] = row
		}
		if barriers && i%97 == 96 {
			lines = append(lines, []byte(`{"barrier":true}`))
		}
	}
	return lines, model
}

// evolvedSchema is the table's schema once evolvingFeed's events are in.
var evolvedSchema = iceberg.NewSchemaWithIdentifiers(0, []int{1},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
	iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.StringType{}},
	iceberg.NestedField{ID: 3, Name: "qty", Type: iceberg.Int64Type{}},
	iceberg.NestedField{ID: 4, Name: "note", Type: iceberg.StringType{}})

// firstSchema is the table's schema before: evolvingFeed's first events'.
const firstSchema = `{"type":"struct","schema-id":0,"identifier-field-ids":[1],"fields":[
	 {"id":1,"name":"id","required":true,"type":"long"},
	 {"id":2,"name":"name","required":true,"type":"string"},
	 {"id":3,"name":"qty","required":false,"type":"int"}]}`
