package deltawriter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/tablelint"
)

// TestKeyIndexFollowsCompaction: the sink's own compactions run between
// commits (small files rewritten with their deletes applied) and the
// writer's key index follows the moved rows (Follow), so later updates and
// deletes of keys in compacted files delete the right rows. The table
// reads back as the model, has fewer files than without compaction, and
// no equality delete. A writer that does not follow is refused.
func TestKeyIndexFollowsCompaction(t *testing.T) {
	for _, version := range []int{2, 3} {
		for _, limit := range []int64{0, 256 << 10} {
			t.Run(fmt.Sprint("v", version, "/limit", limit), func(t *testing.T) {
				testFollowCompaction(t, version, limit)
			})
		}
	}
}

func testFollowCompaction(t *testing.T, version int, limit int64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, uint64(limit)+uint64(version)))
	e := newEnvVersion(t, simpleSchema, nil, version)
	m := newModel(t, simpleSchema)
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, MemoryLimit: limit, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	const commits, per = 40, 150
	stream := randomStream(rng, commits*per, 1200)
	var compacted commit.Compacted
	for c := 0; c < commits; c++ {
		for _, ch := range stream[c*per : (c+1)*per] {
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
			m.apply(ch)
		}
		e.commitWindow(w, uint64(c+1))
		if c%8 == 7 {
			lint(t, e.tbl)
			res, err := e.cm.Compact(ctx, commit.Compaction{MinInputFiles: 4})
			if err != nil {
				t.Fatal(err)
			}
			compacted.RemovedDataFiles += res.RemovedDataFiles
			compacted.RemovedDeleteFiles += res.RemovedDeleteFiles
			e.tbl = e.cm.Table()
			m.check(t, e.tbl)
			lint(t, e.tbl)
			if err := w.Follow(ctx, e.tbl); err != nil {
				t.Fatal(err)
			}
		}
	}
	m.check(t, e.tbl)
	lint(t, e.tbl)
	checkNoEqualityDeletes(t, w)
	st := w.Stats()
	if compacted.RemovedDataFiles == 0 || compacted.RemovedDeleteFiles == 0 || st.IndexFollowedRows == 0 || st.OldRowsDeleted == 0 {
		t.Fatalf("compactions removed %d data and %d delete files; the index followed %d rows; %d old rows deleted: want all > 0",
			compacted.RemovedDataFiles, compacted.RemovedDeleteFiles, st.IndexFollowedRows, st.OldRowsDeleted)
	}
	tasks, err := e.tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) >= commits {
		t.Errorf("%d data files after %d commits with compactions", len(tasks), commits)
	}
	t.Logf("removed %d data and %d delete files; %d data files left; followed %d rows", compacted.RemovedDataFiles, compacted.RemovedDeleteFiles, len(tasks), st.IndexFollowedRows)

	// A compaction the writer does not follow: its next commit is refused.
	for c := 0; c < 3; c++ {
		for _, ch := range stream[c*per : (c+1)*per] {
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
		}
		if c < 2 {
			e.commitWindow(w, uint64(commits+1+c))
		}
	}
	if res, err := e.cm.Compact(ctx, commit.Compaction{MinInputFiles: 2}); err != nil || res.RemovedDataFiles == 0 {
		t.Fatalf("compaction: %+v %v", res, err)
	}
	p, err := w.PrepareCommit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cm.Commit(ctx, commits+3, []commit.Payload{p}, nil); !errors.Is(err, commit.ErrForeignChange) {
		t.Fatalf("a window resolved before a compaction it did not follow: %v, want ErrForeignChange", err)
	}
}

