// Package spill owns sorted run files on local disk: their format, bloom
// filters, the block cache, compaction and checksums. It knows nothing of
// Iceberg: an entry is a caller-hashed key and an opaque value.
//
// Package dedup keeps the newest entries in memory; when that tier crosses
// its share of the writer's memory budget it sorts its entries by (hash, key)
// and hands them to Set.Flush as a new run, then frees them. A lookup asks
// the memory tier first, then Set.Get, which consults the runs newest to
// oldest, skipping those whose hash range or bloom filter rules the key out.
// Lookups compare full key bytes, so two keys with the same hash never merge.
//
// The pieces, shaped after Pebble's sstable/bloom/cache split:
//
//   - format.go draws the run file layout (FormatV1): data blocks with
//     restart points, a bloom filter block, an index block and a footer, each
//     block with a type byte and a CRC32C. Bad bytes are reported as a
//     *CorruptionError matching ErrCorruption, naming the file and offset.
//   - Writer writes one run from entries in strictly increasing order;
//     Reader opens one (footer, index and filter in memory), looks keys up
//     and iterates.
//   - Cache is a ristretto block cache keyed by (run, block offset).
//   - Set manages one writer's runs in a private, locked folder: flushes,
//     lookups, compaction, reset and the sweep of folders left by crashed
//     processes.
//   - FS, Writable and Readable put file I/O behind small interfaces: OSFS,
//     MemFS, and FaultFS for injecting full disks, failed opens and corrupt
//     bytes in tests.
//
// # Usage
//
//	set, err := spill.OpenSet(os.TempDir(), spill.SetOptions{
//		CacheSize: 8 << 20,
//		Drop:      func(v []byte) bool { return isTombstone(v) },
//	})
//	if err != nil { ... }
//	defer set.Close()
//
//	// The memory tier is full: sort it and spill it.
//	sort.Slice(mem, func(i, j int) bool { return less(mem[i], mem[j]) }) // by (Hash, Key)
//	if _, err := set.Flush(len(mem), slices.Values(mem)); err != nil {
//		if !errors.Is(err, spill.ErrCompaction) { ... } // the run was not added
//	}
//	mem = mem[:0]
//
//	// Lookups: memory tier first, then the runs.
//	v, found, src, err := set.Get(xxhash.Sum64(key), key) // v valid until the next call
//
//	// The window committed or aborted: forget everything spilled.
//	err = set.Reset()
//
//	// Accounting: readers' indexes and filters plus the set's own cache.
//	used := set.MemoryBytes()
//
// A Set is used by one goroutine (its writer); Stats and MemoryBytes may be
// called from any. Values returned by Get alias internal buffers.
package spill
