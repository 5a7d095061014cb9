package dedup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/icesink/icesink/spill"
)

func keyOf(i int) []byte { return binary.BigEndian.AppendUint64([]byte("key-"), uint64(i)) }

// TestIndexAgainstMap drives indexes with and without a budget through the
// same random puts and checks every Get against a map.
func TestIndexAgainstMap(t *testing.T) {
	for _, limit := range []int64{0, 256 << 10, 1 << 20} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			ix, err := New(Options{MemoryLimit: limit, SpillDir: t.TempDir(), FanIn: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			rng := rand.New(rand.NewPCG(1, uint64(limit)))
			model := map[string]State{}
			for round := 0; round < 3; round++ {
				for i := 0; i < 60000; i++ {
					k := keyOf(rng.IntN(40000))
					h := xxhash.Sum64(k)
					got, ok, err := ix.Get(h, k)
					if err != nil {
						t.Fatal(err)
					}
					want, wok := model[string(k)]
					if wok && !want.HasRow && !want.EqDeleted && !ok {
						// A state that says nothing an absent key does not
						// may be dropped by a compaction.
						wok = false
					}
					if ok != wok || (ok && got != want) {
						t.Fatalf("round %d op %d: Get(%x) = %v %v, want %v %v", round, i, k, got, ok, want, wok)
					}
					s := State{Row: Ref{File: uint32(rng.IntN(MaxFile)), Pos: rng.Uint32()}, HasRow: rng.IntN(3) > 0, EqDeleted: rng.IntN(2) == 0}
					if err := ix.Put(h, k, s); err != nil {
						t.Fatal(err)
					}
					model[string(k)] = s
					if limit > 0 && ix.MemoryBytes() > limit {
						t.Fatalf("index holds %d bytes, over its limit %d", ix.MemoryBytes(), limit)
					}
				}
				checkEach(t, ix, model)
				st := ix.Stats()
				if limit > 0 && st.Spills == 0 {
					t.Errorf("a %d-byte budget over 40k keys never spilled", limit)
				}
				if limit == 0 && st.Spills != 0 {
					t.Errorf("an unbounded index spilled")
				}
				if err := ix.Reset(); err != nil {
					t.Fatal(err)
				}
				clear(model)
				if _, ok, _ := ix.Get(xxhash.Sum64(keyOf(1)), keyOf(1)); ok {
					t.Fatal("a key survived Reset")
				}
			}
			if limit > 0 {
				st := ix.Stats()
				if st.LookupsDisk+st.LookupsCache == 0 || st.Compactions == 0 {
					t.Errorf("stats %+v: want lookups served from runs and compactions", st)
				}
			}
		})
	}
}

