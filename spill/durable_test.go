package spill

import (
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// sortedEntries returns n entries k<base+i> -> v<tag>, sorted by (hash, key).
func sortedEntries(base, n int, tag string) iter.Seq[Entry] {
	es := make([]Entry, n)
	for i := range es {
		k := []byte(fmt.Sprintf("k%06d", base+i))
		es[i] = Entry{Hash: xxhashOf(k), Key: k, Value: []byte(tag)}
	}
	slices.SortFunc(es, func(a, b Entry) int { return compareEntry(a.Hash, a.Key, b.Hash, b.Key) })
	return slices.Values(es)
}

func compareEntry(h1 uint64, k1 []byte, h2 uint64, k2 []byte) int {
	switch {
	case h1 < h2:
		return -1
	case h1 > h2:
		return 1
	}
	return slices.Compare(k1, k2)
}

// TestOpenSetInKeepsRuns: runs a set released in a folder are read again
// by a set opened there with their names; a run file not listed is
// removed; a missing or damaged listed run and a held lock are errors.
func TestOpenSetInKeepsRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keyindex")
	set, err := OpenSetIn(dir, nil, SetOptions{Writer: WriterOptions{BlockSize: 512}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Flush(500, sortedEntries(0, 500, "old")); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Flush(100, sortedEntries(400, 200, "new")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSetIn(dir, nil, SetOptions{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second set in a held folder: %v, want ErrLocked", err)
	}
	if err := set.Sync(); err != nil {
		t.Fatal(err)
	}
	runs := set.Runs()
	if len(runs) != 2 {
		t.Fatalf("runs %v, want 2", runs)
	}
	if err := set.Release(); err != nil {
		t.Fatal(err)
	}
	// A run a crashed set wrote after the list was taken.
	stray := filepath.Join(dir, "run-000999.spill")
	if err := os.WriteFile(stray, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	set, err = OpenSetIn(dir, runs, SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]string{0: "old", 399: "old", 400: "new", 599: "new"} {
		k := []byte(fmt.Sprintf("k%06d", i))
		v, ok, _, err := set.Get(xxhashOf(k), k)
		if err != nil || !ok || string(v) != want {
			t.Errorf("%s: %q %v %v, want %q", k, v, ok, err, want)
		}
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("the unlisted run is still there: %v", err)
	}
	// New runs do not reuse the names of the adopted ones.
	if _, err := set.Flush(10, sortedEntries(1000, 10, "newer")); err != nil {
		t.Fatal(err)
	}
	if got := set.Runs(); len(got) != 3 || slices.Contains(runs, got[2]) {
		t.Errorf("runs after a flush %v (adopted %v)", got, runs)
	}
	runs = set.Runs()
	set.Release()

	if _, err := OpenSetIn(dir, append(slices.Clone(runs), "run-000777.spill"), SetOptions{}); err == nil {
		t.Error("a missing listed run opened")
	}
	// Damage the footer of the newest run.
	p := filepath.Join(dir, runs[2])
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-20] ^= 0xff
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSetIn(dir, runs, SetOptions{}); err == nil {
		t.Error("a damaged run opened")
	}
	set, err = OpenSetIn(dir, runs[:2], SetOptions{})
	if err != nil {
		t.Fatalf("the folder's lock was not released after the failed open: %v", err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Close left the folder: %v", err)
	}
}

// TestMaxFilterBytes: past the cap the largest runs' filters are freed;
// lookups of present and absent keys still answer right.
func TestMaxFilterBytes(t *testing.T) {
	set, err := OpenSet(t.TempDir(), SetOptions{MaxFilterBytes: 4 << 10, FanIn: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for r := 0; r < 4; r++ {
		n := 20000 >> r // a big run, then smaller ones
		if _, err := set.Flush(n, sortedEntries(r*100000, n, fmt.Sprint("r", r))); err != nil {
			t.Fatal(err)
		}
	}
	var filters int64
	for _, rn := range set.runs {
		filters += rn.r.FilterBytes()
	}
	st := set.Stats()
	if filters > 4<<10 || st.FiltersDropped == 0 {
		t.Fatalf("filters hold %d bytes (cap 4096), %d dropped", filters, st.FiltersDropped)
	}
	if set.runs[0].r.FilterBytes() != 0 {
		t.Error("the largest run kept its filter")
	}
	for r := 0; r < 4; r++ {
		for _, i := range []int{0, (20000 >> r) - 1, 20000 >> r} {
			k := []byte(fmt.Sprintf("k%06d", r*100000+i))
			v, ok, _, err := set.Get(xxhashOf(k), k)
			want := i < 20000>>r
			if err != nil || ok != want || (ok && string(v) != fmt.Sprint("r", r)) {
				t.Errorf("%s: %q %v %v, want found=%v", k, v, ok, err, want)
			}
		}
	}
}
