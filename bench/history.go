package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/procstat"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// HistoryOptions configure History: one sink run that commits very often,
// to show whether memory and commit cost grow with the table's history.
// Zero values take the defaults.
type HistoryOptions struct {
	// Commits is the number of commits of the run. Default 10000.
	Commits int
	// RowsPerCommit is the changes per commit (the checkpoint interval;
	// every checkpoint commits). Default 50.
	RowsPerCommit int
	// Keys is the number of distinct keys (upserts of random keys, 10% of
	// the changes to a live key are deletes). Default 5000.
	Keys int
	// MemoryLimit is the writer's budget; the Go soft memory limit is set
	// from it as `icesink run` does. Default 4 MiB.
	MemoryLimit int64
	// Milestones are the commit counts measured. Default 100, 1000 and
	// 10000 (those not past Commits), and Commits.
	Milestones []int
	// Retention is the sink's (nil: commit.DefaultRetention()).
	Retention *commit.Retention
	// WorkDir holds the run's folder, removed afterwards. Default: the OS
	// temp dir.
	WorkDir string
	// Seed seeds the stream. Default 1.
	Seed uint64
	// Progress, when set, is called after every commit.
	Progress func(commits, total int)
}

func (o HistoryOptions) withDefaults() HistoryOptions {
	if o.Commits <= 0 {
		o.Commits = 10000
	}
	if o.RowsPerCommit <= 0 {
		o.RowsPerCommit = 50
	}
	if o.Keys <= 0 {
		o.Keys = 5000
	}
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = 4 << 20
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.Milestones) == 0 {
		o.Milestones = []int{100, 1000, 10000}
	}
	var ms []int
	for _, m := range o.Milestones {
		if m > 0 && m < o.Commits {
			ms = append(ms, m)
		}
	}
	ms = append(ms, o.Commits)
	slices.Sort(ms)
	o.Milestones = slices.Compact(ms)
	return o
}

// HistoryPoint is what History measured once the run had made Commits
// commits.
type HistoryPoint struct {
	Commits int `json:"commits"`
	// RSS is the process's resident set, PeakRSS its high-water mark so
	// far (VmRSS, VmHWM; 0 off Linux).
	RSS     int64 `json:"rss"`
	PeakRSS int64 `json:"peak_rss"`
	// LiveHeap is the Go heap after a full GC.
	LiveHeap int64 `json:"live_heap"`
	// CommitMillis is the mean wall time per commit over the commits
	// just before this point (a tenth of them, at least 50): writing
	// RowsPerCommit changes, the RowDelta commit and the retention work.
	CommitMillis float64 `json:"commit_ms"`
	// MetadataBytes is the size of the table's metadata folder (metadata
	// files, manifest lists, manifests); Snapshots the snapshots it keeps.
	MetadataBytes int64 `json:"metadata_bytes"`
	Snapshots     int   `json:"snapshots"`
}

// HistoryResult is what History measured.
type HistoryResult struct {
	Options HistoryOptions `json:"options"`
	Points  []HistoryPoint `json:"points"`
	Elapsed time.Duration  `json:"elapsed"`
}

// historySchema is the stream's table: a long key and two payload columns.
func historySchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "seq", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 3, Name: "note", Type: iceberg.PrimitiveTypes.String})
}

// History runs one sink (sink.Run, the library's public pipeline) over a
// generated changelog of Commits x RowsPerCommit changes, committing every
// RowsPerCommit changes, and measures memory and commit cost at each
// milestone. The run's goroutine pauses for a full GC at each milestone.
func History(ctx context.Context, o HistoryOptions) (HistoryResult, error) {
	o = o.withDefaults()
	res := HistoryResult{Options: o}
	dir, err := os.MkdirTemp(o.WorkDir, "icesink-history-")
	if err != nil {
		return res, fmt.Errorf("bench: history: %w", err)
	}
	defer os.RemoveAll(dir)
	wh, err := warehouse.Open(ctx, filepath.Join(dir, "warehouse"), warehouse.Options{})
	if err != nil {
		return res, err
	}
	defer wh.Close()
	tbl, _, err := wh.LoadOrCreate(ctx, benchIdent(), warehouse.TableSpec{Schema: historySchema()})
	if err != nil {
		return res, err
	}
	metaDir, err := localPath(tbl.Location() + "/metadata")
	if err != nil {
		return res, err
	}

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeHistoryStream(pw, o)) }()
	defer pr.Close()
	dec, err := changelog.NewDecoder(pr, changelog.ChangelogJSON, tbl.Schema())
	if err != nil {
		return res, err
	}
	prev := debug.SetMemoryLimit(deltawriter.SoftMemoryLimit(o.MemoryLimit, 1))
	defer debug.SetMemoryLimit(prev)

	began := time.Now()
	at := make([]time.Duration, 0, o.Commits+1) // at[n]: when commit n was made
	at = append(at, 0)
	next := 0
	record := func(commits int) {
		for len(at) <= commits {
			at = append(at, time.Since(began))
			if o.Progress != nil {
				o.Progress(len(at)-1, o.Commits)
			}
		}
		for next < len(o.Milestones) && commits >= o.Milestones[next] {
			res.Points = append(res.Points, measureHistory(o.Milestones[next], at, metaDir, tbl, wh))
			next++
		}
	}
	cfg := sink.Config{
		Loader: wh.Catalog, Ident: benchIdent(), SinkID: benchSink,
		Writer:         deltawriter.Options{MemoryLimit: o.MemoryLimit, SpillDir: filepath.Join(dir, "spill")},
		CheckpointRows: int64(o.RowsPerCommit),
		Retention:      o.Retention,
		Progress:       func(p sink.Progress) { record(p.Commits) },
	}
	run, err := sink.Run(ctx, cfg, dec)
	if err != nil {
		return res, err
	}
	record(run.Commits) // the last commits land after the last checkpoint
	res.Elapsed = time.Since(began)
	return res, nil
}

