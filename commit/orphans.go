package commit

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"strings"
	"time"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// OrphanFiles says which unreferenced files RemoveOrphanFiles removes.
type OrphanFiles struct {
	// DataOnly limits the search to the table's data folder (where
	// writers put their files) instead of its whole location.
	DataOnly bool
	// OlderThan spares files modified more recently (a write in flight).
	// 0: any age.
	OlderThan time.Duration
	// Remove picks the orphans to remove by path; nil removes every one.
	Remove func(path string) bool
}

// RemoveOrphanFiles removes the files under tbl's location that no
// snapshot of tbl references (iceberg-go's orphan-file planning: every
// manifest of every snapshot is read once) and that o picks, and returns
// how many it removed. A table that has written nothing yet has none.
func RemoveOrphanFiles(ctx context.Context, tbl *table.Table, o OrphanFiles) (int, error) {
	opts := []table.OrphanCleanupOption{table.WithFilesOlderThan(o.OlderThan), table.WithDryRun(true)}
	if o.DataOnly {
		opts = append(opts, table.WithLocation(dataFolder(tbl.Metadata())))
	}
	plan, err := tbl.DeleteOrphanFiles(ctx, opts...)
	if errors.Is(err, iofs.ErrNotExist) {
		return 0, nil // nothing written yet
	}
	if err != nil {
		return 0, fmt.Errorf("commit: listing the orphan files of %v: %w", tbl.Identifier(), err)
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return 0, fmt.Errorf("commit: the file IO of %v cannot remove files", tbl.Identifier())
	}
	n := 0
	for _, p := range plan.OrphanFileLocations {
		if o.Remove != nil && !o.Remove(p) {
			continue
		}
		if err := removeIfPresent(wfs, p); err != nil {
			return n, fmt.Errorf("commit: removing orphan file %s: %w", p, err)
		}
		n++
	}
	return n, nil
}

// dataFolder is where meta's writers put their files: write.data.path,
// else LOCATION/data. With the object-storage layout the files lie in
// hash folders below it, so listing it finds them all.
func dataFolder(meta table.Metadata) string {
	return strings.TrimSuffix(meta.Properties().Get(table.WriteDataPathKey, strings.TrimSuffix(meta.Location(), "/")+"/data"), "/")
}
