package dedup

import "fmt"

// Options configure an Index.
type Options struct {
	// MemoryLimit is the byte budget of the memory tier. Zero means
	// unbounded: the index never spills (what today's writers do).
	MemoryLimit int64
}

// Stats are counters of an Index over its lifetime.
type Stats struct {
	// Keys is the number of keys in the memory tier now.
	Keys int
	// PeakMemoryBytes is the most memory the index held at once.
	PeakMemoryBytes int64
	// LookupsMemory counts lookups answered by the memory tier (hit or a
	// definite miss with nothing spilled).
	LookupsMemory int64
}

// Index maps each key touched in the window to its State. It is not safe
// for concurrent use.
type Index struct {
	opts  Options
	mem   memtable
	stats Stats
}

// New returns an empty index.
func New(opts Options) (*Index, error) {
	if opts.MemoryLimit < 0 {
		return nil, fmt.Errorf("dedup: negative memory limit %d", opts.MemoryLimit)
	}
	return &Index{opts: opts}, nil
}

// Get returns the state of key in the window; ok is false when the key was
// not touched since the last Reset.
func (ix *Index) Get(hash uint64, key []byte) (s State, ok bool, err error) {
	ix.stats.LookupsMemory++
	s, ok = ix.mem.get(hash, key)
	return s, ok, nil
}

// Put records the state of key.
func (ix *Index) Put(hash uint64, key []byte, s State) error {
	if !ix.mem.put(hash, key, s) {
		return fmt.Errorf("dedup: memory tier holds %d key bytes, the most it can", len(ix.mem.arena))
	}
	if b := ix.mem.bytes(); b > ix.stats.PeakMemoryBytes {
		ix.stats.PeakMemoryBytes = b
	}
	return nil
}

// MemoryBytes returns the bytes the index holds in memory now.
func (ix *Index) MemoryBytes() int64 { return ix.mem.bytes() }

// Stats returns the index's counters.
func (ix *Index) Stats() Stats {
	s := ix.stats
	s.Keys = ix.mem.len()
	return s
}

// Reset forgets every key: the window was committed or aborted.
func (ix *Index) Reset() error {
	ix.mem.reset()
	return nil
}

// Close releases the index's resources.
func (ix *Index) Close() error { return ix.Reset() }
