package spill

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/icesink/icesink/spill/bloom"
)

// Source says where a lookup was answered, from cheapest to dearest.
type Source uint8

const (
	// SourceNone: nothing was consulted (no runs).
	SourceNone Source = iota
	// SourceFilter: the hash range or the bloom filter of every run
	// consulted ruled the key out; no block was read.
	SourceFilter
	// SourceCache: every block read was served by the cache.
	SourceCache
	// SourceDisk: at least one block was read from a file.
	SourceDisk
)

// String returns the source's name.
func (s Source) String() string {
	switch s {
	case SourceNone:
		return "none"
	case SourceFilter:
		return "filter"
	case SourceCache:
		return "cache"
	case SourceDisk:
		return "disk"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Reader reads one run file. Opening reads the footer, the index and the
// filter into memory and verifies their checksums; every data block's
// checksum is verified when the block is read from the file. A Reader is not
// safe for concurrent use (Get reuses buffers); iterators are independent of
// each other and of Get.
type Reader struct {
	f      Readable
	name   string
	ft     footer
	closed bool

	// lastHash[i] is the largest hash of data block i; offs[i] its offset and
	// offs[len(lastHash)] the end of the data region (blocks are contiguous).
	lastHash []uint64
	offs     []uint64
	filter   bloom.Filter
	meta     []byte // filter bytes (aliased by filter)
	noFilter bool   // DropFilter: lookups go to the blocks

	cache   *Cache
	ck      cacheKey // handle in ck[0:8]; offset filled per lookup
	scratch []byte   // block buffer for uncached reads
}

// OpenReader opens the run in f. The reader owns f: Close closes it, and so
// does a failed OpenReader. Errors match ErrCorruption when the bytes are
// bad and name opts.FileName.
func OpenReader(f Readable, opts ReaderOptions) (*Reader, error) {
	opts = opts.ensureDefaults()
	r := &Reader{f: f, name: opts.FileName}
	if err := r.open(); err != nil {
		f.Close()
		return nil, err
	}
	if opts.Cache != nil {
		r.cache = opts.Cache
		binary.LittleEndian.PutUint64(r.ck[0:], opts.Cache.acquire(opts.CacheID, r.offs[:len(r.lastHash)]))
	}
	return r, nil
}

func (r *Reader) open() error {
	size := r.f.Size()
	if size < footerLen {
		return corruptf(r.name, 0, "file of %d bytes is shorter than the %d-byte footer", size, footerLen)
	}
	var fb [footerLen]byte
	if err := r.readAt(fb[:], size-footerLen); err != nil {
		return err
	}
	ft, err := decodeFooter(r.name, fb[:], size)
	if err != nil {
		return err
	}
	r.ft = ft

	// Index.
	idx := make([]byte, int(ft.index.len)+trailerLen)
	if err := r.readBlock(idx, ft.index, blockKindIndex); err != nil {
		return err
	}
	idx = idx[:ft.index.len]
	if len(idx) < 4 {
		return corruptf(r.name, int64(ft.index.off), "index block of %d bytes", len(idx))
	}
	n := binary.LittleEndian.Uint32(idx)
	if uint64(len(idx)) != 4+uint64(n)*indexEntryLen {
		return corruptf(r.name, int64(ft.index.off), "index block of %d bytes cannot hold %d handles", len(idx), n)
	}
	if (n == 0) != (ft.entries == 0) || uint64(n) > ft.entries {
		return corruptf(r.name, int64(ft.index.off), "%d blocks for %d entries", n, ft.entries)
	}
	r.lastHash = make([]uint64, n)
	r.offs = make([]uint64, n+1)
	var next uint64
	for i := range r.lastHash {
		e := idx[4+i*indexEntryLen:]
		last := binary.LittleEndian.Uint64(e)
		off := binary.LittleEndian.Uint64(e[8:])
		l := binary.LittleEndian.Uint32(e[16:])
		switch {
		case off != next:
			return corruptf(r.name, int64(ft.index.off), "block %d at offset %d, want %d", i, off, next)
		case l < 8 || l > maxBlockLen:
			return corruptf(r.name, int64(ft.index.off), "block %d has length %d", i, l)
		case i > 0 && last < r.lastHash[i-1]:
			return corruptf(r.name, int64(ft.index.off), "block %d ends at hash %x, before block %d", i, last, i-1)
		case last < ft.smallest || last > ft.largest:
			return corruptf(r.name, int64(ft.index.off), "block %d ends at hash %x, outside [%x, %x]", i, last, ft.smallest, ft.largest)
		}
		r.lastHash[i], r.offs[i] = last, off
		next = off + uint64(l) + trailerLen
	}
	if next != ft.filter.off {
		return corruptf(r.name, int64(ft.index.off), "data blocks end at %d, filter starts at %d", next, ft.filter.off)
	}
	if n > 0 && r.lastHash[n-1] != ft.largest {
		return corruptf(r.name, int64(ft.index.off), "last block ends at hash %x, footer says %x", r.lastHash[n-1], ft.largest)
	}
	r.offs[n] = next

	// Filter.
	r.meta = make([]byte, int(ft.filter.len)+trailerLen)
	if err := r.readBlock(r.meta, ft.filter, blockKindFilter); err != nil {
		return err
	}
	r.meta = r.meta[:ft.filter.len]
	if r.filter, err = bloom.Decode(r.meta); err != nil {
		return &CorruptionError{File: r.name, Offset: int64(ft.filter.off), Msg: "bad filter block", Cause: err}
	}
	return nil
}

// readAt reads exactly len(p) bytes at off; a short file is corruption.
func (r *Reader) readAt(p []byte, off int64) error {
	if err := r.f.ReadAt(p, off); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &CorruptionError{File: r.name, Offset: off, Msg: fmt.Sprintf("short read of %d bytes", len(p)), Cause: err}
		}
		return fmt.Errorf("spill: read run %s at offset %d: %w", r.name, off, err)
	}
	return nil
}

