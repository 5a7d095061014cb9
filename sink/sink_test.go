package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/pgtest"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// genInput returns n changelog-json lines of fuzzSchema over nkeys keys,
// with barriers.
func genInput(t *testing.T, seed uint64, n, nkeys int) []byte {
	t.Helper()
	return genInputKeys(t, seed, n, nkeys, 0)
}

// genInputKeys is genInput over the keys base .. base+nkeys-1.
func genInputKeys(t *testing.T, seed uint64, n, nkeys int, base int64) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	enc, err := changelog.NewEncoder(fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		k := base + int64(rng.IntN(nkeys))
		key := fmt.Sprint("k", k%7)
		var line []byte
		// A barrier (a commit) every ~100 lines, a delete every ~6.
		switch r := rng.IntN(300); {
		case r < 3:
			line = []byte(changelog.BarrierLine)
		case r < 60:
			line, err = enc.AppendChangelogJSON(nil, deltawriter.Change{Op: deltawriter.Delete, Row: []any{k, key, nil, decimalOf(0)}})
		default:
			var v any = int32(rng.IntN(1000))
			if rng.IntN(5) == 0 {
				v = nil
			}
			line, err = enc.AppendChangelogJSON(nil, deltawriter.Change{Op: deltawriter.UpdateAfter, Row: []any{k, key, v, decimalOf(int64(rng.IntN(99999)))}})
		}
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// runAndCheck runs input through the sink on the warehouse's table and
// checks the table against the model of the whole input.
func runAndCheck(t *testing.T, wh *warehouse.Warehouse, cfg sink.Config, input []byte) sink.Result {
	t.Helper()
	ctx := context.Background()
	ident := table.Identifier{"db", "t"}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
		t.Fatal(err)
	}
	cfg.Loader, cfg.Ident = wh.Catalog, ident
	dec, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sink.Run(ctx, cfg, dec)
	if err != nil {
		t.Fatal(err)
	}
	want := modelUpTo(t, input, changelog.ChangelogJSON, 1<<62)
	tbl, err := wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	got := liveRows(t, ctx, tbl)
	if len(got) != len(want) || !reflect.DeepEqual(got, want) {
		t.Fatalf("table has %d live rows, the model %d (or they differ)", len(got), len(want))
	}
	return res
}

// Parallel writers, each owning a quarter of the vnodes, commit every
// epoch together: one snapshot per commit epoch holds files of all of them.
func TestParallelWritersAgainstModel(t *testing.T) {
	for _, limit := range []int64{0, 256 << 10} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			wh, err := warehouse.Open(context.Background(), t.TempDir(), warehouse.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer wh.Close()
			input := genInput(t, 1, 20000, 16000)
			cfg := sink.Config{SinkID: "par", Writers: 4, CheckpointRows: 2500, CommitInterval: 4, StateDir: t.TempDir(),
				Writer: deltawriter.Options{MemoryLimit: limit, SpillDir: t.TempDir()}}
			res := runAndCheck(t, wh, cfg, input)
			if res.Commits == 0 || res.Committed.Line != res.Line {
				t.Errorf("commits %d, committed line %d of %d", res.Commits, res.Committed.Line, res.Line)
			}
			tbl, _ := wh.Catalog.LoadTable(context.Background(), table.Identifier{"db", "t"})
			var snaps []table.Snapshot
			for _, s := range tbl.Metadata().Snapshots() {
				if s.Summary.Operation == table.OpReplace {
					continue // a data-manifest merge (commit.Retention)
				}
				snaps = append(snaps, s)
				if s.Summary.Properties[commit.PropSinkID] != "par" {
					t.Errorf("snapshot %d without the sink id", s.SnapshotID)
				}
			}
			// Every snapshot but the last (end of input) is a commit-interval epoch.
			for _, s := range snaps[:len(snaps)-1] {
				if e, _ := strconv.Atoi(s.Summary.Properties[commit.PropEpoch]); e%4 != 0 {
					t.Errorf("snapshot of epoch %d committed off the commit interval 4", e)
				}
			}
		})
	}
}

