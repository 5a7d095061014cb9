package dedup

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"

	"github.com/icesink/icesink/spill"
)

// Options configure an Index.
type Options struct {
	// MemoryLimit is the byte budget of the index: its memory tier plus
	// what the spill runs hold in memory (block index, bloom filter, read
	// cache). When the memory tier would grow past its share, it is
	// written to disk as a sorted run and emptied. Zero means unbounded:
	// the index never spills (what today's writers do).
	MemoryLimit int64
	// CacheBytes is the spill read cache's share of MemoryLimit.
	// Default MemoryLimit/8.
	CacheBytes int64
	// SpillDir is the folder under which the index takes a private
	// subfolder for its runs. Default: the OS temp dir.
	SpillDir string
	// FS is the file system of the spill runs. Default: the OS's.
	FS spill.FS
	// FanIn is the number of runs that triggers a compaction. Default 8.
	FanIn int
	// MaxFilterBytes caps the memory the spill runs' bloom filters hold
	// (spill.SetOptions.MaxFilterBytes): without it a large index pins
	// ~1.25 bytes per key in filters. Default for a bounded index: a
	// quarter of MemoryLimit; past it only the runs' block indexes stay
	// (~0.15 bytes per key) and lookups of the largest runs read blocks.
	// -1: no cap.
	MaxFilterBytes int64
	// Merge, if set, lets Touch answer from the memory tier alone: it
	// combines a key's partial state (derived by the caller as if the key
	// were new) with the key's older state in the spill runs (found false:
	// none), when Resolve runs (at each spill, and when the caller asks).
	// It returns the key's complete state; it must not call the index.
	// Without it Touch reads the runs as Get does.
	// id is the key's ID from PutID.
	Merge func(id uint32, hash uint64, key []byte, older State, found bool, partial State) (State, error)
	// Dir, if set, is the folder of the index's runs instead of a private
	// subfolder of SpillDir: runs there outlive the index when it is
	// Released, and Open reads them again (a key index kept between runs
	// of the sink).
	Dir string
}

// Stats are counters of an Index over its lifetime.
type Stats struct {
	// Keys is the number of keys in the memory tier now.
	Keys int
	// MemoryBytes is what the index holds in memory now; PeakMemoryBytes
	// the most it held at once.
	MemoryBytes     int64
	PeakMemoryBytes int64
	// Spills is the number of runs written from the memory tier,
	// SpilledBytes their size; Compactions and RunsCompacted count merges
	// and their inputs.
	Spills        int64
	SpilledBytes  int64
	Compactions   int64
	RunsCompacted int64
	// Lookups split by where they were answered: the memory tier, a bloom
	// filter or range check (no block read), the block cache, the disk.
	// (Touch's misses that the filters cannot rule out are looked up by
	// Resolve, in order, as LookupsSorted.)
	LookupsMemory int64
	LookupsFilter int64
	LookupsCache  int64
	LookupsDisk   int64
	LookupsSorted int64
	// Resolves counts Resolve's passes over the runs.
	Resolves int64
}

// Index maps each key touched in the window to its State: a memory tier
// first, then spilled runs newest to oldest. It is not safe for
// concurrent use.
type Index struct {
	opts  Options
	mem   memtable
	set   *spill.Set // nil until the first spill
	stats Stats
	val   []byte
	// partials counts the memory tier's partial states.
	partials int
	// outside is what the caller holds for the partial states (SetOutside).
	outside int64
	// last remembers the memory-tier slot of the latest Get, so that the
	// Put that follows it does not probe again.
	last struct {
		valid bool
		hash  uint64
		slot  int
		found bool
	}
	// cacheCap is the spill block cache's capacity (0: no cache) and
	// reserve what the index keeps free for it: capacity plus ristretto's
	// fixed structures.
	cacheCap, reserve int64
}

// cacheOverhead is ristretto's fixed cost beside the cached blocks.
const cacheOverhead = 320 << 10

// New returns an empty index.
func New(opts Options) (*Index, error) {
	if opts.MemoryLimit < 0 || opts.CacheBytes < 0 {
		return nil, fmt.Errorf("dedup: negative memory limit %d or cache size %d", opts.MemoryLimit, opts.CacheBytes)
	}
	ix := &Index{opts: opts}
	if opts.MemoryLimit > 0 {
		if ix.opts.CacheBytes == 0 {
			ix.opts.CacheBytes = opts.MemoryLimit / 8
		}
		if ix.opts.CacheBytes >= 1<<20 {
			ix.cacheCap = ix.opts.CacheBytes - cacheOverhead
			ix.reserve = ix.opts.CacheBytes
		}
		if opts.MemoryLimit-ix.reserve < 64<<10 {
			return nil, fmt.Errorf("dedup: memory limit %d leaves %d bytes for the memory tier, less than 64 KiB", opts.MemoryLimit, opts.MemoryLimit-ix.reserve)
		}
	}
	return ix, nil
}

