package spill

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// entries returns n sorted entries with keys "key-<i*stride>" and values
// "v<i>-<tag>", hashed with hashFn (xxhash if nil).
func makeEntries(n, stride int, tag string, hashFn func([]byte) uint64) []Entry {
	if hashFn == nil {
		hashFn = xxhash.Sum64
	}
	es := make([]Entry, n)
	for i := range es {
		k := []byte(fmt.Sprintf("key-%08d", i*stride))
		es[i] = Entry{Hash: hashFn(k), Key: k, Value: []byte(fmt.Sprintf("v%d-%s", i*stride, tag))}
	}
	sortEntries(es)
	return es
}

func compareEntries(a, b Entry) int {
	if c := cmp.Compare(a.Hash, b.Hash); c != 0 {
		return c
	}
	return bytes.Compare(a.Key, b.Key)
}

func sortEntries(es []Entry) { slices.SortFunc(es, compareEntries) }

// writeRun writes es to name in fs.
func writeRun(t testing.TB, fs FS, name string, es []Entry, opts WriterOptions) RunInfo {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	opts.FileName = name
	w := NewWriter(f, opts)
	for _, e := range es {
		if err := w.Add(e.Hash, e.Key, e.Value); err != nil {
			t.Fatal(err)
		}
	}
	info, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func openRun(t testing.TB, fs FS, name string, opts ReaderOptions) *Reader {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	opts.FileName = name
	r, err := OpenReader(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readAll iterates r.
func readAll(r *Reader) ([]Entry, error) {
	var es []Entry
	it := r.NewIter()
	for it.Next() {
		es = append(es, Entry{it.Hash(), bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	err := it.Err()
	it.Close()
	return es, err
}

func fileBytes(t testing.TB, fs FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func xxhashOf(k []byte) uint64 { return xxhash.Sum64(k) }
