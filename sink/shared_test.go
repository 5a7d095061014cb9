package sink_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// runInput runs input through the sink into the table and returns the
// result (failing the test on an error).
func runInput(t *testing.T, cfg sink.Config, input []byte) sink.Result {
	t.Helper()
	dec, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sink.Run(context.Background(), cfg, dec)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkModel compares the table with the model of the whole input.
func checkModel(t *testing.T, wh *warehouse.Warehouse, ident table.Identifier, input []byte) {
	t.Helper()
	want := modelUpTo(t, input, changelog.ChangelogJSON, 1<<62)
	got := liveRowsOf(t, context.Background(), wh, ident)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("table has %d live rows, the model %d (or they differ)", len(got), len(want))
	}
}

// TestRollbackResumesFromTable: the table's branch is rolled back past
// half of the sink's epochs (the table properties still name the last
// one); the rerun resumes after the epoch the table really holds, writes
// the rolled-back input again, and the table equals the model. Before, it
// resumed after the last epoch, committed nothing, and the rolled-back
// lines were lost.
func TestRollbackResumesFromTable(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []deltawriter.DeleteMode{deltawriter.DeleteByPosition, deltawriter.DeleteByEquality} {
		t.Run(mode.String(), func(t *testing.T) {
			wh, ident := newWarehouse(t)
			input := genInput(t, 11, 3000, 400)
			cfg := sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "rb", Writers: 2, CheckpointRows: 150,
				StateDir: t.TempDir(), Writer: deltawriter.Options{SpillDir: t.TempDir(), DeleteMode: mode, KeyIndexDir: t.TempDir()}}
			first := runInput(t, cfg, input)
			checkModel(t, wh, ident, input)

			tbl, err := wh.Catalog.LoadTable(ctx, ident)
			if err != nil {
				t.Fatal(err)
			}
			var snaps []table.Snapshot
			for _, s := range table.AncestorsOf(tbl.CurrentSnapshot().SnapshotID, tbl.Metadata().SnapshotByID) {
				if s.Summary != nil && s.Summary.Properties[commit.PropEpoch] != "" {
					snaps = append(snaps, s) // the sink's epochs, not its claim
				}
			}
			if len(snaps) < 6 {
				t.Fatalf("%d snapshots, want more to roll back", len(snaps))
			}
			target := snaps[len(snaps)/2]
			line, _ := strconv.ParseInt(target.Summary.Properties[commit.PropInputPosition], 10, 64)
			tx := tbl.NewTransaction()
			if err := tx.RollbackToSnapshot(target.SnapshotID); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			res := runInput(t, cfg, input)
			if res.Start.Line != line || res.Start.RolledBack != first.Committed.Epoch {
				t.Fatalf("rerun started at line %d (rolled back past epoch %d), want line %d (past epoch %d)", res.Start.Line, res.Start.RolledBack, line, first.Committed.Epoch)
			}
			if res.Commits == 0 {
				t.Fatal("the rerun committed nothing")
			}
			checkModel(t, wh, ident, input)
			// A third run has nothing left to do.
			if again := runInput(t, cfg, input); again.Commits != 0 || again.Start.RolledBack != 0 {
				t.Fatalf("third run: %d commits, rolled back %d; want none", again.Commits, again.Start.RolledBack)
			}
			checkModel(t, wh, ident, input)
		})
	}
}

// TestSecondRunOfSinkRefused: while a run of a sink holds its state
// folder, a second run of the same sink on it (a rolling deploy, a
// restart that did not wait) is refused at once; before, each removed the
// other's checkpoints and in-flight files. Once the first run ends, the
// same command runs.
func TestSecondRunOfSinkRefused(t *testing.T) {
	ctx := context.Background()
	wh, ident := newWarehouse(t)
	input := genInput(t, 5, 600, 100)
	cfg := sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "twin", Writers: 2, CheckpointRows: 100,
		StateDir: t.TempDir(), Writer: deltawriter.Options{SpillDir: t.TempDir()}}

	pr, pw := io.Pipe()
	started := make(chan struct{})
	var once sync.Once
	first := cfg
	first.Progress = func(p sink.Progress) {
		if p.Line > 0 {
			once.Do(func() { close(started) })
		}
	}
	dec, err := changelog.NewDecoder(pr, changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := sink.Run(ctx, first, dec)
		done <- err
	}()
	// The first 150 lines: at least one checkpoint, which reports.
	cut := 0
	for range 150 {
		cut += bytes.IndexByte(input[cut:], '\n') + 1
	}
	go func() {
		pw.Write(input[:cut])
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the first run ended early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the first run read nothing in 30 s")
	}

	dec2, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Run(ctx, cfg, dec2); !errors.Is(err, sink.ErrSinkRunning) {
		t.Fatalf("a second run of the sink on its state folder: %v, want ErrSinkRunning", err)
	}

	pw.Write(input[cut:])
	pw.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the first run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the first run did not end in 60 s")
	}
	runInput(t, cfg, input)
	checkModel(t, wh, ident, input)
}

