package kafka

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes a Source's per-partition state to Prometheus.
type collector struct {
	s              *Source
	lag, committed *prometheus.Desc
}

// Collector returns the source's metrics: icesink_kafka_lag_records (how
// far the table is behind each partition's high watermark) and
// icesink_kafka_committed_offset (the offset the last commit holds), both
// labelled topic and partition.
func (s *Source) Collector() prometheus.Collector {
	labels := []string{"topic", "partition"}
	return &collector{
		s:         s,
		lag:       prometheus.NewDesc("icesink_kafka_lag_records", "Records of the partition not yet committed to the table (high watermark minus committed offset).", labels, nil),
		committed: prometheus.NewDesc("icesink_kafka_committed_offset", "The partition's next offset as the sink's last commit holds it.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.committed
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for p, lag := range c.s.Lag() {
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(lag), c.s.cfg.Topic, strconv.Itoa(int(p)))
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for p, off := range c.s.done {
		ch <- prometheus.MustNewConstMetric(c.committed, prometheus.GaugeValue, float64(off), c.s.cfg.Topic, strconv.Itoa(int(p)))
	}
}
