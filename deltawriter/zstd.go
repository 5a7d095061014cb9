package deltawriter

import (
	"runtime"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// zstdCodec is arrow-go's zstd codec with encoders that survive garbage
// collections. arrow-go keeps its page encoders in a sync.Pool, which
// every collection empties; under a writer's soft memory limit the
// runtime collects often, and each page then built a new encoder (its
// match tables and an 8 MiB history: 288 MB allocated per million rows of
// a 32 MiB writer). Here each level keeps up to GOMAXPROCS idle encoders
// for good, and their window is 1 MiB, a data page's default size, so
// each holds a few MiB. Decoding and streams stay arrow-go's.
type zstdCodec struct {
	compress.Codec
	idle [zstd.SpeedBestCompression + 1]chan *zstd.Encoder
}

// zstdWindow is the encoders' window: a page compresses as one block of
// at most this history (larger pages lose only matches farther apart).
const zstdWindow = 1 << 20

func init() {
	// arrow-go's registry is its package state, set at init; ours
	// replaces its zstd entry before any writer runs.
	base, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		return
	}
	c := &zstdCodec{Codec: base}
	for i := range c.idle {
		c.idle[i] = make(chan *zstd.Encoder, runtime.GOMAXPROCS(0))
	}
	compress.RegisterCodec(compress.Codecs.Zstd, c)
}

// Encode compresses src at the default level.
func (c *zstdCodec) Encode(dst, src []byte) []byte {
	return c.EncodeLevel(dst, src, compress.DefaultCompressionLevel)
}

// EncodeLevel compresses src at level (a zstd level; the default is
// zstd's SpeedDefault, as in arrow-go).
func (c *zstdCodec) EncodeLevel(dst, src []byte, level int) []byte {
	l := zstd.EncoderLevelFromZstd(level)
	if level == compress.DefaultCompressionLevel || l < zstd.SpeedFastest || l > zstd.SpeedBestCompression {
		l = zstd.SpeedDefault
	}
	var enc *zstd.Encoder
	select {
	case enc = <-c.idle[l]:
	default:
		var err error
		enc, err = zstd.NewWriter(nil, zstd.WithZeroFrames(true), zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(1),
			zstd.WithAllLitEntropyCompression(true), zstd.WithWindowSize(zstdWindow), zstd.WithLowerEncoderMem(true))
		if err != nil {
			return c.Codec.EncodeLevel(dst, src, level) // not reached: the options are valid
		}
	}
	out := enc.EncodeAll(src, dst[:0])
	select {
	case c.idle[l] <- enc:
	default:
	}
	return out
}
