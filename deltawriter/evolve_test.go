package deltawriter_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
)

// TestEvolveMidWindow: the table's schema changes in the middle of an open
// window (a column added, an int widened to long, a required column made
// optional); rows written before and after, updates and deletes of rows of
// either schema, across commits, under a spilling budget and with the
// rewrite at commit, read back as the model through the scanner, the
// old rows with the new column null and the int as a long.
func TestEvolveMidWindow(t *testing.T) {
	v1 := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.Int32, Required: true},
	)
	for _, b := range []struct {
		name    string
		limit   int64
		rewrite float64
	}{{"tiny", 256 << 10, 0}, {"rewrite", 1 << 30, 0.01}} {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprint(b.name, "/seed", seed), func(t *testing.T) {
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(seed, 7))
				e := newEnv(t, v1, nil)
				w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, MemoryLimit: b.limit,
					SpillDir: t.TempDir(), RewriteDeleted: b.rewrite, DeleteMode: deleteMode(b.rewrite)})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close(ctx)
				rows := map[int64][]any{} // the model, in the newest schema's layout
				evolved := false
				write := func(op deltawriter.Op, k int64) {
					t.Helper()
					var row []any
					if evolved {
						var note any
						if rng.IntN(2) == 0 {
							note = fmt.Sprint("note ", rng.IntN(100))
						}
						var name any = fmt.Sprint("n", rng.IntN(50))
						if rng.IntN(4) == 0 {
							name = nil // optional now
						}
						row = []any{k, name, rng.Int64(), note}
					} else {
						row = []any{k, fmt.Sprint("n", rng.IntN(50)), rng.Int32()}
					}
					if op.IsDelete() {
						row = append([]any{k}, make([]any, len(row)-1)...)
						if !evolved {
							row[1], row[2] = "", int32(0)
						}
					}
					if err := w.Write(ctx, deltawriter.Change{Op: op, Row: row}); err != nil {
						t.Fatal(err)
					}
					switch {
					case op.IsDelete():
						delete(rows, k)
					case evolved:
						rows[k] = row
					default:
						rows[k] = []any{k, row[1], int64(row[2].(int32)), nil}
					}
				}
				step := func(n int) {
					for range n {
						k := int64(rng.IntN(3000))
						if rng.IntN(5) == 0 {
							write(deltawriter.Delete, k)
						} else {
							write(deltawriter.UpdateAfter, k)
						}
					}
				}
				step(6000)
				e.commitWindow(w, 1)
				step(6000) // the open window the schema changes in
				tbl, err := commit.EvolveSchema(ctx, e.wh.Catalog, table.Identifier{"db", "t"}, []iceberg.NestedField{
					{Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true},
					{Name: "name", Type: iceberg.PrimitiveTypes.String},
					{Name: "note", Type: iceberg.PrimitiveTypes.String},
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Evolve(ctx, tbl.Schema()); err != nil {
					t.Fatal(err)
				}
				evolved = true
				step(6000)
				e.commitWindow(w, 2)
				step(3000)
				e.commitWindow(w, 3)
				m := newModel(t, tbl.Schema())
				for _, r := range rows {
					m.apply(deltawriter.Change{Op: deltawriter.Insert, Row: r})
				}
				m.check(t, e.tbl)
				if st := w.Stats(); st.SchemaChanges != 1 || b.rewrite > 0 && st.RewrittenFiles == 0 || b.rewrite == 0 && st.Index.Spills == 0 {
					t.Errorf("stats %+v: want one schema change and the budget's path taken", st)
				}
			})
		}
	}
}

// TestEvolveSchemaRefuses: narrowing is no change; another type, or a key
// column's type, is refused naming the table, the column and both types.
func TestEvolveSchemaRefuses(t *testing.T) {
	ctx := context.Background()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int32, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 3, Name: "d", Type: iceberg.DecimalTypeOf(10, 2)},
	)
	e := newEnv(t, schema, nil)
	ident := table.Identifier{"db", "t"}
	tbl, err := commit.EvolveSchema(ctx, e.wh.Catalog, ident, []iceberg.NestedField{{Name: "v", Type: iceberg.PrimitiveTypes.Int32}})
	if err != nil || tbl.Schema().ID != e.tbl.Schema().ID {
		t.Fatalf("a narrower type changed the schema (%v, schema %d)", err, tbl.Schema().ID)
	}
	for _, c := range []struct {
		col  iceberg.NestedField
		want string
	}{
		{iceberg.NestedField{Name: "v", Type: iceberg.PrimitiveTypes.String}, `table db.t: column "v" is long, the events now carry string`},
		{iceberg.NestedField{Name: "d", Type: iceberg.DecimalTypeOf(12, 3)}, `column "d" is decimal(10, 2), the events now carry decimal(12, 3)`},
		{iceberg.NestedField{Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}, `key column "id" is int, the events now carry long`},
	} {
		_, err := commit.EvolveSchema(ctx, e.wh.Catalog, ident, []iceberg.NestedField{c.col})
		if err == nil || !errors.Is(err, commit.ErrSchemaChange) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.col, err, c.want)
		}
	}
}
