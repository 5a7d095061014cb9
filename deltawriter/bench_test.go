package deltawriter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/warehouse"
)

// BenchmarkKeyAppendHash measures what every change costs before the
// index: the canonical key bytes and their xxhash64, per key shape.
func BenchmarkKeyAppendHash(b *testing.B) {
	for _, tc := range []struct {
		name   string
		fields []iceberg.NestedField
		row    func(i int) []any
	}{
		{"long", []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}},
			func(i int) []any { return []any{int64(i)} }},
		{"string24", []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.String, Required: true}},
			func(i int) []any { return []any{fmt.Sprintf("key-%020d", i)} }},
		{"composite", []iceberg.NestedField{
			{ID: 1, Name: "tenant", Type: iceberg.PrimitiveTypes.String, Required: true},
			{ID: 2, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}},
			func(i int) []any { return []any{fmt.Sprintf("tenant-%02d", i%64), int64(i)} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ids := make([]int, len(tc.fields))
			for i, f := range tc.fields {
				ids[i] = f.ID
			}
			kc, err := NewKeyCodec(iceberg.NewSchemaWithIdentifiers(0, ids, tc.fields...))
			if err != nil {
				b.Fatal(err)
			}
			rows := make([][]any, 4096)
			for i := range rows {
				rows[i] = tc.row(i)
			}
			var buf []byte
			var sink uint64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if buf, err = kc.Append(buf[:0], rows[i&4095]); err != nil {
					b.Fatal(err)
				}
				sink += Hash(buf)
			}
			_ = sink
		})
	}
}

// BenchmarkPositionDeletes measures flushPositionDeletes: ranking the
// window's data files by path, sorting 1M buffered (file, pos) deletes
// over 16 files and writing them as one Parquet file. Each op is one
// flush; b.N flushes write b.N files, removed at the end.
func BenchmarkPositionDeletes(b *testing.B) {
	ctx := context.Background()
	w, ln := positionDeleteWriter(b, Options{}, 16)
	defer w.Close(ctx)
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	dels := make([]uint64, n)
	for i := range dels {
		dels[i] = uint64(rng.IntN(16))<<32 | uint64(rng.Uint32())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ln.posDel = append(ln.posDel[:0], dels...)
		w.posDels = n
		if err := w.flushPositionDeletes(ln); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "deletes/s")
	if err := w.Discard(ctx, commit.Payload{Files: w.done}); err != nil {
		b.Fatal(err)
	}
}

// positionDeleteWriter is a writer on a fresh table of one key column
// whose window has files data files in one lane, for position deletes to
// name.
func positionDeleteWriter(tb testing.TB, opts Options, files int) (*Writer, *lane) {
	tb.Helper()
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, tb.TempDir(), warehouse.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { wh.Close() })
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	tbl, _, err := wh.LoadOrCreate(ctx, table.Identifier{"db", "t"}, warehouse.TableSpec{Schema: schema})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := New(ctx, tbl, opts)
	if err != nil {
		tb.Fatal(err)
	}
	ln := &lane{}
	w.lanes[""] = ln
	for range files {
		w.files = append(w.files, &fileInfo{path: w.newPath(ln, "data"), lane: ln})
	}
	return w, ln
}
