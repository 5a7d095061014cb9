package commit_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
)

// TestTidyHonoursTableRetention: the table's own retention properties
// (history.expire.min-snapshots-to-keep, .max-snapshot-age-ms) keep what
// they ask for however short the sink's retention is. Before, the sink's
// expiry overrode them (and passed an age of 0).
func TestTidyHonoursTableRetention(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		props iceberg.Properties
		want  int // snapshots at least kept of 16
	}{
		{"min-snapshots-to-keep", iceberg.Properties{"history.expire.min-snapshots-to-keep": "10"}, 10},
		{"max-snapshot-age-ms", iceberg.Properties{"history.expire.max-snapshot-age-ms": "3600000"}, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wh, tbl := newTable(t)
			setProperties(t, tbl, tc.props)
			cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
			if err != nil {
				t.Fatal(err)
			}
			for e := uint64(1); e <= 16; e++ {
				commitEpoch(t, cm, tbl, "s", e)
				if _, err := cm.Tidy(ctx, commit.Retention{RetainSnapshots: 3}); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(cm.Table().Metadata().Snapshots()); n < tc.want {
				t.Fatalf("%d snapshots kept, the table's properties ask for at least %d", n, tc.want)
			}
		})
	}
}

// TestExpiryRemovesManifests: expiry removes the manifest lists of the
// expired snapshots and the manifests that only they listed, and keeps
// every file a retained snapshot reads. Before, only a memory test noticed
// when this stopped.
func TestExpiryRemovesManifests(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	for e := uint64(1); e <= 12; e++ {
		commitEpoch(t, cm, tbl, "s", e)
	}
	fsys, err := cm.Table().FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files := func(s table.Snapshot) []string {
		mans, err := s.Manifests(fsys)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{s.ManifestList}
		for _, m := range mans {
			out = append(out, m.FilePath())
		}
		return out
	}
	before := map[int64][]string{}
	for _, s := range cm.Table().Metadata().Snapshots() {
		before[s.SnapshotID] = files(s)
	}
	if _, err := cm.Tidy(ctx, commit.Retention{RetainSnapshots: 4}); err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, s := range cm.Table().Metadata().Snapshots() {
		for _, p := range files(s) {
			kept[p] = true
		}
	}
	exists := func(p string) bool {
		f, err := fsys.Open(p)
		if err == nil {
			f.Close()
		}
		return err == nil
	}
	removed := 0
	for id, paths := range before {
		for _, p := range paths {
			switch {
			case kept[p] && !exists(p):
				t.Fatalf("%s, which a retained snapshot reads, was removed", p)
			case !kept[p] && exists(p):
				t.Fatalf("%s of expired snapshot %d is still there", p, id)
			case !kept[p]:
				removed++
			}
		}
	}
	if len(before)-len(cm.Table().Metadata().Snapshots()) < 8 || removed == 0 {
		t.Fatalf("%d snapshots expired, %d files removed; want 8 and some", len(before)-len(cm.Table().Metadata().Snapshots()), removed)
	}
}

// TestTidyCapsManifestsOnV3: with the default retention (100 manifests)
// a format v3 table's data manifests are merged past V3MaxManifests (a
// commit replacing deletion vectors reads them all), a v2 table's are not.
func TestTidyCapsManifestsOnV3(t *testing.T) {
	for _, version := range []int{2, 3} {
		ctx := context.Background()
		wh, tbl := newTableWith(t, iceberg.Properties{"format-version": strconv.Itoa(version)})
		cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
		if err != nil {
			t.Fatal(err)
		}
		most := 0
		for e := uint64(1); e <= 3*commit.V3MaxManifests; e++ {
			df := dataFile(t, fmt.Sprintf("%s/data/s-%d.parquet", tbl.Location(), e))
			ent, err := commit.EncodeEntry(df, *iceberg.UnpartitionedSpec, testSchema(), version)
			if err != nil {
				t.Fatal(err)
			}
			p := commit.Payload{Version: commit.PayloadVersion, SinkID: "s", FormatVersion: version,
				Files: []commit.File{{Kind: commit.DataFile, Path: df.FilePath(), Rows: 10, Bytes: 100, Entry: ent}}}
			if _, err := cm.Commit(ctx, e, []commit.Payload{p}, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := cm.Tidy(ctx, commit.DefaultRetention()); err != nil {
				t.Fatal(err)
			}
			data, _ := countManifests(t, cm.Table())
			most = max(most, data)
		}
		switch {
		case version == 3 && most > commit.V3MaxManifests+1:
			t.Errorf("v3: %d data manifests at most, want them merged past %d", most, commit.V3MaxManifests)
		case version == 2 && most != 3*commit.V3MaxManifests:
			t.Errorf("v2: %d data manifests at most, want one per commit (%d)", most, 3*commit.V3MaxManifests)
		}
		if got := len(dataFiles(t, cm.Table())); got != 3*commit.V3MaxManifests {
			t.Errorf("v%d: %d data files after the merges, want %d", version, got, 3*commit.V3MaxManifests)
		}
	}
}
