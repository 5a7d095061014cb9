// Command figures measures the state store's _metadata size and heap, inline
// versus in-file, in the two scenarios of Flink's coordinator-state-in-file
// prototype: one checkpoint of 120 MB of pending state, and three retained
// checkpoints of 30 MB each. It prints a Markdown table.
//
//	go run ./coordinator/statestore/internal/figures
//
// Heap is runtime.MemStats.HeapAlloc after a forced GC; it includes the
// coordinator's own live state (one copy, held by this program, as the
// coordinator holds it) plus whatever the store retains.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/icesink/icesink/coordinator/statestore"
)

const mib = 1 << 20

func main() {
	dir := flag.String("dir", "", "scratch directory (default: a new temporary directory)")
	pending := flag.Int("pending", 120_000_000, "bytes of pending state in the first scenario")
	size := flag.Int("retained-size", 30_000_000, "bytes of each retained checkpoint in the second scenario")
	retain := flag.Int("retain", 3, "retained checkpoints in the second scenario")
	flag.Parse()
	if err := run(*dir, *pending, *size, *retain); err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
}

type result struct {
	metadata, stateFile int64   // bytes on disk of the newest checkpoint
	heap, base          float64 // MiB after GC, with and without the store
	alloc               float64 // MiB allocated by the Checkpoint calls
	inMemory            float64 // MiB the store reports holding
	save, restore       time.Duration
}

func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / mib
}

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// measure writes n checkpoints of size bytes, mutating the live state
// between them as a coordinator's state changes, and retains all of them.
func measure(ctx context.Context, root string, inFile bool, size, n int) (result, error) {
	var r result
	dir, err := os.MkdirTemp(root, "store-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	live := make([]byte, size) // the coordinator's current state
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(live)
	r.base = heapMiB()

	st, err := statestore.Open(ctx, statestore.Options{Dir: dir, InFileEnabled: inFile, Retain: n})
	if err != nil {
		return r, err
	}
	defer st.Close()
	a0, t0 := totalAlloc(), time.Now()
	for id := 1; id <= n; id++ {
		live[id] ^= 0xff
		if err := st.Save(ctx, uint64(id), live); err != nil {
			return r, err
		}
	}
	r.save = time.Since(t0) / time.Duration(n)
	r.alloc = float64(totalAlloc()-a0) / mib
	r.heap = heapMiB()
	r.inMemory = float64(st.InMemoryBytes()) / mib

	chk := filepath.Join(dir, fmt.Sprintf("chk-%d", n))
	if fi, err := os.Stat(filepath.Join(chk, "_metadata")); err == nil {
		r.metadata = fi.Size()
	}
	if fi, err := os.Stat(filepath.Join(chk, "_state")); err == nil {
		r.stateFile = fi.Size()
	}

	t0 = time.Now()
	rs := st.NewRestorer()
	seq, err := rs.RestoreLatest(ctx)
	if err != nil {
		return r, err
	}
	res := <-rs.Results()
	r.restore = time.Since(t0)
	if res.Err != nil || res.Seq != seq || len(res.State) != size {
		return r, fmt.Errorf("restore: %v", res.Err)
	}
	runtime.KeepAlive(live)
	return r, nil
}

func run(root string, pending, size, retain int) error {
	ctx := context.Background()
	if root == "" {
		d, err := os.MkdirTemp("", "statestore-figures-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		root = d
	}
	fmt.Printf("Go %s, %s/%s, %d CPUs; heap = HeapAlloc after GC, including the coordinator's one live copy of its state\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Println("| scenario | mode | `_metadata` | state file | heap before store | heap with store | held by store | allocated by Save | Save | async restore |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, sc := range []struct {
		name    string
		size, n int
	}{
		{fmt.Sprintf("%.1f MB pending, 1 checkpoint", float64(pending)/1e6), pending, 1},
		{fmt.Sprintf("%d retained x %.1f MB", retain, float64(size)/1e6), size, retain},
	} {
		for _, inFile := range []bool{false, true} {
			r, err := measure(ctx, root, inFile, sc.size, sc.n)
			if err != nil {
				return err
			}
			mode := "inline (V1, option off)"
			if inFile {
				mode = "in-file (V2)"
			}
			fmt.Printf("| %s | %s | %s | %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %v | %v |\n",
				sc.name, mode, bytesString(r.metadata), bytesString(r.stateFile), r.base, r.heap,
				r.inMemory, r.alloc, r.save.Round(time.Millisecond), r.restore.Round(time.Millisecond))
		}
	}
	return nil
}

func bytesString(n int64) string {
	switch {
	case n == 0:
		return "-"
	case n < 10_000:
		return fmt.Sprintf("%d B", n)
	default:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
}
