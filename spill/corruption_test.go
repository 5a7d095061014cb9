package spill

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// openAndScan opens name and reads every entry and every key: the first
// error, if any.
func openAndScan(fs FS, name string, es []Entry) error {
	f, err := fs.Open(name)
	if err != nil {
		return err
	}
	r, err := OpenReader(f, ReaderOptions{FileName: name})
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := readAll(r); err != nil {
		return err
	}
	for _, e := range es {
		if _, _, _, err := r.Get(e.Hash, e.Key); err != nil {
			return err
		}
	}
	return nil
}

func checkCorruption(t *testing.T, err error, name, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: not detected", what)
	}
	if !errors.Is(err, ErrCorruption) {
		t.Fatalf("%s: %v does not match ErrCorruption", what, err)
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != name || !strings.Contains(err.Error(), name) {
		t.Fatalf("%s: %v does not name %s", what, err, name)
	}
}

// TestBitFlipEverywhere flips one bit of every byte of a small run: each
// flip must surface as ErrCorruption (on open, iteration or lookup).
func TestBitFlipEverywhere(t *testing.T) {
	mem := NewMemFS()
	fs := NewFaultFS(mem)
	es := makeEntries(200, 1, "f", nil)
	writeRun(t, fs, "/run", es, WriterOptions{BlockSize: 512})
	orig := fileBytes(t, mem, "/run")
	for off := range orig {
		if err := fs.FlipBit("/run", int64(off), uint(off)); err != nil {
			t.Fatal(err)
		}
		checkCorruption(t, openAndScan(fs, "/run", es), "/run", "flip at "+strconv.Itoa(off))
		if err := fs.FlipBit("/run", int64(off), uint(off)); err != nil { // restore
			t.Fatal(err)
		}
	}
	if err := openAndScan(fs, "/run", es); err != nil {
		t.Fatal(err)
	}
}

func TestTruncate(t *testing.T) {
	mem := NewMemFS()
	fs := NewFaultFS(mem)
	es := makeEntries(500, 1, "t", nil)
	writeRun(t, fs, "/run", es, WriterOptions{BlockSize: 1024})
	orig := fileBytes(t, mem, "/run")
	for _, size := range []int{0, 1, 63, 64, 65, len(orig) / 2, len(orig) - 65, len(orig) - 64, len(orig) - 1} {
		w, _ := mem.Create("/run")
		w.Write(orig)
		w.Finish()
		if err := fs.Truncate("/run", int64(size)); err != nil {
			t.Fatal(err)
		}
		checkCorruption(t, openAndScan(fs, "/run", es), "/run", "truncate to "+strconv.Itoa(size))
	}
}

// TestCorruptDataBlockInSet: a data block corrupted under an open set fails
// the lookups that read it, naming the run file, and fails a compaction
// (ErrCompaction) without losing the other runs.
func TestCorruptDataBlockInSet(t *testing.T) {
	fs := NewFaultFS(OSFS{})
	set, err := OpenSet(t.TempDir(), SetOptions{FS: fs, FanIn: 2, CacheSize: -1, Compaction: CompactAll})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	es := makeEntries(1000, 1, "a", nil)
	if _, err := set.Flush(len(es), slices.Values(es)); err != nil {
		t.Fatal(err)
	}
	runName := filepath.Join(set.Dir(), "run-000000.spill")
	// OSFS rewrites the file in place: the open reader sees the flip.
	if err := fs.FlipBit(runName, 100, 3); err != nil {
		t.Fatal(err)
	}
	var bad int
	for _, e := range es {
		if _, _, _, err := set.Get(e.Hash, e.Key); err != nil {
			checkCorruption(t, err, runName, "get")
			bad++
		}
	}
	if bad == 0 || bad == len(es) {
		t.Fatalf("%d of %d lookups failed", bad, len(es))
	}
	more := makeEntries(100, 3, "b", nil)
	if _, err := set.Flush(len(more), slices.Values(more)); err != nil {
		t.Fatal(err)
	}
	fresh := makeEntries(50, 7, "c", nil)
	_, err = set.Flush(len(fresh), slices.Values(fresh))
	if !errors.Is(err, ErrCompaction) || !errors.Is(err, ErrCorruption) {
		t.Fatalf("compaction over a corrupt run: %v", err)
	}
	if st := set.Stats(); st.Runs != 3 {
		t.Fatalf("runs after failed compaction: %+v", st)
	}
	for _, e := range fresh {
		if v, found, _, err := set.Get(e.Hash, e.Key); err != nil || !found || string(v) != string(e.Value) {
			t.Fatalf("get %s after failed compaction: %q %v %v", e.Key, v, found, err)
		}
	}
	names, _ := fs.List(set.Dir())
	if len(names) != 4 { // LOCK + 3 runs: the partial output is gone
		t.Fatalf("folder holds %v", names)
	}
}
