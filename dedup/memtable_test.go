package dedup

import (
	"encoding/binary"
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