// TestCompactionRacingCommit: a compaction planned on a table that a sink
// commit changed meanwhile (deletes of rows in files it rewrites) does not
// lose the deletes: the table reads back as the model either way.
func TestCompactionRacingCommit(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 5))
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	stream := randomStream(rng, 12*200, 600)
	for c := 0; c < 10; c++ {
		for _, ch := range stream[c*200 : (c+1)*200] {
			w.Write(ctx, ch)
			m.apply(ch)
		}
		e.commitWindow(w, uint64(c+1))
	}
	// The maintenance committer loads the table now.
	maint, err := commit.NewCommitter(ctx, e.wh.Catalog, e.tbl.Identifier(), "test")
	if err != nil {
		t.Fatal(err)
	}
	// The sink commits deletes and updates of old rows meanwhile.
	for _, ch := range stream[10*200 : 11*200] {
		w.Write(ctx, ch)
		m.apply(ch)
	}
	e.commitWindow(w, 11)
	// iceberg-go refuses the rewrite planned on the older table; Compact
	// plans again on the current one.
	res, err := maint.Compact(ctx, commit.Compaction{MinInputFiles: 2})
	if err != nil || res.RemovedDataFiles == 0 {
		t.Fatalf("the compaction racing a commit: %+v %v", res, err)
	}
	tbl, err := e.wh.Catalog.LoadTable(ctx, e.tbl.Identifier())
	if err != nil {
		t.Fatal(err)
	}
	m.check(t, tbl)
	lint(t, tbl)
}

// lint fails t when tablelint finds a problem in tbl's current snapshot.
func lint(t *testing.T, tbl *table.Table) {
	t.Helper()
	r, err := tablelint.Lint(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("table lint: %v", err)
	}
}

// TestCompactionKeepsDeletesOfKeptFiles: a round that rewrites only the
// small files (the big one of an earlier round stays: size-tiered) must
// keep the position-delete files that also delete rows of the big one
// (iceberg-go v0.7.0 marks every delete file attached to a rewritten file
// safe to drop; those rows came back before the fix).
func TestCompactionKeepsDeletesOfKeptFiles(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(8, 8))
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	stream := randomStream(rng, 14*400, 4000)
	epoch := uint64(0)
	write := func(n int) {
		for range n {
			for _, ch := range stream[:400] {
				if err := w.Write(ctx, ch); err != nil {
					t.Fatal(err)
				}
				m.apply(ch)
			}
			stream = stream[400:]
			epoch++
			e.commitWindow(w, epoch)
		}
	}
	compact := func() commit.Compacted {
		res, err := e.cm.Compact(ctx, commit.Compaction{MinInputFiles: 2})
		if err != nil {
			t.Fatal(err)
		}
		e.tbl = e.cm.Table()
		m.check(t, e.tbl)
		lint(t, e.tbl)
		if err := w.Follow(ctx, e.tbl); err != nil {
			t.Fatal(err)
		}
		return res
	}
	write(10)
	if res := compact(); res.RemovedDataFiles != 10 {
		t.Fatalf("the first round rewrote %d files, want all 10", res.RemovedDataFiles)
	}
	// Two small windows update keys of the big file: their delete files
	// name it and their own files.
	write(2)
	res := compact()
	if res.RemovedDataFiles != 2 {
		t.Fatalf("the second round rewrote %d files, want the 2 small ones", res.RemovedDataFiles)
	}
	write(2)
	m.check(t, e.tbl)
	lint(t, e.tbl)
}

// TestCompactionDropsEqualityDeletes: a table written with equality
// deletes (--delete-mode equality) keeps none once a round rewrote every
// file they apply to; it reads back as the model.
func TestCompactionDropsEqualityDeletes(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 9))
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, DeleteMode: deltawriter.DeleteByEquality})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	stream := randomStream(rng, 6*300, 500)
	for c := 0; c < 6; c++ {
		for _, ch := range stream[c*300 : (c+1)*300] {
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
			m.apply(ch)
		}
		e.commitWindow(w, uint64(c+1))
	}
	eqFiles := func() int {
		tasks, err := e.tbl.Scan().PlanFiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, tk := range tasks {
			for _, d := range tk.EqualityDeleteFiles {
				seen[d.FilePath()] = true
			}
		}
		return len(seen)
	}
	if eqFiles() == 0 {
		t.Fatal("the equality-mode table has no equality deletes to begin with")
	}
	res, err := e.cm.Compact(ctx, commit.Compaction{MinInputFiles: 2})
	if err != nil || res.RemovedDataFiles != 6 {
		t.Fatalf("compaction: %+v %v", res, err)
	}
	e.tbl = e.cm.Table()
	m.check(t, e.tbl)
	lint(t, e.tbl)
	if n := eqFiles(); n != 0 {
		t.Errorf("%d equality-delete files still apply after every data file was rewritten", n)
	}
	snap := e.tbl.CurrentSnapshot()
	if v := snap.Summary.Properties["total-equality-deletes"]; v != "" && v != "0" {
		t.Errorf("the snapshot still holds %s equality-delete rows", v)
	}
}

