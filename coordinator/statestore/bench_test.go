package statestore

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkCheckpoint120MB saves one checkpoint of 120 MB of pending state,
// inline (the option off) and in its own file. It reports the _metadata size
// and the heap the store holds after the checkpoint.
func BenchmarkCheckpoint120MB(b *testing.B) { benchCheckpoints(b, 120_000_000, 1) }

// BenchmarkRetained3x30MB saves three retained checkpoints of 30 MB each.
func BenchmarkRetained3x30MB(b *testing.B) { benchCheckpoints(b, 30_000_000, 3) }

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func benchCheckpoints(b *testing.B, size, n int) {
	ctx := context.Background()
	for _, inFile := range []bool{false, true} {
		name := "inline"
		if inFile {
			name = "in-file"
		}
		b.Run(name, func(b *testing.B) {
			live := randState(1, size)
			root := b.TempDir()
			b.SetBytes(int64(size * n))
			var metadataBytes int64
			var held float64
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				dir := filepath.Join(root, strconv.Itoa(i))
				heap0 := heapAlloc()
				st, err := Open(ctx, Options{Dir: dir, InFileEnabled: inFile, Retain: n})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for id := 1; id <= n; id++ {
					live[id] ^= 0xff
					if err := st.Save(ctx, uint64(id), live); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				held = float64(int64(heapAlloc())-int64(heap0)) / (1 << 20)
				fi, err := os.Stat(filepath.Join(dir, "chk-"+strconv.Itoa(n), metadataName))
				if err != nil {
					b.Fatal(err)
				}
				metadataBytes = fi.Size()
				st.Close()
				os.RemoveAll(dir)
				b.StartTimer()
			}
			b.ReportMetric(float64(metadataBytes), "metadata-B")
			b.ReportMetric(held, "store-heap-MiB")
		})
	}
}
