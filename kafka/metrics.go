package kafka

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes a Source's per-partition state to Prometheus.
type collector struct {
	s                    *Source
	lag, committed, dead *prometheus.Desc
}

// Collector returns the source's metrics: icesink_kafka_lag_records (how
// far the table is behind each partition's high watermark) and
// icesink_kafka_committed_offset (the offset the last commit holds) and
// icesink_kafka_dead_letter_records_total (bad records sent to
// Config.DeadLetterTopic), labelled topic and partition.
func (s *Source) Collector() prometheus.Collector {
	labels := []string{"topic", "partition"}
	return &collector{
		s:         s,
		lag:       prometheus.NewDesc("icesink_kafka_lag_records", "Records of the partition not yet committed to the table (high watermark minus committed offset).", labels, nil),
		committed: prometheus.NewDesc("icesink_kafka_committed_offset", "The partition's next offset as the sink's last commit holds it.", labels, nil),
		dead:      prometheus.NewDesc("icesink_kafka_dead_letter_records_total", "Records of the partition that failed to decode and were sent to the dead-letter topic by this run.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.committed
	ch <- c.dead
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
	for p, n := range c.s.dead {
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.CounterValue, float64(n), c.s.cfg.Topic, strconv.Itoa(int(p)))
	}
}