// dataPaths lists the data files of tbl's current snapshot.
func dataPaths(t *testing.T, tbl *table.Table) map[string]bool {
	t.Helper()
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, task := range tasks {
		out[task.File.FilePath()] = true
	}
	return out
}

// TestFollowCompactionOfDuplicateKeys: keys live twice (another
// application appended rows of live keys) go through the sink's own
// compactions that rewrite neither, one or both of a key's files, with
// Follow after each; a later change of every such key deletes all its
// rows (two each) and no key reads back twice. It covers the rebuild's
// side table of duplicate keys in followRewrite: the rows of removed files
// are dropped and the moved ones taken (before, no test ran that code).
func TestFollowCompactionOfDuplicateKeys(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	write := func(w *deltawriter.Writer, from, to int, s string, v int64) {
		t.Helper()
		for k := from; k < to; k++ {
			ch := deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(k), s, v}}
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
			m.apply(ch)
		}
	}
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	before := dataPaths(t, e.tbl)
	added := func() string { // the one data file added since before
		t.Helper()
		now := dataPaths(t, e.tbl)
		var out []string
		for p := range now {
			if !before[p] {
				out = append(out, p)
			}
		}
		before = now
		if len(out) != 1 {
			t.Fatalf("%d data files added, want 1: %v", len(out), out)
		}
		return out[0]
	}
	write(w, 0, 100, "a", 1)
	e.commitWindow(w, 1)
	a1 := added()
	write(w, 100, 200, "a", 2)
	e.commitWindow(w, 2)
	a2 := added()
	w.Close(ctx)

	// Duplicates: keys 0-9 and 50-59 (live in a1), 100-109 (in a2).
	var f [3]string
	for i, first := range []int{0, 100, 50} {
		var rows [][]any
		for k := first; k < first+10; k++ {
			rows = append(rows, []any{int64(k), "dup", int64(-1)})
		}
		appendForeign(t, ctx, e, rows)
		f[i] = added()
	}
	f1, f2, f3 := f[0], f[1], f[2]
	w, err = deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if n := w.Stats().IndexDuplicateKeys; n != 30 {
		t.Fatalf("the rebuild found %d duplicated keys, want 30", n)
	}
	compact := func(files ...string) {
		t.Helper()
		pick := map[string]bool{}
		for _, p := range files {
			pick[p] = true
		}
		res, err := e.cm.Compact(ctx, commit.Compaction{MinInputFiles: 2, Select: func(p string) bool { return pick[p] }})
		if err != nil || res.RemovedDataFiles != len(files) {
			t.Fatalf("compacting %d files: %+v, %v", len(files), res, err)
		}
		e.tbl = e.cm.Table()
		lint(t, e.tbl)
		if err := w.Follow(ctx, e.tbl); err != nil {
			t.Fatal(err)
		}
		before = dataPaths(t, e.tbl)
	}
	// Round 1: keys 0-9 both files, 50-59 one (a1), 100-109 neither.
	compact(a1, f1)
	// Round 2: keys 100-109 one file (f2), 50-59 the other (f3).
	compact(f2, f3)
	// Round 3: keys 100-109 the other (a2) with what round 1 wrote.
	var c1 string
	for p := range before {
		if p != a2 {
			c1 = p // one of the two compacted files
			break
		}
	}
	compact(a2, c1)

	// Every duplicated key changes: both of its rows go.
	write(w, 0, 10, "new", 3)
	write(w, 50, 60, "new", 3)
	write(w, 100, 110, "new", 3)
	e.commitWindow(w, 3)
	m.check(t, e.tbl)
	lint(t, e.tbl)
	if st := w.Stats(); st.OldRowsDeleted != 60 {
		t.Fatalf("%d old rows deleted, want 60 (two for each of the 30 duplicated keys)", st.OldRowsDeleted)
	}
}

