package deltawriter

import (
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bufferPool is the memory.Allocator of a writer's Arrow builders: it
// keeps the large buffers the encoder frees (a batch's columns, released
// once encoded) for the builders' next batch, up to max bytes, instead
// of leaving them to the garbage collector. A window allocates its
// batches' size over again every batch (gigabytes over a long window):
// under the soft memory limit of a bounded writer that garbage was most
// of what made the collector run.
//
// Buffers below minPooled bytes are memory.GoAllocator's. Pooled sizes
// are rounded up to a class (an eighth of a power of two: at most 12.5%
// more). A freed buffer is zeroed as it enters the pool, so that a buffer
// comes out as a fresh one would, and a reader that kept a freed buffer
// sees zeros, not another batch's values.
type bufferPool struct {
	max  int64              // most bytes kept
	heap memory.GoAllocator // buffers under minPooled

	mu   sync.Mutex
	free [][]byte // oldest first
	idle int64    // bytes in free
}

// minPooled is the smallest buffer the pool keeps: larger Go allocations
// are page-aligned, which gives Arrow its 64-byte alignment.
const minPooled = 32 << 10

var _ memory.Allocator = (*bufferPool)(nil)

func newBufferPool(max int64) *bufferPool {
	return &bufferPool{max: max}
}

// poolClass is the size a buffer of n bytes is allocated with.
func poolClass(n int) int {
	step := 1 << max(bits.Len(uint(n-1))-3, 0)
	return (n + step - 1) &^ (step - 1)
}

// Allocate returns a zeroed buffer of size bytes, aligned to 64 bytes:
// the smallest kept buffer that holds size and is less than twice that,
// else a new one.
func (p *bufferPool) Allocate(size int) []byte {
	if size < minPooled {
		return p.heap.Allocate(size)
	}
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if c := cap(b); c >= size && c < 2*size && (best < 0 || c < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free = slices.Delete(p.free, best, best+1)
		p.idle -= int64(cap(b))
		p.mu.Unlock()
		return b[:size]
	}
	p.mu.Unlock()
	b := make([]byte, poolClass(size))
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64 != 0 {
		return p.heap.Allocate(size) // not expected of a large allocation; never pooled
	}
	return b[:size]
}

// Reallocate returns a buffer of size bytes holding b's bytes, b itself
// when its class has room.
func (p *bufferPool) Reallocate(size int, b []byte) []byte {
	if cap(b) >= size {
		return b[:size]
	}
	nb := p.Allocate(size)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free takes a buffer back: into the pool if it is one of the pool's
// classes (the oldest kept ones make room for it), else to the garbage
// collector.
func (p *bufferPool) Free(b []byte) {
	c := cap(b)
	if c < minPooled || poolClass(c) != c || int64(c) > p.max {
		return
	}
	b = b[:c]
	clear(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, b)
	p.idle += int64(c)
	p.trim()
}

// trim drops the oldest kept buffers while the pool is over max.
func (p *bufferPool) trim() {
	n := 0
	for p.idle > p.max {
		p.idle -= int64(cap(p.free[n]))
		p.free[n] = nil
		n++
	}
	p.free = slices.Delete(p.free, 0, n)
}

// setMax makes max the most bytes the pool keeps, dropping what it
// keeps over that.
func (p *bufferPool) setMax(max int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.max = max
	p.trim()
}

// drain drops every kept buffer (the writer's window ended: its files
// are closed and their batches encoded).
func (p *bufferPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.free)
	p.free, p.idle = p.free[:0], 0
}

// idleBytes is what the pool holds for the next batches.
func (p *bufferPool) idleBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle
}
