package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/icesink/icesink/warehouse"
)

// tinyOptions is a bench small enough for the race detector on 2 cores.
func tinyOptions(t *testing.T) Options {
	scs, err := ParseScenarios("all", []int64{256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Stream:    StreamOptions{Rows: 3000, Keys: 800, Updates: 0.6, Deletes: 0.05, Reinserts: 0.03, Seed: 5},
		Scenarios: scs,
		Repeat:    2,
		WorkDir:   t.TempDir(),
		Keep:      true,
	}
}

func TestRunTiny(t *testing.T) {
	ctx := context.Background()
	opts := tinyOptions(t)
	var progress []Progress
	opts.Progress = func(p Progress) { progress = append(progress, p) }
	opts.AutoGoMemoryLimit = true
	limit := debug.SetMemoryLimit(-1)
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("the Go memory limit is %d after the bench, %d before", got, limit)
	}
	if len(res.Scenarios) != 4 {
		t.Fatalf("%d scenarios, want 4", len(res.Scenarios))
	}
	var orders []int
	for _, s := range res.Scenarios {
		if len(s.Runs) != 2 {
			t.Fatalf("%s: %d runs, want 2", s.Name, len(s.Runs))
		}
		for _, r := range s.Runs {
			orders = append(orders, r.Order)
			if r.Rows == 0 || r.Seconds <= 0 || r.RowsPerSec <= 0 {
				t.Errorf("%s: run without figures: %+v", s.Name, r)
			}
			if len(r.Series) == 0 {
				t.Errorf("%s: no memory series", s.Name)
			}
			if s.Kind != ParquetFloor && (r.Scan == nil || r.Scan.Rows != res.Stream.Live) {
				t.Errorf("%s: scan %+v, want %d rows", s.Name, r.Scan, res.Stream.Live)
			}
		}
	}
	slices.Sort(orders)
	if !slices.Equal(orders, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("run orders %v", orders)
	}
	// The order rotates: the second repeat starts with the second scenario.
	if r := res.Scenarios[1].Runs[1]; r.Order != 4 {
		t.Errorf("%s repeat 2 ran at %d, want 4", res.Scenarios[1].Name, r.Order)
	}
	for _, w := range res.Warnings {
		if strings.Contains(w, "scan returned") {
			t.Error(w)
		}
	}
	if len(res.Ratios) == 0 {
		t.Error("no ratios")
	}
	if len(progress) == 0 || progress[len(progress)-1].Fraction != 1 {
		t.Errorf("progress ended at %+v", progress[len(progress)-1])
	}

	// The upsert table and the append table hold the same rows.
	unb := rowsOf(t, ctx, res.Scenario("unbounded").Runs[0].Dir)
	bnd := rowsOf(t, ctx, res.Scenario("bounded-256KiB").Runs[0].Dir)
	app := rowsOf(t, ctx, res.Scenario("append-baseline").Runs[0].Dir)
	if len(app) != int(res.Stream.Live) || !slices.Equal(unb, app) || !slices.Equal(bnd, app) {
		t.Errorf("tables differ: unbounded %d rows, bounded %d, append %d", len(unb), len(bnd), len(app))
	}

	var md bytes.Buffer
	if err := WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| scenario |", "| unbounded |", "| bounded-256KiB |", "| append-baseline |", "| parquet-floor |", "÷ append-baseline rows/s"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}

	out := filepath.Join(t.TempDir(), "report")
	if err := WriteReport(out, res); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResults(filepath.Join(out, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Scenarios) != 4 || back.Scenarios[1].Kind != Bounded || back.Config.Stream.KeyType != KeyLong {
		t.Errorf("results.json read back as %+v", back.Config)
	}
	report, err := os.ReadFile(filepath.Join(out, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(report, []byte("| bounded-256KiB |")) || bytes.Contains(report, []byte("## Plots")) {
		t.Errorf("report.md without plots:\n%s", report)
	}
}

// rowsOf returns the live rows of the bench table in the run folder dir,
// formatted and sorted.
func rowsOf(t *testing.T, ctx context.Context, dir string) []string {
	t.Helper()
	wh, err := warehouse.Open(ctx, filepath.Join(dir, "warehouse"), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	tbl, err := wh.Catalog.LoadTable(ctx, benchIdent())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for row, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(row))
	}
	slices.Sort(out)
	return out
}

func TestParseScenarios(t *testing.T) {
	scs, err := ParseScenarios("bounded,unbounded,bounded", []int64{16 << 20, 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range scs {
		names = append(names, s.Name)
	}
	if want := []string{"bounded-16MiB", "bounded-1GiB", "unbounded"}; !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	for _, bad := range []string{"nope", "bounded"} {
		if _, err := ParseScenarios(bad, nil); err == nil {
			t.Errorf("ParseScenarios(%q) accepted", bad)
		}
	}
	if n, err := ParseSize("64MiB"); err != nil || n != 64<<20 {
		t.Errorf("ParseSize(64MiB) = %d, %v", n, err)
	}
	if s := FormatSize(1500); s != "1500B" {
		t.Errorf("FormatSize(1500) = %s", s)
	}
}

func TestStat(t *testing.T) {
	if s := statOf([]float64{3, 1, 2}); s.Median != 2 || s.Min != 1 || s.Max != 3 || s.N != 3 {
		t.Errorf("statOf odd: %+v", s)
	}
	if s := statOf([]float64{4, 1, 2, 3}); s.Median != 2.5 {
		t.Errorf("statOf even: %+v", s)
	}
}

// TestRatiosBoundedVsUnbounded: a bounded scenario's speed is paired with
// the unbounded scenario of its own delete mode, repeat by repeat, and
// held to issue 25's 0.8.
func TestRatiosBoundedVsUnbounded(t *testing.T) {
	sc := func(name string, kind Kind, eq bool, rates ...float64) ScenarioResult {
		s := ScenarioResult{Scenario: Scenario{Name: name, Kind: kind, Equality: eq, MemoryLimit: 32 << 20}}
		for i, v := range rates {
			s.Runs = append(s.Runs, RunResult{Repeat: i, RowsPerSec: v})
		}
		return s
	}
	r := &Results{Scenarios: []ScenarioResult{
		sc("unbounded", Unbounded, false, 100, 200),
		sc("bounded-32MiB", Bounded, false, 90, 150),
		sc("unbounded-equality", Unbounded, true, 1000, 1000),
		sc("bounded-32MiB-equality", Bounded, true, 700, 790),
	}}
	want := map[string]struct {
		median float64
		met    bool
	}{
		"bounded-32MiB rows/s ÷ unbounded rows/s":                   {(0.9 + 0.75) / 2, true},
		"bounded-32MiB-equality rows/s ÷ unbounded-equality rows/s": {(0.7 + 0.79) / 2, false},
	}
	for _, ra := range ratios(r) {
		w, ok := want[ra.Name]
		if !ok {
			continue
		}
		delete(want, ra.Name)
		if math.Abs(ra.Value.Median-w.median) > 1e-9 || ra.Met == nil || *ra.Met != w.met || ra.Target != ">= 0.80" {
			t.Errorf("%s: median %v met %v target %q, want %v %v >= 0.80", ra.Name, ra.Value.Median, ra.Met, ra.Target, w.median, w.met)
		}
	}
	for name := range want {
		t.Errorf("no ratio %q", name)
	}
}
