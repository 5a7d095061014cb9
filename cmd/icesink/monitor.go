package main

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
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
			p.rss = max(p.rss, rss())
			select {
			case <-m.stopc:
				p.rss = max(p.rss, hwm())
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

// rss reads VmRSS from /proc/self/status (0 where there is none).
func rss() uint64 { return procStatus("VmRSS:") }

// hwm reads the process's peak RSS, VmHWM.
func hwm() uint64 { return procStatus("VmHWM:") }

func procStatus(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}