// filterCap is the spill set's MaxFilterBytes: Options.MaxFilterBytes
// (< 0: none), by default a quarter of a bounded index's budget.
func (ix *Index) filterCap() int64 {
	switch {
	case ix.opts.MemoryLimit == 0 || ix.opts.MaxFilterBytes < 0:
		return 0
	case ix.opts.MaxFilterBytes > 0:
		return ix.opts.MaxFilterBytes
	}
	return ix.opts.MemoryLimit / 4
}

// SetMaxFilterBytes changes Options.MaxFilterBytes (-1: no cap, 0: the
// default) from now on. A bulk load of random keys (a key index's
// rebuild, which looks each key up) lifts the cap while it runs, as the
// lookups of a run without its filter read blocks; it is applied again
// after, freeing the largest runs' filters.
func (ix *Index) SetMaxFilterBytes(n int64) {
	ix.opts.MaxFilterBytes = n
	if ix.set != nil {
		ix.set.SetMaxFilterBytes(ix.filterCap())
	}
}

// Open returns an index in opts.Dir holding the runs (base names, oldest
// first) that Save returned before a Release. Any run missing or damaged
// is an error, and the index is then not open.
func Open(opts Options, runs []string) (*Index, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("dedup: Open needs Options.Dir")
	}
	ix, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := ix.openSet(runs); err != nil {
		return nil, err
	}
	return ix, nil
}

// openSet opens the index's spill set: in Options.Dir (with runs) or in a
// private subfolder of SpillDir.
func (ix *Index) openSet(runs []string) error {
	so := spill.SetOptions{
		FS:        ix.opts.FS,
		CacheSize: cacheSize(ix.cacheCap),
		FanIn:     ix.opts.FanIn,
		Drop:      droppable,
	}
	so.MaxFilterBytes = ix.filterCap()
	if ix.opts.Dir != "" {
		set, err := spill.OpenSetIn(ix.opts.Dir, runs, so)
		if err != nil {
			return fmt.Errorf("dedup: opening the runs in %s: %w", ix.opts.Dir, err)
		}
		ix.set = set
		return nil
	}
	dir := ix.opts.SpillDir
	if dir == "" {
		dir = os.TempDir()
	}
	set, err := spill.OpenSet(dir, so)
	if err != nil {
		return fmt.Errorf("dedup: opening the spill folder under %s: %w", dir, err)
	}
	ix.set = set
	return nil
}

// Save writes the memory tier as the newest run, makes the runs durable,
// and returns their base names, oldest first, for Open. The index stays
// usable. It needs Options.Dir.
func (ix *Index) Save() ([]string, error) {
	if ix.opts.Dir == "" {
		return nil, fmt.Errorf("dedup: Save needs Options.Dir")
	}
	if ix.mem.len() > 0 || ix.set == nil {
		if err := ix.spill(); err != nil {
			return nil, err
		}
	}
	if err := ix.set.Sync(); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	return ix.set.Runs(), nil
}

// Release closes the index like Close but keeps its runs in Options.Dir.
func (ix *Index) Release() error { return ix.closeSet(true) }

// Get returns the state of key in the window; ok is false when the key was
// not touched since the last Reset.
func (ix *Index) Get(hash uint64, key []byte) (State, bool, error) {
	slot, found := ix.mem.find(hash, key)
	ix.last.valid, ix.last.hash, ix.last.slot, ix.last.found = true, hash, slot, found
	if found {
		ix.stats.LookupsMemory++
		e := &ix.mem.entries[ix.mem.index(slot)]
		return unpack(e.file, e.pos), true, nil
	}
	if ix.set == nil {
		ix.stats.LookupsMemory++
		return State{}, false, nil
	}
	v, ok, src, err := ix.set.Get(hash, key)
	if err != nil {
		return State{}, false, fmt.Errorf("dedup: looking up a spilled key: %w", err)
	}
	switch src {
	case spill.SourceCache:
		ix.stats.LookupsCache++
	case spill.SourceDisk:
		ix.stats.LookupsDisk++
	default:
		ix.stats.LookupsFilter++
	}
	if !ok {
		return State{}, false, nil
	}
	s, err := decodeValue(v)
	if err != nil {
		return State{}, false, fmt.Errorf("dedup: run in %s: %w", ix.set.Dir(), err)
	}
	return s, true, nil
}

