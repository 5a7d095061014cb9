package spill

// WriterOptions configure a Writer. The zero value gives the defaults.
type WriterOptions struct {
	// BlockSize is the target size in bytes of a data block: a block is
	// finished before an entry would take it past this size. Blocks are the
	// unit of disk reads and of the cache (which costs ~180 B per block on top
	// of its bytes), and the index holds 16 B per block. Default 4 KiB, as
	// Pebble's: a point lookup reads, checksums and caches a quarter of what
	// a 16 KiB block costs, for 0.12 B more index per 40-byte entry.
	BlockSize int
	// RestartInterval is the number of entries between restart points in a
	// data block; a lookup scans at most this many entries. Default 16.
	RestartInterval int
	// BloomBitsPerKey sizes the filter: ~0.98% false positives at 10 (see
	// package bloom for the table). Default 10.
	BloomBitsPerKey int
	// ExpectedEntries, if > 0, sizes the filter for that many entries up
	// front, so the writer sets filter bits as entries arrive and holds only
	// the final filter (1.25 B per expected entry at 10 bits). If 0, the
	// writer buffers 8 B per entry until Finish and then sizes the filter
	// exactly. More entries than expected stay correct, with a higher
	// false-positive rate. Default 0.
	ExpectedEntries int
	// FileName names the run in errors. Default "run".
	FileName string
	// FormatVersion is the layout to write. Default FormatLatest.
	FormatVersion FormatVersion
}

func (o WriterOptions) ensureDefaults() WriterOptions {
	if o.BlockSize <= 0 {
		o.BlockSize = 4 << 10
	}
	if o.RestartInterval <= 0 {
		o.RestartInterval = 16
	}
	if o.BloomBitsPerKey <= 0 {
		o.BloomBitsPerKey = 10
	}
	if o.ExpectedEntries < 0 {
		o.ExpectedEntries = 0
	}
	if o.FileName == "" {
		o.FileName = "run"
	}
	if o.FormatVersion == 0 {
		o.FormatVersion = FormatLatest
	}
	return o
}

// ReaderOptions configure a Reader. The zero value gives the defaults.
type ReaderOptions struct {
	// Cache holds data blocks across lookups. Default nil: every lookup
	// that passes the filter reads its block from the file.
	Cache *Cache
	// CacheID names the run in the cache: blocks are cached under (CacheID,
	// block offset). Two readers with the same ID must read the same bytes;
	// call Cache.EvictRun(id) before reusing an ID for different bytes.
	// Default 0.
	CacheID uint64
	// FileName names the run in errors. Default "run".
	FileName string
}

func (o ReaderOptions) ensureDefaults() ReaderOptions {
	if o.FileName == "" {
		o.FileName = "run"
	}
	return o
}

// CompactionPolicy chooses which runs a Set merges when it has too many.
type CompactionPolicy int

const (
	// CompactTiered merges the newest runs whose sizes are comparable: it
	// takes the newest run and keeps adding the next older one while that
	// one has at most as many entries as those taken so far, and at least
	// enough runs to get back to FanIn. A run is rewritten O(log n) times
	// over n flushes instead of O(n). Opts.Drop applies only when the merge
	// reaches the oldest run.
	CompactTiered CompactionPolicy = iota
	// CompactAll merges every run into one each time: the fewest runs for
	// lookups and Drop always applies, at the price of rewriting all spilled
	// entries every FanIn flushes.
	CompactAll
)

// SetOptions configure a Set. The zero value gives the defaults.
type SetOptions struct {
	// FS is the file system. Default OSFS{}.
	FS FS
	// Cache is a block cache shared with other sets. Its memory is then the
	// owner's to account: Set.MemoryBytes leaves it out. Default nil: the set
	// makes its own cache of CacheSize bytes (counted by MemoryBytes) and
	// closes it on Close.
	Cache *Cache
	// CacheSize is the capacity in bytes of the set's own cache; < 0 means
	// no cache. Ignored if Cache is set. Default 8 MiB.
	CacheSize int64
	// FanIn is the number of runs that triggers a compaction: when a flush
	// leaves more than FanIn runs, runs are merged until at most FanIn
	// remain (with CompactAll, into one). Default 8, minimum 2.
	FanIn int
	// Compaction picks the runs to merge. Default CompactTiered.
	Compaction CompactionPolicy
	// Drop, if set, is asked about every entry that a compaction writes into
	// a run that will be the oldest one (a merge that includes the oldest
	// run): entries for which it returns true are dropped, as they shadow
	// nothing older. The value must not be retained. Default nil (keep all).
	Drop func(value []byte) bool
	// Writer configures the run files. ExpectedEntries and FileName are set
	// per run by the set. Default: WriterOptions defaults.
	Writer WriterOptions
	// MaxFilterBytes caps the memory the runs' bloom filters hold (about
	// 1.25 bytes per entry): past it the largest runs' filters are dropped
	// (Reader.DropFilter), so a set of many entries keeps only its block
	// indexes in memory (about 0.15 bytes per entry). 0: no cap.
	MaxFilterBytes int64
}

func (o SetOptions) ensureDefaults() SetOptions {
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.CacheSize == 0 {
		o.CacheSize = 8 << 20
	}
	if o.FanIn <= 0 {
		o.FanIn = 8
	}
	if o.FanIn < 2 {
		o.FanIn = 2
	}
	o.Writer = o.Writer.ensureDefaults()
	return o
}