// Parallel writers at a tiny memory limit spill their indexes, and the
// run's result says so: the summed stats are the sums of the writers' own,
// taken before the writers were closed (closing drops an index's spill
// counters).
func TestParallelWritersSpillStats(t *testing.T) {
	wh, err := warehouse.Open(context.Background(), t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	// No barriers: one window of ~5,000 new keys per writer, more than a
	// 128 KiB index share holds.
	input := bytes.ReplaceAll(genInput(t, 5, 24000, 1<<30), []byte(changelog.BarrierLine+"\n"), nil)
	cfg := sink.Config{SinkID: "spill", Writers: 4, CheckpointRows: 10000, CommitInterval: 4, StateDir: t.TempDir(),
		Writer: deltawriter.Options{MemoryLimit: 256 << 10, SpillDir: t.TempDir()}}
	res := runAndCheck(t, wh, cfg, input)
	if len(res.Writers) != cfg.Writers {
		t.Fatalf("result has the stats of %d writers, want %d", len(res.Writers), cfg.Writers)
	}
	var sum deltawriter.Stats
	for i, st := range res.Writers {
		if st.Index.Spills == 0 || st.Index.SpilledBytes == 0 {
			t.Errorf("writer %d: spills %d, spilled bytes %d; want both > 0 at a 256 KiB limit", i, st.Index.Spills, st.Index.SpilledBytes)
		}
		sum.Changes += st.Changes
		sum.DataRows += st.DataRows
		sum.LocalFlushes += st.LocalFlushes
		sum.Index.Spills += st.Index.Spills
		sum.Index.SpilledBytes += st.Index.SpilledBytes
		sum.Index.Compactions += st.Index.Compactions
		sum.Index.LookupsDisk += st.Index.LookupsDisk
		sum.PeakAccountedBytes = max(sum.PeakAccountedBytes, st.PeakAccountedBytes)
	}
	got := res.Stats
	if got.Index.Spills == 0 || got.Index.SpilledBytes == 0 {
		t.Errorf("summed stats: spills %d, spilled bytes %d; want both > 0", got.Index.Spills, got.Index.SpilledBytes)
	}
	if got.Changes != res.Changes || got.Changes != sum.Changes || got.DataRows != sum.DataRows || got.LocalFlushes != sum.LocalFlushes ||
		got.Index.Spills != sum.Index.Spills || got.Index.SpilledBytes != sum.Index.SpilledBytes ||
		got.Index.Compactions != sum.Index.Compactions || got.Index.LookupsDisk != sum.Index.LookupsDisk ||
		got.PeakAccountedBytes != sum.PeakAccountedBytes {
		t.Errorf("summed stats %+v\nwant the writers' sums %+v (changes routed: %d)", got, sum, res.Changes)
	}
}

// The aggregate size trigger commits when all writers' buffered bytes add
// up, not only on the interval.
func TestCommitBytesTrigger(t *testing.T) {
	wh, err := warehouse.Open(context.Background(), t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	input := genInput(t, 2, 8000, 3000)
	cfg := sink.Config{SinkID: "bytes", Writers: 2, CheckpointRows: 500, CommitInterval: 1000, CommitBytes: 1}
	res := runAndCheck(t, wh, cfg, input)
	if res.Commits < 5 {
		t.Errorf("the size trigger made %d commits with an interval of 1000 checkpoints; want one per checkpoint", res.Commits)
	}
}

// The same job on a real PostgreSQL catalog (the shared deployment).
func TestParallelWritersOnPostgres(t *testing.T) {
	url := pgtest.Start(t)
	wh, err := warehouse.Open(context.Background(), t.TempDir(), warehouse.Options{CatalogURI: url})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	input := genInput(t, 3, 10000, 2000)
	cfg := sink.Config{SinkID: "pg", Writers: 3, CheckpointRows: 2000, StateDir: t.TempDir()}
	runAndCheck(t, wh, cfg, input)
	// A rerun continues after the committed input: nothing is committed twice.
	res := runAndCheck(t, wh, cfg, input)
	if res.Commits != 0 || res.Start.Line == 0 {
		t.Errorf("rerun: %d commits from line %d; want none, resuming at the end", res.Commits, res.Start.Line)
	}
}

// A bad line aborts every writer's window: nothing of it is committed.
func TestBadLineAbortsAllWriters(t *testing.T) {
	wh, err := warehouse.Open(context.Background(), t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	ctx := context.Background()
	ident := table.Identifier{"db", "t"}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
		t.Fatal(err)
	}
	input := genInput(t, 4, 3000, 500)
	input = append(input, []byte("{\"op\":\"+I\",\"data\":{\"id\":1}}\n")...)
	dec, _ := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
	res, err := sink.Run(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, Writers: 3, CheckpointRows: 1000}, dec)
	var le *changelog.LineError
	if !errors.As(err, &le) || le.Line != 3001 {
		t.Fatalf("err = %v, want a LineError at line 3001", err)
	}
	if res.Committed.Line >= 3001 {
		t.Fatalf("the window with the bad line was committed (up to %d)", res.Committed.Line)
	}
	tbl, _ := wh.Catalog.LoadTable(ctx, ident)
	want := modelUpTo(t, input, changelog.ChangelogJSON, res.Committed.Line)
	n := 0
	for _, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(want) {
		t.Errorf("table has %d rows, the committed prefix (%d lines) %d", n, res.Committed.Line, len(want))
	}
}

func decimalOf(v int64) decimal128.Num { return decimal128.FromI64(v) }

// Parallel writers with RewriteDeleted: the table still reads back as the
// model (runAndCheck), the windows' mostly deleted data files were
// rewritten, and the result sums the writers' rewrites.
func TestParallelWritersRewriteDeleted(t *testing.T) {
	wh, err := warehouse.Open(context.Background(), t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	// Few keys, many changes: most rows of every window die in it.
	input := genInput(t, 9, 5000, 300)
	cfg := sink.Config{SinkID: "rw", Writers: 3, CheckpointRows: 3000, CommitInterval: 2, StateDir: t.TempDir(),
		Writer: deltawriter.Options{RewriteDeleted: 0.3, DeleteMode: deltawriter.DeleteByEquality}}
	res := runAndCheck(t, wh, cfg, input)
	var files int
	var dels int64
	for _, st := range res.Writers {
		files += st.RewrittenFiles
		dels += st.RewrittenDeletes
	}
	if files == 0 || res.Stats.RewrittenFiles != files || res.Stats.RewrittenDeletes != dels {
		t.Errorf("rewritten files %d / deletes %d summed, writers' %d / %d; want > 0 and equal", res.Stats.RewrittenFiles, res.Stats.RewrittenDeletes, files, dels)
	}
}
