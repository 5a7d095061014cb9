package spill

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// countFS counts the reads of the files it opens.
type countFS struct {
	FS
	reads *atomic.Int64
}

func (c countFS) Open(name string) (Readable, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return countFile{f, c.reads}, nil
}

type countFile struct {
	Readable
	reads *atomic.Int64
}

func (c countFile) ReadAt(p []byte, off int64) error {
	c.reads.Add(1)
	return c.Readable.ReadAt(p, off)
}

// TestCursorMatchesGet: sorted lookups through a SetCursor answer as
// Set.Get does (newest run first, absent keys, keys of equal hash), and
// read each needed stretch of a run once instead of a block per key.
func TestCursorMatchesGet(t *testing.T) {
	var reads atomic.Int64
	fs := countFS{NewMemFS(), &reads}
	set, err := OpenSet("/spill", SetOptions{FS: fs, CacheSize: -1, FanIn: 16, Writer: WriterOptions{BlockSize: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	// Run r holds the keys i*(r+2) with values tagged r: later runs
	// overwrite some keys of earlier ones. hash collides for pairs of
	// keys so that equal hashes span entries.
	hashOf := func(k []byte) uint64 { return xxhash.Sum64(k) &^ 1 }
	for r := range 3 {
		es := makeEntries(4000, r+2, fmt.Sprint("run", r), func(k []byte) uint64 { return hashOf(k[:len(k)-1]) | uint64(k[len(k)-1]&1) })
		if _, err := set.Flush(len(es), slices.Values(es)); err != nil {
			t.Fatal(err)
		}
	}
	var asks []Entry
	for i := 0; i < 20000; i += 3 {
		k := []byte(fmt.Sprintf("key-%08d", i))
		asks = append(asks, Entry{Hash: hashOf(k[:len(k)-1]) | uint64(k[len(k)-1]&1), Key: k})
	}
	sortEntries(asks)
	var want [][]byte
	for _, a := range asks {
		v, found, _, err := set.Get(a.Hash, a.Key)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			v = nil
		}
		want = append(want, bytes.Clone(v))
	}
	reads.Store(0)
	c := set.NewCursor()
	hits := 0
	for i, a := range asks {
		v, found, _, err := c.Get(a.Hash, a.Key)
		if err != nil {
			t.Fatal(err)
		}
		if found != (want[i] != nil) || !bytes.Equal(v, want[i]) {
			t.Fatalf("%s: cursor %q (found %v), Get %q", a.Key, v, found, want[i])
		}
		if found {
			hits++
		}
	}
	if hits == 0 || hits == len(asks) {
		t.Fatalf("%d of %d lookups found: the test asks nothing useful", hits, len(asks))
	}
	var chunks int64
	for _, rn := range set.runs {
		chunks += rn.info.Bytes/iterReadAhead + 1
	}
	if n := reads.Load(); n > chunks {
		t.Errorf("%d reads for %d sorted lookups, want at most %d (one per chunk)", n, len(asks), chunks)
	}
	// A key before the previous one is refused, not answered wrongly.
	if _, _, _, err := c.Get(asks[0].Hash, asks[0].Key); err == nil {
		t.Error("a lookup out of order was answered")
	}
}
