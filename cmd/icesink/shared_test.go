package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/internal/tablelint"
	"github.com/icesink/icesink/warehouse"
)

// cliModel applies changelog lines of cliSchema to a model of the table:
// id -> (id, name, v).
func cliModel(t *testing.T, m map[int64][]any, lines [][]byte) {
	t.Helper()
	var in bytes.Buffer
	for _, l := range lines {
		in.Write(l)
		in.WriteByte('\n')
	}
	dec, err := changelog.NewDecoder(&in, changelog.ChangelogJSON, cliSchema)
	if err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := dec.Next()
		if err != nil {
			return
		}
		for _, ch := range rec.Changes {
			id := ch.Row[0].(int64)
			if ch.Op.IsDelete() {
				delete(m, id)
			} else {
				m[id] = []any{id, ch.Row[1], ch.Row[2]}
			}
		}
	}
}

// cliTable reads the table back through iceberg-go's scanner, failing on
// a key read twice, and lints its snapshot.
func cliTable(t *testing.T, wh *warehouse.Warehouse) map[int64][]any {
	t.Helper()
	ctx := context.Background()
	tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"db", "t"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := tablelint.Lint(ctx, tbl); err != nil || r.Err() != nil {
		t.Fatalf("lint: %v %v", err, r.Err())
	}
	out := map[int64][]any{}
	for row, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			t.Fatal(err)
		}
		id := row[0].(int64)
		if prev, dup := out[id]; dup {
			t.Fatalf("key %d read twice: %v and %v", id, prev, row)
		}
		out[id] = slices.Clone(row) // the scanner reuses row
	}
	return out
}

