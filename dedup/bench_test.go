package dedup

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// benchKeys returns n distinct 9-byte keys (a long key as the writer's key
// codec encodes it) and their hashes.
func benchKeys(n int) ([][]byte, []uint64) {
	keys, hashes := make([][]byte, n), make([]uint64, n)
	for i := range keys {
		k := make([]byte, 9)
		k[0] = 1
		binary.BigEndian.PutUint64(k[1:], uint64(i)^0x8000000000000000)
		keys[i], hashes[i] = k, xxhash.Sum64(k)
	}
	return keys, hashes
}

// BenchmarkIndex measures the writer's per-change index work, a Get then a
// Put of the same key, over a window of 1M keys: in memory (unbounded),
// and at a 4 MiB budget where most keys live in spilled runs. Each op is
// one change; keys are visited in a scattered order.
func BenchmarkIndex(b *testing.B) {
	const n = 1 << 20
	keys, hashes := benchKeys(n)
	for _, limit := range []int64{0, 4 << 20} {
		name := "memory"
		if limit > 0 {
			name = fmt.Sprintf("spilled-%dMiB", limit>>20)
		}
		b.Run(name, func(b *testing.B) {
			ix, err := New(Options{MemoryLimit: limit, CacheBytes: limit / 8, SpillDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer ix.Close()
			for i := range keys { // the window's first touch of every key
				if err := ix.Put(hashes[i], keys[i], State{Row: Ref{Pos: uint32(i)}, HasRow: true, EqDeleted: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := (i * 0x9e3779b1) & (n - 1) // a bijection of [0, n): scattered
				s, ok, err := ix.Get(hashes[j], keys[j])
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				s.Row.Pos++
				if err := ix.Put(hashes[j], keys[j], s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIndexInsert measures first inserts (a Get that misses, then a
// Put) into an empty window.
func BenchmarkIndexInsert(b *testing.B) {
	keys, hashes := benchKeys(1 << 20)
	ix, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i & (len(keys) - 1)
		if j == 0 && i > 0 {
			b.StopTimer()
			if err := ix.Reset(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if _, _, err := ix.Get(hashes[j], keys[j]); err != nil {
			b.Fatal(err)
		}
		if err := ix.Put(hashes[j], keys[j], State{HasRow: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// writerKeys returns n distinct keys routed to writer 0 of writers (the
// vnodes hash mod 256 that the sink gives writer 0: the first
// 256/writers), and their hashes.
func writerKeys(n, writers int) ([][]byte, []uint64) {
	keys, hashes := make([][]byte, 0, n), make([]uint64, 0, n)
	for i := 0; len(keys) < n; i++ {
		k := binary.BigEndian.AppendUint64([]byte{1}, uint64(i)^0x8000000000000000)
		h := xxhash.Sum64(k)
		if int(h%256) < 256/writers {
			keys, hashes = append(keys, k), append(hashes, h)
		}
	}
	return keys, hashes
}

// TestProbesWithSeveralWriters checks that the memory tier's probe
// lengths do not depend on how many writers share the vnodes: a writer's
// keys share their hashes' low bits. Before slots came from the high
// bits, a lookup read 1.5 slots with one writer, 34 with four, 58 with 16.
func TestProbesWithSeveralWriters(t *testing.T) {
	for _, writers := range []int{1, 4, 16, 64} {
		keys, hashes := writerKeys(100_000, writers)
		var m memtable
		for i := range keys {
			if !m.insert(-1, hashes[i], keys[i], State{HasRow: true}) {
				t.Fatal("arena full")
			}
		}
		if p := m.meanProbes(); p > 3 {
			t.Errorf("%d writers: %.1f slots read per lookup, want under 3 (linear probing at load <= 0.75 reads ~2.5)", writers, p)
		}
	}
}

// BenchmarkIndexWriters measures a Get and a Put per change over 1M keys
// of one writer's vnodes, with 1, 4 and 16 writers sharing the 256 vnodes,
// and reports the mean slots read per lookup.
func BenchmarkIndexWriters(b *testing.B) {
	for _, writers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("writers-%d", writers), func(b *testing.B) {
			keys, hashes := writerKeys(1<<20, writers)
			ix, err := New(Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer ix.Close()
			for i := range keys {
				if err := ix.Put(hashes[i], keys[i], State{HasRow: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := (i * 0x9e3779b1) & (len(keys) - 1)
				s, ok, err := ix.Get(hashes[j], keys[j])
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				if err := ix.Put(hashes[j], keys[j], s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(ix.mem.meanProbes(), "probes/lookup")
		})
	}
}
