package commit_test

import (
	"context"
	"testing"

	"github.com/apache/iceberg-go"

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
			tx := tbl.NewTransaction()
			if err := tx.SetProperties(tc.props); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
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