// checkEach checks that Each yields every key of model that has a row or
// an equality delete, once, with its state, in (hash, key) order.
func checkEach(t *testing.T, ix *Index, model map[string]State) {
	t.Helper()
	want := 0
	for _, s := range model {
		if s.HasRow || s.EqDeleted {
			want++
		}
	}
	n := 0
	var lastH uint64
	var lastK []byte
	err := ix.Each(func(h uint64, k []byte, s State) bool {
		if n > 0 && (h < lastH || h == lastH && bytes.Compare(k, lastK) <= 0) {
			t.Fatalf("Each out of order at %x", k)
		}
		lastH, lastK = h, append(lastK[:0], k...)
		if m, ok := model[string(k)]; !ok || m != s {
			t.Fatalf("Each(%x) = %v, the model has %v %v", k, s, m, ok)
		}
		n++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("Each yielded %d keys, want %d", n, want)
	}
}

// Two keys with the same hash stay two keys, in memory and spilled.
func TestIndexHashCollision(t *testing.T) {
	ix, err := New(Options{MemoryLimit: 256 << 10, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	a, b := []byte("a"), []byte("b")
	const h = 42
	if err := ix.Put(h, a, State{HasRow: true, Row: Ref{File: 1, Pos: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := ix.Get(h, b); ok {
		t.Fatal("b found through a's hash")
	}
	if err := ix.Put(h, b, State{EqDeleted: true}); err != nil {
		t.Fatal(err)
	}
	if err := ix.spill(); err != nil {
		t.Fatal(err)
	}
	sa, _, _ := ix.Get(h, a)
	sb, _, _ := ix.Get(h, b)
	if !sa.HasRow || sa.Row.Pos != 1 || sb.HasRow || !sb.EqDeleted {
		t.Fatalf("after a spill: a=%v b=%v", sa, sb)
	}
}

// A full disk during a spill is an error naming the run file; the index
// keeps what it had spilled before.
func TestIndexSpillDiskFull(t *testing.T) {
	fs := spill.NewFaultFS(spill.OSFS{})
	ix, err := New(Options{MemoryLimit: 256 << 10, SpillDir: t.TempDir(), FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	put := func(i int) error {
		k := keyOf(i)
		h := xxhash.Sum64(k)
		if _, _, err := ix.Get(h, k); err != nil {
			return err
		}
		return ix.Put(h, k, State{HasRow: true, Row: Ref{Pos: uint32(i)}})
	}
	i := 0
	for ; ix.Stats().Spills == 0; i++ {
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	fs.FailWritesAfter(1000)
	for ; ; i++ {
		err := put(i)
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "run") {
			t.Fatalf("spill on a full disk: %v; want ENOSPC naming the run", err)
		}
		break
	}
	s, ok, err := ix.Get(xxhash.Sum64(keyOf(0)), keyOf(0))
	if err != nil || !ok || s.Row.Pos != 0 {
		t.Fatalf("a key spilled before the disk filled: %v %v %v", s, ok, err)
	}
}

// TestIndexSaveOpen: an index saved in its folder and released is read
// again by Open with the same states, the memory tier included, and
// keeps working; an unlisted run is not read.
func TestIndexSaveOpen(t *testing.T) {
	for _, limit := range []int64{0, 256 << 10} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ix")
			opts := Options{MemoryLimit: limit, Dir: dir}
			ix, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			model := map[string]State{}
			put := func(i int, s State) {
				k := keyOf(i)
				if err := ix.Put(xxhash.Sum64(k), k, s); err != nil {
					t.Fatal(err)
				}
				model[string(k)] = s
			}
			for i := 0; i < 20000; i++ {
				put(i, State{Row: Ref{File: uint32(i % 7), Pos: uint32(i)}, HasRow: true})
			}
			for i := 0; i < 20000; i += 3 {
				put(i, State{}) // deleted
			}
			runs, err := ix.Save()
			if err != nil {
				t.Fatal(err)
			}
			if err := ix.Release(); err != nil {
				t.Fatal(err)
			}
			if ix, err = Open(opts, runs); err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			for i := 0; i < 20100; i++ {
				k := keyOf(i)
				got, ok, err := ix.Get(xxhash.Sum64(k), k)
				want, wok := model[string(k)]
				if err != nil || ok != wok || got != want {
					t.Fatalf("key %d: %+v %v %v, want %+v %v", i, got, ok, err, want, wok)
				}
			}
			put(5, State{Row: Ref{File: 9, Pos: 9}, HasRow: true})
			if got, _, _ := ix.Get(xxhash.Sum64(keyOf(5)), keyOf(5)); !got.HasRow || got.Row.File != 9 {
				t.Errorf("a put after Open reads back %+v", got)
			}
		})
	}
}

// TestIndexMemoryWithManyKeys: an index of many more keys than its budget
// holds filters for stays within its budget (the runs' filters are capped;
// their block indexes are ~0.15 bytes a key).
func TestIndexMemoryWithManyKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("2M keys")
	}
	const limit = 1 << 20
	ix, err := New(Options{MemoryLimit: limit, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	const n = 2_000_000
	for i := 0; i < n; i++ {
		k := keyOf(i)
		if err := ix.Put(xxhash.Sum64(k), k, State{HasRow: true, Row: Ref{Pos: uint32(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := ix.MemoryBytes(); got > limit {
		t.Fatalf("%d keys: the index holds %d bytes, over its %d", n, got, limit)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		k := keyOf(i)
		if s, ok, err := ix.Get(xxhash.Sum64(k), k); err != nil || !ok || s.Row.Pos != uint32(i) {
			t.Fatalf("key %d: %+v %v %v", i, s, ok, err)
		}
	}
	t.Logf("%d keys in %d bytes (%.2f bytes a key), %+v", n, ix.MemoryBytes(), float64(ix.MemoryBytes())/n, ix.Stats())
}
