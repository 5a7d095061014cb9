package spill

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// benchEntries returns n sorted entries with 24-byte keys and 12-byte
// values, the shape dedup spills. Keys are generated from ids; absent keys
// use odd ids.
func benchEntries(n int, seed uint64) []Entry {
	es := make([]Entry, n)
	buf := make([]byte, 0, n*36)
	for i := range es {
		start := len(buf)
		buf = fmt.Appendf(buf, "order-%06d-%011d", seed, 2*i)
		k := buf[start:len(buf):len(buf)]
		start = len(buf)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(i))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(i)*7)
		v := buf[start:len(buf):len(buf)]
		es[i] = Entry{Hash: xxhashOf(k), Key: k, Value: v}
	}
	sortEntries(es)
	// Lay the bytes out in sorted order, so the benchmarks measure spill
	// rather than cache misses on the caller's memory.
	packed := make([]byte, 0, len(buf))
	for i, e := range es {
		start := len(packed)
		packed = append(packed, e.Key...)
		packed = append(packed, e.Value...)
		es[i].Key = packed[start : start+len(e.Key) : start+len(e.Key)]
		es[i].Value = packed[start+len(e.Key) : len(packed) : len(packed)]
	}
	return es
}

func absentKey(seed uint64, i int) []byte {
	return fmt.Appendf(nil, "order-%06d-%011d", seed, 2*i+1)
}

func benchSet(b *testing.B, runs, perRun int, opts SetOptions) (*Set, [][]Entry) {
	b.Helper()
	opts.FanIn = max(opts.FanIn, runs)
	set, err := OpenSet(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	all := make([][]Entry, runs)
	for r := range all {
		all[r] = benchEntries(perRun, uint64(r))
		if _, err := set.Flush(perRun, slices.Values(all[r])); err != nil {
			b.Fatal(err)
		}
	}
	return set, all
}

func BenchmarkGet(b *testing.B) {
	const runs, perRun = 4, 100000
	for _, bc := range []struct {
		name  string
		cache int64
		hit   bool
	}{
		{"hit/cached", 64 << 20, true},
		{"hit/uncached", -1, true},
		{"miss", 8 << 20, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			set, all := benchSet(b, runs, perRun, SetOptions{CacheSize: bc.cache})
			defer set.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			probes := make([]Entry, 4096)
			for i := range probes {
				r := rng.IntN(runs)
				if bc.hit {
					probes[i] = all[r][rng.IntN(perRun)]
				} else {
					k := absentKey(uint64(r), rng.IntN(perRun))
					probes[i] = Entry{Hash: xxhashOf(k), Key: k}
				}
			}
			if bc.cache > 0 { // warm the cache
				for pass := 0; pass < 3; pass++ {
					for _, es := range all {
						for j := 0; j < len(es); j += 50 {
							set.Get(es[j].Hash, es[j].Key)
						}
					}
					set.cache.Wait()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := probes[i%len(probes)]
				_, found, _, err := set.Get(p.Hash, p.Key)
				if err != nil || found != bc.hit {
					b.Fatal(found, err)
				}
			}
			b.StopTimer()
			st := set.Stats()
			b.ReportMetric(float64(st.BySource[SourceDisk])/float64(st.Lookups), "disk/op")
		})
	}
}

func BenchmarkFlush(b *testing.B) {
	const n = 100000
	es := benchEntries(n, 1)
	set, err := OpenSet(b.TempDir(), SetOptions{FanIn: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	b.ReportAllocs()
	b.ResetTimer()
	var bytes int64
	for i := 0; i < b.N; i++ {
		info, err := set.Flush(n, slices.Values(es))
		if err != nil {
			b.Fatal(err)
		}
		bytes += info.Bytes
		if i%8 == 7 {
			b.StopTimer()
			set.Reset()
			b.StartTimer()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
	b.SetBytes(bytes / int64(b.N))
}

func BenchmarkCompact(b *testing.B) {
	const runs, perRun = 8, 50000
	inputs := make([][]Entry, runs)
	for r := range inputs {
		// Overlapping key spaces: a quarter of each run shadows older runs.
		inputs[r] = benchEntries(perRun, uint64(r%3))
	}
	set, err := OpenSet(b.TempDir(), SetOptions{FanIn: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	b.ReportAllocs()
	b.ResetTimer()
	var written int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		set.Reset()
		for _, es := range inputs {
			if _, err := set.Flush(perRun, slices.Values(es)); err != nil {
				b.Fatal(err)
			}
		}
		before := set.Stats().CompactedBytes
		b.StartTimer()
		if err := set.compact(0); err != nil {
			b.Fatal(err)
		}
		written += set.Stats().CompactedBytes - before
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*runs*perRun), "ns/entry")
	b.SetBytes(written / int64(b.N))
}

// BenchmarkWindow spills one commit window: 64 flushes of 20,000 entries
// (every fourth flush overwrites the keys of an earlier one), compacting as
// the policy says, then resets. It compares the compaction policies.
func BenchmarkWindow(b *testing.B) {
	const flushes, perFlush = 64, 20000
	inputs := make([][]Entry, flushes)
	for i := range inputs {
		// Every fourth flush repeats the keys of an earlier one.
		inputs[i] = benchEntries(perFlush, uint64(i-i/4))
	}
	for _, pc := range []struct {
		name   string
		policy CompactionPolicy
	}{{"tiered", CompactTiered}, {"all", CompactAll}} {
		b.Run(pc.name, func(b *testing.B) {
			set, err := OpenSet(b.TempDir(), SetOptions{Compaction: pc.policy})
			if err != nil {
				b.Fatal(err)
			}
			defer set.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for f := 0; f < flushes; f++ {
					if _, err := set.Flush(perFlush, slices.Values(inputs[f])); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if err := set.Reset(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			st := set.Stats()
			b.ReportMetric(float64(st.CompactedBytes+st.FlushedBytes)/float64(st.FlushedBytes), "write-amp")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*flushes*perFlush), "ns/entry")
		})
	}
}

// BenchmarkCursor is a sorted batch of lookups, a quarter of one run's
// keys, through a SetCursor over four runs: what dedup's Resolve does at a
// spill. ns/op is per key asked.
func BenchmarkCursor(b *testing.B) {
	const runs, perRun = 4, 100000
	set, all := benchSet(b, runs, perRun, SetOptions{CacheSize: -1})
	defer set.Close()
	var probes []Entry
	for j := 0; j < perRun; j += 4 {
		probes = append(probes, all[1][j])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		c := set.NewCursor()
		for _, p := range probes {
			if _, found, _, err := c.Get(p.Hash, p.Key); err != nil || !found {
				b.Fatal(found, err)
			}
			if i++; i == b.N {
				break
			}
		}
	}
}
