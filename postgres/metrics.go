package postgres

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes a Replication's state to Prometheus.
type collector struct {
	r                          *Replication
	slotLag, lag, rows, estRow *prometheus.Desc
}

// Collector returns the replication's metrics:
// icesink_postgres_slot_lag_bytes (the server's WAL past what the slot has
// confirmed: the WAL PostgreSQL keeps for the sink),
// icesink_postgres_replication_lag_seconds (from the source commit of the
// newest transaction the stream delivered to now; 0 once a keepalive
// showed nothing newer), and per table icesink_postgres_snapshot_rows_total
// and icesink_postgres_snapshot_rows_estimated (the snapshot's progress).
func (r *Replication) Collector() prometheus.Collector {
	return &collector{
		r:       r,
		slotLag: prometheus.NewDesc("icesink_postgres_slot_lag_bytes", "Bytes of WAL the server holds past the slot's confirmed position.", []string{"slot"}, nil),
		lag:     prometheus.NewDesc("icesink_postgres_replication_lag_seconds", "Seconds from the source commit of the newest transaction the stream delivered to now (0: caught up).", []string{"slot"}, nil),
		rows:    prometheus.NewDesc("icesink_postgres_snapshot_rows_total", "Rows of the table read in its snapshot by this run.", []string{"table"}, nil),
		estRow:  prometheus.NewDesc("icesink_postgres_snapshot_rows_estimated", "The table's row count as PostgreSQL estimated it when its snapshot began (pg_class.reltuples).", []string{"table"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.slotLag
	ch <- c.lag
	ch <- c.rows
	ch <- c.estRow
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	slot := r.cfg.Slot
	end, flushed := r.serverEnd.Load(), uint64(r.flushed())
	lag := 0.0
	if end > flushed && flushed > 0 {
		lag = float64(end - flushed)
	}
	ch <- prometheus.MustNewConstMetric(c.slotLag, prometheus.GaugeValue, lag, slot)
	secs := 0.0
	if t := r.lastCommit.Load(); t > 0 {
		secs = time.Since(time.Unix(0, t)).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, secs, slot)
	for _, s := range r.tables {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(s.snapRowsRead.Load()), s.t.name.String())
		ch <- prometheus.MustNewConstMetric(c.estRow, prometheus.GaugeValue, float64(s.snapEstimate.Load()), s.t.name.String())
	}
}
