package bench

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/icesink/icesink/internal/procstat"
)

// Sample is one point of a run's memory-over-time series.
type Sample struct {
	// T is the time since the run's timed phase began, in seconds.
	T float64 `json:"t"`
	// Changes is the number of rows handed to the scenario so far.
	Changes int64 `json:"changes"`
	// RSS is the process's resident set size in bytes (0 where unknown).
	RSS int64 `json:"rss"`
	// Heap is the Go heap's object bytes, live and not yet swept
	// (runtime/metrics /memory/classes/heap/objects:bytes).
	Heap int64 `json:"heap"`
	// Accounted is the writer's accounted bytes at the last batch
	// (writer scenarios only).
	Accounted int64 `json:"accounted"`
}

// progressCell is what the scenario publishes for the sampler: written by
// the scenario's goroutine, read by the sampler's.
type progressCell struct {
	changes   atomic.Int64
	accounted atomic.Int64
}

// sampler records the process's memory every interval until stopped.
type sampler struct {
	interval  time.Duration
	cell      *progressCell
	start     time.Time
	hwmReset  bool
	startFile int64
	heap      []metrics.Sample
	stop      chan struct{}
	done      sync.WaitGroup

	mu      sync.Mutex
	samples []Sample
}

const heapMetric = "/memory/classes/heap/objects:bytes"

// settle collects garbage and returns freed memory to the OS, so that a
// run starts from what the process really holds.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}

// startSampler resets the kernel's peak-RSS mark (where Linux allows it)
// and starts sampling.
func startSampler(interval time.Duration, cell *progressCell) *sampler {
	s := &sampler{
		interval: interval,
		cell:     cell,
		heap:     []metrics.Sample{{Name: heapMetric}},
		stop:     make(chan struct{}),
	}
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+),
	// so the peak read at the end belongs to this run alone.
	s.hwmReset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	s.startFile = procstat.Read().File
	s.start = time.Now()
	s.take()
	s.done.Add(1)
	go s.loop()
	return s
}

func (s *sampler) loop() {
	defer s.done.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.take()
		}
	}
}

func (s *sampler) take() {
	rss := procstat.Read().RSS
	metrics.Read(s.heap)
	var heap int64
	if v := s.heap[0].Value; v.Kind() == metrics.KindUint64 {
		heap = int64(v.Uint64())
	}
	smp := Sample{
		T:         time.Since(s.start).Seconds(),
		Changes:   s.cell.changes.Load(),
		RSS:       rss,
		Heap:      heap,
		Accounted: s.cell.accounted.Load(),
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// memoryFigures are a run's memory peaks.
type memoryFigures struct {
	startRSS  int64
	startFile int64 // file-backed part of startRSS (the binary's pages)
	peakRSS   int64
	peakHeap  int64
	peakAcc   int64
	exactPeak bool // peakRSS is the kernel's VmHWM for this run
	series    []Sample
}

// finish stops sampling and returns the peaks and the series.
func (s *sampler) finish() memoryFigures {
	s.take()
	close(s.stop)
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := memoryFigures{startFile: s.startFile}
	for i, smp := range s.samples {
		if i == 0 {
			m.startRSS = smp.RSS
		}
		m.peakRSS = max(m.peakRSS, smp.RSS)
		m.peakHeap = max(m.peakHeap, smp.Heap)
		m.peakAcc = max(m.peakAcc, smp.Accounted)
	}
	if s.hwmReset {
		if hwm := procstat.Read().HWM; hwm > 0 {
			m.peakRSS = max(m.peakRSS, hwm)
			m.exactPeak = true
		}
	}
	m.series = downsample(s.samples, maxSeries)
	return m
}

// maxSeries bounds the points kept of a run's series.
const maxSeries = 600

// downsample keeps at most n points of ss, each the per-field maximum of
// its bucket, so that peaks survive.
func downsample(ss []Sample, n int) []Sample {
	if len(ss) <= n {
		return append([]Sample(nil), ss...)
	}
	out := make([]Sample, 0, n)
	per := (len(ss) + n - 1) / n
	for i := 0; i < len(ss); i += per {
		b := ss[i:min(i+per, len(ss))]
		m := b[len(b)-1]
		for _, x := range b {
			m.RSS = max(m.RSS, x.RSS)
			m.Heap = max(m.Heap, x.Heap)
			m.Accounted = max(m.Accounted, x.Accounted)
		}
		out = append(out, m)
	}
	return out
}
