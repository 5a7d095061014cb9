// Package plots draws the figures of a benchmark report (peak RSS against
// the window, memory over time, throughput) as PNG files with gonum's
// plot. It is kept out of package bench so that the icesink binary does
// not link a plotting library and its fonts; cmd/icesink-plot uses it.
package plots

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/icesink/icesink/bench"
)

// The files Write writes.
const (
	RSSWindow  = "rss_vs_window.png"
	MemoryTime = "memory_over_time.png"
	Throughput = "throughput.png"
)

const (
	plotWidth  = 9 * vg.Inch
	plotHeight = 5.5 * vg.Inch
)

// Write writes the PNG plots of r into dir and returns them, for
// bench.WriteReport; a plot with nothing to draw is left out.
func Write(dir string, r *bench.Results) ([]bench.Plot, error) {
	var out []bench.Plot
	for _, f := range []func(*bench.Results) (*plot.Plot, bench.Plot, error){rssVsWindow, memoryOverTime, throughput} {
		p, pf, err := f(r)
		if err != nil {
			return nil, fmt.Errorf("plots: plot %s: %w", pf.Name, err)
		}
		if p == nil {
			continue
		}
		if err := save(p, filepath.Join(dir, pf.Name)); err != nil {
			return nil, fmt.Errorf("plots: saving plot %s: %w", pf.Name, err)
		}
		out = append(out, pf)
	}
	return out, nil
}

// legendWidth is the band right of the data where the legend goes.
const legendWidth = 3.2 * vg.Inch

