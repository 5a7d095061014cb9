package commit

import (
	"errors"
	"fmt"

	"github.com/apache/iceberg-go/table"
)

// SnapshotKind is what one snapshot of a table's history is to a sink: the
// one classification every walk over the ancestry uses (the committer's
// foreign-change check, the writers' Follow, the key index's save and load).
type SnapshotKind uint8

// The kinds of snapshot a sink meets in its table's history.
const (
	// OwnEpoch is a commit of one of the sink's epochs (summary
	// icesink.sink-id = the sink).
	OwnEpoch SnapshotKind = iota + 1
	// OwnMaintenance is a compaction by the sink's own maintenance
	// (summary icesink.maintained-by = the sink): rows moved to new files.
	OwnMaintenance
	// MetadataOnly is a rewrite of manifests (iceberg-go's or Java's
	// RewriteManifests, the sink's merge of delete manifests): a replace
	// that says so (manifests-* counters) and added or removed no data or
	// delete file and no row.
	MetadataOnly
	// ForeignRows is any other snapshot: another writer's append, delete,
	// overwrite or compaction, or a snapshot without a summary, which may
	// have changed the table's rows or where they sit.
	ForeignRows
)

// String names k.
func (k SnapshotKind) String() string {
	switch k {
	case OwnEpoch:
		return "own epoch"
	case OwnMaintenance:
		return "own maintenance"
	case MetadataOnly:
		return "metadata only"
	case ForeignRows:
		return "foreign change of rows"
	}
	return fmt.Sprintf("SnapshotKind(%d)", uint8(k))
}

// rowCounters are the summary counters of a snapshot that adds or removes
// files or rows; a metadata-only replace has none of them, or all zero.
var rowCounters = []string{
	"added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files",
	"added-records", "deleted-records", "added-position-deletes", "removed-position-deletes",
	"added-equality-deletes", "removed-equality-deletes", "added-dvs", "removed-dvs",
}

// manifestCounters are the summary counters of a rewrite of manifests.
var manifestCounters = []string{"manifests-created", "manifests-replaced", "manifests-kept", "entries-processed"}

// Classify returns what snapshot s is to sink sinkID.
func Classify(s *table.Snapshot, sinkID string) SnapshotKind {
	if s.Summary == nil {
		return ForeignRows
	}
	props := s.Summary.Properties
	switch {
	case sinkID != "" && props[PropSinkID] == sinkID:
		return OwnEpoch
	case sinkID != "" && props[PropMaintainedBy] == sinkID:
		return OwnMaintenance
	case !ChangesRows(s):
		return MetadataOnly
	}
	return ForeignRows
}

// ChangesRows reports whether snapshot s may have changed the table's live
// rows or where they sit: every snapshot but a replace that is a rewrite of
// manifests, one that names the manifests it rewrote (the spec makes the
// counters optional, so a replace that names nothing may be a compaction)
// and added or removed no file and no row.
func ChangesRows(s *table.Snapshot) bool {
	if s.Summary == nil || s.Summary.Operation != table.OpReplace {
		return true
	}
	props := s.Summary.Properties
	for _, k := range rowCounters {
		if v, ok := props[k]; ok && v != "0" {
			return true
		}
	}
	for _, k := range manifestCounters {
		if _, ok := props[k]; ok {
			return false
		}
	}
	return true
}

// ErrBaseUnreachable is returned by History when the snapshot a walk must
// reach is not in the current snapshot's ancestry: expiry removed a parent
// on the way, or the table was rolled back past it, or another branch's
// snapshot was made current.
var ErrBaseUnreachable = errors.New("snapshot not reachable in the table's current history")

// Step is one snapshot of a History, with its kind.
type Step struct {
	Snapshot *table.Snapshot
	Kind     SnapshotKind
}

// History returns the snapshots of meta's current ancestry that came after
// snapshot base, newest first, classified for sink sinkID (""
// classifies every snapshot that changed rows as ForeignRows). base -1
// stands for the empty table before the first snapshot: the walk must end
// at a snapshot without a parent. It fails with ErrBaseUnreachable when base
// cannot be reached: never a partial history taken for a whole one.
func History(meta table.Metadata, sinkID string, base int64) ([]Step, error) {
	var steps []Step
	s := meta.CurrentSnapshot()
	if s == nil {
		if base == -1 {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: snapshot %d (the table has no current snapshot)", ErrBaseUnreachable, base)
	}
	for s.SnapshotID != base {
		steps = append(steps, Step{Snapshot: s, Kind: Classify(s, sinkID)})
		if s.ParentSnapshotID == nil {
			if base == -1 {
				return steps, nil
			}
			return nil, fmt.Errorf("%w: snapshot %d (the history starts at snapshot %d)", ErrBaseUnreachable, base, s.SnapshotID)
		}
		parent := meta.SnapshotByID(*s.ParentSnapshotID)
		if parent == nil {
			return nil, fmt.Errorf("%w: snapshot %d (snapshot %d's parent %d was expired)", ErrBaseUnreachable, base, s.SnapshotID, *s.ParentSnapshotID)
		}
		s = parent
	}
	return steps, nil
}

// IsAncestor reports whether snapshot id is the current snapshot of meta
// or one of its ancestors still in the metadata.
func IsAncestor(meta table.Metadata, id int64) bool {
	cur := meta.CurrentSnapshot()
	if cur == nil {
		return false
	}
	for _, s := range table.AncestorsOf(cur.SnapshotID, meta.SnapshotByID) {
		if s.SnapshotID == id {
			return true
		}
	}
	return false
}
