package deltawriter_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
)

// countKinds returns the rows a payload holds per file kind.
func countKinds(p commit.Payload) map[commit.FileKind]int64 {
	n := map[commit.FileKind]int64{}
	for _, f := range p.Files {
		n[f.Kind] += f.Rows
	}
	return n
}

// TestRewriteLeavesOnlyLiveRows: with RewriteDeleted, a window whose
// position deletes are all still buffered commits data files holding
// exactly the live rows it wrote, and no position deletes; the table
// reads back as the model.
func TestRewriteLeavesOnlyLiveRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 0))
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	ctx := context.Background()
	// Small files (many per window), every one mostly deleted.
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, TargetFileSize: 32 << 10, RewriteDeleted: 0.5, DeleteMode: deltawriter.DeleteByEquality})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	for _, ch := range randomStream(rng, 20000, 1500) {
		if err := w.Write(ctx, ch); err != nil {
			t.Fatal(err)
		}
		m.apply(ch)
	}
	written := w.Stats().Changes
	p := e.commitWindow(w, 1)
	st := w.Stats()
	kinds := countKinds(p)
	if st.RewrittenFiles == 0 || st.RewrittenDeletes == 0 {
		t.Fatalf("nothing rewritten: %+v", st)
	}
	// Files below the threshold keep their deletes; the rest have none.
	if kinds[commit.DataFile]-kinds[commit.PositionDeleteFile] != int64(len(m.rows)) {
		t.Errorf("%d data rows less %d position deletes, want the %d live rows", kinds[commit.DataFile], kinds[commit.PositionDeleteFile], len(m.rows))
	}
	if kinds[commit.PositionDeleteFile]*4 > kinds[commit.DataFile] {
		t.Errorf("%d position deletes left for %d data rows after rewriting", kinds[commit.PositionDeleteFile], kinds[commit.DataFile])
	}
	if st.DataRows != kinds[commit.DataFile] || int64(st.DataFiles) != int64(len(filesOf(p, commit.DataFile))) {
		t.Errorf("stats count %d data files / %d rows, the payload %d / %d", st.DataFiles, st.DataRows, len(filesOf(p, commit.DataFile)), kinds[commit.DataFile])
	}
	t.Logf("%d changes: %d data files rewritten, %d position deletes dropped; committed %d data rows, %d position deletes, %d live",
		written, st.RewrittenFiles, st.RewrittenDeletes, kinds[commit.DataFile], kinds[commit.PositionDeleteFile], len(m.rows))
	m.check(t, e.tbl)
}

// TestRewriteSkipsFlushedDeletes: a data file some of whose deletes are in
// a position-delete file already is not rewritten (the file names it),
// and the table still reads back as the model.
func TestRewriteSkipsFlushedDeletes(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 0))
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, DeleteBufferRows: 500, RewriteDeleted: 0.01, DeleteMode: deltawriter.DeleteByEquality})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	for _, ch := range randomStream(rng, 8000, 1000) {
		if err := w.Write(ctx, ch); err != nil {
			t.Fatal(err)
		}
		m.apply(ch)
	}
	e.commitWindow(w, 1)
	if st := w.Stats(); st.RewrittenFiles != 0 || st.LocalFlushes == 0 {
		t.Errorf("rewrote %d files (local flushes %d): the one data file's deletes were flushed", st.RewrittenFiles, st.LocalFlushes)
	}
	m.check(t, e.tbl)
}

func filesOf(p commit.Payload, k commit.FileKind) []commit.File {
	var out []commit.File
	for _, f := range p.Files {
		if f.Kind == k {
			out = append(out, f)
		}
	}
	return out
}

// TestRewriteDropsFullyDeletedFile: a window data file all of whose rows
// were deleted in the window is not committed at all, and neither are its
// position deletes; the equality deletes still remove the older rows.
func TestRewriteDropsFullyDeletedFile(t *testing.T) {
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, RewriteDeleted: 0.5, DeleteMode: deltawriter.DeleteByEquality})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	write := func(op deltawriter.Op, from, to int64) {
		for k := from; k < to; k++ {
			ch := deltawriter.Change{Op: op, Row: []any{k, "n", k}}
			if err := w.Write(ctx, ch); err != nil {
				t.Fatal(err)
			}
			m.apply(ch)
		}
	}
	write(deltawriter.Insert, 0, 100)
	e.commitWindow(w, 1)
	write(deltawriter.Insert, 100, 1100)
	write(deltawriter.Delete, 100, 1100)
	write(deltawriter.Delete, 0, 10)
	p := e.commitWindow(w, 2)
	kinds := countKinds(p)
	if len(filesOf(p, commit.DataFile)) != 0 || kinds[commit.PositionDeleteFile] != 0 {
		t.Errorf("window 2 commits %d data files, %d position deletes; want none", len(filesOf(p, commit.DataFile)), kinds[commit.PositionDeleteFile])
	}
	if kinds[commit.EqualityDeleteFile] == 0 {
		t.Error("no equality deletes for the keys of window 1")
	}
	m.check(t, e.tbl)
}
