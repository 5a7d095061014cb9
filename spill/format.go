package spill

import (
	"encoding/binary"
	"hash/crc32"
)

// The run file format, FormatV1. All integers are little-endian.
//
//	+------------------+  offset 0
//	| data block 0     |  entries sorted by (hash, key), restart points
//	| trailer (5 B)    |
//	+------------------+
//	| data block 1     |
//	| trailer          |
//	+------------------+
//	| ...              |
//	+------------------+  filter offset (end of the data region)
//	| filter block     |  bloom over the entry hashes (package spill/bloom)
//	| trailer          |
//	+------------------+  index offset
//	| index block      |  one handle per data block
//	| trailer          |
//	+------------------+  size - 64
//	| footer (64 B)    |
//	+------------------+  size
//
// A data block holds entries back to back, then the restart points:
//
//	entry   := hash (8) | uvarint len(key) | uvarint len(value) | key | value
//	restart := hash (8) | offset (4)     of the entry that starts the interval
//	block   := entry... | restart... | number of restarts (4)
//
// Every RestartInterval-th entry (the first one included) starts a restart
// point. A lookup binary-searches the restart array, which is contiguous and
// carries the hashes (a few cache lines, not one miss per probe into the
// entries), then scans at most one interval. Keys are not prefix-compressed:
// in hash order neighbouring keys share no prefix. The hash is stored whole,
// so a scan compares hashes without decoding keys, and hash collisions are
// resolved by comparing key bytes.
//
// Every block is followed by a 5-byte trailer:
//
//	trailer := type (1) | CRC32C (4) of the block bytes followed by the type byte
//
// The type byte is kind | compression<<4, kind 1 = data, 2 = index, 3 = filter;
// compression 0 = none (the only one FormatV1 defines: the values are small
// opaque integers and the hashes random, so general-purpose compression buys
// little and costs CPU on every cache miss).
//
// The index block has one handle per data block, in file order:
//
//	index  := n (4) | n × (last hash (8) | offset (8) | length (4))
//
// where length excludes the trailer. Blocks are contiguous: each offset is the
// previous offset + length + 5, and the last block ends at the filter offset.
// Entries with the same hash may straddle a block boundary; the last hash of a
// block is what the index binary search compares.
//
// The filter block is a bloom.Filter over the entry hashes (empty runs have a
// one-line filter of zeros).
//
// The footer is fixed-size:
//
//	offset size
//	     0    8  index block offset
//	     8    4  index block length (without trailer)
//	    12    8  filter block offset
//	    20    4  filter block length (without trailer)
//	    24    8  number of entries
//	    32    8  smallest hash
//	    40    8  largest hash
//	    48    4  format version
//	    52    4  CRC32C of bytes [0, 52)
//	    56    8  magic "icespill"
//
// Most runs are scratch files of one process. A key index's runs outlive
// it (OpenSetIn): the next run of the sink, possibly another build, opens
// them, checks this footer (magic, version, checksum) and rebuilds the
// index from the table if they do not pass. Changing the layout is a
// deliberate act, with a new version and a new golden test.

// FormatVersion numbers the run file layout. Its values are written to disk
// and are durable: never renumber or reuse one.
type FormatVersion uint32

const (
	// FormatV1 is the layout drawn in format.go.
	FormatV1 FormatVersion = 1
	// FormatLatest is the version new runs are written in.
	FormatLatest = FormatV1
)

