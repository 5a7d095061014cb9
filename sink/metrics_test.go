package sink_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
)

// TestMetrics: a run registers its icesink_* metrics, they move with the
// run (gathered at every progress call, as a scrape would), and agree with
// the run's result; the run unregisters them at its end.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	wh, ident := newWarehouse(t)
	input := genInput(t, 13, 2000, 600)
	dec, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var last map[string]*dto.MetricFamily
	scrapes := 0
	begin := time.Now()
	maxPending := 0.0
	res, err := sink.Run(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "met", CheckpointRows: 200, CommitInterval: 2, Writers: 2,
		Registerer: reg, Writer: deltawriter.Options{SpillDir: t.TempDir(), MemoryLimit: 1 << 20},
		Progress: func(sink.Progress) {
			fams, err := reg.Gather()
			if err != nil {
				t.Error(err)
				return
			}
			last = map[string]*dto.MetricFamily{}
			for _, f := range fams {
				last[f.GetName()] = f
			}
			scrapes++
			if f := last["icesink_epochs_pending"]; f != nil {
				maxPending = max(maxPending, f.Metric[0].Gauge.GetValue())
			}
		}}, dec)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name string, labels map[string]string) float64 {
		f := last[name]
		if f == nil {
			t.Fatalf("no %s in the last scrape", name)
		}
		var v float64
	metric:
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				v += m.Counter.GetValue()
			case m.Gauge != nil:
				v += m.Gauge.GetValue()
			case m.Histogram != nil:
				v += float64(m.Histogram.GetSampleCount())
			}
		}
		return v
	}
	if scrapes < 5 {
		t.Fatalf("%d scrapes", scrapes)
	}
	changes := sum("icesink_changes_total", nil)
	if changes <= 0 || changes > float64(res.Changes) {
		t.Errorf("changes_total %v, the run took %d", changes, res.Changes)
	}
	if c := sum("icesink_commits_total", nil); c < 1 || c > float64(res.Commits) || sum("icesink_commit_duration_seconds", nil) != c {
		t.Errorf("commits_total %v (run: %d), latency samples %v", c, res.Commits, sum("icesink_commit_duration_seconds", nil))
	}
	if ts := sum("icesink_last_commit_timestamp_seconds", nil); ts < float64(begin.Unix()) || ts > float64(time.Now().Unix()+1) {
		t.Errorf("last commit at %v, the run began at %d", ts, begin.Unix())
	}
	// Every other epoch waits for the next one to commit (CommitInterval
	// 2): right after it ends, it is pending (and the router may be
	// further ahead of the writers).
	if e := sum("icesink_epoch_ended", nil); e < 1 || e > float64(res.Epoch) {
		t.Errorf("epoch_ended %v, the run ended %d", e, res.Epoch)
	}
	if maxPending < 1 || maxPending > float64(res.Epoch) {
		t.Errorf("epochs_pending reached %v, want 1 to %d", maxPending, res.Epoch)
	}
	for _, w := range []string{"0", "1"} {
		if b := sum("icesink_memory_budget_bytes", map[string]string{"writer": w}); b != 1<<20 {
			t.Errorf("writer %s: budget %v", w, b)
		}
	}
	if eq := sum("icesink_deletes_total", map[string]string{"kind": "equality"}); eq != 0 {
		t.Errorf("%v equality deletes", eq)
	}
	if pos := sum("icesink_deletes_total", map[string]string{"kind": "position"}); pos <= 0 {
		t.Errorf("%v position deletes", pos)
	}
	if len(last["icesink_index_lookups_total"].GetMetric()) != 2*2*4 {
		t.Errorf("%d lookup series, want writers x indexes x tiers = 16", len(last["icesink_index_lookups_total"].GetMetric()))
	}
	if fams, _ := reg.Gather(); len(fams) != 0 {
		t.Errorf("%d metric families still registered after the run", len(fams))
	}
}
