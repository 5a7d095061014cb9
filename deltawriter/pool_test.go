package deltawriter

import (
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// TestBufferPoolReuses: a freed buffer comes back for the next request
// of about its size, zeroed and 64-byte aligned; small buffers are not
// kept, and the pool keeps at most its max, dropping the oldest.
func TestBufferPoolReuses(t *testing.T) {
	p := newBufferPool(1 << 20)
	b := p.Allocate(100 << 10)
	if len(b) != 100<<10 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64 != 0 {
		t.Fatalf("Allocate(100 KiB): len %d, address %p", len(b), unsafe.SliceData(b))
	}
	for i := range b {
		b[i] = 0xAB
	}
	p.Free(b)
	if got := p.idleBytes(); got != int64(cap(b)) {
		t.Fatalf("idle after Free: %d, want %d", got, cap(b))
	}
	c := p.Allocate(90 << 10)
	if unsafe.SliceData(c) != unsafe.SliceData(b) {
		t.Fatal("a buffer of about the freed one's size was allocated anew")
	}
	for i, v := range c[:cap(c)] {
		if v != 0 {
			t.Fatalf("reused buffer holds %#x at %d: not zeroed", v, i)
		}
	}
	if got := p.idleBytes(); got != 0 {
		t.Fatalf("idle after reuse: %d", got)
	}
	// Not reused for a request under half its size: that would hold
	// twice the memory the builder accounts.
	p.Free(c)
	if d := p.Allocate(40 << 10); unsafe.SliceData(d) == unsafe.SliceData(c) {
		t.Fatal("a 40 KiB request took a 100 KiB buffer")
	}
	// Small buffers go to the garbage collector.
	p.Free(make([]byte, 1024))
	// The oldest make room: five 300 KiB buffers in a 1 MiB pool.
	var bufs [][]byte
	for range 5 {
		bufs = append(bufs, p.Allocate(300<<10))
	}
	for _, b := range bufs {
		p.Free(b)
	}
	if got := p.idleBytes(); got > 1<<20 {
		t.Fatalf("pool keeps %d bytes, max 1 MiB", got)
	}
	if d := p.Allocate(300 << 10); unsafe.SliceData(d) != unsafe.SliceData(bufs[4]) && unsafe.SliceData(d) != unsafe.SliceData(bufs[3]) && unsafe.SliceData(d) != unsafe.SliceData(bufs[2]) {
		t.Fatal("the pool kept an old buffer over the newest ones")
	}
	p.setMax(0)
	if got := p.idleBytes(); got != 0 {
		t.Fatalf("idle after setMax(0): %d", got)
	}
}

// TestBufferPoolBuilders: Arrow builders on the pool build the same
// arrays batch after batch while reusing the released batches' buffers.
func TestBufferPoolBuilders(t *testing.T) {
	p := newBufferPool(8 << 20)
	bld := array.NewRecordBuilder(p, arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.BinaryTypes.String},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil))
	defer bld.Release()
	missed := 0
	for batch := range 20 {
		before := p.idleBytes()
		for i := range 8192 {
			bld.Field(0).(*array.StringBuilder).Append("file-path-of-some-length-" + string(rune('a'+batch)))
			if i%7 == 0 {
				bld.Field(1).AppendNull()
			} else {
				bld.Field(1).(*array.Int64Builder).Append(int64(batch*8192 + i))
			}
		}
		rec := bld.NewRecordBatch()
		if batch > 1 && p.idleBytes() >= before && before > 0 {
			missed++
		}
		s := rec.Column(0).(*array.String)
		n := rec.Column(1).(*array.Int64)
		for i := range 8192 {
			if want := "file-path-of-some-length-" + string(rune('a'+batch)); s.Value(i) != want {
				t.Fatalf("batch %d row %d: %q, want %q", batch, i, s.Value(i), want)
			}
			if i%7 == 0 {
				if n.IsValid(i) {
					t.Fatalf("batch %d row %d: not null", batch, i)
				}
			} else if n.Value(i) != int64(batch*8192+i) {
				t.Fatalf("batch %d row %d: %d", batch, i, n.Value(i))
			}
		}
		rec.Release()
	}
	if p.idleBytes() == 0 {
		t.Fatal("released batches gave nothing back to the pool")
	}
	if missed > 0 {
		t.Fatalf("%d batches took no buffer from the pool", missed)
	}
}