// Put records the state of key. It may first spill the memory tier to
// keep the index under its budget.
func (ix *Index) Put(hash uint64, key []byte, s State) error {
	_, err := ix.PutID(hash, key, s)
	return err
}

// PutID is Put, and returns the key's ID in the memory tier: what
// Options.Merge is given for it, the same until the tier is next spilled
// or reset (which resolve every partial state first).
func (ix *Index) PutID(hash uint64, key []byte, s State) (uint32, error) {
	slot, found := -1, false
	if ix.last.valid && ix.last.hash == hash && ix.last.slot >= 0 {
		slot, found = ix.last.slot, ix.last.found
		if found {
			e := &ix.mem.entries[ix.mem.index(slot)]
			if !bytes.Equal(ix.mem.key(e), key) {
				slot, found = ix.mem.find(hash, key)
			}
		} else if ix.mem.slots[slot] != 0 {
			slot, found = ix.mem.find(hash, key)
		}
	} else {
		slot, found = ix.mem.find(hash, key)
	}
	ix.last.valid = false
	if found {
		if was := ix.mem.entries[ix.mem.index(slot)].file&flagPartial != 0; was != s.Partial {
			if s.Partial {
				ix.partials++
			} else {
				ix.partials--
			}
		}
		ix.mem.setAt(slot, s)
		return ix.mem.index(slot), nil
	}
	if ix.opts.MemoryLimit > 0 && ix.mem.len() >= minSpillKeys && ix.overBudget(len(key)) {
		if err := ix.spill(); err != nil {
			return 0, err
		}
		slot = -1
	}
	if !ix.mem.insert(slot, hash, key, s) {
		if ix.opts.MemoryLimit == 0 {
			return 0, fmt.Errorf("dedup: memory tier holds %d key bytes, the most it can", len(ix.mem.arena))
		}
		if err := ix.spill(); err != nil {
			return 0, err
		}
		ix.mem.insert(-1, hash, key, s)
	}
	if s.Partial {
		ix.partials++
	}
	if b := ix.MemoryBytes(); b > ix.stats.PeakMemoryBytes {
		ix.stats.PeakMemoryBytes = b
	}
	return uint32(ix.mem.len() - 1), nil
}

// minSpillKeys is the fewest keys a spill writes: a run's own index and
// filter cost more than a smaller tier frees, so a budget whose runs
// leave no room for more (below its floor) is exceeded rather than
// thrashed (spilling at every Put).
const minSpillKeys = 1024

// overBudget reports whether adding a key of keyLen bytes to the memory
// tier could take the index past its limit: the tier's growth, the runs'
// in-memory index and filters, and the room kept for the block cache.
func (ix *Index) overBudget(keyLen int) bool {
	n := ix.mem.bytes() + ix.mem.growthBytes(keyLen) + ix.reserve + ix.outside
	if ix.set != nil {
		n += ix.set.MemoryBytes()
	}
	return n > ix.opts.MemoryLimit
}

// Ingest adds the states each yields, in (hash, key) order and newer than
// everything the index holds. A bounded index writes them as one sorted
// run (its memory tier spilled first, so that the run is the newest),
// sequentially, without passing them through the memory tier: what a key
// index takes from a committed window. n estimates the count (it sizes
// the run's filter). An unbounded index puts them in memory.
func (ix *Index) Ingest(n int, each func(fn func(hash uint64, key []byte, s State) bool) error) error {
	if ix.opts.MemoryLimit == 0 {
		var perr error
		err := each(func(h uint64, k []byte, s State) bool {
			perr = ix.Put(h, k, s)
			return perr == nil
		})
		return errors.Join(err, perr)
	}
	if ix.mem.len() > 0 || ix.set == nil {
		if err := ix.spill(); err != nil {
			return err
		}
	}
	ix.last.valid = false
	var eerr error
	entries := func(yield func(spill.Entry) bool) {
		eerr = each(func(h uint64, k []byte, s State) bool {
			ix.val = appendValue(ix.val[:0], s)
			return yield(spill.Entry{Hash: h, Key: k, Value: ix.val})
		})
	}
	_, err := ix.set.Flush(n, entries)
	if eerr != nil {
		return eerr
	}
	if err != nil {
		return fmt.Errorf("dedup: ingesting a sorted run: %w", err)
	}
	return nil
}

