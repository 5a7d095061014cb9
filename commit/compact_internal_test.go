package commit

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// TestTiered: a round merges the small files and leaves a big one until
// they have grown to its size; a big file with many delete files goes
// along; the byte budget stops the pick.
func TestTiered(t *testing.T) {
	task := func(i int, size int64, deletes int) table.FileScanTask {
		b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, fmt.Sprintf("f%d.parquet", i), iceberg.ParquetFile, nil, nil, nil, 1, size)
		if err != nil {
			t.Fatal(err)
		}
		tk := table.FileScanTask{File: b.Build()}
		for range deletes {
			tk.DeleteFiles = append(tk.DeleteFiles, tk.File)
		}
		return tk
	}
	sizes := func(ts []table.FileScanTask) []int64 {
		var out []int64
		for _, t := range ts {
			out = append(out, t.File.FileSizeBytes())
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		in     []table.FileScanTask
		budget int64
		want   string
	}{
		{"small ones only", []table.FileScanTask{task(0, 100, 0), task(1, 10, 0), task(2, 10, 0), task(3, 12, 0), task(4, 11, 0)}, 1 << 20, "[10 10 11 12]"},
		{"grown to the big one", []table.FileScanTask{task(0, 80, 0), task(1, 10, 0), task(2, 10, 0), task(3, 12, 0), task(4, 11, 0)}, 1 << 20, "[10 10 11 12 80]"},
		{"big with deletes", []table.FileScanTask{task(0, 500, 5), task(1, 10, 0), task(2, 10, 0)}, 1 << 20, "[10 10 500]"},
		{"budget", []table.FileScanTask{task(0, 10, 0), task(1, 10, 0), task(2, 10, 0), task(3, 10, 0)}, 25, "[10 10]"},
	} {
		got, _ := tiered(tc.in, tc.budget, 5)
		if s := fmt.Sprint(sizes(got)); s != tc.want {
			t.Errorf("%s: picked %s, want %s", tc.name, s, tc.want)
		}
	}
}
