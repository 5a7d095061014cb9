package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// Every benchmark operation is one window of benchRows changes (or the
// final rows of such a stream) on a fresh table: fixed work per operation,
// so that ns/op and rows/s compare across runs with benchstat. Setup
// (warehouse, table, generating the stream) is not timed.
const (
	benchRows = 100_000
	benchKeys = 25_000
)

func benchStream(kt KeyType) StreamOptions {
	o := DefaultStream()
	o.Rows, o.Keys, o.KeyType = benchRows, benchKeys, kt
	return o
}

// pregenerate returns every change of the stream of o, built once.
func pregenerate(b *testing.B, o StreamOptions) []deltawriter.Change {
	s, err := NewStream(o)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]deltawriter.Change, o.Rows)
	if n := s.Fill(out); int64(n) != o.Rows {
		b.Fatalf("stream gave %d changes, want %d", n, o.Rows)
	}
	return out
}

// pregenerateFinal returns the final live rows of the stream of o.
func pregenerateFinal(b *testing.B, o StreamOptions) [][]any {
	f, err := NewFinalRows(o)
	if err != nil {
		b.Fatal(err)
	}
	out := make([][]any, f.Len())
	if n := f.Fill(out); int64(n) != f.Len() {
		b.Fatalf("final rows: %d, want %d", n, f.Len())
	}
	return out
}

// sliceFill returns a recordSource fill function over rows.
func sliceFill(rows [][]any) func([][]any) int {
	return func(dst [][]any) int {
		n := copy(dst, rows)
		rows = rows[n:]
		return n
	}
}

// freshTable opens a new warehouse in a new folder; cleanup removes it.
func freshTable(b *testing.B, ctx context.Context, o StreamOptions) (*warehouse.Warehouse, *table.Table, func()) {
	dir, err := os.MkdirTemp(b.TempDir(), "op-")
	if err != nil {
		b.Fatal(err)
	}
	wh, tbl, err := openTable(ctx, filepath.Join(dir, "warehouse"), o, 2)
	if err != nil {
		b.Fatal(err)
	}
	return wh, tbl, func() { wh.Close(); os.RemoveAll(dir) }
}

func reportRows(b *testing.B, rowsPerOp int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(rowsPerOp)*float64(b.N)/s, "rows/s")
	}
}

// writeWindow writes changes through a new writer on tbl and commits them.
func writeWindow(b *testing.B, ctx context.Context, wh *warehouse.Warehouse, limit int64, spill string, changes []deltawriter.Change) *commit.Committer {
	cm, err := commit.NewCommitter(ctx, wh.Catalog, benchIdent(), benchSink)
	if err != nil {
		b.Fatal(err)
	}
	w, err := deltawriter.New(ctx, cm.Table(), deltawriter.Options{SinkID: benchSink, MemoryLimit: limit, SpillDir: spill})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(ctx)
	for i := range changes {
		if err := w.Write(ctx, changes[i]); err != nil {
			b.Fatal(err)
		}
	}
	p, err := w.PrepareCommit(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cm.Commit(ctx, 1, []commit.Payload{p}, nil); err != nil {
		b.Fatal(err)
	}
	return cm
}

// BenchmarkWriterUpsert writes one update-heavy window through the upsert
// writer and commits it, per key type, unbounded and with a budget small
// enough to spill.
func BenchmarkWriterUpsert(b *testing.B) {
	ctx := context.Background()
	for _, kt := range []KeyType{KeyLong, KeyString, KeyComposite} {
		changes := pregenerate(b, benchStream(kt))
		for _, limit := range []int64{0, 1 << 20} {
			name := "unbounded"
			if limit > 0 {
				name = "bounded-" + FormatSize(limit)
			}
			b.Run("key="+kt.String()+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					b.StopTimer()
					wh, _, cleanup := freshTable(b, ctx, benchStream(kt))
					spill := b.TempDir()
					b.StartTimer()
					writeWindow(b, ctx, wh, limit, spill, changes)
					b.StopTimer()
					cleanup()
					b.StartTimer()
				}
				reportRows(b, len(changes))
			})
		}
	}
}

