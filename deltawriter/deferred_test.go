package deltawriter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// TestSpilledWriterDecidesAsUnbounded: a writer whose index spills (and
// so answers keys of the runs in sorted batches, not per change) writes
// exactly what the unbounded writer writes for the same stream, commit
// for commit: the same position deletes of window rows, equality-delete
// rows, old rows deleted through the key index, and the same table, in
// both modes and both delete modes. The stream breaks the changelog
// contract on purpose (inserts of live keys, +U without -U, deletes of
// absent keys), where the two upsert rules for a key with a spilled live
// row differ from those for a new key.
func TestSpilledWriterDecidesAsUnbounded(t *testing.T) {
	for _, mode := range []deltawriter.Mode{deltawriter.Upsert, deltawriter.Changelog} {
		for _, dm := range []deltawriter.DeleteMode{deltawriter.DeleteByEquality, deltawriter.DeleteByPosition} {
			for seed := uint64(1); seed <= 2; seed++ {
				t.Run(fmt.Sprintf("mode%d/%v/seed%d", mode, dm, seed), func(t *testing.T) {
					var stats [2]deltawriter.Stats
					var tables [2][]string
					for i, limit := range []int64{0, 256 << 10} {
						stats[i], tables[i] = writeStream(t, seed, mode, dm, limit)
					}
					un, sp := stats[0], stats[1]
					if sp.Index.Spills == 0 || sp.Index.LookupsSorted == 0 {
						t.Fatalf("the small budget resolved no deferred key (%d spills, %d resolved)", sp.Index.Spills, sp.Index.LookupsSorted)
					}
					type pair struct {
						name   string
						un, sp int64
					}
					for _, p := range []pair{
						{"position deletes", un.PositionDeletes, sp.PositionDeletes},
						{"equality-delete rows", un.EqualityDeletes, sp.EqualityDeletes},
						{"old rows deleted", un.OldRowsDeleted, sp.OldRowsDeleted},
						{"key index lookups", un.IndexLookups, sp.IndexLookups},
						{"data rows", un.DataRows, sp.DataRows},
					} {
						if p.un != p.sp {
							t.Errorf("%s: unbounded %d, spilled %d", p.name, p.un, p.sp)
						}
					}
					if !slices.Equal(tables[0], tables[1]) {
						t.Errorf("the tables differ: unbounded %d rows, spilled %d", len(tables[0]), len(tables[1]))
					}
				})
			}
		}
	}
}

// writeStream writes randomStream(seed) through one writer, committing
// at the same points for every budget, and returns the writer's stats and
// the table's rows, sorted.
func writeStream(t *testing.T, seed uint64, mode deltawriter.Mode, dm deltawriter.DeleteMode, limit int64) (deltawriter.Stats, []string) {
	rng := rand.New(rand.NewPCG(seed, 7))
	e := newEnv(t, simpleSchema, nil)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", Mode: mode, BatchRows: 64, MemoryLimit: limit, SpillDir: t.TempDir(), DeleteMode: dm})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	epoch := uint64(0)
	for i, ch := range randomStream(rng, 16000, 5000) {
		if err := w.Write(ctx, ch); err != nil {
			t.Fatal(err)
		}
		if i%5000 == 4999 {
			epoch++
			e.commitWindow(w, epoch)
		}
	}
	epoch++
	e.commitWindow(w, epoch)
	return w.Stats(), tableRows(t, e.tbl)
}

// tableRows reads tbl back through iceberg-go's scanner, one string per
// row, sorted (duplicates kept).
func tableRows(t *testing.T, tbl *table.Table) []string {
	t.Helper()
	var rows []string
	for row, err := range warehouse.Rows(context.Background(), tbl) {
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, fmt.Sprint(row...))
	}
	slices.Sort(rows)
	return rows
}

// TestKeyDecodeRoundTrip: KeyCodec.Decode gives back the key columns that
// Append encoded (held equality deletes are written from them), for every
// identifier type; truncated or overlong bytes are refused.
func TestKeyDecodeRoundTrip(t *testing.T) {
	types := []iceberg.Type{
		iceberg.PrimitiveTypes.Bool, iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.Int64,
		iceberg.PrimitiveTypes.Date, iceberg.PrimitiveTypes.Time, iceberg.PrimitiveTypes.Timestamp,
		iceberg.PrimitiveTypes.TimestampTz, iceberg.DecimalTypeOf(20, 4), iceberg.PrimitiveTypes.String,
		iceberg.PrimitiveTypes.UUID, iceberg.PrimitiveTypes.Binary, iceberg.FixedTypeOf(3),
	}
	var fields []iceberg.NestedField
	var ids []int
	for i, ty := range types {
		fields = append(fields, iceberg.NestedField{ID: i + 1, Name: fmt.Sprint("k", i), Type: ty, Required: true})
		ids = append(ids, i+1)
	}
	fields = append(fields, iceberg.NestedField{ID: 100, Name: "v", Type: iceberg.PrimitiveTypes.String})
	kc, err := deltawriter.NewKeyCodec(iceberg.NewSchemaWithIdentifiers(0, ids, fields...))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range 500 {
		u := uuid.New()
		row := []any{
			rng.IntN(2) == 0, rng.Int32() - 1<<30, rng.Int64() - 1<<62, int32(rng.IntN(40000) - 20000), rng.Int64N(86400e6),
			rng.Int64() - 1<<62, -rng.Int64(), decimal128.New(rng.Int64()-1<<62, rng.Uint64()), strings.Repeat("ü", i%7),
			u, []byte(strings.Repeat("b", i%4)), []byte{byte(i), 2, 3}, "value",
		}
		key, err := kc.Append(nil, row)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]any, len(row))
		if err := kc.Decode(key, got); err != nil {
			t.Fatal(err)
		}
		got[len(row)-1] = row[len(row)-1]
		if !equalRows(got, row) {
			t.Fatalf("decoded %v, want %v", got, row)
		}
		if err := kc.Decode(key[:len(key)-1], got); err == nil {
			t.Fatal("a truncated key decoded")
		}
		if err := kc.Decode(append(key, 0), got); err == nil {
			t.Fatal("a key with a trailing byte decoded")
		}
	}
}

// TestQueuedBatchesDoNotCloseFiles: when the open Parquet files are over
// their share only because batches wait for the encoder, the writer waits
// for it instead of closing its file (which would not encode anything
// sooner): a one-partition stream at a small budget, with the index
// spilling, writes one data file. (Closing then left 19-51 files of a 2M
// change window at 16 MiB, and the key index's rebuild read them at 11-28x
// the table's scan time.)
func TestQueuedBatchesDoNotCloseFiles(t *testing.T) {
	e := newEnv(t, simpleSchema, nil)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", MemoryLimit: 8 << 20, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	pad := strings.Repeat("p", 80)
	for k := range int64(300_000) {
		if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{k % 200_000, pad, k}}); err != nil {
			t.Fatal(err)
		}
	}
	e.commitWindow(w, 1)
	st := w.Stats()
	if st.Index.Spills == 0 {
		t.Fatalf("the index did not spill: the writer ran unconstrained")
	}
	if st.DataFiles != 1 || st.LocalFlushes != 0 {
		t.Errorf("%d data files, %d local flushes for one partition, want 1 and 0", st.DataFiles, st.LocalFlushes)
	}
}