// spill writes the memory tier as the newest run and empties it.
func (ix *Index) spill() error {
	// The tier is emptied after: its entries may move into their order.
	ix.mem.sortInPlace()
	if err := ix.Resolve(); err != nil {
		ix.mem.unsort()
		return err
	}
	if ix.set == nil {
		if err := ix.openSet(nil); err != nil {
			return err
		}
	}
	entries := func(yield func(spill.Entry) bool) {
		ix.mem.eachSorted(func(hash uint64, key []byte, s State) bool {
			ix.val = appendValue(ix.val[:0], s)
			return yield(spill.Entry{Hash: hash, Key: key, Value: ix.val})
		})
	}
	_, err := ix.set.Flush(ix.mem.len(), entries)
	if err != nil && !errors.Is(err, spill.ErrCompaction) {
		return fmt.Errorf("dedup: spilling %d keys: %w", ix.mem.len(), err)
	}
	ix.mem.clear()
	if ix.overBudget(0) {
		// The new run's index and filter took room the tier's allocation
		// held: give the allocation back.
		ix.mem.reset()
	}
	if err != nil {
		return fmt.Errorf("dedup: compacting spill runs: %w", err)
	}
	return nil
}

func cacheSize(c int64) int64 {
	if c <= 0 {
		return -1 // no cache
	}
	return c
}

// droppable reports whether a spilled state says nothing an absent key
// would not: no row in the window and no equality delete written.
func droppable(v []byte) bool {
	s, err := decodeValue(v)
	return err == nil && !s.HasRow && !s.EqDeleted
}

// MemoryBytes returns the bytes the index holds in memory now.
func (ix *Index) MemoryBytes() int64 {
	n := ix.mem.bytes()
	if ix.set != nil {
		n += ix.set.MemoryBytes()
	}
	return n
}

// Stats returns the index's counters.
func (ix *Index) Stats() Stats {
	s := ix.stats
	s.Keys = ix.mem.len()
	s.MemoryBytes = ix.MemoryBytes()
	if ix.set != nil {
		ss := ix.set.Stats()
		s.Spills = ss.Flushes
		s.SpilledBytes = ss.FlushedBytes
		s.Compactions = ss.Compactions
		s.RunsCompacted = ss.CompactedRuns
	}
	return s
}

// Reset forgets every key: the window was committed or aborted. Spill runs
// are deleted; the memory tier keeps its allocation for the next window.
func (ix *Index) Reset() error {
	ix.mem.clear()
	ix.partials = 0
	ix.last.valid = false
	if ix.set != nil {
		if err := ix.set.Reset(); err != nil {
			return fmt.Errorf("dedup: deleting spill runs: %w", err)
		}
	}
	return nil
}

// Close releases the index's memory and deletes its spill folder.
func (ix *Index) Close() error { return ix.closeSet(false) }

// closeSet frees the memory tier and closes the spill set, keeping its
// runs (Release) or removing its folder.
func (ix *Index) closeSet(keep bool) error {
	ix.mem.reset()
	ix.partials = 0
	ix.last.valid = false
	if ix.set == nil {
		return nil
	}
	set := ix.set
	ix.set = nil
	if keep {
		if err := set.Release(); err != nil {
			return fmt.Errorf("dedup: releasing the runs in %s: %w", ix.opts.Dir, err)
		}
		return nil
	}
	if err := set.Close(); err != nil {
		return fmt.Errorf("dedup: removing the spill folder: %w", err)
	}
	return nil
}

// Touch returns the state of key as far as the memory tier knows it,
// without reading the spill runs: found is false when the tier does not
// hold the key, and the state is then zero, with Partial set when the runs
// may hold an older state of the key (their hash ranges and bloom filters
// cannot rule it out). The caller derives the key's next state from it as
// if the key were new and Puts it; Resolve later merges a partial state
// with the runs' through Options.Merge. Without Options.Merge it is Get.
func (ix *Index) Touch(hash uint64, key []byte) (State, bool, error) {
	if ix.opts.Merge == nil {
		return ix.Get(hash, key)
	}
	slot, found := ix.mem.find(hash, key)
	ix.last.valid, ix.last.hash, ix.last.slot, ix.last.found = true, hash, slot, found
	switch {
	case found:
		ix.stats.LookupsMemory++
		e := &ix.mem.entries[ix.mem.index(slot)]
		return unpack(e.file, e.pos), true, nil
	case ix.set == nil:
		ix.stats.LookupsMemory++
		return State{}, false, nil
	case !ix.set.MayContain(hash):
		ix.stats.LookupsFilter++
		return State{}, false, nil
	}
	return State{Partial: true}, false, nil
}

