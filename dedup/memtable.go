package dedup

import (
	"bytes"
	"cmp"
	"slices"
)

// memEntry is one key of the memory tier: 24 bytes plus the key bytes in
// the arena and 4/0.75 bytes of slot.
type memEntry struct {
	hash   uint64
	keyOff uint32
	keyLen uint32
	file   uint32 // file ordinal | flags
	pos    uint32
}

// memtable is an open-addressing hash table from key to State with keys
// stored in one byte arena. Entries are never removed, only overwritten,
// so a deleted key stays as a state without a row (a tombstone).
type memtable struct {
	slots   []uint32 // entry index + 1; 0 is empty
	entries []memEntry
	arena   []byte
}

const maxArena = 1<<32 - 1

func (m *memtable) len() int { return len(m.entries) }

// bytes is the memory the table holds: the capacity of its slices.
func (m *memtable) bytes() int64 {
	return int64(cap(m.slots))*4 + int64(cap(m.entries))*24 + int64(cap(m.arena))
}

// growthBytes is how many bytes the table would add to hold one more key
// of keyLen bytes, counting a slice that has to grow.
func (m *memtable) growthBytes(keyLen int) int64 {
	var g int64
	if len(m.entries) == cap(m.entries) {
		g += int64(max(cap(m.entries), 256)) * 24
	}
	if len(m.arena)+keyLen > cap(m.arena) {
		g += int64(max(cap(m.arena), keyLen, 4096))
	}
	if (len(m.entries)+1)*4 > len(m.slots)*3 {
		g += int64(max(len(m.slots)*2, 1024)) * 4
	}
	return g
}

// find returns the slot index for key: either the slot holding it (found)
// or the empty slot where it would go.
func (m *memtable) find(hash uint64, key []byte) (int, bool) {
	if len(m.slots) == 0 {
		return -1, false
	}
	mask := uint64(len(m.slots) - 1)
	for i := hash & mask; ; i = (i + 1) & mask {
		s := m.slots[i]
		if s == 0 {
			return int(i), false
		}
		e := &m.entries[s-1]
		if e.hash == hash && bytes.Equal(m.arena[e.keyOff:e.keyOff+e.keyLen], key) {
			return int(i), true
		}
	}
}

func (m *memtable) get(hash uint64, key []byte) (State, bool) {
	i, ok := m.find(hash, key)
	if !ok {
		return State{}, false
	}
	e := &m.entries[m.slots[i]-1]
	return unpack(e.file, e.pos), true
}

// put sets the state of key. It returns false when the arena is full.
func (m *memtable) put(hash uint64, key []byte, s State) bool {
	f, p := s.pack()
	i, ok := m.find(hash, key)
	if ok {
		e := &m.entries[m.slots[i]-1]
		e.file, e.pos = f, p
		return true
	}
	if len(m.arena)+len(key) > maxArena {
		return false
	}
	if (len(m.entries)+1)*4 > len(m.slots)*3 {
		m.rehash(max(len(m.slots)*2, 1024))
		i, _ = m.find(hash, key)
	}
	off := len(m.arena)
	m.arena = append(m.arena, key...)
	m.entries = append(m.entries, memEntry{hash: hash, keyOff: uint32(off), keyLen: uint32(len(key)), file: f, pos: p})
	m.slots[i] = uint32(len(m.entries))
	return true
}

func (m *memtable) rehash(n int) {
	m.slots = make([]uint32, n)
	mask := uint64(n - 1)
	for idx := range m.entries {
		i := m.entries[idx].hash & mask
		for m.slots[i] != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = uint32(idx + 1)
	}
}

// sorted calls fn for every entry in (hash, key) order.
func (m *memtable) sorted(fn func(hash uint64, key []byte, s State) error) error {
	order := make([]uint32, len(m.entries))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int {
		ea, eb := &m.entries[a], &m.entries[b]
		if c := cmp.Compare(ea.hash, eb.hash); c != 0 {
			return c
		}
		return bytes.Compare(m.arena[ea.keyOff:ea.keyOff+ea.keyLen], m.arena[eb.keyOff:eb.keyOff+eb.keyLen])
	})
	for _, i := range order {
		e := &m.entries[i]
		if err := fn(e.hash, m.arena[e.keyOff:e.keyOff+e.keyLen], unpack(e.file, e.pos)); err != nil {
			return err
		}
	}
	return nil
}

// reset drops every entry and frees the memory.
func (m *memtable) reset() { *m = memtable{} }
