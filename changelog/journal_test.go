package changelog

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
)

// TestJournalReplay reads a stream through a journal of small segments,
// frees what a commit holds, and replays: the replay's decoder numbers
// the stream's lines, resumes after the committed line, and reads every
// line after it once, then the rest of the stream.
func TestJournalReplay(t *testing.T) {
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	var b strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&b, `{"op":"+I","data":{"id":%d}}`+"\n", i)
	}
	dir := t.TempDir()
	j, err := NewJournal(strings.NewReader(b.String()), dir)
	if err != nil {
		t.Fatal(err)
	}
	j.segSize = 1 << 10
	d, err := NewDecoder(j, ChangelogJSON, schema)
	if err != nil {
		t.Fatal(err)
	}
	for range 300 {
		if _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}
	before := j.Bytes()
	j.Committed(200)
	if j.Bytes() >= before {
		t.Fatalf("a commit of line 200 freed nothing (%d bytes kept)", j.Bytes())
	}
	r, first, err := j.Replay()
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 || first > 200 {
		t.Fatalf("the replay begins after line %d, want a line in (0, 200]", first)
	}
	rd, err := NewDecoder(r, ChangelogJSON, schema, WithFirstLine(first))
	if err != nil {
		t.Fatal(err)
	}
	if err := rd.Skip(200); err != nil {
		t.Fatal(err)
	}
	for want := int64(201); ; want++ {
		rec, err := rd.Next()
		if err == io.EOF {
			if want != 501 {
				t.Fatalf("the replay ended before line %d", want)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Line != want || rec.Changes[0].Row[0] != want {
			t.Fatalf("line %d: id %v, want %d", rec.Line, rec.Changes[0].Row[0], want)
		}
	}
	if err := rd.Skip(100); err == nil {
		t.Error("a skip to a line before the journal's first: no error")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Close left %d files", len(left))
	}
}
