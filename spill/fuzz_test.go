package spill

import (
	"encoding/binary"
	"testing"
)

// FuzzReader opens arbitrary bytes as a run: it must return an error or a
// reader whose iteration and lookups return errors, never panic.
// go test ./spill -run XXX -fuzz FuzzReader -fuzztime 60s
func FuzzReader(f *testing.F) {
	fs := NewMemFS()
	for i, n := range []int{0, 1, 30, 300} {
		name := "/seed" + string(rune('a'+i))
		writeRun(f, fs, name, makeEntries(n, 1, "v", func(k []byte) uint64 { return xxhashOf(k) % 5 }), WriterOptions{BlockSize: 256, RestartInterval: 2})
		f.Add(fileBytes(f, fs, name))
	}
	f.Add([]byte("icespill"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := OpenReader(&memReadable{name: "fuzz", data: b}, ReaderOptions{FileName: "fuzz"})
		if err != nil {
			if !IsCorruption(err) {
				t.Fatalf("non-corruption error on bytes: %v", err)
			}
			return
		}
		defer r.Close()
		it := r.NewIter()
		var keys [][]byte
		var hashes []uint64
		for it.Next() && len(keys) < 1000 {
			keys = append(keys, append([]byte(nil), it.Key()...))
			hashes = append(hashes, it.Hash())
		}
		it.Close()
		for i, k := range keys {
			r.Get(hashes[i], k)
			r.Get(hashes[i]+1, k)
		}
		r.Get(0, nil)
		r.Get(^uint64(0), []byte("zz"))
	})
}

// FuzzDataBlock wraps arbitrary bytes as the one data block of a run with
// valid checksums, an all-ones filter and a valid index and footer, so the
// fuzzer reaches the block decoding of Get and Iter that checksums otherwise
// guard.
func FuzzDataBlock(f *testing.F) {
	fs := NewMemFS()
	es := makeEntries(20, 1, "v", func(k []byte) uint64 { return xxhashOf(k) % 3 })
	writeRun(f, fs, "/seed", es, WriterOptions{RestartInterval: 3})
	raw := fileBytes(f, fs, "/seed")
	r := openRun(f, fs, "/seed", ReaderOptions{})
	h := r.handle(0)
	f.Add(raw[h.off:h.off+uint64(h.len)], uint64(2), uint64(1), []byte("key-00000001"))
	r.Close()
	f.Fuzz(func(t *testing.T, block []byte, last, probe uint64, key []byte) {
		file := wrapBlock(block, last)
		r, err := OpenReader(&memReadable{name: "fuzz", data: file}, ReaderOptions{FileName: "fuzz"})
		if err != nil {
			return // e.g. a block too short for the index checks
		}
		defer r.Close()
		r.Get(probe, key)
		r.Get(last, key)
		it := r.NewIter()
		for it.Next() {
			r.Get(it.Hash(), it.Key())
		}
		if err := it.Err(); err != nil && !IsCorruption(err) {
			t.Fatalf("non-corruption error: %v", err)
		}
	})
}

// wrapBlock builds a run file around one data block.
func wrapBlock(block []byte, last uint64) []byte {
	file := append([]byte(nil), block...)
	file = appendTrailer(file, 0, blockKindData)
	var ft footer
	ft.version = FormatV1
	ft.entries = 1
	ft.largest = last
	ft.filter = blockHandle{off: uint64(len(file)), len: 64 + 5}
	fstart := len(file)
	for i := 0; i < 64; i++ {
		file = append(file, 0xff)
	}
	file = append(file, 1, 1, 0, 0, 0) // k=1, one line
	file = appendTrailer(file, fstart, blockKindFilter)
	ft.index = blockHandle{off: uint64(len(file)), len: 4 + indexEntryLen}
	istart := len(file)
	file = binary.LittleEndian.AppendUint32(file, 1)
	file = binary.LittleEndian.AppendUint64(file, last)
	file = binary.LittleEndian.AppendUint64(file, 0)
	file = binary.LittleEndian.AppendUint32(file, uint32(len(block)))
	file = appendTrailer(file, istart, blockKindIndex)
	return ft.encode(file)
}
