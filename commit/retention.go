package commit

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Retention bounds the history a long-running sink leaves in its table, so
// that the metadata it loads, holds and rewrites on every commit stops
// growing with the number of commits. The zero value keeps everything.
type Retention struct {
	// RetainSnapshots is the number of newest snapshots always kept; older
	// ones expire (with their manifest lists, and the files no retained
	// snapshot references) once there are a quarter more than this.
	// 0: no expiry.
	RetainSnapshots int
	// OlderThan protects younger snapshots from expiry whatever their
	// number, for readers still planning a scan on them. Default 0.
	OlderThan time.Duration
	// MaxDataManifests merges the current snapshot's data manifests
	// (iceberg-go's RewriteManifests) when it holds more than this many.
	// Delete manifests are left as they are (iceberg-go v0.7.0 does not
	// rewrite them). 0: never.
	MaxDataManifests int
}

// DefaultRetention is what the sink applies unless told otherwise: 100
// snapshots of history, data manifests merged past 100.
func DefaultRetention() Retention {
	return Retention{RetainSnapshots: 100, MaxDataManifests: 100}
}

// Tidied is what one Tidy did.
type Tidied struct {
	ExpiredSnapshots   int // snapshots removed from the metadata
	RewrittenManifests int // data manifests merged into fewer
}

// Tidy applies r to the table after a commit: it expires snapshots past
// the retained history and merges data manifests past the limit, each in a
// commit of its own. Neither changes the table's rows. A failure (a
// concurrent commit, say) leaves the table as it was; the next Tidy tries
// again.
func (c *Committer) Tidy(ctx context.Context, r Retention) (Tidied, error) {
	var t Tidied
	if r.RetainSnapshots > 0 {
		n := len(c.tbl.Metadata().Snapshots())
		if n > r.RetainSnapshots+max(1, r.RetainSnapshots/4) {
			tx := c.tbl.NewTransaction()
			if err := tx.ExpireSnapshots(table.WithRetainLast(r.RetainSnapshots), table.WithOlderThan(r.OlderThan)); err != nil {
				return t, fmt.Errorf("commit: expiring snapshots of %v: %w", c.ident, err)
			}
			tbl, err := tx.Commit(ctx)
			if err != nil {
				c.stale = true
				return t, fmt.Errorf("commit: expiring snapshots of %v: %w", c.ident, err)
			}
			c.adopt(ctx, tbl)
			t.ExpiredSnapshots = n - len(c.tbl.Metadata().Snapshots())
		}
	}
	if r.MaxDataManifests > 0 && c.tbl.CurrentSnapshot() != nil {
		fs, err := c.tbl.FS(ctx)
		if err != nil {
			return t, fmt.Errorf("commit: %v: %w", c.ident, err)
		}
		mans, err := c.tbl.CurrentSnapshot().Manifests(fs)
		if err != nil {
			return t, fmt.Errorf("commit: reading the manifest list of %v: %w", c.ident, err)
		}
		data := 0
		for _, m := range mans {
			if m.ManifestContent() == iceberg.ManifestContentData {
				data++
			}
		}
		if data > r.MaxDataManifests {
			tx := c.tbl.NewTransaction()
			res, err := tx.RewriteManifests(ctx)
			if err != nil {
				return t, fmt.Errorf("commit: merging the data manifests of %v: %w", c.ident, err)
			}
			if !res.IsNoOp() {
				tbl, err := tx.Commit(ctx)
				if err != nil {
					c.stale = true
					return t, fmt.Errorf("commit: merging the data manifests of %v: %w", c.ident, err)
				}
				c.adopt(ctx, tbl)
				t.RewrittenManifests = data
			}
		}
	}
	return t, nil
}
