package spill

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		n         int
		blockSize int
		restart   int
		expected  int
	}{
		{1, 0, 0, 0},
		{10, 0, 0, 10},
		{5000, 0, 0, 0},
		{5000, 256, 1, 5000},
		{5000, 512, 3, 100},
		{20000, 64 << 10, 64, 0},
	} {
		t.Run(fmt.Sprintf("n=%d/bs=%d/ri=%d", tc.n, tc.blockSize, tc.restart), func(t *testing.T) {
			fs := NewMemFS()
			es := makeEntries(tc.n, 2, "a", nil)
			info := writeRun(t, fs, "/r", es, WriterOptions{BlockSize: tc.blockSize, RestartInterval: tc.restart, ExpectedEntries: tc.expected})
			if info.Entries != int64(tc.n) || info.SmallestHash != es[0].Hash || info.LargestHash != es[len(es)-1].Hash {
				t.Fatalf("info %+v", info)
			}
			for _, cache := range []bool{false, true} {
				var c *Cache
				if cache {
					var err error
					if c, err = NewCache(1 << 20); err != nil {
						t.Fatal(err)
					}
					defer c.Close()
				}
				r := openRun(t, fs, "/r", ReaderOptions{Cache: c, CacheID: 1})
				if got := r.Info(); got != info {
					t.Fatalf("reader info %+v, writer %+v", got, info)
				}
				got, err := readAll(r)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(es) {
					t.Fatalf("iterated %d entries, want %d", len(got), len(es))
				}
				for i := range es {
					if compareEntries(got[i], es[i]) != 0 || !bytes.Equal(got[i].Value, es[i].Value) {
						t.Fatalf("entry %d: %+v want %+v", i, got[i], es[i])
					}
				}
				for pass := 0; pass < 2; pass++ {
					for _, e := range es {
						v, found, src, err := r.Get(e.Hash, e.Key)
						if err != nil || !found || !bytes.Equal(v, e.Value) {
							t.Fatalf("get %q: %q %v %v %v", e.Key, v, found, src, err)
						}
						if src != SourceDisk && src != SourceCache {
							t.Fatalf("hit served by %v", src)
						}
						if !cache && src != SourceDisk {
							t.Fatalf("uncached hit served by %v", src)
						}
					}
					if c != nil {
						c.Wait()
					}
				}
				// Absent keys: odd numbers, and the present hashes with another key.
				for i := 0; i < tc.n; i++ {
					k := []byte(fmt.Sprintf("key-%08d", 2*i+1))
					if _, found, _, err := r.Get(xxhashOf(k), k); found || err != nil {
						t.Fatalf("absent %q found=%v err=%v", k, found, err)
					}
					if _, found, _, err := r.Get(es[i].Hash, append(k, 'x')); found || err != nil {
						t.Fatalf("absent %q under a present hash found=%v err=%v", k, found, err)
					}
				}
				if r.MemoryBytes() <= 0 {
					t.Fatal("no memory")
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				if _, _, _, err := r.Get(0, nil); !errors.Is(err, ErrClosed) {
					t.Fatalf("get after close: %v", err)
				}
			}
		})
	}
}

func TestEmptyRun(t *testing.T) {
	fs := NewMemFS()
	info := writeRun(t, fs, "/e", nil, WriterOptions{})
	if info.Entries != 0 || info.Blocks != 0 {
		t.Fatalf("%+v", info)
	}
	r := openRun(t, fs, "/e", ReaderOptions{})
	defer r.Close()
	if _, found, src, err := r.Get(0, []byte("x")); found || err != nil || src != SourceFilter {
		t.Fatal(found, src, err)
	}
	es, err := readAll(r)
	if err != nil || len(es) != 0 {
		t.Fatal(es, err)
	}
}

// TestHashCollisions stores many keys under few hashes, straddling blocks.
func TestHashCollisions(t *testing.T) {
	fs := NewMemFS()
	weak := func(k []byte) uint64 { return xxhashOf(k) & 7 } // 8 hashes for 3000 keys
	es := makeEntries(3000, 2, "c", weak)
	writeRun(t, fs, "/c", es, WriterOptions{BlockSize: 300, RestartInterval: 4})
	c, _ := NewCache(1 << 20)
	defer c.Close()
	r := openRun(t, fs, "/c", ReaderOptions{Cache: c})
	defer r.Close()
	if r.Info().Blocks < 20 {
		t.Fatalf("only %d blocks", r.Info().Blocks)
	}
	for _, e := range es {
		v, found, _, err := r.Get(e.Hash, e.Key)
		if err != nil || !found || !bytes.Equal(v, e.Value) {
			t.Fatalf("get %q: %q %v %v", e.Key, v, found, err)
		}
		k := append(bytes.Clone(e.Key), '!')
		if _, found, _, err := r.Get(e.Hash, k); found || err != nil {
			t.Fatalf("absent %q: found=%v err=%v", k, found, err)
		}
	}
	got, err := readAll(r)
	if err != nil || len(got) != len(es) {
		t.Fatal(len(got), err)
	}
}

func TestWriterOrder(t *testing.T) {
	fs := NewMemFS()
	for _, tc := range []struct {
		name string
		h1   uint64
		k1   string
		h2   uint64
		k2   string
	}{
		{"smaller hash", 5, "a", 4, "b"},
		{"same key", 5, "a", 5, "a"},
		{"smaller key", 5, "b", 5, "a"},
	} {
		f, _ := fs.Create("/o")
		w := NewWriter(f, WriterOptions{FileName: "/o"})
		if err := w.Add(tc.h1, []byte(tc.k1), nil); err != nil {
			t.Fatal(err)
		}
		err := w.Add(tc.h2, []byte(tc.k2), nil)
		if !errors.Is(err, ErrOutOfOrder) || !strings.Contains(err.Error(), "/o") {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// Sticky.
		if err2 := w.Add(100, []byte("z"), nil); err2 != err {
			t.Fatalf("%s: not sticky: %v", tc.name, err2)
		}
		if _, err2 := w.Finish(); err2 != err {
			t.Fatalf("%s: finish: %v", tc.name, err2)
		}
		w.Abort()
	}
	// Same hash, increasing keys, is fine.
	f, _ := fs.Create("/ok")
	w := NewWriter(f, WriterOptions{})
	for _, k := range []string{"a", "b", "ba"} {
		if err := w.Add(1, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(2, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("add after finish: %v", err)
	}
}

// TestLargeEntries: entries larger than a block get a block each.
func TestLargeEntries(t *testing.T) {
	fs := NewMemFS()
	es := makeEntries(50, 1, "", nil)
	for i := range es {
		es[i].Value = bytes.Repeat([]byte{byte(i)}, 40000) // larger than a block
	}
	writeRun(t, fs, "/big", es, WriterOptions{})
	r := openRun(t, fs, "/big", ReaderOptions{})
	defer r.Close()
	for _, e := range es {
		v, found, _, err := r.Get(e.Hash, e.Key)
		if err != nil || !found || !bytes.Equal(v, e.Value) {
			t.Fatalf("get %q: %v %v", e.Key, found, err)
		}
	}
}
