package deltawriter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/icesink/icesink/deltawriter"
)

// allTypesSchema has a composite key over most identifier types and a
// value column of every other primitive type.
var allTypesSchema = iceberg.NewSchemaWithIdentifiers(0, []int{1, 2, 3, 4, 5},
	iceberg.NestedField{ID: 1, Name: "k_str", Type: iceberg.PrimitiveTypes.String, Required: true},
	iceberg.NestedField{ID: 2, Name: "k_int", Type: iceberg.PrimitiveTypes.Int32, Required: true},
	iceberg.NestedField{ID: 3, Name: "k_date", Type: iceberg.PrimitiveTypes.Date, Required: true},
	iceberg.NestedField{ID: 4, Name: "k_uuid", Type: iceberg.PrimitiveTypes.UUID, Required: true},
	iceberg.NestedField{ID: 5, Name: "k_dec", Type: iceberg.DecimalTypeOf(12, 3), Required: true},
	iceberg.NestedField{ID: 6, Name: "b", Type: iceberg.PrimitiveTypes.Bool},
	iceberg.NestedField{ID: 7, Name: "f", Type: iceberg.PrimitiveTypes.Float32},
	iceberg.NestedField{ID: 8, Name: "d", Type: iceberg.PrimitiveTypes.Float64},
	iceberg.NestedField{ID: 9, Name: "t", Type: iceberg.PrimitiveTypes.Time},
	iceberg.NestedField{ID: 10, Name: "ts", Type: iceberg.PrimitiveTypes.Timestamp},
	iceberg.NestedField{ID: 11, Name: "tstz", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
	iceberg.NestedField{ID: 12, Name: "bin", Type: iceberg.PrimitiveTypes.Binary},
	iceberg.NestedField{ID: 13, Name: "fix", Type: iceberg.FixedTypeOf(4)},
	iceberg.NestedField{ID: 14, Name: "l", Type: iceberg.PrimitiveTypes.Int64},
)

func allTypesRow(rng *rand.Rand, k int) []any {
	opt := func(v any) any {
		if rng.IntN(5) == 0 {
			return nil
		}
		return v
	}
	u := uuid.UUID{}
	u[0], u[15] = byte(k), byte(k>>8)
	return []any{
		fmt.Sprintf("käy-%d", k%17), int32(k % 5), int32(19000 + k%3), u, decimal128.FromI64(int64(k%7) * 1001),
		opt(rng.IntN(2) == 0), opt(rng.Float32()), opt(rng.NormFloat64()), opt(rng.Int64N(86400e6)),
		opt(rng.Int64()), rng.Int64N(1 << 50), opt([]byte(strings.Repeat("x", rng.IntN(5)))), opt([]byte{1, 2, 3, byte(k)}),
		opt(rng.Int64()),
	}
}

func TestCompositeKeysAllTypesAgainstModel(t *testing.T) {
	for _, b := range budgets {
		for _, mode := range []deltawriter.Mode{deltawriter.Upsert, deltawriter.Changelog} {
			t.Run(fmt.Sprint(b.name, "/mode", mode), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, uint64(mode)))
				e := newEnv(t, allTypesSchema, nil)
				m := newModel(t, allTypesSchema)
				ctx := context.Background()
				w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{Mode: mode, SinkID: "test", BatchRows: 100, MemoryLimit: b.limit, SpillDir: t.TempDir(), RewriteDeleted: b.rewrite, DeleteMode: deleteMode(b.rewrite)})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close(ctx)
				live := map[int]bool{}
				epoch := uint64(0)
				for i := 0; i < 8000; i++ {
					k := rng.IntN(3000)
					row := allTypesRow(rng, k)
					var chs []deltawriter.Change
					switch {
					case mode == deltawriter.Changelog && live[k] && rng.IntN(3) > 0:
						// A trusted update: -U then +U.
						chs = []deltawriter.Change{{Op: deltawriter.UpdateBefore, Row: row}, {Op: deltawriter.UpdateAfter, Row: row}}
					case mode == deltawriter.Changelog && live[k]:
						chs = []deltawriter.Change{{Op: deltawriter.Delete, Row: row}}
						live[k] = false
					case mode == deltawriter.Changelog:
						chs = []deltawriter.Change{{Op: deltawriter.Insert, Row: row}}
						live[k] = true
					case rng.IntN(4) == 0:
						chs = []deltawriter.Change{{Op: deltawriter.Delete, Row: row}}
					default:
						chs = []deltawriter.Change{{Op: deltawriter.UpdateAfter, Row: row}}
					}
					for _, ch := range chs {
						if err := w.Write(ctx, ch); err != nil {
							t.Fatal(err)
						}
						m.apply(ch)
					}
					if rng.IntN(3000) == 0 {
						epoch++
						e.commitWindow(w, epoch)
					}
				}
				checkSpilled(t, w, b.spills)
				epoch++
				e.commitWindow(w, epoch)
				checkRewritten(t, w, b.rewrite)
				m.check(t, e.tbl)
				checkNoEqualityDeletes(t, w)
			})
		}
	}
}

// TestLargeSingleWindow writes one window of a million inserts (fewer
// under the race detector) and then updates and deletes its first keys,
// which a tiny budget has spilled to disk by then: the deletes must still
// find their rows' positions.
func TestLargeSingleWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("large window")
	}
	n := int64(1_000_000)
	if raceEnabled {
		n = 200_000
	}
	// The bloom filters and block indexes of spilled runs stay in memory
	// (about 1.4 bytes per spilled key), so a million keys need a few MiB.
	t.Run("unbounded", func(t *testing.T) { testLargeWindow(t, n/4, 0, false) })
	t.Run("4MiB", func(t *testing.T) { testLargeWindow(t, n, 4<<20, true) })
}

