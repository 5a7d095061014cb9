package deltawriter

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/icesink/icesink/dedup"
)

// A change to a key that the index's memory tier does not hold, and that
// the spill runs may hold (dedup.Index.Touch), is applied without reading
// the runs: as if the key were new, its state marked Partial. The upsert
// rules differ only by the key's older state in the window, so the
// differences are settled later, for all such keys at once, when the index
// resolves them against the runs in sorted order (at each spill, at
// PrepareCommit, and when the pending equality deletes below outgrow their
// share): merge below. That makes a spilled index cost sequential reads per
// spill instead of a block read per change.
//
// An older state with a live row: the first partial change would have
// position-deleted it (merge does now) and not recorded an equality delete;
// a later change would, after a delete (EqDeletedIfRow tracks that case).
// Otherwise the partial state stands, EqDeleted or'ed with the older one.
// In DeleteByEquality mode the equality deletes a partial chain would
// write under either case are held (pendingEq) and written by merge for
// the case that holds, unless the older state had written one already.

// pendingEq is an equality delete held until its key is resolved: the
// key by its hash and its ID in the index's memory tier (its bytes are
// the index's), the lane the change was in.
type pendingEq struct {
	hash  uint64
	id    uint32
	ifRow bool // the delete the chain writes if the older state had a live row
	lane  *lane
}

// pendingEqBytes is the memory one pendingEq holds.
const pendingEqBytes = 24

// deleteOlder records that the change to key removes the key's row of an
// earlier commit. With a key index that is only the state's EqDeleted
// (resolved at PrepareCommit); in equality mode it writes an equality
// delete of row's key, or holds it when the state is partial.
func (w *Writer) deleteOlder(ln *lane, row []any, hash uint64, partial, ifRow bool) error {
	if w.tidx != nil {
		return nil
	}
	if !partial {
		return w.equalityDelete(ln, row)
	}
	// Held once the key is in the index (hold): the Put may spill, which
	// resolves every partial key but this one.
	w.eqNow = append(w.eqNow, pendingEq{hash: hash, lane: ln, ifRow: ifRow})
	return nil
}

// hold moves the equality deletes of the change just Put, whose key has
// id in the index, to the held ones.
func (w *Writer) hold(id uint32) {
	for _, p := range w.eqNow {
		p.id = id
		w.eqHeld = append(w.eqHeld, p)
	}
	w.eqNow = w.eqNow[:0]
	w.eqSorted = false
}

// heldEqBytes is what the held equality deletes take.
func (w *Writer) heldEqBytes() int64 {
	return int64(cap(w.eqHeld)) * pendingEqBytes
}

// resolve completes the index's partial states (merge is called for each).
func (w *Writer) resolve() error {
	if err := w.index.Resolve(); err != nil {
		return fmt.Errorf("deltawriter: index: %w", err)
	}
	if len(w.eqHeld) > 0 {
		return fmt.Errorf("deltawriter: %d held equality deletes of no partial key", len(w.eqHeld)-w.eqNext)
	}
	return nil
}

// merge is the index's Options.Merge: it completes a partial state n of
// key with the key's older state in the window (found false: none).
func (w *Writer) merge(id uint32, hash uint64, key []byte, old dedup.State, found bool, n dedup.State) (dedup.State, error) {
	hadRow := found && old.HasRow
	eq := n.EqDeleted
	if hadRow {
		if err := w.positionDelete(old.Row); err != nil {
			return n, err
		}
		eq = n.EqDeletedIfRow
	}
	if len(w.eqHeld) > 0 {
		if err := w.settleEq(id, hash, key, hadRow, found && old.EqDeleted); err != nil {
			return n, err
		}
	}
	n.EqDeleted = eq || found && old.EqDeleted
	return n, nil
}

// settleEq writes the held equality delete of key (id) for the case that
// holds (ifRow), unless the older state had written one (done), and drops
// the other. Resolve asks in (hash, key) order; held deletes are sorted
// by hash, and those of one hash (of one key but for a collision) are
// taken by id.
func (w *Writer) settleEq(id uint32, hash uint64, key []byte, ifRow, done bool) error {
	if !w.eqSorted {
		sortHeld(w.eqHeld)
		w.eqSorted, w.eqNext = true, 0
	}
	for i := w.eqNext; i < len(w.eqHeld) && w.eqHeld[i].hash <= hash; i++ {
		p := &w.eqHeld[i]
		if p.hash < hash && p.lane != nil {
			return fmt.Errorf("deltawriter: a held equality delete's key was not resolved")
		}
		if p.id != id || p.lane == nil {
			continue
		}
		ln := p.lane
		p.lane = nil // settled
		if p.ifRow != ifRow || done {
			continue
		}
		if w.eqRow == nil {
			w.eqRow = make([]any, len(w.schema.Fields()))
		}
		if err := w.keys.Decode(key, w.eqRow); err != nil {
			return fmt.Errorf("deltawriter: decoding a held equality delete's key: %w", err)
		}
		if err := w.equalityDelete(ln, w.eqRow); err != nil {
			return err
		}
	}
	for w.eqNext < len(w.eqHeld) && w.eqHeld[w.eqNext].lane == nil {
		w.eqNext++
	}
	if w.eqNext == len(w.eqHeld) {
		w.eqHeld, w.eqNext = w.eqHeld[:0], 0
	}
	return nil
}

// sortHeld sorts held equality deletes by (hash, id) in place. Hashes are
// uniform: a counting pass by their top bits moves each to a bucket of
// about eight (an in-place permutation, American flag sort), and a sort
// of each bucket finishes: a third of the time of a comparison sort of
// the whole (BenchmarkSortHeld: 5 against 14 ms for 100k), with two
// transient arrays of at most 64 Ki counts.
func sortHeld(ps []pendingEq) {
	n := len(ps)
	if n < 2 {
		return
	}
	b := min(max(bits.Len(uint(n))-3, 1), 16)
	shift := 64 - b
	ends := make([]uint32, 1<<b+1)
	for i := range ps {
		ends[ps[i].hash>>shift+1]++
	}
	for i := 1; i < len(ends); i++ {
		ends[i] += ends[i-1]
	}
	// next[k]: the first slot of bucket k not yet holding one of its own;
	// ends[k+1]: the bucket's end.
	next := make([]uint32, 1<<b)
	copy(next, ends[:1<<b])
	for k := range next {
		for next[k] < ends[k+1] {
			p := ps[next[k]]
			t := p.hash >> shift
			if t == uint64(k) {
				next[k]++
				continue
			}
			ps[next[k]], ps[next[t]] = ps[next[t]], p
			next[t]++
		}
	}
	for k := range next {
		if lo, hi := ends[k], ends[k+1]; hi-lo > 1 {
			slices.SortFunc(ps[lo:hi], cmpHeld)
		}
	}
}

// cmpHeld orders held equality deletes by (hash, id): the order settleEq
// takes them in.
func cmpHeld(a, b pendingEq) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}
