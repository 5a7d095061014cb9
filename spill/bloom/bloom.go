// Package bloom is a cache-line-blocked Bloom filter over 64-bit hashes, the
// filter block of spill's run files.
//
// The caller hands in a hash it already has (spill's keys arrive with their
// xxhash64), so the filter never hashes key bytes again. Each hash selects one
// 64-byte line and sets k bits inside it: a lookup costs one cache miss,
// however large the filter. That is the layout of LevelDB's and Pebble's
// filters, with the line chosen from the high half of the (remixed) hash and
// the bits from the low half.
//
// Why not github.com/bits-and-blooms/bloom/v3: it rehashes every input with
// murmur3 (four 64-bit hashes per key) where we already hold a good hash,
// scatters k probes over the whole bit array (k cache misses per lookup on a
// filter of many MiB), and its serialized form belongs to that library's
// release history, while ours is part of a durable run format.
//
// # Layout (durable: spill.FormatV1 depends on it)
//
//	+----------------------------+-------------+----------------------+
//	| lines: n × 64 bytes        | k (1 byte)  | n (uint32 LE)        |
//	+----------------------------+-------------+----------------------+
//
// For a hash h the filter computes x = Mix(h) and picks the line
// (hi32(x) × n) >> 32. The k bit positions inside the line are successive
// 9-bit fields of y = Mix(x XOR 0x9e3779b97f4a7c15), low bits first; after
// every 7 probes y = Mix(y) supplies 7 more. Bit b of a line lives in byte
// b/8 under mask 1<<(b%8). Mix is the murmur3 64-bit finalizer, a bijection,
// so the caller may pass hashes whose low or high bits are skewed (for
// example hashes routed to one writer by some of their bits).
//
// # False-positive rates
//
// Measured with 1,000,000 random hashes (TestFalsePositiveTable); k is
// bitsPerKey×0.69 rounded down, at least 1:
//
//	bits/key   k   false positives
//	   4       2       15.6%
//	   6       4        5.9%
//	   8       5        2.4%
//	  10       6        0.98%
//	  12       8        0.41%
//	  16      11        0.10%
//	  20      13        0.04%
//
// A classic (unblocked) filter with 10 bits/key gives about 0.8%; the
// blocked layout pays ~0.2 points for one cache miss per lookup.
package bloom

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	// LineBytes is the size of one filter line: one CPU cache line.
	LineBytes = 64
	lineBits  = LineBytes * 8
	// TrailerLen is the number of bytes after the lines: k and the line count.
	TrailerLen = 5
	maxProbes  = 30
	// seed2 derives the in-line bit positions from the same hash; any odd
	// constant would do, this one is part of the layout.
	seed2         = 0x9e3779b97f4a7c15
	probesPerWord = 7 // 9-bit positions taken from one 64-bit word
)

// ErrInvalid is returned by Decode for bytes that are not a filter.
var ErrInvalid = errors.New("bloom: invalid filter")

// Mix is the murmur3 64-bit finalizer. It is a bijection that spreads every
// input bit over the whole output; the filter applies it to each hash.
func Mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Probes returns the number of bits set per key for bitsPerKey.
func Probes(bitsPerKey int) int {
	k := bitsPerKey * 69 / 100
	if k < 1 {
		k = 1
	}
	if k > maxProbes {
		k = maxProbes
	}
	return k
}

// NumLines returns the number of lines for n keys at bitsPerKey (at least 1).
func NumLines(n, bitsPerKey int) int {
	if n < 0 {
		n = 0
	}
	lines := (n*bitsPerKey + lineBits - 1) / lineBits
	if lines < 1 {
		lines = 1
	}
	return lines
}

// EncodedLen is the size of an encoded filter sized for n keys.
func EncodedLen(n, bitsPerKey int) int {
	return NumLines(n, bitsPerKey)*LineBytes + TrailerLen
}

// Writer builds one filter. If the number of keys is known up front, bits are
// set as keys arrive and the writer holds only the final filter; otherwise it
// buffers the hashes (8 bytes each) until Finish, which sizes the filter
// exactly. A writer given more keys than it was sized for stays correct (no
// false negatives), only its false-positive rate grows.
type Writer struct {
	bitsPerKey int
	k          int
	lines      []byte // sized up front; nil if buffering
	hashes     []uint64
	n          int
}

