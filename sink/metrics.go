package sink

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/dedup"
)

// runMetrics is what a run exposes to Prometheus (Config.Registerer): the
// writers' counters as each last published them (after every batch), and
// the commits of the in-process coordinator. All names start icesink_.
type runMetrics struct {
	budget  int64
	writers []*writer
	// commit side (in-process coordinator only)
	commitSeconds prometheus.Histogram
	lastCommit    atomic.Int64 // unix nanoseconds of the last commit
	commits       atomic.Int64
	line          atomic.Int64 // input line the last commit covers
	compactions   atomic.Int64

	descs map[string]*prometheus.Desc
}

func newRunMetrics(budget int64) *runMetrics {
	m := &runMetrics{budget: budget, descs: map[string]*prometheus.Desc{}}
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "icesink_commit_duration_seconds",
		Help:    "Time to commit one epoch to the catalog (retries included), in seconds.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	})
	desc := func(name, help string, labels ...string) {
		m.descs[name] = prometheus.NewDesc(name, help, labels, nil)
	}
	desc("icesink_changes_total", "Changes a writer took.", "writer")
	desc("icesink_data_rows_total", "Rows a writer wrote to data files.", "writer")
	desc("icesink_deletes_total", "Deletes a writer wrote, by kind (position, equality).", "writer", "kind")
	desc("icesink_old_rows_deleted_total", "Rows of earlier commits a writer found in its key index and deleted by position.", "writer")
	desc("icesink_buffered_bytes", "Bytes of a writer's uncommitted window (its files and buffers).", "writer")
	desc("icesink_memory_accounted_bytes", "Memory a writer's accounting saw at its last check.", "writer")
	desc("icesink_memory_budget_bytes", "A writer's memory budget (0: unbounded).")
	desc("icesink_spilled_bytes_total", "Bytes a writer's indexes wrote as sorted runs, by index (window, key).", "writer", "index")
	desc("icesink_index_lookups_total", "Lookups in a writer's indexes, by index (window, key) and by where they were answered (memory, filter, cache, disk).", "writer", "index", "tier")
	desc("icesink_local_flushes_total", "Times a writer flushed its files or delete buffers early to stay within its budget.", "writer")
	desc("icesink_commits_total", "Epochs this run committed.")
	desc("icesink_last_commit_timestamp_seconds", "Unix time of this run's last commit (time() minus it: the time since).")
	desc("icesink_committed_input_line", "The input line the last commit covers.")
	desc("icesink_compactions_total", "Compaction rounds that rewrote files (run --maintain).")
	return m
}

// Describe implements prometheus.Collector.
func (m *runMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
	m.commitSeconds.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *runMetrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.CounterValue, v, labels...)
	}
	gauge := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.GaugeValue, v, labels...)
	}
	for i, w := range m.writers {
		st := w.pub.Load()
		if st == nil {
			continue
		}
		id := strconv.Itoa(i)
		counter("icesink_changes_total", float64(st.Changes), id)
		counter("icesink_data_rows_total", float64(st.DataRows), id)
		counter("icesink_deletes_total", float64(st.PositionDeletes), id, "position")
		counter("icesink_deletes_total", float64(st.EqualityDeletes), id, "equality")
		counter("icesink_old_rows_deleted_total", float64(st.OldRowsDeleted), id)
		gauge("icesink_buffered_bytes", float64(w.pubBuffered.Load()), id)
		gauge("icesink_memory_accounted_bytes", float64(st.AccountedBytes), id)
		counter("icesink_local_flushes_total", float64(st.LocalFlushes), id)
		for _, ix := range []struct {
			name string
			s    dedup.Stats
		}{{"window", st.Index}, {"key", st.TableIndex}} {
			counter("icesink_spilled_bytes_total", float64(ix.s.SpilledBytes), id, ix.name)
			counter("icesink_index_lookups_total", float64(ix.s.LookupsMemory), id, ix.name, "memory")
			counter("icesink_index_lookups_total", float64(ix.s.LookupsFilter), id, ix.name, "filter")
			counter("icesink_index_lookups_total", float64(ix.s.LookupsCache), id, ix.name, "cache")
			counter("icesink_index_lookups_total", float64(ix.s.LookupsDisk), id, ix.name, "disk")
		}
	}
	gauge("icesink_memory_budget_bytes", float64(m.budget))
	counter("icesink_commits_total", float64(m.commits.Load()))
	if t := m.lastCommit.Load(); t > 0 {
		gauge("icesink_last_commit_timestamp_seconds", float64(t)/1e9)
	}
	gauge("icesink_committed_input_line", float64(m.line.Load()))
	counter("icesink_compactions_total", float64(m.compactions.Load()))
	m.commitSeconds.Collect(ch)
}

// committed records a commit that took d and covers input line line.
func (m *runMetrics) committed(d time.Duration, line int64) {
	m.commitSeconds.Observe(d.Seconds())
	m.commits.Add(1)
	m.lastCommit.Store(time.Now().UnixNano())
	m.line.Store(line)
}
