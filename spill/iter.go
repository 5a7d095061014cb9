package spill

import (
	"bytes"
	"fmt"
)

// iterReadAhead is how many bytes of whole blocks an iterator reads at once.
const iterReadAhead = 64 << 10

// Iter walks a run's entries in (hash, key) order, reading the file
// sequentially (bypassing the cache, so a compaction does not flush it). It
// checks every block's checksum, that entries are in strictly increasing
// order and that their count matches the footer. Not safe for concurrent use.
//
//	it := r.NewIter()
//	for it.Next() {
//		use(it.Hash(), it.Key(), it.Value())
//	}
//	if err := it.Err(); err != nil { ... }
type Iter struct {
	r   *Reader
	err error

	next int   // next block to decode
	c    chunk // blocks as read from the file

	block []byte // current block's entry region
	pos   int

	n      uint64
	hash   uint64
	keyBuf []byte
	key    []byte
	value  []byte
}

// NewIter returns an iterator positioned before the first entry.
func (r *Reader) NewIter() *Iter {
	it := &Iter{r: r}
	if r.closed {
		it.err = fmt.Errorf("spill: iterate run %s: %w", r.name, ErrClosed)
	}
	return it
}

// Next advances to the next entry and reports whether there is one. At the
// end or on error it returns false; see Err.
func (it *Iter) Next() bool {
	if it.err != nil {
		return false
	}
	if it.r.closed {
		it.err = fmt.Errorf("spill: iterate run %s: %w", it.r.name, ErrClosed)
		return false
	}
	for it.pos >= len(it.block) {
		if it.block != nil && it.hash != it.r.lastHash[it.next-1] {
			it.err = corruptf(it.r.name, int64(it.r.offs[it.next-1]), "data block %d ends at hash %x, index says %x", it.next-1, it.hash, it.r.lastHash[it.next-1])
			return false
		}
		if it.next >= len(it.r.lastHash) {
			if it.n != it.r.ft.entries {
				it.err = corruptf(it.r.name, int64(it.r.ft.index.off), "run has %d entries, footer says %d", it.n, it.r.ft.entries)
			}
			it.block, it.key, it.value = nil, nil, nil
			return false
		}
		if err := it.loadBlock(); err != nil {
			it.err = err
			return false
		}
	}
	h, k, v, next, ok := decodeEntry(it.block, it.pos, len(it.block))
	if !ok {
		it.err = corruptf(it.r.name, int64(it.r.offs[it.next-1])+int64(it.pos), "malformed entry in data block %d", it.next-1)
		return false
	}
	if it.n > 0 && (h < it.hash || h == it.hash && bytes.Compare(k, it.key) <= 0) {
		it.err = corruptf(it.r.name, int64(it.r.offs[it.next-1])+int64(it.pos), "entry %d out of order", it.n)
		return false
	}
	if h < it.r.ft.smallest || h > it.r.lastHash[it.next-1] {
		it.err = corruptf(it.r.name, int64(it.r.offs[it.next-1])+int64(it.pos), "entry %d hash %x outside its block's range", it.n, h)
		return false
	}
	it.hash, it.key, it.value, it.pos = h, k, v, next
	it.n++
	return true
}

// loadBlock makes block it.next current, reading ahead when needed.
func (it *Iter) loadBlock() error {
	r := it.r
	i := it.next
	if !it.c.has(i) {
		// The previous key must survive the read for the order check.
		it.keyBuf = append(it.keyBuf[:0], it.key...)
		it.key = it.keyBuf
	}
	b, _, err := it.c.block(r, i)
	if err != nil {
		return err
	}
	end, _, ok := blockLayout(b)
	if !ok {
		return corruptf(r.name, int64(r.offs[i]), "data block %d has a malformed restart array", i)
	}
	it.block = b[:end]
	it.pos = 0
	it.next++
	return nil
}

// Hash returns the current entry's hash.
func (it *Iter) Hash() uint64 { return it.hash }

// Key returns the current entry's key, valid until the next call to Next.
func (it *Iter) Key() []byte { return it.key }

// Value returns the current entry's value, valid until the next call to
// Next.
func (it *Iter) Value() []byte { return it.value }

// Err returns the error that stopped the iteration, if any.
func (it *Iter) Err() error { return it.err }

// Close releases the iterator's buffer and returns Err.
func (it *Iter) Close() error {
	it.c.buf, it.block, it.key, it.value = nil, nil, nil, nil
	if it.err == nil {
		it.err = fmt.Errorf("spill: iterate run %s: %w", it.r.name, ErrClosed)
		return nil
	}
	return it.err
}
