package commit_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
)

// TestRemoveOrphanFilesObjectStorage: on a table with the object-storage
// layout, writers' files lie in hash folders under the data folder; the
// sweep of the data folder finds an orphan in any of them, and leaves the
// files the predicate does not pick and the table's referenced files.
func TestRemoveOrphanFilesObjectStorage(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTableWith(t, iceberg.Properties{table.ObjectStoreEnabledKey: "true"})
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	locs, err := tbl.LocationProvider()
	if err != nil {
		t.Fatal(err)
	}
	local := func(p string) string { return strings.TrimPrefix(p, "file://") }
	write := func(p string) {
		if err := os.MkdirAll(filepath.Dir(local(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(local(p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A committed file, so that the table has a snapshot to plan against.
	commitEpoch(t, cm, tbl, "s", 1)
	kept := tbl.Location() + "/data/s-1.parquet"
	write(kept)
	var orphans []string
	for _, name := range []string{"orphan-a.parquet", "orphan-b.parquet", "orphan-c.parquet", "other.parquet"} {
		p := locs.NewDataLocation(name)
		write(p)
		orphans = append(orphans, p)
	}
	n, err := commit.RemoveOrphanFiles(ctx, cm.Table(), commit.OrphanFiles{DataOnly: true,
		Remove: func(p string) bool { return strings.Contains(p, "/orphan-") }})
	if err != nil || n != 3 {
		t.Fatalf("removed %d files (%v), want the 3 orphans in their hash folders: %v", n, err, orphans)
	}
	for _, p := range append([]string{kept}, orphans[3]) {
		if _, err := os.Stat(local(p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