// readBlock reads block h and its trailer into dst (len h.len+trailerLen)
// and verifies kind and checksum.
func (r *Reader) readBlock(dst []byte, h blockHandle, kind byte) error {
	if err := r.readAt(dst, int64(h.off)); err != nil {
		return err
	}
	typ := dst[h.len]
	if typ != kind {
		return corruptf(r.name, int64(h.off)+int64(h.len), "block type %#x, want %#x", typ, kind)
	}
	want := binary.LittleEndian.Uint32(dst[h.len+1:])
	if got := blockChecksum(dst[:h.len+1]); got != want {
		return corruptf(r.name, int64(h.off), "block checksum mismatch (got %08x, want %08x)", got, want)
	}
	return nil
}

func (r *Reader) handle(i int) blockHandle {
	return blockHandle{off: r.offs[i], len: uint32(r.offs[i+1] - r.offs[i] - trailerLen)}
}

// dataBlock returns data block i, from the cache or the file.
func (r *Reader) dataBlock(i int) ([]byte, Source, error) {
	h := r.handle(i)
	if r.cache != nil {
		binary.LittleEndian.PutUint64(r.ck[8:], h.off)
		if b, ok := r.cache.get(&r.ck); ok {
			return b, SourceCache, nil
		}
	}
	if r.cache != nil && r.cache.shouldOffer() {
		// A fresh buffer: the cache keeps it.
		buf := make([]byte, int(h.len)+trailerLen)
		if err := r.readBlock(buf, h, blockKindData); err != nil {
			return nil, SourceDisk, err
		}
		b := buf[:h.len:h.len]
		r.cache.set(&r.ck, b)
		return b, SourceDisk, nil
	}
	need := int(h.len) + trailerLen
	if cap(r.scratch) < need {
		r.scratch = make([]byte, need)
	}
	buf := r.scratch[:need]
	if err := r.readBlock(buf, h, blockKindData); err != nil {
		return nil, SourceDisk, err
	}
	return buf[:h.len], SourceDisk, nil
}

// Get looks up key, whose hash is hash. It consults the hash range and the
// filter, binary-searches the index, reads the block (through the cache)
// and searches it. The value aliases an internal buffer or a cached block:
// it must not be modified, and is valid until the next call on the reader;
// copy it to keep it. src says where the lookup was answered.
func (r *Reader) Get(hash uint64, key []byte) (value []byte, found bool, src Source, err error) {
	if r.closed {
		return nil, false, SourceNone, fmt.Errorf("spill: get from run %s: %w", r.name, ErrClosed)
	}
	if !r.mayContain(hash) {
		return nil, false, SourceFilter, nil
	}
	return r.find(hash, key, r)
}

// blockSource gives a run's data blocks: the reader's own (through the
// cache) or a cursor's (read forward in chunks).
type blockSource interface {
	dataBlock(i int) ([]byte, Source, error)
}

// find searches the blocks that may hold (hash, key), from the first whose
// last hash is >= hash, taking them from blocks.
func (r *Reader) find(hash uint64, key []byte, blocks blockSource) (value []byte, found bool, src Source, err error) {
	lo, hi := 0, len(r.lastHash)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.lastHash[m] < hash {
			lo = m + 1
		} else {
			hi = m
		}
	}
	src = SourceCache
	for i := lo; i < len(r.lastHash); i++ {
		b, s, err := blocks.dataBlock(i)
		if s > src {
			src = s
		}
		if err != nil {
			return nil, false, src, err
		}
		v, found, ok := searchBlock(b, hash, key)
		if !ok {
			return nil, false, src, corruptf(r.name, int64(r.offs[i]), "malformed data block %d", i)
		}
		if found {
			return v, true, src, nil
		}
		if r.lastHash[i] != hash {
			break // equal hashes may continue in the next block only
		}
	}
	return nil, false, src, nil
}

// chunk holds whole data blocks [lo, hi) of a run as read at once: the
// sequential readers' (Iter, Cursor) buffer.
type chunk struct {
	buf    []byte
	lo, hi int
	// checked is 1 + the block whose type and checksum were verified
	// last: a cursor asks for one block many times in a row (a sorted
	// batch of keys landing in it), and verifying it once is enough.
	checked int
}

