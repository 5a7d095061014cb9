package deltawriter

import (
	"context"
	"math"
	"slices"

	"github.com/apache/iceberg-go"
)

// posDeletes hands a rebuild each data file's deleted positions with each
// position-delete file read once, whatever the number of data files it
// applies to (a writer's delete file names rows of many): the first data
// file reads every delete file and keeps, per data file still to come,
// the positions deleted there. What it keeps is bounded by the rebuild's
// share of the budget: past it, the positions kept for the last data
// files are dropped, and the delete files they came from are read again
// when those files come (a rebuild then reads its deletes about (their
// positions' bytes / the share) times, never once per data file).
type posDeletes struct {
	files   []iceberg.DataFile // the snapshot's position-delete files
	order   map[string]int     // data file -> its index in the rebuild's order
	upTo    []int              // per delete file: the last data file its positions were handed to (-1: none)
	reach   []int              // per delete file: the last data file it deletes in (when read)
	stale   int                // the first data file a delete file has not handed its positions to
	pending map[int][]int64    // data file index -> positions read for it
	bytes   int64              // what pending holds (about)
}

// newPosDeletes prepares the position deletes of files for a rebuild over
// the data files paths, read in that order.
func newPosDeletes(files []iceberg.DataFile, paths []string) *posDeletes {
	p := &posDeletes{files: files, order: make(map[string]int, len(paths)), pending: map[int][]int64{}}
	for i, path := range paths {
		p.order[path] = i
	}
	p.upTo, p.reach = make([]int, len(files)), make([]int, len(files))
	for j := range files {
		p.upTo[j], p.reach[j] = -1, -1
	}
	return p
}

// of returns the positions deleted in data file at (read in order),
// unsorted; the rebuilder's budget bounds what is kept for later files.
func (p *posDeletes) of(ctx context.Context, r *rebuilder, at int) ([]int64, error) {
	if at >= p.stale && len(p.files) > 0 {
		for j, df := range p.files {
			if p.upTo[j] >= at {
				continue
			}
			if p.upTo[j] >= 0 {
				r.w.stats.IndexRebuildDeleteRereads++
			}
			reach := -1
			err := readParquet(ctx, r.fs, df.FilePath(), nil, func(cols []any) error {
				file, _ := cols[0].(string)
				pos, _ := cols[1].(int64)
				if i, ok := p.order[file]; ok && i >= at {
					if len(p.pending[i]) == 0 {
						p.bytes += 48 // the slice and its map entry
					}
					p.pending[i] = append(p.pending[i], pos)
					p.bytes += 8
					reach = max(reach, i)
				}
				return nil
			}, "file_path", "pos")
			if err != nil {
				return nil, err
			}
			p.upTo[j], p.reach[j] = math.MaxInt, reach
			p.shrink(r.w.opts.MemoryLimit/8, at)
		}
		// Every delete file handed out through the file stale-1 (MaxInt:
		// all of them, to the end); until then none is read again.
		p.stale = slices.Min(p.upTo)
		if p.stale < math.MaxInt {
			p.stale++
		}
	}
	deleted := p.pending[at]
	if len(deleted) > 0 {
		p.bytes -= 48 + 8*int64(len(deleted))
	}
	delete(p.pending, at)
	return deleted, nil
}

// shrink drops the positions kept for the last data files until what is
// kept fits limit (0: no limit), never those of data file at (being
// read); the delete files that deleted in the files dropped hand them
// their positions again when they come.
func (p *posDeletes) shrink(limit int64, at int) {
	if limit <= 0 || p.bytes <= limit {
		return
	}
	idx := make([]int, 0, len(p.pending))
	for i := range p.pending {
		if i != at {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	cut := math.MaxInt
	for len(idx) > 0 && p.bytes > limit {
		i := idx[len(idx)-1]
		idx = idx[:len(idx)-1]
		p.bytes -= 48 + 8*int64(len(p.pending[i]))
		delete(p.pending, i)
		cut = i
	}
	for j := range p.files {
		if p.upTo[j] >= cut && p.reach[j] >= cut {
			p.upTo[j] = cut - 1
		}
	}
}
