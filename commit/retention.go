package commit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// Retention bounds the history a long-running sink leaves in its table, so
// that the metadata it loads, holds and rewrites on every commit stops
// growing with the number of commits. The zero value keeps everything.
type Retention struct {
	// RetainSnapshots is the number of newest snapshots always kept; older
	// ones expire once there are a quarter more than this, and their
	// manifest lists and the manifests no retained snapshot lists are
	// removed. Data and delete files are not: the sink's own commits never
	// unreference one, and files other writers' rewrites left behind are
	// the orphan-file cleanup's. 0: no expiry.
	RetainSnapshots int
	// OlderThan protects younger snapshots from expiry whatever their
	// number, for readers still planning a scan on them. Default 0. The
	// table's history.expire.min-snapshots-to-keep and
	// history.expire.max-snapshot-age-ms raise RetainSnapshots and
	// OlderThan when they ask for more.
	OlderThan time.Duration
	// MaxDataManifests merges the current snapshot's data manifests
	// (iceberg-go's RewriteManifests) when it holds more than this many
	// (at most V3MaxManifests on a format v3 table). 0: never.
	MaxDataManifests int
	// MaxDeleteManifests merges the current snapshot's delete manifests
	// into one per partition spec when it holds more than this many
	// (iceberg-go v0.7.0's RewriteManifests leaves them alone; see
	// mergeDeleteManifests). Format v2 tables only. 0: never.
	MaxDeleteManifests int
	// CheckManifestsEvery is how many Tidy calls pass between two counts
	// of the manifests (a read of the manifest list). Default: an eighth
	// of the smaller manifest limit; a one-shot maintenance sets 1.
	CheckManifestsEvery int
}

// DefaultRetention is what the sink applies unless told otherwise: 100
// snapshots of history, data and delete manifests each merged past 100.
func DefaultRetention() Retention {
	return Retention{RetainSnapshots: 100, MaxDataManifests: 100, MaxDeleteManifests: 100}
}

// withTable returns r made no shorter than what the table's own retention
// properties ask for (history.expire.min-snapshots-to-keep,
// history.expire.max-snapshot-age-ms, as another engine's expiry would
// honour them): the sink never expires what the table's owner keeps.
func (r Retention) withTable(props iceberg.Properties) Retention {
	if n := props.GetInt(table.MinSnapshotsToKeepKey, 0); n > r.RetainSnapshots {
		r.RetainSnapshots = n
	}
	if ms := props.GetInt64(table.MaxSnapshotAgeMsKey, 0); time.Duration(ms)*time.Millisecond > r.OlderThan {
		r.OlderThan = time.Duration(ms) * time.Millisecond
	}
	return r
}

// V3MaxManifests caps the manifest limits on a format v3 table: a commit
// that replaces deletion vectors reads every manifest of the table
// (iceberg-go v0.7.0's overwrite producer scans them all for the replaced
// vectors, and its check that the vectors' data files exist reads the
// data manifests), so it stays cheap only while they are few.
const V3MaxManifests = 8

// Tidied is what one Tidy did.
type Tidied struct {
	ExpiredSnapshots   int // snapshots removed from the metadata
	RewrittenManifests int // data manifests merged into fewer
	MergedDeletes      int // delete manifests merged into one per spec
}

// removeExpired removes the manifest lists of the snapshots of before that
// after no longer has, and the manifests they listed that no snapshot of
// after lists.
func removeExpired(ctx context.Context, before, after *table.Table) error {
	fsys, err := after.FS(ctx)
	if err != nil {
		return err
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return nil
	}
	kept := map[string]bool{}
	for _, s := range after.Metadata().Snapshots() {
		kept[s.ManifestList] = true
	}
	listed := func(s table.Snapshot, into map[string]bool) error {
		mans, err := s.Manifests(fsys)
		if err != nil {
			return fmt.Errorf("snapshot %d: %w", s.SnapshotID, err)
		}
		for _, m := range mans {
			into[m.FilePath()] = true
		}
		return nil
	}
	orphans := map[string]bool{}
	var lists []string
	for _, s := range before.Metadata().Snapshots() {
		if kept[s.ManifestList] || s.ManifestList == "" {
			continue
		}
		lists = append(lists, s.ManifestList)
		if err := listed(s, orphans); err != nil {
			return err
		}
	}
	if len(lists) == 0 {
		return nil
	}
	live := map[string]bool{}
	for _, s := range after.Metadata().Snapshots() {
		if err := listed(s, live); err != nil {
			return err
		}
	}
	var errs []error
	for _, p := range lists {
		errs = append(errs, removeIfPresent(wfs, p))
	}
	for p := range orphans {
		if !live[p] {
			errs = append(errs, removeIfPresent(wfs, p))
		}
	}
	return errors.Join(errs...)
}