// Resolve completes every partial state of the memory tier: the keys are
// looked up in the spill runs in (hash, key) order, each run read forward
// once (spill.SetCursor), and Options.Merge combines each key's older
// state with its partial one. Spilling resolves first; a caller resolves
// before Each, and whenever it wants Merge's effects to have happened.
func (ix *Index) Resolve() error {
	if ix.partials == 0 {
		return nil
	}
	if ix.opts.Merge == nil || ix.set == nil {
		return fmt.Errorf("dedup: %d partial states without a merge function or spill runs", ix.partials)
	}
	ix.stats.Resolves++
	ix.last.valid = false
	m := &ix.mem
	// The tier's own order (a spill writes in it next; merges change
	// states, not keys).
	m.sortOrder()
	cur := ix.set.NewCursor()
	for j, i := range m.order {
		e := m.sortedAt(j)
		if e.file&flagPartial == 0 {
			continue
		}
		key := m.key(e)
		v, found, _, err := cur.Get(e.hash, key)
		if err != nil {
			return fmt.Errorf("dedup: resolving a key against the spill runs: %w", err)
		}
		ix.stats.LookupsSorted++
		var old State
		if found {
			if old, err = decodeValue(v); err != nil {
				return fmt.Errorf("dedup: run in %s: %w", ix.set.Dir(), err)
			}
		}
		s, err := ix.opts.Merge(i, e.hash, key, old, found, unpack(e.file, e.pos))
		if err != nil {
			return err
		}
		s.Partial, s.EqDeletedIfRow = false, false
		e.file, e.pos = s.pack()
		ix.partials--
	}
	return nil
}

// SetMemoryLimit changes a bounded index's Options.MemoryLimit from now
// on (the block cache keeps the size New gave it, and the limit never
// goes below the room the cache and a minimal memory tier need). When the
// index holds more than the new limit, its memory tier spills at once.
// An unbounded index stays so: n <= 0, or an index created without a
// limit, is an error.
func (ix *Index) SetMemoryLimit(n int64) error {
	if ix.opts.MemoryLimit == 0 || n <= 0 {
		return fmt.Errorf("dedup: memory limit %d: only a bounded index takes a new (positive) limit", n)
	}
	ix.opts.MemoryLimit = max(n, ix.reserve+64<<10)
	if ix.set != nil {
		ix.set.SetMaxFilterBytes(ix.filterCap())
	}
	if ix.mem.len() > 0 && ix.overBudget(0) {
		if err := ix.spill(); err != nil {
			return err
		}
		ix.mem.reset() // give the tier's allocation back
	}
	return nil
}

// SetOutside tells the index how many bytes its caller holds beside the
// partial states (what Resolve's merges will settle): they count against
// the index's budget, so that it spills, and resolves, in time.
func (ix *Index) SetOutside(n int64) { ix.outside = n }

// Each calls fn for every key with a row or an equality delete recorded
// (states with neither say nothing and are skipped), in (hash, key) order,
// until fn returns false: the memory tier merged with the spill runs,
// which are read sequentially. The index must not change during the call.
func (ix *Index) Each(fn func(hash uint64, key []byte, s State) bool) error {
	if ix.partials > 0 {
		return fmt.Errorf("dedup: Each over %d partial states: Resolve first", ix.partials)
	}
	m := &ix.mem
	m.sortOrder()
	i, stop := 0, false
	// emitMem yields the memory tier's entries before (hash, key) (all of
	// them when last); it reports whether the tier holds (hash, key).
	emitMem := func(hash uint64, key []byte, last bool) (same bool) {
		for ; i < len(m.order) && !stop; i++ {
			e := m.sortedAt(i)
			c := 0
			if !last {
				if c = cmp.Compare(e.hash, hash); c == 0 {
					c = bytes.Compare(m.key(e), key)
				}
				if c > 0 {
					return false
				}
			}
			if s := unpack(e.file, e.pos); (s.HasRow || s.EqDeleted) && !fn(e.hash, m.key(e), s) {
				stop = true
			}
			if c == 0 && !last {
				i++
				return true // the tier's state is the newer
			}
		}
		return false
	}
	var err error
	if ix.set != nil {
		serr := ix.set.Scan(func(hash uint64, key, v []byte) bool {
			if emitMem(hash, key, false) || stop {
				return !stop
			}
			s, derr := decodeValue(v)
			if derr != nil {
				err, stop = derr, true
				return false
			}
			if !fn(hash, key, s) {
				stop = true
			}
			return !stop
		})
		if serr != nil {
			return fmt.Errorf("dedup: reading spill runs: %w", serr)
		}
	}
	if err != nil {
		return err
	}
	emitMem(0, nil, true)
	return nil
}