// BenchmarkAppendBaseline appends the stream's final rows with
// iceberg-go's Table.Append (records built from the rows, then
// table.WriteRecords and one commit).
func BenchmarkAppendBaseline(b *testing.B) {
	ctx := context.Background()
	o := benchStream(KeyLong)
	rows := pregenerateFinal(b, o)
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		_, tbl, cleanup := freshTable(b, ctx, o)
		sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
		if err != nil {
			b.Fatal(err)
		}
		src, err := newRecordSource(sc, sliceFill(rows), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		rdr := &recordReader{src: src, ctx: ctx}
		rdr.ref.Store(1)
		b.StartTimer()
		if _, err := tbl.Append(ctx, rdr, iceberg.Properties{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		rdr.Release()
		src.release()
		cleanup()
		b.StartTimer()
	}
	reportRows(b, len(rows))
}

// BenchmarkParquetFloor encodes the stream's final rows to a local
// Parquet file with pqarrow and the writer's properties.
func BenchmarkParquetFloor(b *testing.B) {
	ctx := context.Background()
	o := benchStream(KeyLong)
	rows := pregenerateFinal(b, o)
	_, tbl, cleanup := freshTable(b, ctx, o)
	defer cleanup()
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		b.Fatal(err)
	}
	props := deltawriter.WriterProperties(tbl.Properties(), sc)
	path := filepath.Join(b.TempDir(), "floor.parquet")
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		src, err := newRecordSource(sc, sliceFill(rows), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := encodeParquet(ctx, f, props, src); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		f.Close()
		src.release()
		b.StartTimer()
	}
	reportRows(b, len(rows))
}

// BenchmarkScan scans, with iceberg-go, the table the upsert writer wrote
// and the one the append baseline wrote: the same live rows, with and
// without the upsert's delete files.
func BenchmarkScan(b *testing.B) {
	ctx := context.Background()
	o := benchStream(KeyLong)
	live := pregenerateFinal(b, o)

	wh, _, cleanup := freshTable(b, ctx, o)
	defer cleanup()
	upsert := writeWindow(b, ctx, wh, 0, b.TempDir(), pregenerate(b, o)).Table()

	_, tbl, cleanup2 := freshTable(b, ctx, o)
	defer cleanup2()
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		b.Fatal(err)
	}
	src, err := newRecordSource(sc, sliceFill(live), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer src.release()
	rdr := &recordReader{src: src, ctx: ctx}
	rdr.ref.Store(1)
	appended, err := tbl.Append(ctx, rdr, iceberg.Properties{})
	rdr.Release()
	if err != nil {
		b.Fatal(err)
	}

	for _, c := range []struct {
		name string
		tbl  *table.Table
	}{{"table=upsert", upsert}, {"table=append", appended}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				s, err := scanTable(ctx, c.tbl)
				if err != nil {
					b.Fatal(err)
				}
				if s.Rows != int64(len(live)) {
					b.Fatalf("scan returned %d rows, want %d", s.Rows, len(live))
				}
			}
			reportRows(b, len(live))
		})
	}
}

// BenchmarkStream is the generator's own cost (left out of the bench's
// rows/s), per key type.
func BenchmarkStream(b *testing.B) {
	for _, kt := range []KeyType{KeyLong, KeyString, KeyComposite} {
		b.Run("key="+kt.String(), func(b *testing.B) {
			batch := make([]deltawriter.Change, batchSize)
			b.ReportAllocs()
			for range b.N {
				s, err := NewStream(benchStream(kt))
				if err != nil {
					b.Fatal(err)
				}
				for s.Fill(batch) > 0 {
				}
			}
			reportRows(b, benchRows)
		})
	}
}

// TestBenchHelpers keeps the benchmarks' helpers honest without running
// the benchmarks: sliceFill yields every row once.
func TestBenchHelpers(t *testing.T) {
	rows := [][]any{{1}, {2}, {3}}
	fill := sliceFill(rows)
	dst := make([][]any, 2)
	var got [][]any
	for n := fill(dst); n > 0; n = fill(dst) {
		got = append(got, dst[:n]...)
	}
	if !slices.EqualFunc(got, rows, func(a, b []any) bool { return a[0] == b[0] }) {
		t.Errorf("sliceFill yielded %v", got)
	}
}
