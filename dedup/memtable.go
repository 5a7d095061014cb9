package dedup

import (
	"bytes"
	"cmp"
	"math/bits"
	"slices"
)

// memEntry is one key of the memory tier: 24 bytes, plus the key bytes in
// the arena and 4/0.75 bytes of slot.
type memEntry struct {
	hash   uint64
	keyOff uint32
	keyLen uint32
	file   uint32 // file ordinal | flags
	pos    uint32
}

// memtable is an open-addressing hash table (linear probing) from key to
// State, with keys stored in one byte arena. Entries are never removed,
// only overwritten: a deleted key stays as a state without a row.
type memtable struct {
	// slots hold entry index + 1 in their low shift bits (0 is empty) and
	// the rest of the bits of the entry's hash above those home takes (a
	// fingerprint): a probe passes a slot of another key without reading
	// its entry, but for one in 2^(32-shift). len is 2^shift.
	slots   []uint32
	shift   uint
	entries []memEntry
	arena   []byte
	order   []uint32 // scratch for eachSorted
	// sorted reports that order holds every entry in (hash, key) order:
	// cleared by insert and clear.
	sorted bool
	// inPlace reports that the entries themselves are in (hash, key)
	// order (sortInPlace), order[j] being the index entry j had: the slots
	// no longer find them, so only clear (or reset) may follow.
	inPlace bool
}

const maxArena = 1<<32 - 1

func (m *memtable) len() int { return len(m.entries) }

// bytes is the memory the table holds: the capacity of its slices.
func (m *memtable) bytes() int64 {
	return int64(cap(m.slots))*4 + int64(cap(m.entries))*24 + int64(cap(m.arena)) + int64(cap(m.order))*4
}

// growthBytes is how many bytes the table would add to hold one more key
// of keyLen bytes, counting a slice that has to grow (append doubles
// small slices and grows large ones by about 1.25x; we count 2x).
func (m *memtable) growthBytes(keyLen int) int64 {
	var g int64
	if len(m.entries) == cap(m.entries) {
		g += int64(max(cap(m.entries), 256)) * 28 // the entry, and its slot in the sort order of a spill
	}
	if len(m.arena)+keyLen > cap(m.arena) {
		g += int64(max(cap(m.arena), keyLen, 4096))
	}
	if (len(m.entries)+1)*4 > len(m.slots)*3 {
		g += int64(max(len(m.slots)*2, 1024)) * 4
	}
	return g
}

// home is the first slot a hash probes: bits 32 and up of the hash. The
// low bits route keys to vnodes (hash mod the vnode count), so the keys of
// one writer share them; slots taken from them would cluster (mean probes
// 1.5 with one writer, 34 with four, 58 with sixteen).
func home(hash, mask uint64) uint64 { return bits.RotateLeft64(hash, 32) & mask }

// meanProbes is the mean number of slots a lookup of a present key reads.
func (m *memtable) meanProbes() float64 {
	if len(m.entries) == 0 {
		return 0
	}
	mask := uint64(len(m.slots) - 1)
	var n uint64
	for i, s := range m.slots {
		if s != 0 {
			n += (uint64(i)-home(m.entries[m.index(i)].hash, mask))&mask + 1
		}
	}
	return float64(n) / float64(len(m.entries))
}

func (m *memtable) key(e *memEntry) []byte { return m.arena[e.keyOff : e.keyOff+e.keyLen] }

// index is the entry index held by a slot that is not empty.
func (m *memtable) index(slot int) uint32 { return m.slots[slot]&(1<<m.shift-1) - 1 }

// fingerprint is a slot's fingerprint of hash, in place: the hash's bits
// above those home takes (32 + shift and up).
func (m *memtable) fingerprint(hash uint64) uint32 {
	return uint32(hash>>(32+m.shift)) << m.shift
}

// find returns the slot index for key: either the slot holding it (found)
// or the empty slot where it would go (-1 when the table has no slots).
func (m *memtable) find(hash uint64, key []byte) (int, bool) {
	if len(m.slots) == 0 {
		return -1, false
	}
	mask := uint64(len(m.slots) - 1)
	fp, low := m.fingerprint(hash), uint32(1)<<m.shift-1
	for i := home(hash, mask); ; i = (i + 1) & mask {
		s := m.slots[i]
		if s == 0 {
			return int(i), false
		}
		if s&^low != fp {
			continue
		}
		e := &m.entries[s&low-1]
		if e.hash == hash && bytes.Equal(m.arena[e.keyOff:e.keyOff+e.keyLen], key) {
			return int(i), true
		}
	}
}

// setAt overwrites the state in a slot that find reported found.
func (m *memtable) setAt(slot int, s State) {
	e := &m.entries[m.index(slot)]
	e.file, e.pos = s.pack()
}

// insert adds a key that is not in the table at slot (as find returned
// it; -1 to look it up). It returns false when the arena is full.
func (m *memtable) insert(slot int, hash uint64, key []byte, s State) bool {
	if len(m.arena)+len(key) > maxArena {
		return false
	}
	if slot < 0 || (len(m.entries)+1)*4 > len(m.slots)*3 {
		if (len(m.entries)+1)*4 > len(m.slots)*3 {
			m.rehash(max(len(m.slots)*2, 1024))
		}
		slot, _ = m.find(hash, key)
	}
	f, p := s.pack()
	off := len(m.arena)
	m.arena = append(m.arena, key...)
	m.entries = append(m.entries, memEntry{hash: hash, keyOff: uint32(off), keyLen: uint32(len(key)), file: f, pos: p})
	m.sorted = false
	m.slots[slot] = m.fingerprint(hash) | uint32(len(m.entries))
	return true
}