// has reports whether block i is in the chunk.
func (c *chunk) has(i int) bool { return i >= c.lo && i < c.hi }

// block returns data block i of r (without its trailer), checked, first
// reading whole blocks from i on, up to iterReadAhead bytes (at least
// one), when the chunk does not hold it; read says whether it did.
func (c *chunk) block(r *Reader, i int) (b []byte, read bool, err error) {
	if !c.has(i) {
		j := i + 1
		for j < len(r.lastHash) && r.offs[j+1]-r.offs[i] <= iterReadAhead {
			j++
		}
		n := int(r.offs[j] - r.offs[i])
		if cap(c.buf) < n {
			c.buf = make([]byte, n)
		}
		c.buf = c.buf[:n]
		if err := r.readAt(c.buf, int64(r.offs[i])); err != nil {
			return nil, true, err
		}
		c.lo, c.hi, c.checked, read = i, j, 0, true
	}
	h := r.handle(i)
	raw := c.buf[h.off-r.offs[c.lo]:][:int(h.len)+trailerLen]
	if c.checked == i+1 {
		return raw[:h.len], read, nil
	}
	if typ := raw[h.len]; typ != blockKindData {
		return nil, read, corruptf(r.name, int64(h.off)+int64(h.len), "block type %#x, want %#x", typ, blockKindData)
	}
	if got, want := blockChecksum(raw[:h.len+1]), binary.LittleEndian.Uint32(raw[h.len+1:]); got != want {
		return nil, read, corruptf(r.name, int64(h.off), "block checksum mismatch (got %08x, want %08x)", got, want)
	}
	c.checked = i + 1
	return raw[:h.len], read, nil
}

// searchBlock finds (hash, key) in a data block. ok is false if the block is
// malformed.
func searchBlock(b []byte, hash uint64, key []byte) (value []byte, found, ok bool) {
	end, nr, ok := blockLayout(b)
	if !ok {
		return nil, false, false
	}
	restarts := b[end : len(b)-4]
	// First restart whose hash is >= hash; the scan starts one before.
	lo, hi := 0, nr
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if binary.LittleEndian.Uint64(restarts[restartLen*m:]) < hash {
			lo = m + 1
		} else {
			hi = m
		}
	}
	off := 0
	if lo > 0 {
		off = int(binary.LittleEndian.Uint32(restarts[restartLen*(lo-1)+8:]))
	}
	for off < end {
		if off+10 > end {
			return nil, false, false
		}
		h := binary.LittleEndian.Uint64(b[off:])
		if h > hash {
			return nil, false, true
		}
		if kl, vl := b[off+8], b[off+9]; kl|vl < 0x80 && h < hash {
			// Fast skip of an entry with one-byte lengths.
			off += 10 + int(kl) + int(vl)
			continue
		}
		_, k, v, next, ok := decodeEntry(b, off, end)
		if !ok {
			return nil, false, false
		}
		if h == hash {
			switch c := bytes.Compare(k, key); {
			case c == 0:
				return v, true, true
			case c > 0:
				return nil, false, true
			}
		}
		off = next
	}
	if off != end {
		return nil, false, false
	}
	return nil, false, true
}

// blockLayout returns the end of a data block's entries and its number of
// restart points.
func blockLayout(b []byte) (end, nr int, ok bool) {
	if len(b) < 4 {
		return 0, 0, false
	}
	n := uint64(binary.LittleEndian.Uint32(b[len(b)-4:]))
	if n == 0 || 4+restartLen*n > uint64(len(b)) {
		return 0, 0, false
	}
	return len(b) - 4 - restartLen*int(n), int(n), true
}

// Info returns the run's summary from its footer.
func (r *Reader) Info() RunInfo {
	return RunInfo{
		Entries:      int64(r.ft.entries),
		Blocks:       len(r.lastHash),
		Bytes:        r.f.Size(),
		SmallestHash: r.ft.smallest,
		LargestHash:  r.ft.largest,
	}
}

// MemoryBytes returns the bytes the open reader holds: index, filter, its
// block buffer and fixed overhead. Cached blocks are the cache's.
func (r *Reader) MemoryBytes() int64 {
	const fixed = 256 // the Reader struct and the file handle, roughly
	return fixed + int64(8*cap(r.lastHash)+8*cap(r.offs)+cap(r.meta)+cap(r.scratch))
}

// FilterBytes returns the memory the run's bloom filter holds (0 once
// dropped).
func (r *Reader) FilterBytes() int64 { return int64(cap(r.meta)) }

// DropFilter frees the run's bloom filter: from then on every lookup
// within the run's hash range searches its blocks (through the cache).
// The filter stays in the file.
func (r *Reader) DropFilter() {
	r.noFilter, r.meta, r.filter = true, nil, bloom.Filter{}
}

// Close closes the file. Cached blocks stay until the cache's EvictRun.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.scratch, r.lastHash, r.offs, r.meta, r.filter = nil, nil, nil, nil, bloom.Filter{}
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("spill: close run %s: %w", r.name, err)
	}
	return nil
}