// writeHistoryStream writes the changelog History reads: upserts of
// uniformly drawn keys, a tenth of the changes to live keys deletes.
func writeHistoryStream(w io.Writer, o HistoryOptions) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	rng := rand.New(rand.NewPCG(o.Seed, 0x4849))
	live := make([]bool, o.Keys)
	var line []byte
	for i := range o.Commits * o.RowsPerCommit {
		k := rng.IntN(o.Keys)
		op := "+I"
		switch {
		case live[k] && rng.IntN(10) == 0:
			op = "-D"
			live[k] = false
		case live[k]:
			op = "+U"
		default:
			live[k] = true
		}
		line = fmt.Appendf(line[:0], `{"op":%q,"data":{"id":%d,"seq":%d,"note":"change %d of key %d"}}`+"\n", op, k, i, i, k)
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func measureHistory(n int, at []time.Duration, metaDir string, tbl *table.Table, wh *warehouse.Warehouse) HistoryPoint {
	p := HistoryPoint{Commits: n}
	w := min(max(50, n/10), n/2)
	if n < len(at) && w > 0 {
		p.CommitMillis = float64(at[n]-at[n-w]) / float64(w) / float64(time.Millisecond)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.LiveHeap = int64(ms.HeapAlloc)
	st := procstat.Read()
	p.RSS, p.PeakRSS = st.RSS, st.HWM
	_ = filepath.WalkDir(metaDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				p.MetadataBytes += info.Size()
			}
		}
		return nil
	})
	if cur, err := wh.Catalog.LoadTable(context.Background(), tbl.Identifier()); err == nil {
		p.Snapshots = len(cur.Metadata().Snapshots())
	}
	return p
}

// localPath turns a file:// location into a path.
func localPath(loc string) (string, error) {
	u, err := url.Parse(loc)
	if err != nil {
		return "", fmt.Errorf("bench: location %s: %w", loc, err)
	}
	if u.Scheme != "file" && u.Scheme != "" {
		return "", fmt.Errorf("bench: location %s is not local", loc)
	}
	return u.Path, nil
}

// WriteHistoryMarkdown writes r as a table, each figure also as a ratio to
// the first milestone's.
func WriteHistoryMarkdown(w io.Writer, r HistoryResult) error {
	o := r.Options
	ret := "default"
	if o.Retention != nil {
		ret = fmt.Sprintf("retain %d snapshots, merge past %d data / %d delete manifests", o.Retention.RetainSnapshots, o.Retention.MaxDataManifests, o.Retention.MaxDeleteManifests)
	}
	fmt.Fprintf(w, "## History: %d commits of %d changes over %d keys, --memory-limit %s (retention: %s), %s\n\n",
		o.Commits, o.RowsPerCommit, o.Keys, FormatSize(o.MemoryLimit), ret, r.Elapsed.Round(time.Second))
	fmt.Fprintln(w, "| commits | RSS | peak RSS | live heap | ms/commit | metadata folder | snapshots | RSS / first | ms/commit / first |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range r.Points {
		first := r.Points[0]
		fmt.Fprintf(w, "| %d | %s | %s | %s | %.1f | %s | %d | %s | %s |\n", p.Commits,
			mib(float64(p.RSS)), mib(float64(p.PeakRSS)), mib(float64(p.LiveHeap)), p.CommitMillis,
			mib(float64(p.MetadataBytes)), p.Snapshots,
			ratio(float64(p.RSS), float64(first.RSS)), ratio(p.CommitMillis, first.CommitMillis))
	}
	_, err := fmt.Fprintln(w)
	return err
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
}
