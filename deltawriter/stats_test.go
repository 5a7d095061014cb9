package deltawriter

import (
	"reflect"
	"testing"

	"github.com/icesink/icesink/dedup"
)

// TestStatsAdd: every counter of two writers adds up (before, a
// hand-written sum left some of the key index's out), peaks and commits
// take the larger, reasons the second's.
func TestStatsAdd(t *testing.T) {
	a := Stats{Changes: 3, Commits: 2, PeakAccountedBytes: 10, IndexRebuildReason: "x",
		Index: dedup.Stats{Spills: 1, PeakMemoryBytes: 5}, TableIndex: dedup.Stats{LookupsMemory: 4, PeakMemoryBytes: 9}}
	b := Stats{Changes: 4, Commits: 2, PeakAccountedBytes: 7, IndexForeignRebuilds: 1, IndexNotSaved: "y",
		Index: dedup.Stats{Spills: 2, PeakMemoryBytes: 8}, TableIndex: dedup.Stats{LookupsMemory: 1, PeakMemoryBytes: 3}}
	want := Stats{Changes: 7, Commits: 2, PeakAccountedBytes: 10, IndexForeignRebuilds: 1, IndexRebuildReason: "x", IndexNotSaved: "y",
		Index: dedup.Stats{Spills: 3, PeakMemoryBytes: 8}, TableIndex: dedup.Stats{LookupsMemory: 5, PeakMemoryBytes: 9}}
	if got := a.Add(b); !reflect.DeepEqual(got, want) {
		t.Fatalf("Add = %+v\nwant  %+v", got, want)
	}
}
