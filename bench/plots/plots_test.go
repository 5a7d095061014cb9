package plots

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/icesink/icesink/bench"
)

func TestWrite(t *testing.T) {
	scs, err := bench.ParseScenarios("unbounded,bounded", []int64{256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	res, err := bench.Run(context.Background(), bench.Options{
		Stream:    bench.StreamOptions{Rows: 2000, Keys: 500, Updates: 0.6, Deletes: 0.05, Reinserts: 0.03, Seed: 7},
		Scenarios: scs,
		Repeat:    1,
		WorkDir:   t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ps, err := Write(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteReport(dir, res, ps...); err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile(filepath.Join(dir, bench.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Errorf("wrote %v, want the three plots", ps)
	}
	for _, name := range []string{RSSWindow, MemoryTime, Throughput} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 300 {
			t.Errorf("%s is %v", name, b)
		}
		if !bytes.Contains(report, []byte("("+name+")")) {
			t.Errorf("report.md does not show %s", name)
		}
	}
}
