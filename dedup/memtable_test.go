package dedup

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMemtableFingerprintTwins: keys whose hashes differ only in bits
// that neither the home slot nor the slot's fingerprint takes (the low 32,
// which route keys to vnodes) probe the same slots with the same
// fingerprint; each must still find its own state, before and after the
// table grows (which changes how many bits the fingerprint has).
func TestMemtableFingerprintTwins(t *testing.T) {
	var m memtable
	const n = 5000 // several rehashes from 1024 slots
	key := func(i int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(i)) }
	// 50 groups of 100 twins: the same high 32 bits, low bits i.
	hash := func(i int) uint64 { return (uint64(i/100)*0x9e3779b1)<<32 | uint64(i%100) }
	check := func(upto int) {
		t.Helper()
		for i := range upto {
			slot, found := m.find(hash(i), key(i))
			if !found {
				t.Fatalf("%d keys in: key %d not found", upto, i)
			}
			if s := unpack(m.entries[m.index(slot)].file, m.entries[m.index(slot)].pos); s.Row.Pos != uint32(i) {
				t.Fatalf("%d keys in: key %d found with key %d's state", upto, i, s.Row.Pos)
			}
		}
		if _, found := m.find(hash(0)^1<<20, key(0)); found {
			t.Fatalf("%d keys in: a hash that differs in one low bit found key 0", upto)
		}
	}
	for i := range n {
		if !m.insert(-1, hash(i), key(i), State{HasRow: true, Row: Ref{File: 1, Pos: uint32(i)}}) {
			t.Fatal("arena full")
		}
		if i == 700 || i == n-1 {
			check(i + 1)
		}
	}
}

// TestMemtableSortInPlace: the entries moved into (hash, key) order keep
// each one's key and state, order names the index each had (the id
// Resolve reports), keys of one hash are ordered by their bytes, and
// eachSorted walks them in that order; the same walk as without moving.
func TestMemtableSortInPlace(t *testing.T) {
	for _, n := range []int{0, 1, 2, 9, 1000, 70000} {
		var m, ref memtable
		rng := rand.New(rand.NewPCG(uint64(n), 3))
		for i := range n {
			h := rng.Uint64()
			if i%7 == 3 {
				h = m.entries[rng.IntN(i)].hash // a collision: same hash, another key
			}
			key := binary.BigEndian.AppendUint64(nil, rng.Uint64())
			s := State{HasRow: true, Row: Ref{File: 1, Pos: uint32(i)}}
			if !m.insert(-1, h, key, s) || !ref.insert(-1, h, key, s) {
				t.Fatal("arena full")
			}
		}
		type seen struct {
			hash uint64
			key  string
			pos  uint32
		}
		var want, got []seen
		ref.eachSorted(func(h uint64, k []byte, s State) bool {
			want = append(want, seen{h, string(k), s.Row.Pos})
			return true
		})
		m.sortInPlace()
		m.eachSorted(func(h uint64, k []byte, s State) bool {
			got = append(got, seen{h, string(k), s.Row.Pos})
			return true
		})
		if !slices.Equal(got, want) {
			t.Fatalf("%d entries: the walk after moving them differs from the walk by index", n)
		}
		for j := range m.entries {
			e := &m.entries[j]
			if uint32(m.order[j]) != unpack(e.file, e.pos).Row.Pos {
				t.Fatalf("%d entries: entry %d had index %d, order says %d", n, j, unpack(e.file, e.pos).Row.Pos, m.order[j])
			}
			if j > 0 && m.compare(&m.entries[j-1], e) >= 0 {
				t.Fatalf("%d entries: entries %d and %d out of (hash, key) order", n, j-1, j)
			}
		}
	}
}