// NewWriter returns a writer for bitsPerKey (values below 1 mean 10). If
// expected > 0 the filter is sized for that many keys up front.
func NewWriter(bitsPerKey, expected int) *Writer {
	if bitsPerKey < 1 {
		bitsPerKey = 10
	}
	w := &Writer{bitsPerKey: bitsPerKey, k: Probes(bitsPerKey)}
	if expected > 0 {
		w.lines = newLines(NumLines(expected, bitsPerKey))
	}
	return w
}

// Add adds a hash. Adding the same hash twice is harmless.
func (w *Writer) Add(h uint64) {
	w.n++
	if w.lines == nil {
		w.hashes = append(w.hashes, h)
		return
	}
	set(w.lines, w.k, h)
}

// Len returns the number of Add calls so far.
func (w *Writer) Len() int { return w.n }

// MemoryBytes returns the bytes the writer holds.
func (w *Writer) MemoryBytes() int64 {
	return int64(cap(w.lines) + 8*cap(w.hashes))
}

// Finish returns the encoded filter. The bytes are the writer's own buffer
// (no copy of a possibly large filter); the writer must not be used
// afterwards.
func (w *Writer) Finish() []byte {
	lines := w.lines
	if lines == nil {
		lines = newLines(NumLines(len(w.hashes), w.bitsPerKey))
		for _, h := range w.hashes {
			set(lines, w.k, h)
		}
		w.hashes = nil
	}
	n := len(lines) / LineBytes
	lines = append(lines, byte(w.k))
	lines = binary.LittleEndian.AppendUint32(lines, uint32(n))
	w.lines = nil
	return lines
}

// newLines allocates n zeroed lines with room for the trailer.
func newLines(n int) []byte { return make([]byte, n*LineBytes, n*LineBytes+TrailerLen) }

func set(lines []byte, k int, h uint64) {
	x := Mix(h)
	n := uint64(len(lines) / LineBytes)
	line := lines[(((x>>32)*n)>>32)*LineBytes:][:LineBytes]
	y := Mix(x ^ seed2)
	for i := 0; i < k; i++ {
		if i > 0 && i%probesPerWord == 0 {
			y = Mix(y)
		}
		b := y % lineBits
		line[b/8] |= 1 << (b % 8)
		y >>= 9
	}
}

// Filter is a decoded, read-only filter. It aliases the bytes it was decoded
// from.
type Filter struct {
	lines  []byte
	nLines uint64
	k      int
}

// Decode checks b's trailer and returns the filter it holds. The filter
// aliases b.
func Decode(b []byte) (Filter, error) {
	if len(b) < TrailerLen+LineBytes {
		return Filter{}, fmt.Errorf("%w: %d bytes", ErrInvalid, len(b))
	}
	t := b[len(b)-TrailerLen:]
	k := int(t[0])
	n := binary.LittleEndian.Uint32(t[1:])
	if k < 1 || k > maxProbes {
		return Filter{}, fmt.Errorf("%w: %d probes", ErrInvalid, k)
	}
	if n == 0 || uint64(n)*LineBytes != uint64(len(b)-TrailerLen) {
		return Filter{}, fmt.Errorf("%w: %d lines in %d bytes", ErrInvalid, n, len(b))
	}
	return Filter{lines: b[:len(b)-TrailerLen], nLines: uint64(n), k: k}, nil
}

// MayContain reports whether h may have been added. A false answer is
// certain; a true one is wrong at the rate in the package doc.
func (f Filter) MayContain(h uint64) bool {
	if f.nLines == 0 {
		return true // zero Filter: no information
	}
	x := Mix(h)
	line := f.lines[(((x>>32)*f.nLines)>>32)*LineBytes:][:LineBytes]
	y := Mix(x ^ seed2)
	for i := 0; i < f.k; i++ {
		if i > 0 && i%probesPerWord == 0 {
			y = Mix(y)
		}
		b := y % lineBits
		if line[b/8]&(1<<(b%8)) == 0 {
			return false
		}
		y >>= 9
	}
	return true
}

// Size returns the encoded size of the filter in bytes.
func (f Filter) Size() int {
	if f.nLines == 0 {
		return 0
	}
	return len(f.lines) + TrailerLen
}