func (m *memtable) rehash(n int) {
	if cap(m.slots) >= n {
		m.slots = m.slots[:n]
		clear(m.slots)
	} else {
		m.slots = make([]uint32, n)
	}
	// n is a power of two; entries stay under 3/4 of it, so an entry
	// index + 1 fits in its low bits.
	m.shift = uint(bits.TrailingZeros(uint(n)))
	mask := uint64(n - 1)
	for idx := range m.entries {
		h := m.entries[idx].hash
		i := home(h, mask)
		for m.slots[i] != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = m.fingerprint(h) | uint32(idx+1)
	}
}

// eachSorted calls fn for every entry in (hash, key) order until fn
// returns false.
func (m *memtable) eachSorted(fn func(hash uint64, key []byte, s State) bool) {
	m.sortOrder()
	for j := range m.order {
		e := m.sortedAt(j)
		if !fn(e.hash, m.key(e), unpack(e.file, e.pos)) {
			return
		}
	}
}

// sortedAt is the entry at position j of the (hash, key) order.
func (m *memtable) sortedAt(j int) *memEntry {
	if m.inPlace {
		return &m.entries[j]
	}
	return &m.entries[m.order[j]]
}

// sortInPlace moves the entries themselves into (hash, key) order, order
// keeping each one's former index (its id for the index's callers), so
// that the passes of a spill (Resolve, then the run's writing) read them
// in memory order instead of one cache miss each. The entries are bucketed
// by the top bits of their hashes (a sequential counting pass), moved once
// (cycle by cycle), and each bucket of about eight is sorted where it lies.
// The slots no longer find the entries: only clear may follow.
func (m *memtable) sortInPlace() {
	if m.inPlace {
		return
	}
	n := len(m.entries)
	ends := m.bucket()
	// Entry j becomes the one at order[j], following each cycle of the
	// permutation once.
	moved := make([]uint64, (n+63)/64)
	for j := range n {
		if moved[j>>6]&(1<<(j&63)) != 0 {
			continue
		}
		tmp := m.entries[j]
		for k := j; ; {
			moved[k>>6] |= 1 << (k & 63)
			src := int(m.order[k])
			if src == j {
				m.entries[k] = tmp
				break
			}
			m.entries[k] = m.entries[src]
			k = src
		}
	}
	// An insertion sort of each bucket, entries and order together.
	lo := 0
	for _, end := range ends {
		hi := int(end)
		for i := lo + 1; i < hi; i++ {
			for j := i; j > lo && m.compare(&m.entries[j], &m.entries[j-1]) < 0; j-- {
				m.entries[j], m.entries[j-1] = m.entries[j-1], m.entries[j]
				m.order[j], m.order[j-1] = m.order[j-1], m.order[j]
			}
		}
		lo = hi
	}
	m.sorted, m.inPlace = true, true
}

// unsort makes entries sortInPlace moved findable again (their indexes
// changed: ids given out before do not name them any more).
func (m *memtable) unsort() {
	if !m.inPlace {
		return
	}
	if len(m.slots) > 0 {
		m.rehash(len(m.slots))
	}
	m.sorted, m.inPlace = false, false
}

// compare orders entries by (hash, key).
func (m *memtable) compare(a, b *memEntry) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return bytes.Compare(m.key(a), m.key(b))
}

// bucket fills m.order with the entries' indexes bucketed by the top bits
// of their hashes, and returns each bucket's end in order. Hashes are
// uniform: a counting pass puts each entry in a bucket of about eight,
// which a sort of each bucket finishes.
func (m *memtable) bucket() []uint32 {
	n := len(m.entries)
	m.order = slices.Grow(m.order[:0], n)[:n]
	b := min(max(bits.Len(uint(n))-3, 1), 16)
	shift := 64 - b
	ends := make([]uint32, 1<<b+1)
	for i := range m.entries {
		ends[m.entries[i].hash>>shift+1]++
	}
	for i := 1; i < len(ends); i++ {
		ends[i] += ends[i-1]
	}
	for i := range m.entries {
		k := m.entries[i].hash >> shift
		m.order[ends[k]] = uint32(i)
		ends[k]++
	}
	// ends[k] is now the end of bucket k (and the start of k+1).
	return ends[:1<<b]
}

// sortOrder fills m.order with the entries' indexes in (hash, key) order.
func (m *memtable) sortOrder() {
	if m.sorted {
		return
	}
	ends := m.bucket()
	less := func(a, b uint32) int { return m.compare(&m.entries[a], &m.entries[b]) }
	lo := uint32(0)
	for _, hi := range ends {
		if hi-lo > 1 {
			slices.SortFunc(m.order[lo:hi], less)
		}
		lo = hi
	}
	m.sorted = true
}

// clear drops every entry and keeps the allocations for reuse.
func (m *memtable) clear() {
	clear(m.slots)
	m.sorted, m.inPlace = false, false
	m.entries = m.entries[:0]
	m.arena = m.arena[:0]
}

// reset drops every entry and frees the memory.
func (m *memtable) reset() { *m = memtable{} }
