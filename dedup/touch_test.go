package dedup

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestTouchResolvesAgainstMap: an index with a merge function answers
// Touch from memory alone; every partial state it hands out is merged,
// once, in (hash, key) order, with exactly the state the key held before
// (through spills and compactions; a state without flags may have been
// dropped), and the final states equal a map's. Each refuses to run over
// unresolved states.
func TestTouchResolvesAgainstMap(t *testing.T) {
	model := map[string]State{} // complete states
	older := map[string]State{} // partial keys: the state merge must see
	var ix *Index
	var merged int
	var pass int64
	var lastHash uint64
	var lastKey []byte
	combine := func(old, n State) State {
		n.EqDeleted = n.EqDeleted || old.EqDeleted
		n.Partial = false
		return n
	}
	merge := func(id uint32, hash uint64, key []byte, old State, found bool, n State) (State, error) {
		if r := ix.stats.Resolves; r != pass {
			pass, lastKey = r, nil // a new pass
		}
		if c := cmp.Compare(hash, lastHash); lastKey != nil && (c < 0 || c == 0 && bytes.Compare(key, lastKey) <= 0) {
			t.Fatalf("merge of %x out of (hash, key) order", key)
		}
		lastHash, lastKey = hash, append([]byte{}, key...)
		merged++
		want, ok := older[string(key)]
		if !ok {
			t.Fatalf("merge of %x, which was not partial", key)
		}
		delete(older, string(key))
		if found && old != want || !found && (want.HasRow || want.EqDeleted) {
			t.Fatalf("merge of %x: older %+v (found %v), want %+v", key, old, found, want)
		}
		if !n.Partial {
			t.Fatalf("merge of a complete state %+v", n)
		}
		return combine(old, n), nil
	}
	var err error
	ix, err = New(Options{MemoryLimit: 256 << 10, SpillDir: t.TempDir(), FanIn: 2, Merge: merge})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	deferred, eachChecked := 0, false
	for i := 0; i < 120000; i++ {
		k := keyOf(rng.IntN(30000))
		h := xxhash.Sum64(k)
		s, found, err := ix.Touch(h, k)
		if err != nil {
			t.Fatal(err)
		}
		_, isPartial := older[string(k)]
		switch {
		case isPartial:
			if !found || !s.Partial {
				t.Fatalf("key %x: a partial state came back as %+v (found %v)", k, s, found)
			}
		case s.Partial:
			deferred++
			older[string(k)] = model[string(k)]
		case found && s != model[string(k)]:
			t.Fatalf("key %x: Touch %+v, map %+v", k, s, model[string(k)])
		case !found && (model[string(k)].HasRow || model[string(k)].EqDeleted):
			t.Fatalf("key %x: Touch found nothing and no run may hold it, map %+v", k, model[string(k)])
		}
		next := State{Row: Ref{File: uint32(i % 100), Pos: uint32(i)}, HasRow: rng.IntN(2) == 0, EqDeleted: rng.IntN(3) == 0, Partial: s.Partial}
		if err := ix.Put(h, k, next); err != nil {
			t.Fatal(err)
		}
		if next.Partial {
			model[string(k)] = combine(older[string(k)], next)
			if !eachChecked {
				eachChecked = true
				if err := ix.Each(func(uint64, []byte, State) bool { return true }); err == nil {
					t.Fatal("Each ran over partial states")
				}
			}
		} else {
			model[string(k)] = next
		}
	}
	if err := ix.Resolve(); err != nil {
		t.Fatal(err)
	}
	if deferred == 0 || merged != deferred || len(older) != 0 || ix.Stats().Spills == 0 {
		t.Fatalf("%d deferred, %d merged, %d left, %d spills", deferred, merged, len(older), ix.Stats().Spills)
	}
	if err := ix.Each(func(h uint64, k []byte, s State) bool {
		if want := model[string(k)]; want != s {
			t.Fatalf("key %x: %+v after Resolve, want %+v", k, s, want)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
}
