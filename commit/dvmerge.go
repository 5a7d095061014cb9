package commit

import (
	"context"
	"fmt"
	"path"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/codec"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/google/uuid"
)

// refVectors are the deletion vectors an epoch's payloads hold for one
// data file: the vectors added, the payload of the first, and the live
// vectors the payloads say they replace.
type refVectors struct {
	added    []iceberg.DataFile
	owner    int
	replaced []vectorKey
}

// mergeVectors returns payloads that hold at most one deletion vector per
// data file, each replacing the vector the table holds for that file now.
// A data file may hold rows of several writers (after a compaction, by
// this sink or another engine, or after a change of --writers or
// --vnodes), so several writers may delete from it in one epoch; and a
// writer's idea of a file's live vector is stale after an epoch that
// merged it. For such a file the vectors added, and the table's live one,
// are read and written again as one vector (into a Puffin file of the
// sink's beside the first), which replaces the live one. Payloads that
// need nothing merged are returned as they are; the caller's are never
// changed.
func (c *Committer) mergeVectors(ctx context.Context, payloads []Payload) ([]Payload, error) {
	meta := c.tbl.Metadata()
	// Only the vectors' entries are decoded (every file's is again by
	// the commit itself).
	refs := map[string]*refVectors{}
	for i := range payloads {
		p := &payloads[i]
		for _, f := range p.Files {
			if f.Kind != DeletionVector && f.Kind != ReplacedDeletionVector {
				continue
			}
			schema, spec, err := payloadSchema(meta, p)
			if err != nil {
				return nil, err
			}
			df, err := codec.DecodeDataFile(f.Entry, *spec, schema, p.FormatVersion)
			if err != nil {
				return nil, fmt.Errorf("decoding manifest entry of %s: %w", f.Path, err)
			}
			r := refs[f.Ref]
			if r == nil {
				r = &refVectors{owner: i}
				refs[f.Ref] = r
			}
			if f.Kind == DeletionVector {
				r.added = append(r.added, df)
			} else {
				r.replaced = append(r.replaced, keyOf(df))
			}
		}
	}
	if len(refs) == 0 {
		return payloads, nil
	}
	fsys, err := c.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	live, err := liveVectors(fsys, c.tbl.CurrentSnapshot(), refs)
	if err != nil {
		return nil, err
	}
	var merge []string
	for ref, r := range refs {
		if len(r.added) == 0 {
			return nil, fmt.Errorf("the payloads replace a deletion vector of %s without a new one", ref)
		}
		lv, has := live[ref]
		switch {
		case len(r.added) != 1:
		case has && len(r.replaced) == 1 && r.replaced[0] == keyOf(lv):
			continue
		case !has && len(r.replaced) == 0:
			continue
		}
		merge = append(merge, ref)
	}
	if len(merge) == 0 {
		return payloads, nil
	}
	slices.Sort(merge)
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("merging deletion vectors: the table's file IO cannot write")
	}
	w := dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	for _, ref := range merge {
		r := refs[ref]
		files := slices.Clone(r.added)
		if lv, has := live[ref]; has {
			files = append(files, lv)
		}
		// Each in its own Puffin file (ReadDVs wants one file).
		union := dv.NewRoaringPositionBitmap()
		for _, f := range files {
			bm, err := dv.ReadDV(fsys, f)
			if err != nil {
				return nil, fmt.Errorf("merging the deletion vectors of %s: reading %s: %w", ref, f.FilePath(), err)
			}
			union.Or(bm)
		}
		first := r.added[0]
		w.Load(ref, union, first.SpecID(), first.Partition())
	}
	first := refs[merge[0]].added[0]
	loc := path.Join(path.Dir(first.FilePath()), fmt.Sprintf("%s-merged-%s.puffin", c.sinkID, uuid.NewString()))
	merged, err := w.Flush(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("writing the merged deletion vectors to %s: %w", loc, err)
	}
	// The payloads without the merged files' vectors, then the merged
	// vectors and the live ones they replace in each file's first payload.
	out := make([]Payload, len(payloads))
	for i := range payloads {
		out[i] = payloads[i]
		out[i].Files = nil
		for _, f := range payloads[i].Files {
			if (f.Kind == DeletionVector || f.Kind == ReplacedDeletionVector) && slices.Contains(merge, f.Ref) {
				continue
			}
			out[i].Files = append(out[i].Files, f)
		}
	}
	for _, df := range merged {
		ref := ""
		if p := df.ReferencedDataFile(); p != nil {
			ref = *p
		}
		r := refs[ref]
		if r == nil {
			return nil, fmt.Errorf("merged deletion vector %s names data file %q, which no payload deletes from", df.FilePath(), ref)
		}
		p := &out[r.owner]
		schema, spec, err := payloadSchema(meta, p)
		if err != nil {
			return nil, err
		}
		entry, err := EncodeEntry(df, *spec, schema, p.FormatVersion)
		if err != nil {
			return nil, err
		}
		p.Files = append(p.Files, File{Kind: DeletionVector, Path: df.FilePath(), Rows: df.Count(), Bytes: df.FileSizeBytes(), Entry: entry, Ref: ref})
		if lv, has := live[ref]; has {
			entry, err := EncodeEntry(lv, *spec, schema, p.FormatVersion)
			if err != nil {
				return nil, err
			}
			p.Files = append(p.Files, File{Kind: ReplacedDeletionVector, Path: lv.FilePath(), Rows: lv.Count(), Entry: entry, Ref: ref})
		}
	}
	return out, nil
}

// liveVectors returns the live deletion vector of each data file of refs
// that has one in snapshot s.
func liveVectors(fsys icebergio.IO, s *table.Snapshot, refs map[string]*refVectors) (map[string]iceberg.DataFile, error) {
	live := map[string]iceberg.DataFile{}
	if s == nil {
		return live, nil
	}
	mans, err := s.Manifests(fsys)
	if err != nil {
		return nil, fmt.Errorf("reading the manifest list of snapshot %d: %w", s.SnapshotID, err)
	}
	for _, m := range mans {
		if m.ManifestContent() != iceberg.ManifestContentDeletes {
			continue
		}
		for e, err := range m.Entries(fsys, true) {
			if err != nil {
				return nil, fmt.Errorf("reading delete manifest %s: %w", m.FilePath(), err)
			}
			df := e.DataFile()
			if !table.IsDeletionVector(df) {
				continue
			}
			if k := keyOf(df); refs[k.ref] != nil {
				live[k.ref] = df
			}
		}
	}
	return live, nil
}
