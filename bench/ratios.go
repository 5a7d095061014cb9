package bench

import "fmt"

// target is a goal a ratio should meet.
type target struct {
	atLeast bool // value >= bound; else value <= bound
	bound   float64
}

// String spells t as the report shows it (">= 0.90").
func (t target) String() string {
	if t.atLeast {
		return fmt.Sprintf(">= %.2f", t.bound)
	}
	return fmt.Sprintf("<= %.2f", t.bound)
}

func (t target) met(v float64) bool {
	if t.atLeast {
		return v >= t.bound
	}
	return v <= t.bound
}

// ratios compares the scenarios of r repeat by repeat.
func ratios(r *Results) []Ratio {
	// The goals of issue 6 (and issue 3's bound on RSS).
	var (
		targetVsAppend = &target{atLeast: true, bound: 0.9}
		targetVsFloor  = &target{atLeast: true, bound: 1 / 1.5}
		targetRSS      = &target{atLeast: false, bound: 0.2}
		targetScan     = &target{atLeast: true, bound: 0.7}
		targetBound    = &target{atLeast: false, bound: 1}
		// Issue 25: the spilled writer at >= 0.8x the unbounded one's speed.
		targetVsUnbounded = &target{atLeast: true, bound: 0.8}
	)
	var out []Ratio
	var unb, unbEq, app, floor *ScenarioResult
	for i := range r.Scenarios {
		switch s := &r.Scenarios[i]; s.Kind {
		case Unbounded:
			if s.Equality {
				unbEq = s
			} else {
				unb = s
			}
		case AppendBaseline:
			app = s
		case ParquetFloor:
			floor = s
		}
	}
	rate := func(x *RunResult) float64 { return x.RowsPerSec }
	scan := func(x *RunResult) float64 {
		if x.Scan == nil {
			return 0
		}
		return x.Scan.RowsPerSec
	}
	rss := func(x *RunResult) float64 { return float64(x.PeakRSS) }
	for i := range r.Scenarios {
		w := &r.Scenarios[i]
		if !w.Kind.Writes() {
			continue
		}
		bounded := w.Kind == Bounded
		goal := func(t *target) *target {
			if bounded {
				return t
			}
			return nil
		}
		if app != nil {
			out = append(out, pair(w.Name+" rows/s ÷ append-baseline rows/s", w, app, rate, rate, goal(targetVsAppend),
				"changes/s of the upsert stream vs iceberg-go appending the final rows"))
		}
		if floor != nil {
			out = append(out, pair(w.Name+" rows/s ÷ parquet-floor rows/s", w, floor, rate, rate, goal(targetVsFloor),
				"within 1.5x of the floor means >= 0.67"))
		}
		if app != nil {
			out = append(out, pair(w.Name+" scan rows/s ÷ append-baseline scan rows/s", w, app, scan, scan, goal(targetScan),
				fmt.Sprintf("the upsert table has %s equality-delete and %s position-delete rows",
					countOf(w, func(x *RunResult) int64 { return x.EqualityDeletes.Rows }),
					countOf(w, func(x *RunResult) int64 { return x.PositionDeletes.Rows }))))
		}
		if !w.Equality {
			out = append(out, pair(w.Name+" key-index rebuild s ÷ scan s", w, w,
				func(x *RunResult) float64 {
					if x.Rebuild == nil {
						return 0
					}
					return x.Rebuild.Seconds
				},
				func(x *RunResult) float64 {
					if x.Scan == nil {
						return 0
					}
					return x.Scan.Seconds
				}, nil, "a restart rebuilds the writer's key index from the table: key columns of every data file, deletes applied"))
			out = append(out, pair(w.Name+" key-index reopen s ÷ rebuild s", w, w,
				func(x *RunResult) float64 {
					if x.Rebuild == nil {
						return 0
					}
					return x.Rebuild.ReopenSeconds
				},
				func(x *RunResult) float64 {
					if x.Rebuild == nil {
						return 0
					}
					return x.Rebuild.Seconds
				}, nil, "a restart on an unchanged table takes the key index the last run saved (deltawriter.Options.KeyIndexDir)"))
		}
		same := unb // the unbounded scenario of w's delete mode
		if w.Equality {
			same = unbEq
		}
		if bounded && same != nil {
			out = append(out, pair(w.Name+" rows/s ÷ "+same.Name+" rows/s", w, same, rate, rate, targetVsUnbounded,
				"the bound's cost in speed: the same stream and delete mode, unbounded, in the same repeat"))
		}
		if bounded && unb != nil {
			out = append(out, pair(w.Name+" peak RSS ÷ unbounded peak RSS", w, unb, rss, rss, targetRSS,
				"the target is set for a 10M-row window over 5M keys"))
		}
		if bounded {
			limit := float64(2*w.MemoryLimit + 64<<20)
			out = append(out, pair(w.Name+" peak RSS ÷ (2 × budget + 64MiB)", w, w, rss,
				func(*RunResult) float64 { return limit }, targetBound, "issue 3's bound on the process's peak RSS"))
			budget := float64(w.MemoryLimit)
			out = append(out, pair(w.Name+" peak accounted bytes ÷ budget", w, w,
				func(x *RunResult) float64 { return float64(x.PeakAccounted) },
				func(*RunResult) float64 { return budget }, targetBound, "the budget is not exceeded"))
		}
	}
	return out
}

// pair divides num(a's run) by den(b's run) for each repeat both ran.
func pair(name string, a, b *ScenarioResult, num, den func(*RunResult) float64, t *target, note string) Ratio {
	var vs []float64
	for i := range a.Runs {
		for j := range b.Runs {
			if a.Runs[i].Repeat != b.Runs[j].Repeat {
				continue
			}
			if d := den(&b.Runs[j]); d > 0 {
				vs = append(vs, num(&a.Runs[i])/d)
			}
		}
	}
	r := Ratio{Name: name, Value: statOf(vs), Note: note}
	if t != nil {
		r.Target = t.String()
		if len(vs) > 0 {
			m := t.met(r.Value.Median)
			r.Met = &m
		}
	}
	return r
}

// countOf formats a per-run count (the same in every repeat, the stream
// being seeded) as the median run has it.
func countOf(s *ScenarioResult, f func(*RunResult) int64) string {
	if m := s.MedianRun(); m != nil {
		return fmt.Sprint(f(m))
	}
	return "?"
}
