package deltawriter

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// rebuildPlan is what a key-index rebuild reads of a snapshot: its live
// data files, and the delete files that apply to them. It is made from
// the manifests without iceberg-go's scan planning, which gives every
// data file the list of every position-delete file whose path bounds
// hold it: data files × delete files in time and in memory, since our
// writers' delete files span many data files (3,300 files held over
// 100 MiB of such lists, outside any budget). Position deletes are read
// by path instead (posDeletes); a data file's task is made when it is
// read.
type rebuildPlan struct {
	data    []seqFile
	posDels []iceberg.DataFile // position-delete files (not vectors)
	dvs     map[string]seqFile // data file path -> its deletion vector
	eqDels  []seqFile          // equality-delete files
}

// seqFile is a file of a manifest entry with the entry's data sequence
// number.
type seqFile struct {
	df  iceberg.DataFile
	seq int64
}

// planRebuild lists snap's live files.
func planRebuild(fsys iceio.IO, snap *table.Snapshot) (*rebuildPlan, error) {
	mans, err := snap.Manifests(fsys)
	if err != nil {
		return nil, fmt.Errorf("listing the manifests of snapshot %d: %w", snap.SnapshotID, err)
	}
	p := &rebuildPlan{dvs: map[string]seqFile{}}
	for _, m := range mans {
		entries, err := m.FetchEntries(fsys, true)
		if err != nil {
			return nil, fmt.Errorf("reading manifest %s: %w", m.FilePath(), err)
		}
		for _, e := range entries {
			f := seqFile{df: e.DataFile(), seq: e.SequenceNum()}
			switch f.df.ContentType() {
			case iceberg.EntryContentData:
				p.data = append(p.data, f)
			case iceberg.EntryContentEqDeletes:
				p.eqDels = append(p.eqDels, f)
			case iceberg.EntryContentPosDeletes:
				if ref := f.df.ReferencedDataFile(); ref != nil && f.df.FileFormat() == iceberg.PuffinFile {
					if _, dup := p.dvs[*ref]; dup {
						return nil, fmt.Errorf("two deletion vectors for %s in snapshot %d", *ref, snap.SnapshotID)
					}
					p.dvs[*ref] = f
					continue
				}
				p.posDels = append(p.posDels, f.df)
			}
		}
	}
	return p, nil
}

// task is data file i with its deletion vector and the equality deletes
// that apply to it (a later sequence number, and the file's partition
// unless one of them has none), as iceberg-go's planning matches them.
// Its position deletes are posDeletes's.
func (p *rebuildPlan) task(i int) table.FileScanTask {
	d := p.data[i]
	t := table.FileScanTask{File: d.df}
	if v, ok := p.vector(i); ok {
		t.DeletionVectorFiles = []iceberg.DataFile{v}
	}
	part := d.df.Partition()
	for _, e := range p.eqDels {
		if e.seq <= d.seq {
			continue
		}
		if ep := e.df.Partition(); len(ep) > 0 && len(part) > 0 && !maps.EqualFunc(part, ep, samePartitionValue) {
			continue
		}
		t.EqualityDeleteFiles = append(t.EqualityDeleteFiles, e.df)
	}
	return t
}

// vector returns the deletion vector of data file i, if one applies (its
// sequence number not before the file's).
func (p *rebuildPlan) vector(i int) (iceberg.DataFile, bool) {
	d := p.data[i]
	v, ok := p.dvs[d.df.FilePath()]
	if !ok || v.seq >= 0 && d.seq > v.seq {
		return nil, false
	}
	return v.df, true
}

// samePartitionValue compares two partition values of a manifest.
func samePartitionValue(a, b any) bool {
	if x, ok := a.([]byte); ok {
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	}
	return reflect.DeepEqual(a, b)
}

// paths are the data files' paths, in the plan's order.
func (p *rebuildPlan) paths() []string {
	out := make([]string, len(p.data))
	for i, d := range p.data {
		out[i] = d.df.FilePath()
	}
	return slices.Clip(out)
}
