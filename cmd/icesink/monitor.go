package main

import (
	"runtime/metrics"
	"time"

	"github.com/icesink/icesink/internal/procstat"
)

// peaks are the process's memory peaks over a run.
type peaks struct {
	heap uint64 // Go heap objects, bytes
	rss  uint64 // resident set size, bytes
}

// monitor samples the Go heap and the process RSS every 20 ms.
type monitor struct {
	stopc chan struct{}
	done  chan peaks
}

func startMonitor() *monitor {
	m := &monitor{stopc: make(chan struct{}), done: make(chan peaks, 1)}
	go func() {
		var p peaks
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			p.heap = max(p.heap, sample[0].Value.Uint64())
			p.rss = max(p.rss, uint64(procstat.Read().RSS))
			select {
			case <-m.stopc:
				p.rss = max(p.rss, uint64(procstat.Read().HWM))
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
