package sink

import (
	"testing"

	"github.com/icesink/icesink/deltawriter"
)

// TestSpareSlices: a written batch's slices come back to the router
// emptied, with their capacity, and keep no row alive; a full hand-back
// does not block the writer.
func TestSpareSlices(t *testing.T) {
	w := &writer{given: make(chan spareSlices, 1)}
	ch, lines := w.spare()
	if len(ch) != 0 || cap(ch) != batchSize || len(lines) != 0 || cap(lines) != batchSize {
		t.Fatalf("new slices: len %d/%d, cap %d/%d; want empty ones of %d", len(ch), len(lines), cap(ch), cap(lines), batchSize)
	}
	for i := range 3 {
		ch = append(ch, deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(i)}})
		lines = append(lines, int64(i+1))
	}
	w.giveBack(batch{changes: ch, lines: lines})
	w.giveBack(batch{changes: make([]deltawriter.Change, 2), lines: make([]int64, 2)}) // the channel is full: dropped
	w.giveBack(batch{})                                                                // no slices: nothing to give
	back, backLines := w.spare()
	if len(back) != 0 || cap(back) != batchSize || &back[:1][0] != &ch[0] || &backLines[:1][0] != &lines[0] {
		t.Fatalf("given back: len %d, cap %d; want the written batch's slices, empty", len(back), cap(back))
	}
	for i, c := range back[:3] {
		if c.Row != nil {
			t.Errorf("change %d still holds its row %v", i, c.Row)
		}
	}
	if again, _ := w.spare(); cap(again) != batchSize || len(w.given) != 0 {
		t.Errorf("after the one given back: cap %d, %d waiting; want a new slice and none waiting", cap(again), len(w.given))
	}
}
