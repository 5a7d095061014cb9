package deltawriter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/deltawriter"
)

// TestKeyIndexManyCommits runs 120 commits of an update-heavy stream in
// DeleteByPosition mode, restarting the writer (its key index rebuilt
// from the table) every 30 commits, with a foreign iceberg-go append of
// rows whose keys the stream later updates and deletes between restarts.
// The table must read back as the model, with no equality delete, and
// the updates of keys from old commits must have been position deletes.
func TestKeyIndexManyCommits(t *testing.T) {
	commits, per := 120, 150
	if testing.Short() {
		commits = 60
	}
	for _, limit := range []int64{0, 256 << 10} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(7, uint64(limit)))
			e := newEnv(t, simpleSchema, nil)
			m := newModel(t, simpleSchema)
			var w *deltawriter.Writer
			var old, rebuilt int64
			defer func() {
				if w != nil {
					w.Close(ctx)
				}
			}()
			stream := randomStream(rng, commits*per, 2000)
			for c := 0; c < commits; c++ {
				if c%30 == 0 {
					if w != nil {
						st := w.Stats()
						old += st.OldRowsDeleted
						checkNoEqualityDeletes(t, w)
						w.Close(ctx)
					}
					if c > 0 {
						// Another application appends rows of keys the
						// stream also writes (ids 0-1999) that are not
						// live now (an append of a live key would be a
						// duplicate); the rebuilt index must know them.
						var rows [][]any
						for k := int64(c); len(rows) < 5 && k < 2000; k += 7 {
							kb, _ := m.keys.Append(nil, []any{k, nil, nil})
							if _, live := m.rows[string(kb)]; !live {
								rows = append(rows, []any{k, "foreign", int64(-c)})
							}
						}
						appendForeign(t, ctx, e, rows)
						for _, r := range rows {
							m.apply(deltawriter.Change{Op: deltawriter.Insert, Row: r})
						}
					}
					var err error
					w, err = deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, MemoryLimit: limit, SpillDir: t.TempDir()})
					if err != nil {
						t.Fatal(err)
					}
					rebuilt += w.Stats().IndexRebuildRows
				}
				for _, ch := range stream[c*per : (c+1)*per] {
					if err := w.Write(ctx, ch); err != nil {
						t.Fatal(err)
					}
					m.apply(ch)
				}
				e.commitWindow(w, uint64(c+1))
			}
			st := w.Stats()
			old += st.OldRowsDeleted
			checkNoEqualityDeletes(t, w)
			m.check(t, e.tbl)
			if old == 0 || rebuilt == 0 {
				t.Errorf("%d old rows position-deleted, %d rows read at rebuilds: want both", old, rebuilt)
			}
			if limit > 0 && st.TableIndex.Spills == 0 {
				t.Errorf("the key index never spilled at %d bytes", limit)
			}
			t.Logf("%d old rows position-deleted, %d rows read by rebuilds, key index %+v", old, rebuilt, st.TableIndex)
		})
	}
}

// appendForeign appends rows of simpleSchema with iceberg-go's own write
// path, as another application would, and reloads the env's table.
func appendForeign(t *testing.T, ctx context.Context, e *env, rows [][]any) {
	t.Helper()
	sc, err := table.SchemaToArrowSchema(simpleSchema, nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r[0].(int64))
		b.Field(1).(*array.StringBuilder).Append(r[1].(string))
		b.Field(2).(*array.Int64Builder).Append(r[2].(int64))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	at := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer at.Release()
	tbl, err := e.tbl.AppendTable(ctx, at, 1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.tbl = tbl
	if err := e.cm.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
}