// applyChunk applies the changes of the changelog lines in chunk to m.
func applyChunk(t *testing.T, m map[string][]any, chunk []byte) {
	t.Helper()
	dec, err := changelog.NewDecoder(bytes.NewReader(chunk), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	kc, _ := deltawriter.NewKeyCodec(fuzzSchema)
	for {
		rec, err := dec.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range rec.Changes {
			k, _ := kc.Append(nil, ch.Row)
			if ch.Op.IsDelete() {
				delete(m, string(k))
			} else {
				m[string(k)] = ch.Row
			}
		}
	}
}

// foreignEqualityDelete deletes the keys (id, k) of rows with iceberg-go's
// equality-delete writer, as another engine's merge-on-read delete would.
func foreignEqualityDelete(t *testing.T, ctx context.Context, wh *warehouse.Warehouse, ident table.Identifier, rows [][]any) {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"1"})},
		{Name: "k", Type: arrow.BinaryTypes.String, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"2"})},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r[0].(int64))
		b.Field(1).(*array.StringBuilder).Append(r[1].(string))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl, err := wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	records := func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) }
	if err := tx.CommitEqualityDeletes(ctx, []int{1, 2}, records, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestForeignChangesFollowed: between two of the sink's commits another
// engine appends rows, deletes keys with equality deletes and compacts the
// table; the run goes on by itself (its writers rebuild their key indexes
// from the table before they resolve the next window), later changes of
// the foreign rows' keys reach them, and the table equals the model: the
// input's changes and the foreign ones in the order they landed, with no
// equality delete of the sink's. Before, the run stopped at the first
// foreign change ("changed by another writer").
func TestForeignChangesFollowed(t *testing.T) {
	ctx := context.Background()
	wh, ident := newWarehouse(t)
	input := genInput(t, 23, 2400, 250)
	var chunks [][]byte
	for i, cut := 0, 0; i < 4; i++ {
		end := len(input)
		if i < 3 {
			end = cut
			for range 600 {
				end += bytes.IndexByte(input[end:], '\n') + 1
			}
		}
		chunks = append(chunks, bytes.Clone(input[cut:end]))
		cut = end
	}
	// Changes of the foreign rows' keys, after they landed.
	chunks[2] = append(chunks[2], `{"op":"+U","data":{"id":90000,"k":"f","v":7,"d":"1.00"}}`+"\n"+`{"op":"-D","data":{"id":90001,"k":"g","d":"0"}}`+"\n"...)
	for i := range chunks {
		chunks[i] = append(chunks[i], changelog.BarrierLine+"\n"...)
	}
	var all []byte
	var ends []int64 // the line each chunk ends at
	for _, c := range chunks {
		all = append(all, c...)
		ends = append(ends, int64(bytes.Count(all, []byte("\n"))))
	}

	cfg := sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "s", Writers: 2, CheckpointRows: 150,
		StateDir: t.TempDir(), Writer: deltawriter.Options{SpillDir: t.TempDir(), MemoryLimit: 256 << 10}}
	pr, pw := io.Pipe()
	dec, err := changelog.NewDecoder(pr, changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res sink.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := sink.Run(ctx, cfg, dec)
		done <- outcome{res, err}
	}()
	// committed waits until the table holds the input up to line n.
	committed := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			pos, err := sink.Resume(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "s"})
			if err == nil && pos.Line >= n {
				return
			}
			select {
			case o := <-done:
				t.Fatalf("the run ended before line %d was committed: %v", n, o.err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("line %d not committed in 60 s (at %d, %v)", n, pos.Line, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	feed := func(i int) {
		t.Helper()
		go pw.Write(chunks[i])
		committed(ends[i])
	}
	model := map[string][]any{}
	kc, _ := deltawriter.NewKeyCodec(fuzzSchema)

	feed(0)
	applyChunk(t, model, chunks[0])
	foreign := [][]any{{int64(90000), "f", int32(1), int64(100)}, {int64(90001), "g", int32(2), int64(200)}, {int64(90002), "h", int32(3), int64(300)}}
	foreignAppend(t, ctx, wh, ident, foreign)
	for _, r := range foreign {
		row := []any{r[0], r[1], r[2], decimalOf(r[3].(int64))}
		k, _ := kc.Append(nil, row)
		model[string(k)] = row
	}

	feed(1)
	applyChunk(t, model, chunks[1])
	var gone [][]any
	for _, row := range model {
		if len(gone) < 8 && row[0].(int64) < 90000 {
			gone = append(gone, row)
		}
	}
	foreignEqualityDelete(t, ctx, wh, ident, gone)
	for _, row := range gone {
		k, _ := kc.Append(nil, row)
		delete(model, string(k))
	}

	feed(2)
	applyChunk(t, model, chunks[2])
	spark, err := commit.NewCommitter(ctx, wh.Catalog, ident, "spark")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := spark.Compact(ctx, commit.Compaction{MinInputFiles: 2}); err != nil || c.RemovedDataFiles == 0 {
		t.Fatalf("the foreign compaction: %+v, %v", c, err)
	}

	go func() {
		pw.Write(chunks[3])
		pw.Close()
	}()
	applyChunk(t, model, chunks[3])
	var o outcome
	select {
	case o = <-done:
	case <-time.After(120 * time.Second):
		t.Fatal("the run did not end in 120 s")
	}
	if o.err != nil {
		t.Fatalf("the run stopped: %v", o.err)
	}
	if got := liveRowsOf(t, ctx, wh, ident); !reflect.DeepEqual(got, model) {
		t.Fatalf("table has %d live rows, the model %d (or they differ)", len(got), len(model))
	}
	if st := o.res.Stats; st.EqualityDeletes != 0 || st.IndexForeignRebuilds < 2*3 {
		t.Fatalf("%d equality-delete rows, %d key index rebuilds after foreign changes; want 0 and one per writer and change (6)", st.EqualityDeletes, st.IndexForeignRebuilds)
	}
}

// rollbackSource passes its source's records on, and at line at (a
// barrier) waits until the table holds epochs of the sink, then rolls the
// branch back to the sink's first one.
type rollbackSource struct {
	sink.Source
	t     *testing.T
	wh    *warehouse.Warehouse
	ident table.Identifier
	at    int64
	done  bool
}

func (s *rollbackSource) Next() (changelog.Record, error) {
	rec, err := s.Source.Next()
	if err != nil || s.done || rec.Line < s.at || !rec.Barrier {
		return rec, err
	}
	s.done = true
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tbl, err := s.wh.Catalog.LoadTable(ctx, s.ident)
		if err != nil {
			return rec, err
		}
		var snaps []table.Snapshot
		if cur := tbl.CurrentSnapshot(); cur != nil {
			for _, sn := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
				if sn.Summary != nil && sn.Summary.Properties[commit.PropEpoch] != "" {
					snaps = append(snaps, sn)
				}
			}
		}
		if len(snaps) >= 3 {
			tx := tbl.NewTransaction()
			if err := tx.RollbackToSnapshot(snaps[len(snaps)-1].SnapshotID); err != nil {
				return rec, err
			}
			_, err := tx.Commit(ctx)
			return rec, err
		}
		if time.Now().After(deadline) {
			s.t.Errorf("the sink committed %d epochs in 30 s, want 3 before the rollback", len(snaps))
			return rec, errors.New("no epochs to roll back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRollbackDuringRun: the branch is rolled back while a run goes on, in
// either delete mode; the run's next commit notices (ErrRolledBack, which
// the command answers by restarting from its input), nothing is committed
// on top of the rolled-back branch, and the rerun writes the lost epochs
// again: the table equals the model. Before, an equality-mode run
// committed its next epochs on the rolled-back branch and the lost input
// was skipped for good (issue 46 item 2).
func TestRollbackDuringRun(t *testing.T) {
	for _, mode := range []deltawriter.DeleteMode{deltawriter.DeleteByPosition, deltawriter.DeleteByEquality} {
		t.Run(mode.String(), func(t *testing.T) {
			wh, ident := newWarehouse(t)
			input := genInput(t, 13, 3000, 400)
			cfg := sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "rb", Writers: 2, CheckpointRows: 150,
				StateDir: t.TempDir(), Writer: deltawriter.Options{SpillDir: t.TempDir(), DeleteMode: mode}}
			dec, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
			if err != nil {
				t.Fatal(err)
			}
			_, err = sink.Run(context.Background(), cfg, &rollbackSource{Source: dec, t: t, wh: wh, ident: ident, at: 1200})
			// (In position mode the writers' Follow may see it first: its
			// base is off the branch.)
			if !errors.Is(err, commit.ErrForeignChange) || (mode == deltawriter.DeleteByEquality && !errors.Is(err, commit.ErrRolledBack)) {
				t.Fatalf("the run after the rollback: %v, want ErrRolledBack (ErrForeignChange)", err)
			}
			res := runInput(t, cfg, input)
			if res.Start.RolledBack == 0 {
				t.Errorf("the rerun did not see the rollback")
			}
			checkModel(t, wh, ident, input)
		})
	}
}

// TestFailedStartReportsTable: a run that fails at its start (here: a key
// index folder other users may write) reports what the table holds of the
// sink, not "line 0, epoch 0" (issue 46 item 21).
func TestFailedStartReportsTable(t *testing.T) {
	wh, ident := newWarehouse(t)
	input := genInput(t, 3, 600, 100)
	cfg := sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "fs", CheckpointRows: 100, StateDir: t.TempDir(), Writer: deltawriter.Options{SpillDir: t.TempDir()}}
	first := runInput(t, cfg, input)
	if first.Committed.Epoch == 0 {
		t.Fatal("the first run committed nothing")
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg.KeyIndexDir = open
	dec, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sink.Run(context.Background(), cfg, dec)
	if err == nil {
		t.Fatal("a run with a key index folder of mode 0777 started")
	}
	if !res.CommittedKnown || res.Committed.Epoch != first.Committed.Epoch || res.Committed.Line != first.Committed.Line {
		t.Fatalf("the failed run reports epoch %d, line %d (known %v); the table holds epoch %d, line %d",
			res.Committed.Epoch, res.Committed.Line, res.CommittedKnown, first.Committed.Epoch, first.Committed.Line)
	}
}