// capLimit is limit, at most most (0, never, stays 0).
func capLimit(limit, most int) int {
	if limit == 0 {
		return 0
	}
	return min(limit, most)
}

func removeIfPresent(wfs icebergio.WriteFileIO, path string) error {
	if err := wfs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Tidy applies r to the table after a commit: it expires snapshots past
// the retained history and merges data and delete manifests past their
// limits, each in a commit of its own. Neither changes the table's rows. A failure (a
// concurrent commit, say) leaves the table as it was; the next Tidy tries
// again.
func (c *Committer) Tidy(ctx context.Context, r Retention) (Tidied, error) {
	var t Tidied
	if r.RetainSnapshots > 0 {
		r = r.withTable(c.tbl.Properties())
		n := len(c.tbl.Metadata().Snapshots())
		if n > r.RetainSnapshots+max(1, r.RetainSnapshots/4) {
			before := c.tbl
			// iceberg-go's own clean-up after expiry reads every manifest of
			// every retained snapshot (O(files in the table) per expiry, a
			// quarter of a long run's time); removeExpired reads only the
			// manifest lists.
			tx := c.tbl.NewTransaction()
			if err := tx.ExpireSnapshots(table.WithRetainLast(r.RetainSnapshots), table.WithOlderThan(r.OlderThan), table.WithPostCommit(false)); err != nil {
				return t, fmt.Errorf("commit: expiring snapshots of %v: %w", c.ident, err)
			}
			tbl, err := tx.Commit(ctx)
			if err != nil {
				c.stale = true
				return t, fmt.Errorf("commit: expiring snapshots of %v: %w", c.ident, err)
			}
			c.adopt(ctx, tbl)
			t.ExpiredSnapshots = n - len(c.tbl.Metadata().Snapshots())
			if err := removeExpired(ctx, before, c.tbl); err != nil {
				return t, fmt.Errorf("commit: removing the files of expired snapshots of %v: %w", c.ident, err)
			}
			if err := c.removeReplaced(ctx); err != nil {
				return t, err
			}
		}
	}
	if c.tbl.Metadata().Version() >= 3 {
		r.MaxDataManifests = capLimit(r.MaxDataManifests, V3MaxManifests)
		r.MaxDeleteManifests = capLimit(r.MaxDeleteManifests, V3MaxManifests)
	}
	// Reading the manifest list costs as much as a commit: it is read
	// every eighth of the smaller limit's commits (a commit adds one data
	// and one delete manifest), so a limit is overshot by at most a
	// quarter.
	limit := max(r.MaxDataManifests, r.MaxDeleteManifests)
	if r.MaxDataManifests > 0 && r.MaxDeleteManifests > 0 {
		limit = min(r.MaxDataManifests, r.MaxDeleteManifests)
	}
	c.tidies++
	every := r.CheckManifestsEvery
	if every <= 0 {
		every = max(1, limit/8)
	}
	if limit > 0 && c.tidies%every == 0 && c.tbl.CurrentSnapshot() != nil {
		fsys, err := c.tbl.FS(ctx)
		if err != nil {
			return t, fmt.Errorf("commit: %v: %w", c.ident, err)
		}
		mans, err := c.tbl.CurrentSnapshot().Manifests(fsys)
		if err != nil {
			return t, fmt.Errorf("commit: reading the manifest list of %v: %w", c.ident, err)
		}
		data, deletes := 0, 0
		for _, m := range mans {
			if m.ManifestContent() == iceberg.ManifestContentData {
				data++
			} else {
				deletes++
			}
		}
		if r.MaxDeleteManifests > 0 && deletes > r.MaxDeleteManifests {
			n, err := c.mergeDeleteManifests(ctx, fsys, mans)
			if err != nil {
				return t, fmt.Errorf("commit: merging the delete manifests of %v: %w", c.ident, err)
			}
			t.MergedDeletes = n
		}
		if r.MaxDataManifests > 0 && data > r.MaxDataManifests {
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
