package deltawriter_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"

	_ "github.com/icesink/icesink/deltawriter" // registers the zstd codec
)

// TestZstdEncodersOutliveGC: the zstd codec Parquet pages go through
// round-trips, and reuses its encoders across garbage collections instead
// of building new ones (arrow-go's own codec, whose sync.Pool each
// collection empties, allocates a new encoder after every one).
func TestZstdEncodersOutliveGC(t *testing.T) {
	c, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte("an icesink data page, "), 40000)
	out := c.EncodeLevel(nil, src, compress.DefaultCompressionLevel)
	if got := c.Decode(nil, out); !bytes.Equal(got, src) {
		t.Fatalf("round trip: %d bytes back of %d", len(got), len(src))
	}
	dst := make([]byte, c.CompressBound(int64(len(src))))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 5 {
		runtime.GC()
		c.EncodeLevel(dst, src, compress.DefaultCompressionLevel)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("5 pages, each after a collection, allocated %d KiB: encoders are built again", n>>10)
	}
}
