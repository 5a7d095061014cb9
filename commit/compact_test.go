package commit_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/cespare/xxhash/v2"

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

// TestCompactionLayout: a round's row groups are sized from its memory
// limit (arrow-go buffers a row group's encoded pages whole, and the next
// round reads its column chunks whole: iceberg-go's 128 MiB row groups
// held a 16 MiB round's peak at 52 MiB), unless the table sets its own
// size, which wins.
func TestCompactionLayout(t *testing.T) {
	const rowsPerWindow, windows = 4000, 3
	for _, tc := range []struct {
		name   string
		props  iceberg.Properties
		groups int // 0: at least 2 of at most ~1 MiB
	}{
		{"round's size", nil, 0},
		{"table's size", iceberg.Properties{table.ParquetRowGroupSizeBytesKey: strconv.Itoa(64 << 20)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			wh, tbl := newTableOf(t, warehouse.TableSpec{Properties: tc.props, Schema: iceberg.NewSchemaWithIdentifiers(0, []int{1},
				iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
				iceberg.NestedField{ID: 2, Name: "note", Type: iceberg.PrimitiveTypes.String})})
			cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
			if err != nil {
				t.Fatal(err)
			}
			w, err := deltawriter.New(ctx, tbl, deltawriter.Options{SinkID: "s"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close(ctx)
			for e := uint64(1); e <= windows; e++ {
				for i := range int64(rowsPerWindow) {
					k := int64(e)*rowsPerWindow + i
					// 208 bytes of hex: about half of it survives zstd.
					var note strings.Builder
					for j := range 13 {
						fmt.Fprintf(&note, "%016x", xxhash.Sum64String(strconv.FormatInt(k*13+int64(j), 10)))
					}
					if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{k, note.String()}}); err != nil {
						t.Fatal(err)
					}
				}
				p, err := w.PrepareCommit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cm.Commit(ctx, e, []commit.Payload{p}, map[string]string{commit.PropInputPosition: strconv.FormatUint(e, 10)}); err != nil {
					t.Fatal(err)
				}
				if err := w.Committed(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// A 1 MiB limit: row groups of 1 MiB (an eighth of the limit,
			// at least 1 MiB).
			res, err := cm.Compact(ctx, commit.Compaction{MinInputFiles: 2, MemoryLimit: 1 << 20})
			if err != nil || res.AddedDataFiles != 1 || res.RemovedDataFiles != windows {
				t.Fatalf("compaction: %+v, %v", res, err)
			}
			tasks, err := cm.Table().Scan().PlanFiles(ctx)
			if err != nil || len(tasks) != 1 {
				t.Fatalf("%d data files after the compaction (%v), want 1", len(tasks), err)
			}
			fsys, err := cm.Table().FS(ctx)
			if err != nil {
				t.Fatal(err)
			}
			f, err := fsys.Open(tasks[0].File.FilePath())
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rdr, err := file.NewParquetReader(f)
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int64
			for g := range rdr.NumRowGroups() {
				sizes = append(sizes, rdr.MetaData().RowGroup(g).TotalCompressedSize())
			}
			t.Logf("row groups of %v bytes compressed", sizes)
			switch {
			case tc.groups > 0 && len(sizes) != tc.groups:
				t.Errorf("%d row groups, want %d: the table's %s", len(sizes), tc.groups, table.ParquetRowGroupSizeBytesKey)
			case tc.groups == 0 && (len(sizes) < 2 || slices.Max(sizes) > 5<<18):
				// 1 MiB and one batch of rows over it at most.
				t.Errorf("row groups of %v bytes: want ~1 MiB each", sizes)
			}
		})
	}
}
