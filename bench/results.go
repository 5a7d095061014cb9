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
	Median float64 `json:"median"` // the middle value (mean of the two middle ones for an even N)
	Min    float64 `json:"min"`    // the smallest value
	Max    float64 `json:"max"`    // the largest value
	N      int     `json:"n"`      // how many values
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
	Files int   `json:"files"` // number of files
	Rows  int64 `json:"rows"`  // rows in them
	Bytes int64 `json:"bytes"` // their size on storage
}

// ScanResult is the cost of reading a run's table back with iceberg-go's
// scanner (deletes applied).
type ScanResult struct {
	Seconds    float64 `json:"seconds"`      // wall time of the whole scan, planning included
	Rows       int64   `json:"rows"`         // live rows returned
	RowsPerSec float64 `json:"rows_per_sec"` // Rows / Seconds
}

// RebuildResult is the cost of building a new writer's key index from the
// run's committed table (what a restart pays in DeleteByPosition mode).
type RebuildResult struct {
	Seconds float64 `json:"seconds"` // wall time of deltawriter.New
	Rows    int64   `json:"rows"`    // live rows read into the index
	Files   int     `json:"files"`   // data files read
	// ReopenSeconds is the wall time of deltawriter.New taking the index
	// the rebuilt writer saved (a restart on an unchanged table).
	ReopenSeconds float64 `json:"reopen_seconds"`
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
	// StartRSSFile is the file-backed part of StartRSS: mostly the
	// binary's own pages, which every run carries.
	StartRSSFile int64 `json:"start_rss_file"`
	// PeakRSS is the process's peak RSS during the run: the kernel's
	// VmHWM, reset at the run's start, when ExactPeakRSS; else the
	// largest sampled VmRSS.
	PeakRSS      int64 `json:"peak_rss"`
	ExactPeakRSS bool  `json:"exact_peak_rss"` // PeakRSS is the run's own VmHWM
	// PeakHeap is the largest sampled Go heap (object bytes).
	PeakHeap int64 `json:"peak_heap"`
	// PeakAccounted is the most bytes the writer accounted at once
	// (writer scenarios): the larger of its own peak
	// (Stats.PeakAccountedBytes) and its BufferedBytes after each batch.
	PeakAccounted int64 `json:"peak_accounted"`
	// LocalFlushes counts the writer's early file closes and delete-buffer
	// writes to stay under its budget.
	LocalFlushes int64 `json:"local_flushes"`
	// Spill figures of the writer (zero when it did not spill).
	Spills        int64 `json:"spills"`         // sorted runs written from the memory tier
	BytesSpilled  int64 `json:"bytes_spilled"`  // their size
	Compactions   int64 `json:"compactions"`    // merges of runs
	RunsCompacted int64 `json:"runs_compacted"` // runs those merges read
	// Lookups of the inserted-row index, by where they were answered:
	// the memory tier, a bloom filter or range check, the block cache,
	// the disk.
	LookupsMemory int64 `json:"lookups_memory"` // answered by the memory tier
	LookupsFilter int64 `json:"lookups_filter"` // by a bloom filter or range check
	LookupsCache  int64 `json:"lookups_cache"`  // by the block cache
	LookupsDisk   int64 `json:"lookups_disk"`   // by a block read from disk
	// Files written, by kind.
	Data            Files `json:"data"`             // data files
	PositionDeletes Files `json:"position_deletes"` // position-delete files
	EqualityDeletes Files `json:"equality_deletes"` // equality-delete files
	// Commits is the number of snapshots the run committed.
	Commits int `json:"commits"`
	// TableCompactions counts the compaction rounds that rewrote files
	// (Options.CompactEvery); LiveDataFiles, LiveManifests and
	// LiveDeleteFiles are what the final snapshot holds.
	TableCompactions int `json:"table_compactions,omitempty"`
	LiveDataFiles    int `json:"live_data_files"`
	LiveManifests    int `json:"live_manifests"`
	LiveDeleteFiles  int `json:"live_delete_files"`
	// Scan is the cost of reading the table back (not for the floor).
	Scan *ScanResult `json:"scan,omitempty"`
	// Rebuild is the cost of rebuilding the key index from the committed
	// table (writer scenarios in position mode).
	Rebuild *RebuildResult `json:"rebuild,omitempty"`
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
	RowsPerSec     Stat `json:"rows_per_sec"`      // RunResult.RowsPerSec
	Seconds        Stat `json:"seconds"`           // RunResult.Seconds
	CPUSeconds     Stat `json:"cpu_seconds"`       // RunResult.CPUSeconds
	RowsPerCPUSec  Stat `json:"rows_per_cpu_sec"`  // RunResult.RowsPerCPUSec
	PeakRSS        Stat `json:"peak_rss"`          // RunResult.PeakRSS
	PeakHeap       Stat `json:"peak_heap"`         // RunResult.PeakHeap
	PeakAccounted  Stat `json:"peak_accounted"`    // RunResult.PeakAccounted
	BytesSpilled   Stat `json:"bytes_spilled"`     // RunResult.BytesSpilled
	Spills         Stat `json:"spills"`            // RunResult.Spills
	ScanSeconds    Stat `json:"scan_seconds"`      // ScanResult.Seconds, runs with a scan
	ScanRowsPerSec Stat `json:"scan_rows_per_sec"` // ScanResult.RowsPerSec, runs with a scan
}