const (
	magic         = "icespill"
	footerLen     = 64
	trailerLen    = 5
	indexEntryLen = 20
	restartLen    = 12

	blockKindData   byte = 1
	blockKindIndex  byte = 2
	blockKindFilter byte = 3

	// maxEntryLen bounds len(key)+len(value): larger entries are rejected.
	maxEntryLen = 1 << 24
	// maxBlockLen bounds a block on read; larger lengths are corruption.
	maxBlockLen = 1 << 30
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// blockChecksum is the CRC32C of a block followed by its type byte: b is
// the block and the type byte, contiguous as in the file.
func blockChecksum(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// appendTrailer appends the trailer of the block dst[start:] to dst.
func appendTrailer(dst []byte, start int, typ byte) []byte {
	dst = append(dst, typ)
	return binary.LittleEndian.AppendUint32(dst, blockChecksum(dst[start:]))
}

// blockHandle locates a block (without its trailer) in the file.
type blockHandle struct {
	off uint64
	len uint32
}

// footer is the decoded footer.
type footer struct {
	index    blockHandle
	filter   blockHandle
	entries  uint64
	smallest uint64
	largest  uint64
	version  FormatVersion
}

func (f *footer) encode(dst []byte) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint64(dst, f.index.off)
	dst = binary.LittleEndian.AppendUint32(dst, f.index.len)
	dst = binary.LittleEndian.AppendUint64(dst, f.filter.off)
	dst = binary.LittleEndian.AppendUint32(dst, f.filter.len)
	dst = binary.LittleEndian.AppendUint64(dst, f.entries)
	dst = binary.LittleEndian.AppendUint64(dst, f.smallest)
	dst = binary.LittleEndian.AppendUint64(dst, f.largest)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(f.version))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
	return append(dst, magic...)
}

// decodeFooter parses the last footerLen bytes of a file of the given size.
func decodeFooter(name string, b []byte, size int64) (footer, error) {
	off := size - footerLen
	if string(b[56:64]) != magic {
		return footer{}, corruptf(name, off+56, "bad magic %q", b[56:64])
	}
	if got, want := crc32.Checksum(b[:52], crcTable), binary.LittleEndian.Uint32(b[52:]); got != want {
		return footer{}, corruptf(name, off, "footer checksum mismatch (got %08x, want %08x)", got, want)
	}
	f := footer{
		index:    blockHandle{binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint32(b[8:])},
		filter:   blockHandle{binary.LittleEndian.Uint64(b[12:]), binary.LittleEndian.Uint32(b[20:])},
		entries:  binary.LittleEndian.Uint64(b[24:]),
		smallest: binary.LittleEndian.Uint64(b[32:]),
		largest:  binary.LittleEndian.Uint64(b[40:]),
		version:  FormatVersion(binary.LittleEndian.Uint32(b[48:])),
	}
	if f.version != FormatV1 {
		return footer{}, corruptf(name, off+48, "unsupported format version %d", f.version)
	}
	// Layout: data | filter+trailer | index+trailer | footer, contiguous;
	// offsets are checked against the size first so the sums cannot wrap.
	if f.filter.off > uint64(size) || f.index.off > uint64(size) ||
		f.filter.off+uint64(f.filter.len)+trailerLen != f.index.off ||
		f.index.off+uint64(f.index.len)+trailerLen != uint64(off) {
		return footer{}, corruptf(name, off, "footer handles (filter %d+%d, index %d+%d) do not tile a file of %d bytes",
			f.filter.off, f.filter.len, f.index.off, f.index.len, size)
	}
	if f.smallest > f.largest {
		return footer{}, corruptf(name, off+32, "smallest hash %x > largest %x", f.smallest, f.largest)
	}
	return f, nil
}

// appendEntry appends one entry to a data block.
func appendEntry(dst []byte, hash uint64, key, value []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, hash)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	dst = append(dst, key...)
	return append(dst, value...)
}

// entryLen is the encoded size of an entry.
func entryLen(key, value []byte) int {
	return 8 + uvarintLen(uint64(len(key))) + uvarintLen(uint64(len(value))) + len(key) + len(value)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// decodeEntry decodes the entry at b[off:end]. ok is false if it does not fit.
func decodeEntry(b []byte, off, end int) (hash uint64, key, value []byte, next int, ok bool) {
	if off < 0 || end > len(b) || off+8+2 > end {
		return 0, nil, nil, 0, false
	}
	hash = binary.LittleEndian.Uint64(b[off:])
	p := off + 8
	kl, n := uvarint(b[p:end])
	if n <= 0 {
		return 0, nil, nil, 0, false
	}
	p += n
	vl, n := uvarint(b[p:end])
	if n <= 0 {
		return 0, nil, nil, 0, false
	}
	p += n
	if kl > uint64(end-p) || vl > uint64(end-p)-kl {
		return 0, nil, nil, 0, false
	}
	k := p + int(kl)
	v := k + int(vl)
	return hash, b[p:k:k], b[k:v:v], v, true
}

// uvarint is binary.Uvarint with a fast path for one-byte values.
func uvarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return binary.Uvarint(b)
}