func testLargeWindow(t *testing.T, n, limit int64, spills bool) {
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", TargetFileSize: 1 << 20, MemoryLimit: limit, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	apply := func(ch deltawriter.Change) {
		if err := w.Write(ctx, ch); err != nil {
			t.Fatal(err)
		}
		m.apply(ch)
	}
	for k := int64(0); k < n; k++ {
		apply(deltawriter.Change{Op: deltawriter.Insert, Row: []any{k, "first", k}})
	}
	for k := int64(0); k < 10_000; k++ {
		if k%2 == 0 {
			apply(deltawriter.Change{Op: deltawriter.UpdateAfter, Row: []any{k, "again", -k}})
		} else {
			apply(deltawriter.Change{Op: deltawriter.Delete, Row: []any{k, nil, nil}})
		}
	}
	for k := int64(0); k < 10_000; k += 3 {
		apply(deltawriter.Change{Op: deltawriter.Insert, Row: []any{k, "third", k * 3}})
	}
	st := w.Stats()
	if limit > 0 && st.PeakAccountedBytes > limit {
		t.Errorf("peak accounted bytes %d over the budget %d", st.PeakAccountedBytes, limit)
	}
	checkSpilled(t, w, spills)
	if spills && st.Index.LookupsSorted == 0 {
		t.Errorf("no key was resolved against a spill run: %+v", st.Index)
	}
	p := e.commitWindow(w, 1)
	// 10,000 updates and deletes of rows written in the window, then
	// re-inserts of the 1,667 of them that were updated (multiples of 6).
	if _, pos := p.Count(2); pos != 10_000+1667 {
		t.Errorf("position deletes = %d, want %d (every delete of a row written in the window)", pos, 10_000+1667)
	}
	// Every first touch is looked up in the key index at the commit (in
	// an empty table: no old row, no delete), none writes an equality
	// delete.
	if _, eqRows := p.Count(3); eqRows != 0 {
		t.Errorf("position mode wrote %d equality-delete rows", eqRows)
	}
	if st := w.Stats(); st.IndexLookups != int64(n) || st.OldRowsDeleted != 0 {
		t.Errorf("%d key-index lookups and %d old rows deleted for %d first touches into an empty table, want %d and 0", st.IndexLookups, st.OldRowsDeleted, n, n)
	}
	if dataFiles, _ := p.Count(1); limit == 0 && n >= 100_000 && dataFiles < 2 {
		t.Errorf("want the window to roll data files at 1 MiB, got %d data file(s)", dataFiles)
	}
	m.check(t, e.tbl)
}

// TestOneEqualityDeletePerKeyPerWindow: a key updated 1,000 times in a
// window yields one equality-delete row.
func TestOneEqualityDeletePerKeyPerWindow(t *testing.T) {
	e := newEnv(t, simpleSchema, nil)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", DeleteMode: deltawriter.DeleteByEquality})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	for i := int64(0); i < 1000; i++ {
		if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.UpdateAfter, Row: []any{int64(42), "x", i}}); err != nil {
			t.Fatal(err)
		}
	}
	p := e.commitWindow(w, 1)
	if _, eq := p.Count(3); eq != 1 {
		t.Errorf("equality-delete rows = %d, want 1", eq)
	}
	if _, pos := p.Count(2); pos != 999 {
		t.Errorf("position-delete rows = %d, want 999", pos)
	}
	m := newModel(t, simpleSchema)
	m.apply(deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(42), "x", int64(999)}})
	m.check(t, e.tbl)
}

func TestBadChangesWriteNothing(t *testing.T) {
	e := newEnv(t, simpleSchema, nil)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	bad := []struct {
		ch   deltawriter.Change
		want string
	}{
		{deltawriter.Change{Op: deltawriter.Insert, Row: []any{nil, "x", int64(1)}}, `key column "id" is null`},
		{deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(1), "x", nil}}, `field "v": null in a required column`},
		{deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(1), 5, int64(1)}}, `field "name"`},
		{deltawriter.Change{Op: deltawriter.Insert, Row: []any{"1", "x", int64(1)}}, `key column "id"`},
		{deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(1)}}, `row has 1 values`},
		{deltawriter.Change{Op: 9, Row: []any{int64(1), "x", int64(1)}}, `unknown op`},
	}
	for _, b := range bad {
		err := w.Write(ctx, b.ch)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Write(%v) = %v, want an error containing %q", b.ch, err, b.want)
		}
	}
	if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(1), "ok", int64(1)}}); err != nil {
		t.Fatalf("a good change after bad ones: %v", err)
	}
	p := e.commitWindow(w, 1)
	if _, rows := p.Count(1); rows != 1 {
		t.Errorf("data rows = %d, want 1", rows)
	}
}

func TestAbortRemovesWindowFiles(t *testing.T) {
	e := newEnv(t, simpleSchema, nil)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", TargetFileSize: 4 << 10, BatchRows: 256})
	if err != nil {
		t.Fatal(err)
	}
	for k := int64(0); k < 5000; k++ {
		if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{k % 700, "x", k}}); err != nil {
			t.Fatal(err)
		}
	}
	before := countFiles(t, e.wh.Location)
	if before == 0 {
		t.Fatal("the window wrote no file before the abort")
	}
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, e.wh.Location); n != 0 {
		t.Errorf("%d Parquet files remain after Abort, want 0 (had %d)", n, before)
	}
	w.Close(ctx)
}
