package sink

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/dedup"
)

// commitMetrics are the commits a process saw: made by its in-process
// coordinator (with their latency), by a coordinator process, or, under
// a remote coordinator, learnt by the first writer (without latency).
type commitMetrics struct {
	commitSeconds prometheus.Histogram
	lastCommit    atomic.Int64 // unix nanoseconds of the last commit
	commits       atomic.Int64
	line          atomic.Int64 // input line the last commit covers
	compactions   atomic.Int64
	descs         map[string]*prometheus.Desc
}

func newCommitMetrics() *commitMetrics {
	m := &commitMetrics{descs: map[string]*prometheus.Desc{}}
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "icesink_commit_duration_seconds",
		Help:    "Time to commit one epoch to the catalog (retries included), in seconds.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	})
	m.desc("icesink_commits_total", "Epochs this process committed (or, under a remote coordinator, saw committed).")
	m.desc("icesink_last_commit_timestamp_seconds", "Unix time of this process's last commit (time() minus it: the time since).")
	m.desc("icesink_committed_input_line", "The input line the last commit covers.")
	m.desc("icesink_compactions_total", "Compaction rounds that rewrote files (run --maintain).")
	return m
}

func (m *commitMetrics) desc(name, help string, labels ...string) {
	m.descs[name] = prometheus.NewDesc(name, help, labels, nil)
}

// Describe implements prometheus.Collector.
func (m *commitMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
	m.commitSeconds.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *commitMetrics) Collect(ch chan<- prometheus.Metric) {
	m.counter(ch, "icesink_commits_total", float64(m.commits.Load()))
	if t := m.lastCommit.Load(); t > 0 {
		m.gauge(ch, "icesink_last_commit_timestamp_seconds", float64(t)/1e9)
	}
	m.gauge(ch, "icesink_committed_input_line", float64(m.line.Load()))
	m.counter(ch, "icesink_compactions_total", float64(m.compactions.Load()))
	m.commitSeconds.Collect(ch)
}

func (m *commitMetrics) counter(ch chan<- prometheus.Metric, name string, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.CounterValue, v, labels...)
}

func (m *commitMetrics) gauge(ch chan<- prometheus.Metric, name string, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.GaugeValue, v, labels...)
}

// committed records a commit that took d and covers input line line.
func (m *commitMetrics) committed(d time.Duration, line int64) {
	m.commitSeconds.Observe(d.Seconds())
	m.remoteCommitted(line)
}

// remoteCommitted records a commit the writers' remote coordinator made,
// covering input line line (its latency is the coordinator's to measure).
func (m *commitMetrics) remoteCommitted(line int64) {
	m.commits.Add(1)
	m.lastCommit.Store(time.Now().UnixNano())
	m.line.Store(line)
}

// runMetrics is what a run exposes to Prometheus (Config.Registerer): the
// writers' counters as each last published them (after every batch), its
// epochs, and its commits. All names start icesink_.
type runMetrics struct {
	*commitMetrics
	budget  int64
	writers []*writer
	// epochs: the last one the router ended, the last one committed
	ended, done atomic.Uint64
}

func newRunMetrics(budget int64) *runMetrics {
	m := &runMetrics{commitMetrics: newCommitMetrics(), budget: budget}
	m.desc("icesink_changes_total", "Changes a writer took.", "writer")
	m.desc("icesink_data_rows_total", "Rows a writer wrote to data files.", "writer")
	m.desc("icesink_deletes_total", "Deletes a writer wrote, by kind (position, equality).", "writer", "kind")
	m.desc("icesink_old_rows_deleted_total", "Rows of earlier commits a writer found in its key index and deleted by position.", "writer")
	m.desc("icesink_buffered_bytes", "Bytes of a writer's uncommitted window (its files and buffers).", "writer")
	m.desc("icesink_memory_accounted_bytes", "Memory a writer's accounting saw at its last check.", "writer")
	m.desc("icesink_memory_budget_bytes", "A writer's memory budget (0: unbounded); under a shared budget (Config.Budget), the share it runs at now.", "writer")
	m.desc("icesink_spilled_bytes_total", "Bytes a writer's indexes wrote as sorted runs, by index (window, key).", "writer", "index")
	m.desc("icesink_index_lookups_total", "Lookups in a writer's indexes, by index (window, key) and by where they were answered (memory, filter, cache, disk).", "writer", "index", "tier")
	m.desc("icesink_local_flushes_total", "Times a writer flushed its files or delete buffers early to stay within its budget.", "writer")
	m.desc("icesink_epoch_ended", "The last epoch (checkpoint) this run ended.")
	m.desc("icesink_epochs_pending", "Epochs this run ended that are not committed yet (awaiting alignment, a commit interval or the commit).")
	return m
}

// Collect implements prometheus.Collector.
func (m *runMetrics) Collect(ch chan<- prometheus.Metric) {
	for i, w := range m.writers {
		st := w.pub.Load()
		if st == nil {
			continue
		}
		id := strconv.Itoa(i)
		m.counter(ch, "icesink_changes_total", float64(st.Changes), id)
		m.counter(ch, "icesink_data_rows_total", float64(st.DataRows), id)
		m.counter(ch, "icesink_deletes_total", float64(st.PositionDeletes), id, "position")
		m.counter(ch, "icesink_deletes_total", float64(st.EqualityDeletes), id, "equality")
		m.counter(ch, "icesink_old_rows_deleted_total", float64(st.OldRowsDeleted), id)
		m.gauge(ch, "icesink_buffered_bytes", float64(w.pubBuffered.Load()), id)
		m.gauge(ch, "icesink_memory_accounted_bytes", float64(st.AccountedBytes), id)
		m.counter(ch, "icesink_local_flushes_total", float64(st.LocalFlushes), id)
		budget := m.budget
		if w.share != nil {
			budget = w.share.applied.Load()
		}
		m.gauge(ch, "icesink_memory_budget_bytes", float64(budget), id)
		for _, ix := range []struct {
			name string
			s    dedup.Stats
		}{{"window", st.Index}, {"key", st.TableIndex}} {
			m.counter(ch, "icesink_spilled_bytes_total", float64(ix.s.SpilledBytes), id, ix.name)
			m.counter(ch, "icesink_index_lookups_total", float64(ix.s.LookupsMemory), id, ix.name, "memory")
			m.counter(ch, "icesink_index_lookups_total", float64(ix.s.LookupsFilter), id, ix.name, "filter")
			m.counter(ch, "icesink_index_lookups_total", float64(ix.s.LookupsCache), id, ix.name, "cache")
			m.counter(ch, "icesink_index_lookups_total", float64(ix.s.LookupsDisk), id, ix.name, "disk")
		}
	}
	ended, done := m.ended.Load(), m.done.Load()
	m.gauge(ch, "icesink_epoch_ended", float64(ended))
	m.gauge(ch, "icesink_epochs_pending", float64(ended-min(done, ended)))
	m.commitMetrics.Collect(ch)
}

// epochDone records that epoch e and those before it are committed.
func (m *runMetrics) epochDone(e uint64) {
	for old := m.done.Load(); e > old && !m.done.CompareAndSwap(old, e); old = m.done.Load() {
	}
}
