package commit

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// tableCommitter commits metadata updates to a catalog; every iceberg-go
// catalog is one (table.CatalogIO).
type tableCommitter interface {
	CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error)
}

// mergeDeleteManifests rewrites the delete manifests of the current
// snapshot into one per partition spec and commits them, with the data
// manifests unchanged, as a REPLACE snapshot. iceberg-go v0.7.0's
// RewriteManifests leaves delete manifests alone, and a sink adds one with
// almost every commit: without this, every commit rewrites, and every scan
// and expiry reads, a manifest list that grows with the number of commits.
//
// Each entry is written as EXISTING with its own data and file sequence
// numbers, so every delete keeps applying to exactly the data files it
// applied to. It returns the number of manifests merged (0: nothing to do,
// or a table this does not handle: format v1 or v3, or a catalog that
// cannot take the commit).
func (c *Committer) mergeDeleteManifests(ctx context.Context, fs icebergio.IO, mans []iceberg.ManifestFile) (int, error) {
	meta := c.tbl.Metadata()
	cur := c.tbl.CurrentSnapshot()
	cat, ok := c.loader.(tableCommitter)
	wfs, wok := fs.(icebergio.WriteFileIO)
	if !ok || !wok || cur == nil || meta.Version() != 2 {
		return 0, nil
	}
	locs, err := table.LoadLocationProvider(meta.Location(), meta.Properties())
	if err != nil {
		return 0, err
	}
	bySpec := map[int32][]iceberg.ManifestFile{}
	var keep []iceberg.ManifestFile
	for _, m := range mans {
		if m.ManifestContent() == iceberg.ManifestContentDeletes {
			bySpec[m.PartitionSpecID()] = append(bySpec[m.PartitionSpecID()], m)
		} else {
			keep = append(keep, m)
		}
	}
	sw := &snapshotWriter{wfs: wfs, locs: locs, meta: meta, schema: c.tbl.Schema(), id: newSnapshotID(meta), name: "deletes-merged"}
	merged := 0
	for _, specID := range slices.Sorted(maps.Keys(bySpec)) {
		group := bySpec[specID]
		if len(group) < 2 {
			keep = append(keep, group...)
			continue
		}
		// Each entry as EXISTING, with its sequence numbers (a manifest
		// left with no live delete is not kept).
		err := sw.manifest(int(specID), iceberg.ManifestContentDeletes, func(w *iceberg.ManifestWriter) error {
			for _, m := range group {
				for e, err := range m.Entries(wfs, true) {
					if err == nil {
						err = w.Existing(e)
					}
					if err != nil {
						return fmt.Errorf("manifest %s: %w", m.FilePath(), err)
					}
				}
			}
			return nil
		})
		if err != nil {
			sw.cleanup()
			return 0, fmt.Errorf("merging %d delete manifests: %w", len(group), err)
		}
		merged += len(group)
	}
	if merged == 0 {
		return 0, nil
	}
	keep = append(keep, sw.added...)

	props := iceberg.Properties{
		"manifests-replaced": strconv.Itoa(merged),
		"manifests-created":  strconv.Itoa(len(bySpec)),
		"icesink.tidy":       "merge-delete-manifests",
	}
	if err := c.commitMetadataSnapshot(ctx, cat, wfs, sw.id, sw.name, keep, props, nil, sw.written); err != nil {
		return 0, fmt.Errorf("committing merged delete manifests: %w", err)
	}
	return merged, nil
}

// commitMetadataSnapshot commits straight through the catalog a replace
// snapshot (id snapID) on top of the current one that lists mans and
// changes no row (summary props, with the parent's totals), plus updates,
// asserting that the branch is still at the parent. written are the files
// the caller wrote for it: removed when the catalog surely refused it.
// An empty table gets a first snapshot listing nothing.
func (c *Committer) commitMetadataSnapshot(ctx context.Context, cat tableCommitter, wfs icebergio.WriteFileIO, snapID int64, name string, mans []iceberg.ManifestFile, props iceberg.Properties, updates []table.Update, written []string) error {
	meta := c.tbl.Metadata()
	cur := c.tbl.CurrentSnapshot()
	cleanup := func() {
		for _, p := range written {
			_ = wfs.Remove(p)
		}
	}
	locs, err := table.LoadLocationProvider(meta.Location(), meta.Properties())
	if err != nil {
		cleanup()
		return err
	}
	seq := meta.LastSequenceNumber() + 1
	listPath := locs.NewMetadataLocation(fmt.Sprintf("snap-%d-0-%s.avro", snapID, name))
	out, err := wfs.Create(listPath)
	if err != nil {
		cleanup()
		return fmt.Errorf("creating manifest list %s: %w", listPath, err)
	}
	written = append(written, listPath)
	var parent *int64
	schemaID := c.tbl.Schema().ID
	if cur != nil {
		id := cur.SnapshotID
		parent = &id
		if cur.SchemaID != nil {
			schemaID = *cur.SchemaID
		}
		if cur.Summary != nil {
			for k, v := range cur.Summary.Properties {
				if strings.HasPrefix(k, "total-") {
					props[k] = v // a rewrite of metadata changes no total
				}
			}
		}
	}
	// Format v3: the list assigns row ids to manifests that have none
	// (there are none among a v3 table's own), and the snapshot says
	// which ids it took.
	var firstRowID, addedRows int64
	if meta.Version() >= 3 {
		firstRowID = meta.NextRowID()
		var lw *iceberg.ManifestListWriter
		lw, err = iceberg.NewManifestListWriterV3(out, snapID, seq, firstRowID, parent)
		if err == nil {
			err = lw.AddManifests(mans)
			if cerr := lw.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				addedRows = *lw.NextRowID() - firstRowID
			}
		}
	} else {
		err = iceberg.WriteManifestList(meta.Version(), out, snapID, parent, &seq, 0, mans)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return fmt.Errorf("writing manifest list %s: %w", listPath, err)
	}
	snap := table.Snapshot{
		SnapshotID:       snapID,
		ParentSnapshotID: parent,
		SequenceNumber:   seq,
		TimestampMs:      max(time.Now().UnixMilli(), meta.LastUpdatedMillis()),
		ManifestList:     listPath,
		Summary:          &table.Summary{Operation: table.OpReplace, Properties: props},
		SchemaID:         &schemaID,
	}
	if meta.Version() >= 3 {
		snap.FirstRowID, snap.AddedRows = &firstRowID, &addedRows
	}
	updates = append([]table.Update{
		table.NewAddSnapshotUpdate(&snap),
		table.NewSetSnapshotRefUpdate(table.MainBranch, snapID, table.BranchRef, -1, -1, -1),
	}, updates...)
	reqs := []table.Requirement{table.AssertTableUUID(meta.TableUUID()), table.AssertRefSnapshotID(table.MainBranch, parent)}
	committed, loc, err := cat.CommitTable(ctx, c.ident, reqs, updates)
	if err != nil {
		c.stale = true
		if Retryable(err) {
			cleanup() // refused before anything was written to the catalog
		}
		return err
	}
	removeOldMetadata(wfs, meta, committed)
	if c.cat != nil {
		// The catalog answered with the table as committed: no reload.
		c.tbl = table.New(c.ident, committed, loc, c.fsF, c.cat)
		return nil
	}
	if err := c.Refresh(ctx); err != nil {
		c.stale = true
	}
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
