package deltawriter

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortHeld: sortHeld orders held deletes by (hash, id) as a
// comparison sort does, whatever their count and however many share a
// hash (one key's several deletes, colliding keys) or top bits.
func TestSortHeld(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 7, 100, 1000, 70_000} {
		for _, hashes := range []int{1, 3, n/2 + 1, 1 << 30} {
			ps := make([]pendingEq, n)
			for i := range ps {
				h := rng.Uint64()
				if hashes < 1<<30 {
					h = uint64(rng.IntN(hashes)) * 0x9e3779b97f4a7c15
				}
				ps[i] = pendingEq{hash: h, id: rng.Uint32N(uint32(n + 1)), ifRow: i%2 == 0}
			}
			want := slices.Clone(ps)
			slices.SortStableFunc(want, cmpHeld)
			sortHeld(ps)
			if !slices.IsSortedFunc(ps, cmpHeld) {
				t.Fatalf("%d deletes over %d hashes: not in (hash, id) order", n, hashes)
			}
			// The same multiset: compare as sorted by every field.
			full := func(a, b pendingEq) int {
				if c := cmpHeld(a, b); c != 0 {
					return c
				}
				return cmp.Compare(btoi(a.ifRow), btoi(b.ifRow))
			}
			slices.SortFunc(ps, full)
			slices.SortFunc(want, full)
			if !slices.Equal(ps, want) {
				t.Fatalf("%d deletes over %d hashes: sortHeld lost or changed some", n, hashes)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkSortHeld sorts a spill's worth of held equality deletes (100k,
// random hashes, a few sharing a key ID): sortHeld against a comparison
// sort of the whole.
func BenchmarkSortHeld(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]pendingEq, 100_000)
	for i := range src {
		src[i] = pendingEq{hash: rng.Uint64(), id: uint32(i / 2)}
	}
	ps := make([]pendingEq, len(src))
	for _, bc := range []struct {
		name string
		sort func([]pendingEq)
	}{
		{"buckets", sortHeld},
		{"pdqsort", func(ps []pendingEq) { slices.SortFunc(ps, cmpHeld) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				copy(ps, src)
				bc.sort(ps)
			}
		})
	}
}
