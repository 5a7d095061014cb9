package spill

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/icesink/icesink/spill/bloom"
)

// RunInfo describes a finished run.
type RunInfo struct {
	// Entries is the number of entries.
	Entries int64
	// Blocks is the number of data blocks.
	Blocks int
	// Bytes is the size of the file.
	Bytes int64
	// SmallestHash and LargestHash bound the entries' hashes (both 0 for an
	// empty run).
	SmallestHash, LargestHash uint64
}

type restartPoint struct {
	hash uint64
	off  uint32
}

type indexEntry struct {
	lastHash uint64
	h        blockHandle
}

// Writer writes one run file. Entries must be added in strictly increasing
// (hash, key) order, keys compared with bytes.Compare; the hash is the
// caller's (xxhash64 of the key in icesink) and the writer never recomputes
// it. Errors are sticky: after the first, every method returns it. A Writer
// is not safe for concurrent use.
type Writer struct {
	w    Writable
	opts WriterOptions
	err  error
	done bool

	// buf holds finished blocks not yet written, then the block being
	// built from blockStart on: blocks go out in writes of ~writeBufferSize.
	buf        []byte
	blockStart int
	restarts   []restartPoint
	nInBlock   int
	written    uint64 // bytes written to w: the file offset of buf[0]

	index  []indexEntry
	filter *bloom.Writer

	entries  uint64
	smallest uint64
	lastHash uint64
	lastKey  []byte
}

// NewWriter returns a writer that writes a run to w.
func NewWriter(w Writable, opts WriterOptions) *Writer {
	opts = opts.ensureDefaults()
	return &Writer{
		w:      w,
		opts:   opts,
		buf:    make([]byte, 0, writeBufferSize+opts.BlockSize+trailerLen+64),
		filter: bloom.NewWriter(opts.BloomBitsPerKey, opts.ExpectedEntries),
	}
}

// Add appends an entry. (hash, key) must sort strictly after the previous
// entry's, else Add fails with ErrOutOfOrder. key and value are copied; the
// caller may reuse them when Add returns.
func (w *Writer) Add(hash uint64, key, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return fmt.Errorf("spill: add to run %s: %w", w.opts.FileName, ErrClosed)
	}
	if w.entries > 0 && (hash < w.lastHash || hash == w.lastHash && bytes.Compare(key, w.lastKey) <= 0) {
		w.err = fmt.Errorf("spill: run %s: entry %d (hash %016x, key %q) does not sort after (hash %016x, key %q): %w",
			w.opts.FileName, w.entries, hash, key, w.lastHash, w.lastKey, ErrOutOfOrder)
		return w.err
	}
	if len(key)+len(value) > maxEntryLen {
		w.err = fmt.Errorf("spill: run %s: entry of %d bytes exceeds the limit of %d", w.opts.FileName, len(key)+len(value), maxEntryLen)
		return w.err
	}
	n := entryLen(key, value)
	if w.nInBlock > 0 && len(w.buf)-w.blockStart+n+restartLen*(len(w.restarts)+1)+4 > w.opts.BlockSize {
		if err := w.flushBlock(); err != nil {
			return err
		}
	}
	if w.nInBlock%w.opts.RestartInterval == 0 {
		w.restarts = append(w.restarts, restartPoint{hash, uint32(len(w.buf) - w.blockStart)})
	}
	w.buf = appendEntry(w.buf, hash, key, value)
	w.nInBlock++
	if w.entries == 0 {
		w.smallest = hash
	}
	w.entries++
	w.lastHash = hash
	w.lastKey = append(w.lastKey[:0], key...)
	w.filter.Add(hash)
	return nil
}

// writeBufferSize is the size of the writes a Writer issues: whole blocks
// are gathered up to this size (fewer system calls).
const writeBufferSize = 128 << 10

