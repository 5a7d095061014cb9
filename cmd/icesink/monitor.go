package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"github.com/icesink/icesink/internal/membound"
	"github.com/icesink/icesink/internal/procstat"
)

// peaks are the process's memory peaks over a run.
type peaks struct {
	heap uint64 // Go heap objects, bytes
	rss  uint64 // resident set size, bytes
	// allocs and cycles are the bytes the Go heap allocated and the
	// collections it ran while the monitor ran.
	allocs, cycles uint64
	// bound is what the memory governor did (zero without one).
	bound membound.Stats
	// profileErr is why the heap profile (--memprofile) could not be
	// written, if it could not.
	profileErr error
}

// monitor samples the Go heap and the process RSS every 20 ms.
type monitor struct {
	stopc chan struct{}
	done  chan peaks
}

// startMonitor starts sampling. With heapProfile set, it writes the heap
// profile there whenever the Go heap passes the peak of its last profile
// by a tenth (at most once a second): the file ends as the profile taken
// nearest the run's peak (what the last collection found live then, and
// where it was allocated).
func startMonitor(heapProfile string) *monitor {
	m := &monitor{stopc: make(chan struct{}), done: make(chan peaks, 1)}
	go func() {
		var p peaks
		var profiled uint64
		var last time.Time
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
		metrics.Read(sample)
		allocs0, cycles0 := sample[1].Value.Uint64(), sample[2].Value.Uint64()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			p.heap = max(p.heap, sample[0].Value.Uint64())
			p.rss = max(p.rss, uint64(procstat.Read().RSS))
			if heapProfile != "" && p.profileErr == nil && p.heap > profiled+profiled/10 && time.Since(last) >= time.Second {
				p.profileErr = writeHeapProfile(heapProfile)
				profiled, last = p.heap, time.Now()
			}
			select {
			case <-m.stopc:
				p.rss = max(p.rss, uint64(procstat.Read().HWM))
				metrics.Read(sample)
				p.allocs, p.cycles = sample[1].Value.Uint64()-allocs0, sample[2].Value.Uint64()-cycles0
				m.done <- p
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *monitor) stop() peaks {
	close(m.stopc)
	return <-m.done
}

// writeHeapProfile replaces the file at path with the heap profile.
func writeHeapProfile(path string) error {
	var b bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&b, 0); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}