// TestCompactionKeepsTaggedFiles: a tag taken before a compaction keeps
// the files the compaction replaced after the compaction's parent expired:
// time travel to the tag reads every row it had. Before, the replaced
// files were removed as soon as the parent expired (24 of a tagged
// snapshot's files were gone in the reproduction).
func TestCompactionKeepsTaggedFiles(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	rng := rand.New(rand.NewPCG(9, 9))
	stream := randomStream(rng, 20*100, 400)
	window := func(c int) {
		t.Helper()
		for _, ch := range stream[c*100 : (c+1)*100] {
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
			m.apply(ch)
		}
		e.commitWindow(w, uint64(c+1))
	}
	for c := range 6 {
		window(c)
	}
	tagged := e.tbl.CurrentSnapshot().SnapshotID
	taggedRows := len(m.rows)
	tag := []table.Update{table.NewSetSnapshotRefUpdate("before-compaction", tagged, table.TagRef, -1, -1, -1)}
	if _, _, err := e.wh.Catalog.CommitTable(ctx, e.tbl.Identifier(), nil, tag); err != nil {
		t.Fatal(err)
	}
	if err := e.cm.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	window(6)
	window(7) // the compaction's parent is not the tagged snapshot
	if res, err := e.cm.Compact(ctx, commit.Compaction{MinInputFiles: 2}); err != nil || res.RemovedDataFiles == 0 {
		t.Fatalf("compaction: %+v, %v", res, err)
	}
	e.tbl = e.cm.Table()
	if err := w.Follow(ctx, e.tbl); err != nil {
		t.Fatal(err)
	}
	for c := 8; c < 20; c++ {
		window(c)
		if _, err := e.cm.Tidy(ctx, commit.Retention{RetainSnapshots: 3}); err != nil {
			t.Fatal(err)
		}
		e.tbl = e.cm.Table()
	}
	m.check(t, e.tbl)
	if e.tbl.Metadata().SnapshotByID(tagged) == nil {
		t.Fatal("expiry removed the tagged snapshot")
	}
	_, it, err := e.tbl.Scan(table.WithSnapshotID(tagged)).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for rec, err := range it {
		if err != nil {
			t.Fatalf("time travel to the tag: %v", err)
		}
		rows += int(rec.NumRows())
		rec.Release()
	}
	if rows != taggedRows {
		t.Fatalf("the tagged snapshot reads %d rows, it held %d", rows, taggedRows)
	}
}

// TestKeyIndexFileTablePruned: after the sink's compactions, the key
// index's file table (and the KEYINDEX a clean stop saves) names only the
// data files still in the table. Before, it kept every file ever indexed.
func TestKeyIndexFileTablePruned(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, simpleSchema, nil)
	dir := t.TempDir()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", KeyIndexDir: dir, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	rng := rand.New(rand.NewPCG(4, 4))
	stream := randomStream(rng, 12*100, 300)
	for c := range 12 {
		for _, ch := range stream[c*100 : (c+1)*100] {
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
		}
		e.commitWindow(w, uint64(c+1))
		if c%4 == 3 {
			if res, err := e.cm.Compact(ctx, commit.Compaction{MinInputFiles: 2}); err != nil || res.RemovedDataFiles == 0 {
				t.Fatalf("compaction: %+v, %v", res, err)
			}
			e.tbl = e.cm.Table()
			if err := w.Follow(ctx, e.tbl); err != nil {
				t.Fatal(err)
			}
		}
	}
	if why, err := w.SaveKeyIndex(ctx, e.tbl); err != nil || why != "" {
		t.Fatalf("save: %q, %v", why, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "KEYINDEX"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Files []string }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	live := dataPaths(t, e.tbl)
	named := 0
	for _, p := range m.Files {
		if p == "" {
			continue
		}
		named++
		if !live[p] {
			t.Fatalf("the saved file table names %s, which a compaction removed", p)
		}
	}
	if named == 0 || len(m.Files) == named {
		t.Fatalf("file table of %d entries, %d named; want removed files emptied", len(m.Files), named)
	}
}