// save writes p as a PNG with its legend right of the data, not over it.
func save(p *plot.Plot, path string) error {
	legend := p.Legend
	p.Legend = plot.NewLegend()
	img := vgimg.New(plotWidth+legendWidth, plotHeight)
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Top, legend.Left = true, true
	legend.XOffs = vg.Points(6)
	legend.YOffs = -vg.Points(40)
	legend.Draw(draw.Crop(dc, plotWidth, 0, 0, 0))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// countScale returns a divisor and its unit name for counts up to v.
func countScale(v float64) (float64, string) {
	switch {
	case v >= 2e6:
		return 1e6, "millions"
	case v >= 2e3:
		return 1e3, "thousands"
	}
	return 1, ""
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// ("250", not "250.00").
type plainTicks struct{}

// Ticks returns the default ticks between min and max, relabelled.
func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			// Round to 10 digits first so that 0.30000000000000004 reads 0.3.
			v, _ := strconv.ParseFloat(strconv.FormatFloat(ts[i].Value, 'g', 10, 64), 64)
			ts[i].Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ts
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.X.Tick.Marker = plainTicks{}
	p.Y.Tick.Marker = plainTicks{}
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, xys plotter.XYs, color, dash int, label string) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(color)
	l.Dashes = plotutil.Dashes(dash)
	l.Width = vg.Points(1.6)
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

// rssVsWindow draws, per writer scenario, the running peak of RSS against
// the number of changes written in the window (the median run).
func rssVsWindow(r *bench.Results) (*plot.Plot, bench.Plot, error) {
	pf := bench.Plot{Name: RSSWindow, Title: "Peak RSS vs window length, unbounded vs bounded"}
	div, unit := countScale(float64(r.Config.Stream.Rows))
	xl := "window length (changes since the last commit"
	if r.Config.CommitEvery > 0 {
		xl = "changes written (the window is committed every " + fmt.Sprint(r.Config.CommitEvery) + " changes"
	}
	if unit != "" {
		xl += ", " + unit
	}
	xl += ")"
	p := newPlot(pf.Title, xl, "peak RSS so far (MiB)")
	drawn := 0
	for i := range r.Scenarios {
		s := &r.Scenarios[i]
		m := s.MedianRun()
		if !s.Kind.Writes() || m == nil {
			continue
		}
		var xys plotter.XYs
		var peak int64
		for _, smp := range m.Series {
			peak = max(peak, smp.RSS)
			xys = append(xys, plotter.XY{X: float64(smp.Changes) / div, Y: float64(peak) / (1 << 20)})
		}
		if err := addLine(p, xys, i, 0, s.Name); err != nil {
			return nil, pf, err
		}
		if s.Kind == bench.Bounded && len(xys) > 0 {
			bound := float64(2*s.MemoryLimit+64<<20) / (1 << 20)
			line := plotter.XYs{{X: 0, Y: bound}, {X: xys[len(xys)-1].X, Y: bound}}
			if err := addLine(p, line, i, 2, s.Name+": 2 × budget + 64MiB"); err != nil {
				return nil, pf, err
			}
		}
		drawn++
	}
	if drawn == 0 {
		return nil, pf, nil
	}
	return p, pf, nil
}

// memoryOverTime draws RSS (solid) and Go heap (dashed) over time for
// every scenario (the median run).
func memoryOverTime(r *bench.Results) (*plot.Plot, bench.Plot, error) {
	pf := bench.Plot{Name: MemoryTime, Title: "Memory over time (RSS solid, Go heap dashed)"}
	p := newPlot(pf.Title, "time since the run's start (s)", "memory (MiB)")
	drawn := 0
	for i := range r.Scenarios {
		s := &r.Scenarios[i]
		m := s.MedianRun()
		if m == nil || len(m.Series) == 0 {
			continue
		}
		var rss, heap plotter.XYs
		for _, smp := range m.Series {
			rss = append(rss, plotter.XY{X: smp.T, Y: float64(smp.RSS) / (1 << 20)})
			heap = append(heap, plotter.XY{X: smp.T, Y: float64(smp.Heap) / (1 << 20)})
		}
		if err := addLine(p, rss, i, 0, s.Name+" RSS"); err != nil {
			return nil, pf, err
		}
		if err := addLine(p, heap, i, 1, s.Name+" Go heap"); err != nil {
			return nil, pf, err
		}
		if s.Kind == bench.Bounded {
			bound := float64(2*s.MemoryLimit+64<<20) / (1 << 20)
			line := plotter.XYs{{X: 0, Y: bound}, {X: rss[len(rss)-1].X, Y: bound}}
			if err := addLine(p, line, i, 2, s.Name+": 2 × budget + 64MiB"); err != nil {
				return nil, pf, err
			}
		}
		drawn++
	}
	if drawn == 0 {
		return nil, pf, nil
	}
	return p, pf, nil
}

// barErrors are bar heights with min/max error bars.
type barErrors struct{ y, lo, hi []float64 }

// Len, XY and YError make barErrors a plotter.XYer and plotter.YErrorer.
func (b barErrors) Len() int                        { return len(b.y) }
func (b barErrors) XY(i int) (float64, float64)     { return float64(i), b.y[i] }
func (b barErrors) YError(i int) (float64, float64) { return b.y[i] - b.lo[i], b.hi[i] - b.y[i] }

// throughput draws rows/s per scenario: the median as a bar, min and max
// as error bars.
func throughput(r *bench.Results) (*plot.Plot, bench.Plot, error) {
	pf := bench.Plot{Name: Throughput, Title: "Throughput per scenario (bar: median; whiskers: min–max over the repeats)"}
	var names []string
	var be barErrors
	top := 0.0
	for i := range r.Scenarios {
		s := &r.Scenarios[i]
		if len(s.Runs) == 0 {
			continue
		}
		names = append(names, s.Name)
		st := s.Summary.RowsPerSec
		be.y, be.lo, be.hi = append(be.y, st.Median), append(be.lo, st.Min), append(be.hi, st.Max)
		top = max(top, st.Max)
	}
	if len(names) == 0 {
		return nil, pf, nil
	}
	div, unit := countScale(top)
	for i := range be.y {
		be.y[i], be.lo[i], be.hi[i] = be.y[i]/div, be.lo[i]/div, be.hi[i]/div
	}
	yl := "rows/s"
	if unit != "" {
		yl = "rows/s (" + unit + ")"
	}
	p := newPlot(pf.Title, "scenario (writers: changes/s; baselines: final rows/s)", yl)
	bars, err := plotter.NewBarChart(plotter.Values(be.y), vg.Points(40))
	if err != nil {
		return nil, pf, err
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = vg.Length(0)
	p.Add(bars)
	eb, err := plotter.NewYErrorBars(be)
	if err != nil {
		return nil, pf, err
	}
	eb.LineStyle.Width = vg.Points(1.5)
	p.Add(eb)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	return p, pf, nil
}
