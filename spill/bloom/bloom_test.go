package bloom

import (
	"bytes"
	"encoding/hex"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

var (
	update  = flag.Bool("update", false, "rewrite testdata/golden.hex")
	fpTable = flag.Bool("fptable", false, "print the false-positive table of the package doc")
)

// goldenFilter builds the filter the golden file pins: 100 keys 0..99 remixed
// by an odd constant, 10 bits per key.
func goldenFilter() []byte {
	w := NewWriter(10, 0)
	for i := uint64(0); i < 100; i++ {
		w.Add(i * 0x9e3779b97f4a7c15)
	}
	return w.Finish()
}

// TestGoldenLayout pins the encoded bytes: a change here changes the run
// format and needs a new spill.FormatVersion. Regenerate on purpose with
// go test ./spill/bloom -run Golden -update.
func TestGoldenLayout(t *testing.T) {
	got := goldenFilter()
	if len(got) != 2*LineBytes+TrailerLen { // ceil(1000/512) = 2 lines
		t.Fatalf("len = %d", len(got))
	}
	enc := hex.Dump(got)
	path := filepath.Join("testdata", "golden.hex")
	if *update {
		if err := os.WriteFile(path, []byte(enc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if enc != string(want) {
		t.Fatalf("layout changed:\n got:\n%s\nwant:\n%s", enc, want)
	}
	// The same filter built with the size known up front is identical.
	w := NewWriter(10, 100)
	for i := uint64(0); i < 100; i++ {
		w.Add(i * 0x9e3779b97f4a7c15)
	}
	if !bytes.Equal(w.Finish(), got) {
		t.Fatal("sized-up-front filter differs from buffered one")
	}
}

func TestNoFalseNegatives(t *testing.T) {
	for _, bpk := range []int{1, 4, 10, 20} {
		for _, n := range []int{0, 1, 7, 1000, 20000} {
			for _, expected := range []int{0, n, n / 3} {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(bpk)))
				w := NewWriter(bpk, expected)
				hs := make([]uint64, n)
				for i := range hs {
					hs[i] = rng.Uint64()
					w.Add(hs[i])
				}
				f, err := Decode(w.Finish())
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range hs {
					if !f.MayContain(h) {
						t.Fatalf("bpk=%d n=%d: false negative for %x", bpk, n, h)
					}
				}
			}
		}
	}
}

func fpRate(bpk, n int, skewed bool) float64 {
	rng := rand.New(rand.NewPCG(1, uint64(bpk)))
	w := NewWriter(bpk, n)
	for i := 0; i < n; i++ {
		h := rng.Uint64()
		if skewed {
			h &^= 0xff // a writer routed by the low byte sees it constant
		}
		w.Add(h)
	}
	f, _ := Decode(w.Finish())
	fp := 0
	const probes = 200000
	for i := 0; i < probes; i++ {
		h := rng.Uint64()
		if skewed {
			h &^= 0xff
		}
		if f.MayContain(h) {
			fp++
		}
	}
	return float64(fp) / probes
}

// TestFalsePositiveRate checks the rate at 10 bits/key with a generous bound,
// also for hashes whose low bits are constant.
func TestFalsePositiveRate(t *testing.T) {
	for _, skewed := range []bool{false, true} {
		r := fpRate(10, 100000, skewed)
		t.Logf("10 bits/key skewed=%v: %.3f%%", skewed, 100*r)
		if r > 0.02 {
			t.Fatalf("false-positive rate %.3f%% > 2%%", 100*r)
		}
	}
}

// TestFalsePositiveTable prints the table in the package doc:
// go test ./spill/bloom -run Table -v -fptable
func TestFalsePositiveTable(t *testing.T) {
	if !*fpTable {
		t.Skip("needs -fptable")
	}
	for _, bpk := range []int{4, 6, 8, 10, 12, 16, 20} {
		r := fpRate(bpk, 1000000, false)
		t.Logf("bits/key %2d k=%2d fp=%.3f%%", bpk, Probes(bpk), 100*r)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := goldenFilter()
	cases := map[string][]byte{
		"empty":     nil,
		"short":     good[:10],
		"truncated": good[:len(good)-1],
		"zero k":    append(append([]byte{}, good[:len(good)-5]...), 0, 2, 0, 0, 0),
		"big k":     append(append([]byte{}, good[:len(good)-5]...), 31, 2, 0, 0, 0),
		"bad lines": append(append([]byte{}, good[:len(good)-5]...), 6, 3, 0, 0, 0),
		"no lines":  append(make([]byte, 64), 6, 0, 0, 0, 0),
	}
	for name, b := range cases {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func BenchmarkMayContain(b *testing.B) {
	w := NewWriter(10, 1<<20)
	for i := uint64(0); i < 1<<20; i++ {
		w.Add(i * 0x9e3779b97f4a7c15)
	}
	f, _ := Decode(w.Finish())
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		if f.MayContain(uint64(i) * 0x2545f4914f6cdd1d) {
			n++
		}
	}
	_ = n
}