// flushBlock finishes the data block being built, and writes the gathered
// blocks if they fill the write buffer.
func (w *Writer) flushBlock() error {
	for _, r := range w.restarts {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, r.hash)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, r.off)
	}
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(w.restarts)))
	blockLen := len(w.buf) - w.blockStart
	w.buf = appendTrailer(w.buf, w.blockStart, blockKindData)
	w.index = append(w.index, indexEntry{lastHash: w.lastHash, h: blockHandle{off: w.written + uint64(w.blockStart), len: uint32(blockLen)}})
	w.restarts = w.restarts[:0]
	w.nInBlock = 0
	if len(w.buf) >= writeBufferSize {
		if err := w.write(w.buf); err != nil {
			return err
		}
		w.buf = w.buf[:0]
	}
	w.blockStart = len(w.buf)
	return nil
}

func (w *Writer) write(b []byte) error {
	if err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("spill: write run %s at offset %d: %w", w.opts.FileName, w.written, err)
		return w.err
	}
	w.written += uint64(len(b))
	return nil
}

// EntryCount returns the number of entries added so far.
func (w *Writer) EntryCount() int64 { return int64(w.entries) }

// MemoryBytes returns the bytes the writer holds: the block buffer, the
// index and the filter being built.
func (w *Writer) MemoryBytes() int64 {
	return int64(cap(w.buf)+cap(w.lastKey)+16*cap(w.restarts)+24*cap(w.index)) + w.filter.MemoryBytes()
}

// Finish writes the filter, the index and the footer and finishes the file.
// On error the file is aborted (the caller removes it).
func (w *Writer) Finish() (RunInfo, error) {
	if w.err != nil {
		return RunInfo{}, w.err
	}
	if w.done {
		return RunInfo{}, fmt.Errorf("spill: finish run %s: %w", w.opts.FileName, ErrClosed)
	}
	if err := w.finish(); err != nil {
		w.Abort()
		return RunInfo{}, err
	}
	w.done = true
	if err := w.w.Finish(); err != nil {
		w.err = fmt.Errorf("spill: finish run %s: %w", w.opts.FileName, err)
		return RunInfo{}, w.err
	}
	info := RunInfo{Entries: int64(w.entries), Blocks: len(w.index), Bytes: int64(w.written)}
	if w.entries > 0 {
		info.SmallestHash, info.LargestHash = w.smallest, w.lastHash
	}
	w.release()
	return info, nil
}

func (w *Writer) finish() error {
	if w.nInBlock > 0 {
		if err := w.flushBlock(); err != nil {
			return err
		}
	}
	if len(w.buf) > 0 {
		if err := w.write(w.buf); err != nil {
			return err
		}
	}
	var ft footer
	ft.version = w.opts.FormatVersion
	ft.entries = w.entries
	if w.entries > 0 {
		ft.smallest, ft.largest = w.smallest, w.lastHash
	}

	// Filter block, written from the filter's own buffer.
	fb := w.filter.Finish()
	ft.filter = blockHandle{off: w.written, len: uint32(len(fb))}
	if err := w.write(fb); err != nil {
		return err
	}
	w.buf = append(w.buf[:0], blockKindFilter)
	sum := crc32.Update(crc32.Checksum(fb, crcTable), crcTable, w.buf[:1])
	w.buf = binary.LittleEndian.AppendUint32(w.buf, sum)

	// Index block, then the footer: one write with the filter's trailer.
	istart := len(w.buf)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(w.index)))
	for _, e := range w.index {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, e.lastHash)
		w.buf = binary.LittleEndian.AppendUint64(w.buf, e.h.off)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, e.h.len)
	}
	ft.index = blockHandle{off: w.written + uint64(istart), len: uint32(len(w.buf) - istart)}
	w.buf = appendTrailer(w.buf, istart, blockKindIndex)
	w.buf = ft.encode(w.buf)
	return w.write(w.buf)
}

// Abort abandons the run: the Writable is aborted (the caller removes the
// file) and later calls fail. Abort after Finish does nothing.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.w.Abort()
	if w.err == nil {
		w.err = fmt.Errorf("spill: run %s: %w", w.opts.FileName, ErrClosed)
	}
	w.release()
}

func (w *Writer) release() {
	w.buf, w.restarts, w.index, w.lastKey, w.filter = nil, nil, nil, nil, bloom.NewWriter(1, 0)
}
