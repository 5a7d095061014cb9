package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// Stat is the median, minimum and maximum of one figure over the repeats.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// statOf returns the Stat of vs (zero when vs is empty).
func statOf(vs []float64) Stat {
	if len(vs) == 0 {
		return Stat{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: med, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Files counts the files of one kind a run wrote.
type Files struct {
	Files int   `json:"files"`
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

// ScanResult is the cost of reading a run's table back with iceberg-go's
// scanner (deletes applied).
type ScanResult struct {
	Seconds    float64 `json:"seconds"`
	Rows       int64   `json:"rows"`
	RowsPerSec float64 `json:"rows_per_sec"`
}

// RunResult is one repeat of one scenario.
type RunResult struct {
	// Repeat is the repeat's index, from 0.
	Repeat int `json:"repeat"`
	// Order is the run's position in the whole bench, from 0.
	Order int `json:"order"`
	// Rows is what the scenario was handed: changes for the writer
	// scenarios, final live rows for the baselines.
	Rows int64 `json:"rows"`
	// Seconds is the timed work: the writes and the commits (for the
	// floor, closing the file), without the generator's own time.
	Seconds float64 `json:"seconds"`
	// RowsPerSec is Rows / Seconds.
	RowsPerSec float64 `json:"rows_per_sec"`
	// CPUSeconds is the CPU time (user + system, all threads) the process
	// used in the timed phase, less the generator's time; 0 where unknown.
	// Above Seconds, the scenario used more than one core.
	CPUSeconds float64 `json:"cpu_seconds"`
	// RowsPerCPUSec is Rows / CPUSeconds.
	RowsPerCPUSec float64 `json:"rows_per_cpu_sec"`
	// StartRSS is the process's RSS when the run began, after a GC that
	// returned freed memory to the OS.
	StartRSS int64 `json:"start_rss"`
	// PeakRSS is the process's peak RSS during the run: the kernel's
	// VmHWM, reset at the run's start, when ExactPeakRSS; else the
	// largest sampled VmRSS.
	PeakRSS      int64 `json:"peak_rss"`
	ExactPeakRSS bool  `json:"exact_peak_rss"`
	// PeakHeap is the largest sampled Go heap (object bytes).
	PeakHeap int64 `json:"peak_heap"`
	// PeakAccounted is the most bytes the writer accounted at once
	// (writer scenarios).
	PeakAccounted int64 `json:"peak_accounted"`
	// Spill figures of the writer (zero when it did not spill).
	Spills        int64 `json:"spills"`
	BytesSpilled  int64 `json:"bytes_spilled"`
	Compactions   int64 `json:"compactions"`
	RunsCompacted int64 `json:"runs_compacted"`
	// Lookups of the inserted-row index, by where they were answered:
	// the memory tier, a bloom filter or range check, the block cache,
	// the disk.
	LookupsMemory int64 `json:"lookups_memory"`
	LookupsFilter int64 `json:"lookups_filter"`
	LookupsCache  int64 `json:"lookups_cache"`
	LookupsDisk   int64 `json:"lookups_disk"`
	// Files written, by kind.
	Data            Files `json:"data"`
	PositionDeletes Files `json:"position_deletes"`
	EqualityDeletes Files `json:"equality_deletes"`
	// Commits is the number of snapshots the run committed.
	Commits int `json:"commits"`
	// Scan is the cost of reading the table back (not for the floor).
	Scan *ScanResult `json:"scan,omitempty"`
	// LiveRows is the number of live keys the stream left; a scan that
	// returns another count is reported in Results.Warnings.
	LiveRows int64 `json:"live_rows"`
	// Dir is the run's folder, kept when Options.Keep.
	Dir string `json:"dir,omitempty"`
	// Series is the memory over time of the timed phase.
	Series []Sample `json:"series"`
}

// Summary is a scenario's figures over its repeats.
type Summary struct {
	RowsPerSec     Stat `json:"rows_per_sec"`
	Seconds        Stat `json:"seconds"`
	CPUSeconds     Stat `json:"cpu_seconds"`
	RowsPerCPUSec  Stat `json:"rows_per_cpu_sec"`
	PeakRSS        Stat `json:"peak_rss"`
	PeakHeap       Stat `json:"peak_heap"`
	PeakAccounted  Stat `json:"peak_accounted"`
	BytesSpilled   Stat `json:"bytes_spilled"`
	Spills         Stat `json:"spills"`
	ScanSeconds    Stat `json:"scan_seconds"`
	ScanRowsPerSec Stat `json:"scan_rows_per_sec"`
}

// ScenarioResult is one scenario with all its runs.
type ScenarioResult struct {
	Scenario
	Runs    []RunResult `json:"runs"`
	Summary Summary     `json:"summary"`
}

func (sr *ScenarioResult) summarize() {
	pick := func(f func(r *RunResult) (float64, bool)) Stat {
		var vs []float64
		for i := range sr.Runs {
			if v, ok := f(&sr.Runs[i]); ok {
				vs = append(vs, v)
			}
		}
		return statOf(vs)
	}
	all := func(f func(r *RunResult) float64) Stat {
		return pick(func(r *RunResult) (float64, bool) { return f(r), true })
	}
	sr.Summary = Summary{
		RowsPerSec:    all(func(r *RunResult) float64 { return r.RowsPerSec }),
		Seconds:       all(func(r *RunResult) float64 { return r.Seconds }),
		CPUSeconds:    all(func(r *RunResult) float64 { return r.CPUSeconds }),
		RowsPerCPUSec: all(func(r *RunResult) float64 { return r.RowsPerCPUSec }),
		PeakRSS:       all(func(r *RunResult) float64 { return float64(r.PeakRSS) }),
		PeakHeap:      all(func(r *RunResult) float64 { return float64(r.PeakHeap) }),
		PeakAccounted: all(func(r *RunResult) float64 { return float64(r.PeakAccounted) }),
		BytesSpilled:  all(func(r *RunResult) float64 { return float64(r.BytesSpilled) }),
		Spills:        all(func(r *RunResult) float64 { return float64(r.Spills) }),
		ScanSeconds: pick(func(r *RunResult) (float64, bool) {
			if r.Scan == nil {
				return 0, false
			}
			return r.Scan.Seconds, true
		}),
		ScanRowsPerSec: pick(func(r *RunResult) (float64, bool) {
			if r.Scan == nil {
				return 0, false
			}
			return r.Scan.RowsPerSec, true
		}),
	}
}

// medianRun returns the run whose rows/s is the median (the lower middle
// for an even count), the one the plots draw.
func (sr *ScenarioResult) medianRun() *RunResult {
	if len(sr.Runs) == 0 {
		return nil
	}
	idx := make([]int, len(sr.Runs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		x, y := sr.Runs[a].RowsPerSec, sr.Runs[b].RowsPerSec
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	return &sr.Runs[idx[(len(idx)-1)/2]]
}

// Ratio compares two scenarios of the same bench, repeat by repeat (the
// runs of one repeat ran next to each other, so they saw the same noise).
type Ratio struct {
	// Name says what is divided by what.
	Name string `json:"name"`
	// Value is the ratio over the repeats.
	Value Stat `json:"value"`
	// Target is the goal, e.g. ">= 0.9"; empty when there is none.
	Target string `json:"target,omitempty"`
	// Met reports whether the median meets Target (nil without a target).
	Met *bool `json:"met,omitempty"`
	// Note qualifies the figure.
	Note string `json:"note,omitempty"`
}

// Environment describes the machine a bench ran on.
type Environment struct {
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model,omitempty"`
	MemTotal   int64  `json:"mem_total,omitempty"`
	GOGC       string `json:"gogc,omitempty"`
	GOMEMLIMIT string `json:"gomemlimit,omitempty"`
}

// Config is what a bench ran, as recorded in results.json.
type Config struct {
	CommandLine    string        `json:"command_line,omitempty"`
	Stream         StreamOptions `json:"stream"`
	Mode           string        `json:"mode"`
	Scenarios      []string      `json:"scenarios"`
	Repeat         int           `json:"repeat"`
	CommitEvery    int64         `json:"commit_every"`
	TargetFileSize int64         `json:"target_file_size,omitempty"`
	SampleInterval string        `json:"sample_interval"`
	GoMemoryLimit  string        `json:"go_memory_limit,omitempty"`
}

// Results is everything one bench measured.
type Results struct {
	Config      Config           `json:"config"`
	Environment Environment      `json:"environment"`
	Started     time.Time        `json:"started"`
	Elapsed     float64          `json:"elapsed_seconds"`
	Stream      Counts           `json:"stream"`
	Scenarios   []ScenarioResult `json:"scenarios"`
	Ratios      []Ratio          `json:"ratios"`
	Warnings    []string         `json:"warnings,omitempty"`
}

// Scenario returns the result of the scenario named name, or nil.
func (r *Results) Scenario(name string) *ScenarioResult {
	for i := range r.Scenarios {
		if r.Scenarios[i].Name == name {
			return &r.Scenarios[i]
		}
	}
	return nil
}

// ReadResults reads a results.json written by WriteReport.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	return &r, nil
}
