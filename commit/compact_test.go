package commit_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// TestCompactKeepsDeletesOfKeptFiles: a position-delete file that deletes
// rows of two data files stays when a compaction rewrites one of them and
// keeps the other (iceberg-go v0.7.0 lists it as safe to drop with the
// rewritten file): dropping it would bring the kept file's deleted row
// back. Before, only a deltawriter test caught this.
func TestCompactKeepsDeletesOfKeptFiles(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	w, err := deltawriter.New(ctx, tbl, deltawriter.Options{SinkID: "s", DeleteMode: deltawriter.DeleteByPosition})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	epoch := uint64(0)
	window := func(changes ...deltawriter.Change) map[string]bool {
		t.Helper()
		before := dataFiles(t, cm.Table())
		for _, ch := range changes {
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
		}
		p, err := w.PrepareCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		epoch++
		if _, err := cm.Commit(ctx, epoch, []commit.Payload{p}, map[string]string{commit.PropInputPosition: strconv.FormatUint(epoch, 10)}); err != nil {
			t.Fatal(err)
		}
		if err := w.Committed(ctx); err != nil {
			t.Fatal(err)
		}
		added := map[string]bool{}
		for f := range dataFiles(t, cm.Table()) {
			if !before[f] {
				added[f] = true
			}
		}
		return added
	}
	insert := func(from, to int64) []deltawriter.Change {
		var out []deltawriter.Change
		for k := from; k < to; k++ {
			out = append(out, deltawriter.Change{Op: deltawriter.Insert, Row: []any{k}})
		}
		return out
	}
	a := window(insert(0, 100)...)
	window(insert(100, 200)...) // b: kept by the compaction
	c := window(insert(200, 210)...)
	// One position-delete file for rows of a and b.
	window(deltawriter.Change{Op: deltawriter.Delete, Row: []any{int64(5)}}, deltawriter.Change{Op: deltawriter.Delete, Row: []any{int64(105)}})
	pick := map[string]bool{}
	for f := range a {
		pick[f] = true
	}
	for f := range c {
		pick[f] = true
	}
	res, err := cm.Compact(ctx, commit.Compaction{MinInputFiles: 2, Select: func(p string) bool { return pick[p] }, Folder: commit.CompactionFolder("s")})
	if err != nil || res.RemovedDataFiles != 2 {
		t.Fatalf("compaction: %+v, %v", res, err)
	}
	// The round's files are in the sink's compaction folder (a killed
	// round's are found there at the next start); the kept ones are not.
	tasks, err := cm.Table().Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inFolder := 0
	for _, task := range tasks {
		if commit.CompactionFile(task.File.FilePath(), "s") {
			inFolder++
		}
	}
	if inFolder != res.AddedDataFiles || len(tasks) != res.AddedDataFiles+1 {
		t.Fatalf("%d of %d live data files in %s, want the round's %d (and the kept one outside)", inFolder, len(tasks), commit.CompactionFolder("s"), res.AddedDataFiles)
	}
	live := map[int64]bool{}
	for row, err := range warehouse.Rows(ctx, cm.Table()) {
		if err != nil {
			t.Fatal(err)
		}
		live[row[0].(int64)] = true
	}
	if len(live) != 208 || live[5] || live[105] {
		t.Fatalf("%d live rows (5 live: %v, 105 live: %v), want 208 without 5 and 105", len(live), live[5], live[105])
	}
}
