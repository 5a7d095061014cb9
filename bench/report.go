package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The files WriteReport writes.
const (
	ResultsFile = "results.json"
	ReportFile  = "report.md"
)

// Plot is a figure in the report folder that report.md shows (the
// plots are drawn by package bench/plots, which the sink's binary does
// not link).
type Plot struct {
	Name  string // file name in the report folder
	Title string
}

// WriteReport writes results.json and report.md into dir, creating it;
// report.md shows plots, files already in dir.
func WriteReport(dir string, r *Results, plots ...Plot) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: report folder: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encoding results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var md strings.Builder
	writeReportMarkdown(&md, r, plots)
	if err := os.WriteFile(filepath.Join(dir, ReportFile), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// WriteMarkdown writes the results table and the ratios as Markdown.
func WriteMarkdown(w io.Writer, r *Results) error {
	var b strings.Builder
	writeTable(&b, r)
	b.WriteString("\n")
	writeRatios(&b, r)
	writeWarnings(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeTable(b *strings.Builder, r *Results) {
	b.WriteString("| scenario | rows/s median (min–max) | rows/CPU-s | peak RSS | peak Go heap | peak accounted | spilled (runs) | files data/pos/eq | live files data/del/manifests | eq-delete rows | scan s | scan rows/s |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range r.Scenarios {
		s := &r.Scenarios[i]
		m := s.MedianRun()
		sm := s.Summary
		dash := "–"
		acc, spill, files, live, eqRows, scanS, scanR := dash, dash, dash, dash, dash, dash, dash
		if s.Kind.Writes() {
			acc = mib(sm.PeakAccounted.Median)
			spill = fmt.Sprintf("%s (%.0f)", mib(sm.BytesSpilled.Median), sm.Spills.Median)
		}
		if m != nil {
			files = fmt.Sprintf("%d/%d/%d", m.Data.Files, m.PositionDeletes.Files, m.EqualityDeletes.Files)
			if s.Kind.Writes() {
				eqRows = fmt.Sprint(m.EqualityDeletes.Rows)
				live = fmt.Sprintf("%d/%d/%d", m.LiveDataFiles, m.LiveDeleteFiles, m.LiveManifests)
			}
		}
		if sm.ScanSeconds.N > 0 {
			scanS = fmt.Sprintf("%.2f", sm.ScanSeconds.Median)
			scanR = rate(sm.ScanRowsPerSec.Median)
		}
		cpu := dash
		if sm.RowsPerCPUSec.Median > 0 {
			cpu = rate(sm.RowsPerCPUSec.Median)
		}
		fmt.Fprintf(b, "| %s | %s (%s–%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Name, rate(sm.RowsPerSec.Median), rate(sm.RowsPerSec.Min), rate(sm.RowsPerSec.Max), cpu,
			mib(sm.PeakRSS.Median), mib(sm.PeakHeap.Median), acc, spill, files, live, eqRows, scanS, scanR)
	}
}

func writeRatios(b *strings.Builder, r *Results) {
	if len(r.Ratios) == 0 {
		return
	}
	b.WriteString("| ratio (same repeat) | median (min–max) | target | met |\n")
	b.WriteString("|---|---:|---:|:---:|\n")
	for _, x := range r.Ratios {
		met := "–"
		if x.Met != nil {
			met = "no"
			if *x.Met {
				met = "yes"
			}
		}
		target := x.Target
		if target == "" {
			target = "–"
		}
		fmt.Fprintf(b, "| %s | %.2f (%.2f–%.2f) | %s | %s |\n", x.Name, x.Value.Median, x.Value.Min, x.Value.Max, target, met)
	}
}

func writeWarnings(b *strings.Builder, r *Results) {
	if len(r.Warnings) == 0 {
		return
	}
	b.WriteString("\nWarnings:\n")
	for _, w := range r.Warnings {
		fmt.Fprintf(b, "- %s\n", w)
	}
}

func writeReportMarkdown(b *strings.Builder, r *Results, plots []Plot) {
	c := r.Config
	st := c.Stream
	b.WriteString("# icesink bench\n\n")
	if c.CommandLine != "" {
		fmt.Fprintf(b, "Reproduce with:\n\n```\n%s\n```\n\n", c.CommandLine)
	}
	fmt.Fprintf(b, "Stream: %d changes over %d keys (key %s, ~%d bytes a row, seed %d); shares: updates %.2f, deletes %.2f, re-inserts %.2f, zipf %g",
		st.Rows, st.Keys, st.KeyType, st.RowBytes, st.Seed, st.Updates, st.Deletes, st.Reinserts, st.Zipf)
	if st.UpdateBefore {
		b.WriteString(", -U before each +U")
	}
	fmt.Fprintf(b, ". Emitted: %d inserts, %d updates, %d deletes, %d re-inserts; %d live keys at the end.\n\n",
		r.Stream.Inserts, r.Stream.Updates, r.Stream.Deletes, r.Stream.Reinserts, r.Stream.Live)
	window := "one commit window for the whole stream"
	if c.CommitEvery > 0 {
		window = fmt.Sprintf("a commit every %d changes", c.CommitEvery)
	}
	if c.RewriteDeleted > 0 {
		window += fmt.Sprintf(", data files with %.0f%%+ deleted rows rewritten at commit", c.RewriteDeleted*100)
	}
	fmt.Fprintf(b, "Writer mode %s, %s; %d repeats, scenarios alternating (%s)", c.Mode, window, c.Repeat, strings.Join(c.Scenarios, ", "))
	if c.GoMemoryLimit != "" {
		fmt.Fprintf(b, "; Go soft memory limit: %s", c.GoMemoryLimit)
	}
	b.WriteString(".\n\n")
	e := r.Environment
	fmt.Fprintf(b, "Machine: %s, %d CPUs (GOMAXPROCS %d), %s RAM, %s %s/%s", orNA(e.CPUModel), e.NumCPU, e.GOMAXPROCS, mib(float64(e.MemTotal)), e.GoVersion, e.GOOS, e.GOARCH)
	if e.GOGC != "" {
		fmt.Fprintf(b, ", GOGC=%s", e.GOGC)
	}
	if e.GOMEMLIMIT != "" {
		fmt.Fprintf(b, ", GOMEMLIMIT=%s", e.GOMEMLIMIT)
	}
	fmt.Fprintf(b, ". Bench took %.0f s.\n\n", r.Elapsed)

	b.WriteString("## Results\n\n")
	writeTable(b, r)
	b.WriteString("\nMemory figures are MiB, medians over the repeats. rows/s counts changes for the writer scenarios and final live rows for the baselines.\n\n")
	b.WriteString("## Ratios\n\n")
	writeRatios(b, r)
	writeWarnings(b, r)
	if len(plots) > 0 {
		b.WriteString("\n## Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(b, "![%s](%s)\n\n", p.Title, p.Name)
		}
	}
	b.WriteString("## How it was measured\n\n")
	exact := true
	for i := range r.Scenarios {
		for _, x := range r.Scenarios[i].Runs {
			exact = exact && x.ExactPeakRSS
		}
	}
	b.WriteString("- Every run uses a fresh embedded warehouse (SQLite catalog, local files) in a fresh folder; all runs share one process, so before each run the heap is collected and freed memory returned to the OS (runtime/debug.FreeOSMemory).\n")
	if exact {
		b.WriteString("- Peak RSS is the kernel's VmHWM, reset at each run's start through /proc/self/clear_refs, so it is that run's own peak; RSS is also sampled every " + c.SampleInterval + " for the series.\n")
	} else {
		b.WriteString("- Peak RSS is the largest VmRSS sampled every " + c.SampleInterval + " (the kernel's VmHWM could not be reset per run and is process-lifetime), so a shorter spike can be missed.\n")
	}
	var starts, files []float64
	for i := range r.Scenarios {
		for _, x := range r.Scenarios[i].Runs {
			starts, files = append(starts, float64(x.StartRSS)), append(files, float64(x.StartRSSFile))
		}
	}
	if st := statOf(starts); st.N > 0 && st.Median > 0 {
		fmt.Fprintf(b, "- Runs started at a median RSS of %s MiB (%s–%s), of which %s MiB file-backed (mostly the binary's own pages): the fixed overhead every peak includes.\n",
			mib(st.Median), mib(st.Min), mib(st.Max), mib(statOf(files).Median))
	}
	b.WriteString("- RSS includes what the process holds besides the scenario: the Go runtime, the SQLite catalog, and the generator's state (a bit per key; the baselines also replay the stream into 4 bytes per key before they start).\n")
	b.WriteString("- Peak Go heap is the largest sampled /memory/classes/heap/objects:bytes (runtime/metrics): live and unswept objects. Peak accounted bytes is the writer's own accounting (the largest of its Stats.PeakAccountedBytes, its index's peak, and its BufferedBytes after every batch of 1024 changes); what it does not see (zstd encoder state, GC headroom) shows as the gap to the Go heap.\n")
	b.WriteString("- rows/s excludes the generator's own time (timed around each batch and subtracted); it includes building Arrow records from the rows, Parquet encoding, the commit, and for the writer scenarios the upsert work. The baselines write the stream's final live rows (the same table content) with no upsert work; iceberg-go's append and the upsert writer both encode on a goroutine of their own while the rows come in, so the subtracted generator time overlapped some of their work and their figures are, if anything, flattering; the floor encodes on the generator's goroutine and is not flattered.\n")
	b.WriteString("- rows/CPU-s divides by the CPU time (user + system, all threads, from getrusage) the process used in the timed phase, less the generator's time: a scenario that pipelines over several cores (iceberg-go's append and the upsert writer build records on one goroutine and encode them on another) shows a rows/s above its rows/CPU-s; the floor runs on one goroutine, plus the GC.\n")
	b.WriteString("- The scan reads the committed table with iceberg-go's scanner (Scan().ToArrowRecords, deletes applied) right after the write.\n")
	b.WriteString("- Ratios are taken repeat by repeat (the runs of one repeat ran next to each other) and summarized by median, min and max.\n")
}

// rate formats a per-second rate.
func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// mib formats bytes in MiB.
func mib(v float64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%.1f", v/(1<<20))
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}
