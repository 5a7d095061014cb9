package spill

import (
	"fmt"
)

// Cursor answers lookups in one run through a chunk of whole blocks read
// at once (up to iterReadAhead bytes, bypassing the cache): keys asked in
// increasing (hash, key) order cost one sequential pass over the blocks
// they touch rather than a read per key (asked otherwise, the answers
// stay right and chunks are read again). Not safe for concurrent use; the
// run must stay open while the cursor is used.
type Cursor struct {
	r *Reader
	c chunk
}

// NewCursor returns a cursor before the run's first key.
func (r *Reader) NewCursor() *Cursor { return &Cursor{r: r} }

// mayContain reports whether the run may hold hash: its range and filter
// do not rule it out.
func (r *Reader) mayContain(hash uint64) bool {
	return r.ft.entries > 0 && hash >= r.ft.smallest && hash <= r.ft.largest && (r.noFilter || r.filter.MayContain(hash))
}

// Get looks up key, whose hash is hash. The value aliases the cursor's
// buffer (valid until the next Get). src is SourceFilter when the range or
// the filter answered, SourceDisk when a chunk was read, else SourceCache.
func (c *Cursor) Get(hash uint64, key []byte) (value []byte, found bool, src Source, err error) {
	r := c.r
	if r.closed {
		return nil, false, SourceNone, fmt.Errorf("spill: cursor on run %s: %w", r.name, ErrClosed)
	}
	if !r.mayContain(hash) {
		return nil, false, SourceFilter, nil
	}
	return r.find(hash, key, c)
}

// dataBlock is the cursor's blockSource: from its chunk.
func (c *Cursor) dataBlock(i int) ([]byte, Source, error) {
	b, read, err := c.c.block(c.r, i)
	if read {
		return b, SourceDisk, err
	}
	return b, SourceCache, err
}

// MemoryBytes is what the cursor holds: its chunk buffer.
func (c *Cursor) MemoryBytes() int64 { return int64(cap(c.c.buf)) }

// SetCursor answers lookups in every run of a Set, newest first, of keys
// asked in increasing (hash, key) order (a key asked before the previous
// one is refused: it would cost a read per run): one Cursor per run. The
// set must not flush, compact or reset while it is used.
type SetCursor struct {
	s        *Set
	cs       []*Cursor // parallel to s.runs
	lastHash uint64
	lastKey  []byte
	started  bool
}

// NewCursor returns a cursor over the set's runs as they are now.
func (s *Set) NewCursor() *SetCursor {
	c := &SetCursor{s: s, cs: make([]*Cursor, len(s.runs))}
	for i, rn := range s.runs {
		c.cs[i] = rn.r.NewCursor()
	}
	return c
}

// Get returns the value of the newest run that holds (hash, key), as
// Set.Get does, for keys asked in increasing order. The value is valid
// until the next Get.
func (c *SetCursor) Get(hash uint64, key []byte) (value []byte, found bool, src Source, err error) {
	if c.s.closed.Load() {
		return nil, false, SourceNone, c.s.errClosed("cursor get")
	}
	if c.started && (hash < c.lastHash || hash == c.lastHash && string(key) < string(c.lastKey)) {
		return nil, false, SourceNone, fmt.Errorf("spill: cursor on %s: key asked out of order", c.s.dir)
	}
	c.started, c.lastHash, c.lastKey = true, hash, append(c.lastKey[:0], key...)
	for i := len(c.cs) - 1; i >= 0 && !found && err == nil; i-- {
		var ps Source
		value, found, ps, err = c.cs[i].Get(hash, key)
		src = max(src, ps)
	}
	c.s.c.lookups.Add(1)
	c.s.c.bySource[src].Add(1)
	if !found {
		value = nil
	}
	return value, found, src, err
}

// MayContain reports whether some run of the set may hold hash: the runs'
// hash ranges and bloom filters (a run whose filter was dropped always
// may) do not rule it out. No file is read.
func (s *Set) MayContain(hash uint64) bool {
	for _, rn := range s.runs {
		if rn.r.mayContain(hash) {
			return true
		}
	}
	return false
}
