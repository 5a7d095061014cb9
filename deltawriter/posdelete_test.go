package deltawriter

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/codec"

	"github.com/icesink/icesink/commit"
)

// TestPositionDeleteFile: a window's position deletes (runs of rows of
// its own files and rows of earlier commits' files) make one file that
// reads back, through Parquet alone, as Iceberg's (file_path string,
// pos) rows in (file_path, pos) order, whose manifest entry bounds
// file_path by the first and last path it names (truncated), and that costs well
// under a byte a row: each path is stored once, not once a row.
func TestPositionDeleteFile(t *testing.T) {
	ctx := context.Background()
	w, ln := positionDeleteWriter(t, Options{BatchRows: 1000}, 3)
	defer w.Close(ctx)
	type row struct {
		path string
		pos  int64
	}
	var want []row
	// The window's files, in reverse order of their index, each with a
	// run of consecutive positions and a few apart.
	for f := 2; f >= 0; f-- {
		for pos := range 4000 + f*700 {
			if pos%13 == 5 {
				continue
			}
			ln.posDel = append(ln.posDel, uint64(f)<<32|uint64(pos))
			want = append(want, row{w.files[f].path, int64(pos)})
		}
	}
	// Rows of two files of earlier commits, one named before the window's
	// files and one after.
	for _, p := range []string{"file:///a/old-1.parquet", "file:///z/old-2.parquet"} {
		for pos := int64(10); pos < 2500; pos += 3 {
			ln.oldDel = append(ln.oldDel, oldPosDel{p, pos})
			want = append(want, row{p, pos})
		}
	}
	w.posDels = len(ln.posDel)
	slices.SortFunc(want, func(a, b row) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		return int(a.pos - b.pos)
	})
	if err := w.flushPositionDeletes(ln); err != nil {
		t.Fatal(err)
	}
	defer w.Discard(ctx, commit.Payload{Files: w.done})
	if len(w.done) != 1 || w.done[0].Kind != commit.PositionDeleteFile {
		t.Fatalf("files written: %+v, want one position-delete file", w.done)
	}
	pf := w.done[0]
	local := strings.TrimPrefix(pf.Path, "file://")

	rdr, err := file.OpenParquetFile(local, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	if !arrow.TypeEqual(sc.Field(0).Type, arrow.BinaryTypes.String) || sc.Field(0).Name != "file_path" {
		t.Fatalf("the file's first column reads as %s %s, want file_path utf8", sc.Field(0).Name, sc.Field(0).Type)
	}
	var got []row
	if err := readParquet(ctx, w.fs, pf.Path, nil, func(v []any) error {
		got = append(got, row{v[0].(string), v[1].(int64)})
		return nil
	}, "file_path", "pos"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the file holds %d rows, want %d (or in another order)", len(got), len(want))
	}
	if pf.Rows != int64(len(want)) {
		t.Fatalf("the payload counts %d rows, want %d", pf.Rows, len(want))
	}
	st, err := os.Stat(local)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > int64(len(want))/4 {
		t.Fatalf("the file takes %d bytes for %d deletes: paths not stored once, or positions not delta-coded", st.Size(), len(want))
	}
	df, err := codec.DecodeDataFile(pf.Entry, *iceberg.UnpartitionedSpec, iceberg.PositionalDeleteSchema, 2)
	if err != nil {
		t.Fatal(err)
	}
	const pathField = 2147483546
	lo, hi := string(df.LowerBoundValues()[pathField]), string(df.UpperBoundValues()[pathField])
	// Bounds are truncated (a prefix below, a successor above).
	first, last := want[0].path, want[len(want)-1].path
	if lo == "" || hi == "" || !strings.HasPrefix(first, lo) || !strings.HasPrefix(last, hi[:len(hi)-1]) || hi < last[:min(len(hi), len(last))] {
		t.Fatalf("file_path bounds [%q, %q] do not bound [%q, %q] tightly", lo, hi, first, last)
	}
}
