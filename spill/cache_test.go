package spill

import (
	"bytes"
	"slices"
	"testing"
)

// TestCacheEvictRunReusedID: after EvictRun, a new run under the same ID is
// never served the old run's blocks.
func TestCacheEvictRunReusedID(t *testing.T) {
	fs := NewMemFS()
	c, err := NewCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Same keys, same layout (equal-length values), different bytes.
	a := makeEntries(2000, 1, "AAAA", nil)
	b := makeEntries(2000, 1, "BBBB", nil)
	writeRun(t, fs, "/a", a, WriterOptions{})
	writeRun(t, fs, "/b", b, WriterOptions{})

	ra := openRun(t, fs, "/a", ReaderOptions{Cache: c, CacheID: 7})
	for pass := 0; pass < 3; pass++ { // get the blocks admitted
		for _, e := range a {
			ra.Get(e.Hash, e.Key)
		}
		c.Wait()
	}
	hits := 0
	for _, e := range a {
		if _, _, src, _ := ra.Get(e.Hash, e.Key); src == SourceCache {
			hits++
		}
	}
	if hits == 0 {
		t.Fatal("nothing cached")
	}
	if c.UsedBytes() <= 0 {
		t.Fatal("no bytes used")
	}
	ra.Close()
	c.EvictRun(7)
	c.Wait()

	rb := openRun(t, fs, "/b", ReaderOptions{Cache: c, CacheID: 7})
	defer rb.Close()
	for pass := 0; pass < 2; pass++ {
		for _, e := range b {
			v, found, _, err := rb.Get(e.Hash, e.Key)
			if err != nil || !found || !bytes.Equal(v, e.Value) {
				t.Fatalf("pass %d get %s: %q %v %v (stale block?)", pass, e.Key, v, found, err)
			}
		}
		c.Wait()
	}
}

// TestCacheSharedID: two readers of the same file under one ID share blocks.
func TestCacheSharedID(t *testing.T) {
	fs := NewMemFS()
	c, _ := NewCache(4 << 20)
	defer c.Close()
	es := makeEntries(500, 1, "x", nil)
	writeRun(t, fs, "/r", es, WriterOptions{})
	r1 := openRun(t, fs, "/r", ReaderOptions{Cache: c, CacheID: 3})
	defer r1.Close()
	for _, e := range es {
		r1.Get(e.Hash, e.Key)
	}
	c.Wait()
	r2 := openRun(t, fs, "/r", ReaderOptions{Cache: c, CacheID: 3})
	defer r2.Close()
	hits := 0
	for _, e := range es {
		v, found, src, err := r2.Get(e.Hash, e.Key)
		if err != nil || !found || !bytes.Equal(v, e.Value) {
			t.Fatal(err)
		}
		if src == SourceCache {
			hits++
		}
	}
	if hits == 0 {
		t.Fatal("second reader got no cache hits")
	}
}

func TestCacheKeyInjective(t *testing.T) {
	seen := map[[2]uint64][2]uint64{}
	var k cacheKey
	for h := uint64(0); h < 300; h++ {
		for off := uint64(0); off < 300*16384; off += 16384 {
			putKey(&k, h, off)
			a, b := cacheKeyToHash(k[:])
			if b == 0 {
				t.Fatal("zero conflict hash")
			}
			if prev, ok := seen[[2]uint64{a, b}]; ok {
				t.Fatalf("(%d,%d) and %v collide", h, off, prev)
			}
			seen[[2]uint64{a, b}] = [2]uint64{h, off}
		}
	}
}

func putKey(k *cacheKey, h, off uint64) {
	for i := 0; i < 8; i++ {
		k[i] = byte(h >> (8 * i))
		k[8+i] = byte(off >> (8 * i))
	}
}

func TestNewCacheRejects(t *testing.T) {
	if _, err := NewCache(0); err == nil {
		t.Fatal("capacity 0 accepted")
	}
}

// TestCacheSharedBySets: two sets sharing a cache, with the same keys and
// run sequence numbers, never see each other's blocks.
func TestCacheSharedBySets(t *testing.T) {
	c, _ := NewCache(4 << 20)
	defer c.Close()
	fs := NewMemFS()
	var sets [2]*Set
	var data [2][]Entry
	for i := range sets {
		s, err := OpenSet("/spill", SetOptions{FS: fs, Cache: c})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sets[i] = s
		data[i] = makeEntries(1000, 1, string(rune('A'+i)), nil)
		if _, err := s.Flush(1000, slices.Values(data[i])); err != nil {
			t.Fatal(err)
		}
	}
	for pass := 0; pass < 3; pass++ {
		for i, s := range sets {
			for _, e := range data[i] {
				v, found, _, err := s.Get(e.Hash, e.Key)
				if err != nil || !found || !bytes.Equal(v, e.Value) {
					t.Fatalf("set %d get %s: %q", i, e.Key, v)
				}
			}
		}
		c.Wait()
	}
	if sets[0].MemoryBytes() >= c.MemoryBytes() {
		t.Fatal("a shared cache counted in a set's memory")
	}
}

// TestCacheFullStillAdmitsHotBlocks: once the cache has been offered its
// capacity, misses are offered only now and then (shouldOffer), yet a
// block that keeps being read gets cached, and every read stays correct.
func TestCacheFullStillAdmitsHotBlocks(t *testing.T) {
	fs := NewMemFS()
	c, err := NewCache(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	es := makeEntries(20000, 1, "value", nil)
	info := writeRun(t, fs, "/h", es, WriterOptions{BlockSize: 1024})
	if int64(info.Blocks)*1024 < 4*c.Capacity() {
		t.Fatalf("run of %d blocks does not overflow the cache", info.Blocks)
	}
	r := openRun(t, fs, "/h", ReaderOptions{Cache: c})
	defer r.Close()
	for _, e := range es { // cold pass: the cache has been offered more than it holds
		v, found, _, err := r.Get(e.Hash, e.Key)
		if err != nil || !found || !bytes.Equal(v, e.Value) {
			t.Fatalf("get %s: %q %v %v", e.Key, v, found, err)
		}
	}
	c.Wait()
	if c.offered.Load() < c.Capacity() {
		t.Fatalf("offered %d bytes, capacity %d", c.offered.Load(), c.Capacity())
	}
	hot := es[:8]
	cached := false
	for pass := 0; pass < 50 && !cached; pass++ {
		cached = true
		for _, e := range hot {
			v, found, src, err := r.Get(e.Hash, e.Key)
			if err != nil || !found || !bytes.Equal(v, e.Value) {
				t.Fatalf("hot get %s: %q %v %v", e.Key, v, found, err)
			}
			cached = cached && src == SourceCache
		}
		c.Wait()
	}
	if !cached {
		t.Fatal("hot blocks never cached in a full cache")
	}
	// A second cold pass offers about one miss in offerEvery, not every one.
	before, disk := c.offered.Load(), 0
	for _, e := range es[len(es)/2:] {
		if _, _, src, _ := r.Get(e.Hash, e.Key); src == SourceDisk {
			disk++
		}
	}
	if got := c.offered.Load() - before; disk == 0 || got > int64(disk)*1024/2 {
		t.Fatalf("a cold pass with %d disk reads of <= 1 KiB blocks offered %d bytes", disk, got)
	}
}
