package spill

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSetModel runs random flushes, overwrites, deletions (tombstones),
// compactions with Drop and lookups against a map.
func TestSetModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy CompactionPolicy
		fanIn  int
		weak   bool // few distinct hashes: collisions everywhere
		cache  int64
	}{
		{"tiered", CompactTiered, 4, false, 1 << 20},
		{"all", CompactAll, 3, false, 1 << 20},
		{"collisions", CompactTiered, 3, true, 1 << 20},
		{"nocache", CompactAll, 5, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) { testSetModel(t, tc.policy, tc.fanIn, tc.weak, tc.cache) })
	}
}

func testSetModel(t *testing.T, policy CompactionPolicy, fanIn int, weak bool, cacheSize int64) {
	rng := rand.New(rand.NewPCG(uint64(fanIn), uint64(policy)))
	hashOf := xxhashOf
	if weak {
		hashOf = func(k []byte) uint64 { return xxhashOf(k) % 61 }
	}
	isTomb := func(v []byte) bool { return len(v) > 0 && v[0] == 'T' }
	set, err := OpenSet("/spill", SetOptions{
		FS:         NewMemFS(),
		FanIn:      fanIn,
		Compaction: policy,
		CacheSize:  cacheSize,
		Drop:       isTomb,
		Writer:     WriterOptions{BlockSize: 512},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()

	model := map[string]string{} // what a lookup must see (tombstones included, unless dropped)
	const keySpace = 3000
	check := func(round int) {
		for i := 0; i < 400; i++ {
			k := []byte(fmt.Sprintf("k%05d", rng.IntN(keySpace+500)))
			v, found, src, err := set.Get(hashOf(k), k)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := model[string(k)]
			if ok && isTomb([]byte(want)) && !found {
				continue // a tombstone may have been dropped by a full compaction
			}
			if found != ok || found && string(v) != want {
				t.Fatalf("round %d: get %s = %q,%v (src %v), want %q,%v", round, k, v, found, src, want, ok)
			}
		}
	}
	for round := 0; round < 60; round++ {
		n := 1 + rng.IntN(300)
		batch := map[string]string{}
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("k%05d", rng.IntN(keySpace))
			v := fmt.Sprintf("v%d.%d", round, i)
			if rng.IntN(5) == 0 {
				v = "T" + v
			}
			batch[k] = v
		}
		es := make([]Entry, 0, len(batch))
		for k, v := range batch {
			es = append(es, Entry{Hash: hashOf([]byte(k)), Key: []byte(k), Value: []byte(v)})
			model[k] = v
		}
		sortEntries(es)
		hint := len(es)
		if round%3 == 0 {
			hint = 0
		}
		if _, err := set.Flush(hint, slices.Values(es)); err != nil {
			t.Fatal(err)
		}
		if st := set.Stats(); st.Runs > fanIn {
			t.Fatalf("round %d: %d runs > fan-in %d", round, st.Runs, fanIn)
		}
		check(round)
		if round == 40 {
			if err := set.Reset(); err != nil {
				t.Fatal(err)
			}
			clear(model)
			check(round)
		}
	}
	st := set.Stats()
	t.Logf("%+v", st)
	if st.Compactions == 0 || st.Flushes != 60 || st.Lookups == 0 {
		t.Fatalf("stats %+v", st)
	}
	if policy == CompactAll && st.DroppedEntries == 0 {
		t.Fatal("nothing dropped")
	}
	if set.MemoryBytes() <= 0 {
		t.Fatal("no memory accounted")
	}
}

func TestSetDropOnlyWhenOldest(t *testing.T) {
	fs := NewMemFS()
	tomb := []byte("T")
	set, err := OpenSet("/d", SetOptions{FS: fs, FanIn: 2, Compaction: CompactTiered,
		Drop: func(v []byte) bool { return bytes.Equal(v, tomb) }})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	k := []byte("key")
	h := xxhashOf(k)
	flush := func(v []byte) {
		t.Helper()
		if _, err := set.Flush(1, slices.Values([]Entry{{h, k, v}})); err != nil {
			t.Fatal(err)
		}
	}
	flush([]byte("live")) // oldest run: big
	for i := 0; i < 3; i++ {
		other := []byte(fmt.Sprintf("filler%d", i))
		set.Flush(1, slices.Values([]Entry{{xxhashOf(other), other, []byte("x")}}))
	}
	flush(tomb)
	// Whatever got merged, the tombstone must still shadow "live" or both
	// must be gone: never resurrect "live".
	v, found, _, err := set.Get(h, k)
	if err != nil {
		t.Fatal(err)
	}
	if found && !bytes.Equal(v, tomb) {
		t.Fatalf("resurrected %q", v)
	}
}

func TestSetFolderAndClose(t *testing.T) {
	dir := t.TempDir()
	set, err := OpenSet(dir, SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(set.Dir()) != dir {
		t.Fatalf("folder %s not in %s", set.Dir(), dir)
	}
	es := makeEntries(1000, 1, "x", nil)
	if _, err := set.Flush(len(es), slices.Values(es)); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Flush(0, slices.Values([]Entry(nil))); err != nil {
		t.Fatal(err)
	}
	if st := set.Stats(); st.Runs != 1 || st.Flushes != 1 {
		t.Fatalf("empty flush made a run: %+v", st)
	}
	names, _ := OSFS{}.List(set.Dir())
	if len(names) != 2 { // LOCK and one run
		t.Fatalf("folder holds %v", names)
	}
	if err := set.Reset(); err != nil {
		t.Fatal(err)
	}
	names, _ = OSFS{}.List(set.Dir())
	if len(names) != 1 {
		t.Fatalf("after reset folder holds %v", names)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(set.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("folder left: %v", err)
	}
	if _, _, _, err := set.Get(1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSweep: a crashed process's folder (lock free) goes, a live one stays.
func TestSweep(t *testing.T) {
	t.Run("os", func(t *testing.T) { testSweep(t, OSFS{}, t.TempDir()) })
	t.Run("mem", func(t *testing.T) { testSweep(t, NewMemFS(), "/spill") })
}

func testSweep(t *testing.T, fs FS, dir string) {
	live, err := OpenSet(dir, SetOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	es := makeEntries(10, 1, "", nil)
	if _, err := live.Flush(10, slices.Values(es)); err != nil {
		t.Fatal(err)
	}
	// Crashed: a folder with a LOCK file nobody holds, and one without LOCK.
	crashed := filepath.Join(dir, "icesink-spill-99999-00000000deadbeef")
	noLock := filepath.Join(dir, "icesink-spill-99998-00000000feedface")
	other := filepath.Join(dir, "not-ours")
	for _, d := range []string{crashed, noLock, other} {
		if err := fs.MkdirAll(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(crashed, "LOCK"), filepath.Join(crashed, "run-000001.spill")} {
		w, err := fs.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		w.Finish()
	}
	s2, err := OpenSet(dir, SetOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := s2.Stats().StaleSwept; got != 2 {
		t.Fatalf("swept %d folders, want 2", got)
	}
	names, _ := fs.List(dir)
	want := []string{filepath.Base(live.Dir()), filepath.Base(s2.Dir()), "not-ours"}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("dir holds %v, want %v", names, want)
	}
	// The live set still works.
	if _, found, _, err := live.Get(es[0].Hash, es[0].Key); !found || err != nil {
		t.Fatal(found, err)
	}
}

func TestSetMemoryBytes(t *testing.T) {
	set, err := OpenSet("/m", SetOptions{FS: NewMemFS(), CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	empty := set.MemoryBytes()
	es := makeEntries(50000, 1, "m", nil)
	if _, err := set.Flush(len(es), slices.Values(es)); err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 3; pass++ {
		for _, e := range es[:5000] {
			set.Get(e.Hash, e.Key)
		}
		set.cache.Wait()
	}
	full := set.MemoryBytes()
	// The filter alone is ~1.25 B per entry.
	if full-empty < 50000 {
		t.Fatalf("memory %d -> %d", empty, full)
	}
	if used := set.cache.UsedBytes(); used <= 0 || used > 1<<20 {
		t.Fatalf("cache used %d", used)
	}
	if err := set.Reset(); err != nil {
		t.Fatal(err)
	}
	set.cache.Wait()
	if after := set.MemoryBytes(); after != empty {
		t.Fatalf("after reset %d, empty was %d (full %d)", after, empty, full)
	}
}

// sweepingFS runs another set's sweep of dir just before the first lock of
// a fresh set folder: the window between OpenSet's MkdirAll and its Lock.
type sweepingFS struct {
	FS
	dir   string
	swept int
}

func (f *sweepingFS) Lock(name string) (io.Closer, error) {
	if f.swept == 0 && filepath.Base(name) == lockName && filepath.Dir(filepath.Dir(name)) == f.dir {
		f.swept = sweep(f.FS, f.dir)
	}
	return f.FS.Lock(name)
}

// TestOpenSetSweptBeforeLock: a sibling set's sweep that removes our fresh,
// not yet locked folder makes OpenSet take a new one, not fail.
func TestOpenSetSweptBeforeLock(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   FS
		dir  string
	}{{"os", OSFS{}, t.TempDir()}, {"mem", NewMemFS(), "/spill"}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &sweepingFS{FS: tc.fs, dir: tc.dir}
			s, err := OpenSet(tc.dir, SetOptions{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if fs.swept != 1 {
				t.Fatalf("the sibling sweep removed %d folders, want our fresh one", fs.swept)
			}
			es := makeEntries(10, 1, "", nil)
			if _, err := s.Flush(10, slices.Values(es)); err != nil {
				t.Fatal(err)
			}
			if _, found, _, err := s.Get(es[0].Hash, es[0].Key); !found || err != nil {
				t.Fatal(found, err)
			}
		})
	}
}
