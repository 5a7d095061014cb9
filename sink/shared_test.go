package sink_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

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
