package coordinator

import (
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

// BenchmarkStatus measures Status on a database's machine: 200 tables of
// 256 vnodes, each held by two writers taking alternate vnodes (the coordinator asks it at every
// registration and tick).
//
//	go test ./coordinator -run X -bench Status
func BenchmarkStatus(b *testing.B) {
	const tables, vnodes = 200, 256
	m, err := NewMachine(Config{Vnodes: tables * vnodes})
	if err != nil {
		b.Fatal(err)
	}
	for i := range tables * 2 {
		// A table's writers take alternate vnodes of its slot.
		vn := roaring.New()
		for v := i / 2 * vnodes; v < (i/2+1)*vnodes; v += 2 {
			vn.Add(uint32(v + i%2))
		}
		if err := m.Step(Register{Writer: WriterID(i + 1), Vnodes: vn}); err != nil {
			b.Fatal(err)
		}
	}
	if st := m.Status(); !st.Missing.IsEmpty() || len(st.Writers) != tables*2 {
		b.Fatalf("missing %v, %d writers", st.Missing, len(st.Writers))
	}
	for b.Loop() {
		m.Status()
	}
}

// TestStatusMissing: the vnodes Status reports missing are those neither
// vacant nor held by an active or retired writer.
func TestStatusMissing(t *testing.T) {
	vacant := roaring.New()
	vacant.AddRange(4, 8)
	m, err := NewMachine(Config{Vnodes: 8, Vacant: vacant})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Step(Register{Writer: 1, Vnodes: roaring.BitmapOf(0, 1)}); err != nil {
		t.Fatal(err)
	}
	st := m.Status()
	if want := roaring.BitmapOf(2, 3); !st.Missing.Equals(want) || len(st.Writers) != 1 {
		t.Fatalf("missing %v, writers %v; want missing %v and one writer", st.Missing, st.Writers, want)
	}
}
