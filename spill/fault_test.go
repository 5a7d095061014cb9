package spill

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestFlushENOSPC: a disk that fills mid-run fails the flush with an error
// naming the run and ENOSPC; the partial file is removed and the set keeps
// serving earlier runs and accepts later flushes.
func TestFlushENOSPC(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			var inner FS = NewMemFS()
			dir := "/spill"
			if name == "os" {
				inner, dir = OSFS{}, t.TempDir()
			}
			ffs := NewFaultFS(inner)
			set, err := OpenSet(dir, SetOptions{FS: ffs, FanIn: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			first := makeEntries(2000, 2, "first", nil)
			if _, err := set.Flush(len(first), slices.Values(first)); err != nil {
				t.Fatal(err)
			}
			// Fail at several points: in a data block, in the filter, in the
			// footer write.
			second := makeEntries(2000, 3, "second", nil)
			// Where the writes of this run fall: data, filter, index+footer.
			probe := NewMemFS()
			info := writeRun(t, probe, "/p", second, WriterOptions{ExpectedEntries: len(second)})
			pr := openRun(t, probe, "/p", ReaderOptions{})
			dataEnd := int64(pr.ft.filter.off)
			pr.Close()
			budgets := []int64{0, 100, dataEnd - 1, dataEnd, dataEnd + 10, info.Bytes - 30, info.Bytes - 1}
			for _, budget := range budgets {
				ffs.FailWritesAfter(budget)
				_, err := set.Flush(len(second), slices.Values(second))
				ffs.FailWritesAfter(-1)
				if err == nil {
					t.Fatalf("budget %d of %d: flush succeeded", budget, info.Bytes)
				}
				if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "run-") || IsCorruption(err) {
					t.Fatalf("budget %d: %v", budget, err)
				}
				names, _ := ffs.List(set.Dir())
				if len(names) != 2 {
					t.Fatalf("budget %d: partial run left: %v", budget, names)
				}
				if st := set.Stats(); st.Runs != 1 {
					t.Fatalf("budget %d: %+v", budget, st)
				}
				for _, e := range first {
					if v, found, _, err := set.Get(e.Hash, e.Key); err != nil || !found || !bytes.Equal(v, e.Value) {
						t.Fatalf("budget %d: get %s: %q %v %v", budget, e.Key, v, found, err)
					}
				}
			}
			if _, err := set.Flush(len(second), slices.Values(second)); err != nil {
				t.Fatal(err)
			}
			if _, found, _, err := set.Get(second[0].Hash, second[0].Key); !found || err != nil {
				t.Fatal(found, err)
			}
		})
	}
}

// TestCompactionENOSPC: a compaction that runs out of disk keeps its inputs;
// the flush reports ErrCompaction but its run is in the set.
func TestCompactionENOSPC(t *testing.T) {
	ffs := NewFaultFS(NewMemFS())
	set, err := OpenSet("/spill", SetOptions{FS: ffs, FanIn: 2, Compaction: CompactAll})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var all []Entry
	for i := 0; i < 2; i++ {
		es := makeEntries(1000, 1, string(rune('a'+i)), nil)
		if _, err := set.Flush(len(es), slices.Values(es)); err != nil {
			t.Fatal(err)
		}
		all = es
	}
	third := makeEntries(500, 5, "c", nil)
	// Enough for the flush, not for the merge.
	ffs.FailWritesAfter(20000)
	_, err = set.Flush(len(third), slices.Values(third))
	ffs.FailWritesAfter(-1)
	if !errors.Is(err, ErrCompaction) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v", err)
	}
	if st := set.Stats(); st.Runs != 3 {
		t.Fatalf("%+v", st)
	}
	model := map[string]string{}
	for _, e := range all {
		model[string(e.Key)] = string(e.Value)
	}
	for _, e := range third {
		model[string(e.Key)] = string(e.Value)
	}
	check := func() {
		for k, want := range model {
			v, found, _, err := set.Get(xxhashOf([]byte(k)), []byte(k))
			if err != nil || !found || string(v) != want {
				t.Fatalf("get %s: %q %v %v, want %q", k, v, found, err, want)
			}
		}
	}
	check()
	// With space again the next flush compacts.
	fourth := makeEntries(10, 7, "d", nil)
	if _, err := set.Flush(len(fourth), slices.Values(fourth)); err != nil {
		t.Fatal(err)
	}
	for _, e := range fourth {
		model[string(e.Key)] = string(e.Value)
	}
	if st := set.Stats(); st.Runs != 1 || st.Compactions != 1 {
		t.Fatalf("%+v", st)
	}
	check()
}

func TestOpenFailures(t *testing.T) {
	// A spill dir under a regular file cannot be created.
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSet(filepath.Join(f, "spill"), SetOptions{}); err == nil || !strings.Contains(err.Error(), f) {
		t.Fatalf("open under a file: %v", err)
	}
	// Creates fail: the flush fails naming the run, the set stays usable.
	ffs := NewFaultFS(NewMemFS())
	set, err := OpenSet("/spill", SetOptions{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	es := makeEntries(10, 1, "", nil)
	ffs.FailCreates(syscall.EACCES)
	if _, err := set.Flush(10, slices.Values(es)); !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), "run-") {
		t.Fatalf("flush with failing create: %v", err)
	}
	ffs.FailCreates(nil)
	// Opens fail after writing: the run is removed.
	ffs.FailOpens(syscall.EMFILE)
	if _, err := set.Flush(10, slices.Values(es)); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("flush with failing open: %v", err)
	}
	ffs.FailOpens(nil)
	names, _ := ffs.List(set.Dir())
	if len(names) != 1 {
		t.Fatalf("folder holds %v", names)
	}
	if _, err := set.Flush(10, slices.Values(es)); err != nil {
		t.Fatal(err)
	}
	// An out-of-order sequence fails and leaves nothing.
	bad := []Entry{es[1], es[0]}
	if _, err := set.Flush(2, slices.Values(bad)); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("out of order flush: %v", err)
	}
	if names, _ := ffs.List(set.Dir()); len(names) != 2 {
		t.Fatalf("folder holds %v", names)
	}
}
