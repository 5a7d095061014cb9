package spill

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/icesink/icesink/spill/bloom"
)

// Cache is a block cache shared by readers, built on ristretto. It holds
// decoded-ready data blocks (checksums verified, trailer stripped) and is
// never the source of truth: ristretto may refuse or drop any block at any
// time (its TinyLFU admission turns away many first sets by design, and sets
// are applied asynchronously), and a miss simply reads the file.
//
// # Keying
//
// A block is cached under (handle, block offset). The handle is not the
// caller's run ID: the first reader opened with a given ReaderOptions.CacheID
// gets a fresh handle from a counter that never repeats, and later readers
// with the same ID share it until EvictRun(id). So after EvictRun a run ID
// may name a new file and no reader can ever be served the old file's bytes,
// whatever ristretto still holds. The (handle, offset) pair is mapped to
// ristretto's (key hash, conflict hash) injectively.
//
// # Eviction and release
//
// Capacity is in bytes: a block costs its bytes plus ristretto's per-item
// overhead, so blocks should be large (see WriterOptions.BlockSize).
// EvictRun deletes the run's blocks (the caller, normally a Set, calls it
// when it deletes the run's file) and forgets the ID's handle. Blocks are
// immutable and garbage collected: a block that is evicted while a lookup
// holds a slice of it stays valid for that lookup. Close releases
// ristretto's goroutine; the cache must not be used afterwards.
type Cache struct {
	rc         *ristretto.Cache[[]byte, []byte]
	capacity   int64
	counters   int64
	nextHandle atomic.Uint64
	nextRunID  atomic.Uint64
	offered    atomic.Int64 // bytes offered by set
	misses     atomic.Uint64

	mu   sync.Mutex
	runs map[uint64]*cacheRun
}

type cacheRun struct {
	handle uint64
	// offsets are the run's block offsets (a reader's index, shared, read
	// only), for EvictRun.
	offsets []uint64
}

// cacheKey is a cache key in its byte form: handle, then block offset.
type cacheKey [16]byte

// NewCache returns a cache holding up to capacity bytes (> 0).
func NewCache(capacity int64) (*Cache, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("spill: cache capacity %d must be > 0", capacity)
	}
	// Ristretto wants ~10 counters per item it will hold; items are ~4 KiB
	// (the default block size).
	counters := max(capacity/(4<<10)*10, 1024)
	rc, err := ristretto.NewCache(&ristretto.Config[[]byte, []byte]{
		NumCounters: counters,
		MaxCost:     capacity,
		BufferItems: 64,
		KeyToHash:   cacheKeyToHash,
	})
	if err != nil {
		return nil, fmt.Errorf("spill: cache: %w", err)
	}
	return &Cache{rc: rc, capacity: capacity, counters: counters, runs: map[uint64]*cacheRun{}}, nil
}

// cacheKeyToHash maps (handle, offset) to ristretto's two hashes
// injectively: the conflict hash is offset+1 (never 0, which ristretto reads
// as "no conflict hash") and, for a given offset, handle -> Mix(handle×odd +
// offset) is a bijection.
func cacheKeyToHash(k []byte) (uint64, uint64) {
	h := binary.LittleEndian.Uint64(k[0:8])
	off := binary.LittleEndian.Uint64(k[8:16])
	return bloom.Mix(h*0x9e3779b97f4a7c15 + off), off + 1
}

// NewRunID returns a run ID no other NewRunID call on this cache returned:
// readers of different files that share the cache need distinct IDs, and
// sets sharing a cache take theirs from here.
func (c *Cache) NewRunID() uint64 { return c.nextRunID.Add(1) }

// acquire returns the handle for run id, creating one if the ID has none.
func (c *Cache) acquire(id uint64, offsets []uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.runs[id]; ok {
		return r.handle
	}
	h := c.nextHandle.Add(1)
	c.runs[id] = &cacheRun{handle: h, offsets: offsets}
	return h
}

// EvictRun drops the blocks of run id and forgets its handle: readers opened
// with this ID afterwards never see blocks cached before. Readers still open
// with the old handle keep working (they may re-cache their own blocks).
func (c *Cache) EvictRun(id uint64) {
	c.mu.Lock()
	r, ok := c.runs[id]
	delete(c.runs, id)
	c.mu.Unlock()
	if !ok {
		return
	}
	var k cacheKey
	binary.LittleEndian.PutUint64(k[0:], r.handle)
	for _, off := range r.offsets {
		binary.LittleEndian.PutUint64(k[8:], off)
		c.rc.Del(k[:])
	}
}

func (c *Cache) get(k *cacheKey) ([]byte, bool) { return c.rc.Get(k[:]) }

func (c *Cache) set(k *cacheKey, block []byte) {
	c.offered.Add(int64(cap(block)))
	c.rc.Set(k[:], block, int64(cap(block)))
}

// offerEvery is how often a block read from disk is offered to a full cache.
const offerEvery = 4

// shouldOffer says whether a block just missed should be offered to the
// cache. Until the cache has been offered its capacity, every block is;
// then one miss in offerEvery. Ristretto's admission counts every Get, hit
// or miss, so a block that keeps missing is still offered and admitted
// soon, while the reads of blocks touched once skip the fresh buffer and
// the set that ristretto would mostly refuse.
func (c *Cache) shouldOffer() bool {
	if c.offered.Load() < c.capacity {
		return true
	}
	return c.misses.Add(1)%offerEvery == 0
}

// Wait blocks until the sets issued so far are applied (or refused), for
// tests that need determinism.
func (c *Cache) Wait() { c.rc.Wait() }

// Capacity returns the capacity in bytes.
func (c *Cache) Capacity() int64 { return c.capacity }

// UsedBytes returns the cost held now: block bytes plus ristretto's
// per-item overhead.
func (c *Cache) UsedBytes() int64 { return c.rc.MaxCost() - c.rc.RemainingCost() }

// MemoryBytes returns UsedBytes plus an estimate of ristretto's fixed
// structures (frequency counters, set buffer): what the cache costs now.
func (c *Cache) MemoryBytes() int64 {
	const setBuf = 32 << 10 * 8 // ristretto's set channel of 32 Ki pointers
	return c.UsedBytes() + c.counters*3 + setBuf
}

// Close releases the cache.
func (c *Cache) Close() { c.rc.Close() }