// ScenarioResult is one scenario with all its runs.
type ScenarioResult struct {
	Scenario
	Runs    []RunResult `json:"runs"`    // in repeat order
	Summary Summary     `json:"summary"` // over Runs
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

// MedianRun returns the run whose rows/s is the median (the lower middle
// for an even count), the one the plots draw; nil without runs.
func (sr *ScenarioResult) MedianRun() *RunResult {
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
	GoVersion  string `json:"go_version"`           // runtime.Version()
	GOOS       string `json:"goos"`                 // runtime.GOOS
	GOARCH     string `json:"goarch"`               // runtime.GOARCH
	NumCPU     int    `json:"num_cpu"`              // runtime.NumCPU()
	GOMAXPROCS int    `json:"gomaxprocs"`           // runtime.GOMAXPROCS(0)
	CPUModel   string `json:"cpu_model,omitempty"`  // from /proc/cpuinfo
	MemTotal   int64  `json:"mem_total,omitempty"`  // bytes, from /proc/meminfo
	GOGC       string `json:"gogc,omitempty"`       // the GOGC environment variable
	GOMEMLIMIT string `json:"gomemlimit,omitempty"` // the GOMEMLIMIT environment variable
}

// Config is what a bench ran, as recorded in results.json.
type Config struct {
	CommandLine    string        `json:"command_line,omitempty"`     // Options.CommandLine
	Stream         StreamOptions `json:"stream"`                     // defaults filled in
	Mode           string        `json:"mode"`                       // "upsert" or "changelog"
	Scenarios      []string      `json:"scenarios"`                  // names, in order
	Repeat         int           `json:"repeat"`                     // Options.Repeat
	CommitEvery    int64         `json:"commit_every"`               // Options.CommitEvery
	TargetFileSize int64         `json:"target_file_size,omitempty"` // Options.TargetFileSize
	RewriteDeleted float64       `json:"rewrite_deleted,omitempty"`  // Options.RewriteDeleted
	CompactEvery   int           `json:"compact_every,omitempty"`    // Options.CompactEvery
	Scans          int           `json:"scans,omitempty"`            // Options.Scans
	SampleInterval string        `json:"sample_interval"`            // Options.SampleInterval
	GoMemoryLimit  string        `json:"go_memory_limit,omitempty"`  // the soft limit set, if any
}

// Results is everything one bench measured.
type Results struct {
	Config      Config           `json:"config"`             // what ran
	Environment Environment      `json:"environment"`        // where it ran
	Started     time.Time        `json:"started"`            // when it began (UTC)
	Elapsed     float64          `json:"elapsed_seconds"`    // how long the bench took
	Stream      Counts           `json:"stream"`             // the events of the stream
	Scenarios   []ScenarioResult `json:"scenarios"`          // in Config.Scenarios order
	Ratios      []Ratio          `json:"ratios"`             // between scenarios, with targets
	Warnings    []string         `json:"warnings,omitempty"` // wrong scans, budgets exceeded
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