// TestSharedTableAgainstModel: between runs of the sink (each killed with
// SIGKILL at a random moment and rerun), another engine appends rows,
// tags a snapshot, deletes keys with equality deletes, sets the table's
// commit retries, rolls the table back past some of the sink's epochs and
// compacts it; the input grows from run to run. After each phase the
// table equals the model (the input's changes and the foreign ones in
// the order they landed), through iceberg-go's scanner and tablelint, no
// key twice; the tag still reads.
func TestSharedTableAgainstModel(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(41, 41))
	_, lines := stream(t, rng, 8000, 1200)
	schema := writeSchema(t)
	whDir, keyDir := t.TempDir(), t.TempDir()
	ident := table.Identifier{"db", "t"}
	model := map[int64][]any{}
	done := 0
	phase := func(n int) {
		t.Helper()
		in := writeLines(t, lines[:n])
		args := []string{"run", "--warehouse", whDir, "--table", "db.t", "--schema", schema, "--input", in, "--checkpoint-rows", "400",
			"--writers", "2", "--memory-limit", "2MiB", "--key-index-dir", keyDir, "--maintain", "--compact-every", "3", "--compact-min-files", "2",
			"--retain-snapshots", "40", "--quiet"}
		killAndRerun(t, rng, args, 1, 100*time.Millisecond, 500*time.Millisecond)
		cliModel(t, model, lines[done:n])
		done = n
		if got := cliTable(t, openWarehouse(t, whDir)); !reflect.DeepEqual(got, model) {
			for id, row := range got {
				if !reflect.DeepEqual(row, model[id]) {
					t.Logf("key %d: table %#v, model %#v", id, row, model[id])
					break
				}
			}
			t.Fatalf("after input line %d: the table has %d live rows, the model %d (or they differ)", n, len(got), len(model))
		}
	}
	load := func(wh *warehouse.Warehouse) *table.Table {
		t.Helper()
		tbl, err := wh.Catalog.LoadTable(ctx, ident)
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}

	phase(2000)
	// A foreign append of keys the input never has, and a tag.
	wh := openWarehouse(t, whDir)
	sc, err := table.SchemaToArrowSchema(cliSchema, nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	for id := int64(1_000_000); id < 1_000_020; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append("foreign")
		b.Field(2).(*array.Int64Builder).Append(-id)
		model[id] = []any{id, "foreign", -id}
	}
	rec := b.NewRecordBatch()
	b.Release()
	at := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	rec.Release()
	if _, err := load(wh).AppendTable(ctx, at, 1024, nil); err != nil {
		t.Fatal(err)
	}
	at.Release()
	tagged := load(wh).CurrentSnapshot().SnapshotID
	taggedRows := len(model)
	if _, _, err := wh.Catalog.CommitTable(ctx, ident, nil, []table.Update{table.NewSetSnapshotRefUpdate("audit", tagged, table.TagRef, -1, -1, -1)}); err != nil {
		t.Fatal(err)
	}

	phase(4000)
	// Equality deletes of ten live keys of the input; the table's commits
	// retry on conflicts.
	eqSc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"1"})}}, nil)
	eb := array.NewRecordBuilder(memory.DefaultAllocator, eqSc)
	n := 0
	for id := range model {
		if id < 1_000_000 && n < 10 {
			eb.Field(0).(*array.Int64Builder).Append(id)
			delete(model, id)
			n++
		}
	}
	erec := eb.NewRecordBatch()
	eb.Release()
	tx := load(wh).NewTransaction()
	if err := tx.CommitEqualityDeletes(ctx, []int{1}, func(yield func(arrow.RecordBatch, error) bool) { yield(erec, nil) }, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.SetProperties(iceberg.Properties{"commit.retry.num-retries": "3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	erec.Release()

	phase(6000)
	// Roll back to a snapshot of the sink's in the middle of the last
	// phase, then compact as another engine would.
	tbl := load(wh)
	var mid table.Snapshot
	var midLine int64
	for _, s := range table.AncestorsOf(tbl.CurrentSnapshot().SnapshotID, tbl.Metadata().SnapshotByID) {
		if s.Summary == nil || s.Summary.Properties[commit.PropEpoch] == "" {
			continue
		}
		l, _ := strconv.ParseInt(s.Summary.Properties[commit.PropInputPosition], 10, 64)
		if l > 4000 && l <= 5000 {
			mid, midLine = s, l
		}
	}
	if midLine == 0 {
		t.Fatal("no snapshot of the sink between input lines 4000 and 5000 left to roll back to")
	}
	tx = tbl.NewTransaction()
	if err := tx.RollbackToSnapshot(mid.SnapshotID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The model: lines 4000-6000 again, from the snapshot's line on.
	model = map[int64][]any{}
	for id, row := range cliTable(t, wh) {
		model[id] = row
	}
	done = int(midLine)
	spark, err := commit.NewCommitter(ctx, wh.Catalog, ident, "spark")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := spark.Compact(ctx, commit.Compaction{MinInputFiles: 2}); err != nil || c.RemovedDataFiles == 0 {
		t.Fatalf("foreign compaction: %+v, %v", c, err)
	}

	phase(8000)
	checkEpochsOnce(t, whDir)
	// Time travel to the tag still reads every row it had.
	_, it, err := load(wh).Scan(table.WithSnapshotID(tagged)).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for rec, err := range it {
		if err != nil {
			t.Fatalf("reading the tag: %v", err)
		}
		rows += int(rec.NumRows())
		rec.Release()
	}
	if rows != taggedRows {
		t.Fatalf("the tag reads %d rows, it held %d", rows, taggedRows)
	}
}

// appendAfterCommits appends a row of a new key (ids from 1,000,000)
// after each commit of the sink it sees on table db.t, between two
// commits or racing the next one, until stop is closed; then it sends the
// ids appended.
func appendAfterCommits(t *testing.T, wh *warehouse.Warehouse, stop <-chan struct{}) <-chan []int64 {
	appended := make(chan []int64, 1)
	go func() {
		var ids []int64
		defer func() { appended <- ids }()
		var seen int64
		for id := int64(1_000_000); ; {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			tbl, err := wh.Catalog.LoadTable(context.Background(), table.Identifier{"db", "t"})
			if err != nil {
				continue
			}
			cur := tbl.CurrentSnapshot()
			if cur == nil || cur.SnapshotID == seen || cur.Summary == nil || cur.Summary.Properties[commit.PropEpoch] == "" {
				continue
			}
			seen = cur.SnapshotID
			if err := appendForeignRows(t, wh, []int64{id}); err != nil {
				t.Errorf("foreign append: %v", err)
				return
			}
			ids = append(ids, id)
			id++
		}
	}()
	return appended
}

// appendForeignRows appends rows of new keys (id, "foreign", -id) with
// iceberg-go's write path, retrying when the sink's commits move the
// table, as another application would.
func appendForeignRows(t *testing.T, wh *warehouse.Warehouse, ids []int64) error {
	ctx := context.Background()
	sc, err := table.SchemaToArrowSchema(cliSchema, nil, true, false)
	if err != nil {
		return err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append("foreign")
		b.Field(2).(*array.Int64Builder).Append(-id)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	at := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer at.Release()
	for attempt := 0; ; attempt++ {
		tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"db", "t"})
		if err == nil {
			if _, err = tbl.AppendTable(ctx, at, 1024, nil); err == nil {
				return nil
			}
		}
		if attempt == 50 {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForeignWriterDuringRun: another application appends rows while the
// sink runs; every append is followed (the writers rebuild their key
// indexes before the next commit) or, when it lands while the sink is
// committing, the refused epoch is started again from the table by the
// command itself: a file is read again, a pipe from its journal. The run
// exits 0 and the table holds the input's final state and every foreign
// row. Before, the first foreign commit stopped the run, and later the
// first lost race stopped a run reading a pipe.
func TestForeignWriterDuringRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command for seconds")
	}
	for _, input := range []string{"file", "pipe"} {
		t.Run(input, func(t *testing.T) { foreignWriterDuringRun(t, input) })
	}
}

func foreignWriterDuringRun(t *testing.T, input string) {
	rng := rand.New(rand.NewPCG(43, 43))
	in, lines := stream(t, rng, 30000, 2000)
	schema := writeSchema(t)
	whDir := t.TempDir()
	args := []string{"run", "--warehouse", whDir, "--table", "db.t", "--schema", schema, "--input", in, "--checkpoint-rows", "400",
		"--commit-interval", "8", "--writers", "2", "--memory-limit", "4MiB", "--stats"}
	// The table exists before the foreign writer starts.
	if _, stderr, code := icesink(t, append(slices.Clone(args[:len(args)-1]), "--quiet", "--input", writeLines(t, lines[:1]))...); code != 0 {
		t.Fatalf("creating the table: %s", stderr)
	}
	var stdin io.Reader
	if input == "pipe" {
		data, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		args[slices.Index(args, in)] = "-"
		stdin = bytes.NewReader(data) // exec copies it through a pipe
	}
	wh := openWarehouse(t, whDir)
	stop := make(chan struct{})
	appended := appendAfterCommits(t, wh, stop)
	// A run that hangs dumps its goroutines (SIGQUIT) into the failure.
	rctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, binary, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	var out syncBuffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &out, stdin
	err := cmd.Run()
	close(stop)
	ids := <-appended
	if err != nil {
		t.Fatalf("the run failed: %v\n%s", err, out.String())
	}
	model := map[int64][]any{}
	cliModel(t, model, lines)
	for _, id := range ids {
		model[id] = []any{id, "foreign", -id}
	}
	if got := cliTable(t, wh); !reflect.DeepEqual(got, model) {
		t.Fatalf("the table has %d live rows, the model %d (or they differ)\n%s", len(got), len(model), out.String())
	}
	if len(ids) == 0 {
		t.Fatal("no foreign append landed during the run")
	}
	restarts := strings.Count(out.String(), "starting again from the table")
	t.Logf("%d foreign appends during the run; %d restarts", len(ids), restarts)
	if restarts == 0 {
		// A quiet machine commits fast: the appends may all land between
		// commits (then every one is followed, and the restart is not
		// tried this time; a loaded one races several).
		t.Log("no commit lost a race to a foreign append this time: the restart was not tried")
	}
}
