package coordinator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cespare/xxhash/v2"
)

// DefaultVnodes is the number of vnodes the key space is split into unless
// Config.Vnodes says otherwise.
const DefaultVnodes = 256

// VnodeOf returns the vnode of a key: xxhash64 of its canonical bytes modulo
// vnodes. Every writer and router of a job must use the same vnodes count.
func VnodeOf(canonicalKey []byte, vnodes int) uint32 {
	return uint32(xxhash.Sum64(canonicalKey) % uint64(vnodes))
}

// SplitVnodes splits [0, vnodes) into writers contiguous, disjoint ranges
// whose sizes differ by at most one, in ascending order. It fails when there
// are fewer vnodes than writers, since every writer must own a vnode.
func SplitVnodes(vnodes, writers int) ([]*roaring.Bitmap, error) {
	if vnodes <= 0 || writers <= 0 {
		return nil, fmt.Errorf("coordinator: split %d vnodes among %d writers: both must be positive", vnodes, writers)
	}
	if writers > vnodes {
		return nil, fmt.Errorf("coordinator: split %d vnodes among %d writers: more writers than vnodes", vnodes, writers)
	}
	out := make([]*roaring.Bitmap, writers)
	base, extra := vnodes/writers, vnodes%writers
	start := 0
	for i := range out {
		n := base
		if i < extra {
			n++
		}
		b := roaring.New()
		b.AddRange(uint64(start), uint64(start+n))
		out[i] = b
		start += n
	}
	return out, nil
}

// ParseVnodes parses a vnode set such as "0-127,200-255" or "7": comma
// separated single vnodes or inclusive ranges, each below vnodes. The set must
// not be empty.
func ParseVnodes(s string, vnodes int) (*roaring.Bitmap, error) {
	b := roaring.New()
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("coordinator: vnodes %q: bad vnode %q: %w", s, lo, err)
		}
		last := first
		if isRange {
			last, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("coordinator: vnodes %q: bad vnode %q: %w", s, hi, err)
			}
		}
		if last < first {
			return nil, fmt.Errorf("coordinator: vnodes %q: range %q is reversed", s, part)
		}
		if last >= uint64(vnodes) {
			return nil, fmt.Errorf("coordinator: vnodes %q: vnode %d is not below %d", s, last, vnodes)
		}
		b.AddRange(first, last+1)
	}
	if b.IsEmpty() {
		return nil, fmt.Errorf("coordinator: vnodes %q: empty set", s)
	}
	return b, nil
}

// FormatVnodes renders a vnode set the way ParseVnodes reads it, with
// maximal ranges: "0-127,200-255". An empty or nil set renders as "none".
func FormatVnodes(b *roaring.Bitmap) string {
	if b == nil || b.IsEmpty() {
		return "none"
	}
	var sb strings.Builder
	it := b.Iterator()
	first := true
	var lo, hi uint32
	flush := func() {
		if !first {
			sb.WriteByte(',')
		}
		first = false
		if lo == hi {
			sb.WriteString(strconv.FormatUint(uint64(lo), 10))
		} else {
			fmt.Fprintf(&sb, "%d-%d", lo, hi)
		}
	}
	lo = it.Next()
	hi = lo
	for it.HasNext() {
		v := it.Next()
		if v == hi+1 {
			hi = v
			continue
		}
		flush()
		lo, hi = v, v
	}
	flush()
	return sb.String()
}

// allVnodes returns the set [0, n).
func allVnodes(n int) *roaring.Bitmap {
	b := roaring.New()
	b.AddRange(0, uint64(n))
	return b
}
