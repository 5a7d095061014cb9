package sink

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// TestCommitEpochRefusesMisalignedWriters: payloads of one epoch whose
// windows end at different input lines (writers with different
// checkpoints) are not committed: the resume position would lose or
// repeat lines of one of them.
func TestCommitEpochRefusesMisalignedWriters(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	ident := table.Identifier{"db", "t"}
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	cm, err := commit.NewCommitter(ctx, wh.Catalog, ident, "s")
	if err != nil {
		t.Fatal(err)
	}
	ec := &epochCommitter{cm: cm}
	payload := func(line int64) []byte {
		p := commit.Payload{Version: commit.PayloadVersion, SinkID: "s", InputPosition: line, FormatVersion: 2}
		b, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	err = ec.CommitEpoch(ctx, 1, [][]byte{payload(1000), payload(1500)})
	if err == nil || !strings.Contains(err.Error(), "line 1000") || !strings.Contains(err.Error(), "line 1500") {
		t.Fatalf("misaligned payloads: %v", err)
	}
	if pos, _ := ec.committed(); pos.Epoch != 0 {
		t.Fatalf("committed %+v", pos)
	}
	if err := ec.CommitEpoch(ctx, 1, [][]byte{payload(1000), payload(1000)}); err != nil {
		t.Fatal(err)
	}
}

// TestCompactionSizedByShare: under a shared budget a table's compaction
// rounds are sized like one writer's even share, not like the process's
// whole budget, and the caller's policy is left as it was.
func TestCompactionSizedByShare(t *testing.T) {
	pol := &commit.Compaction{MinInputFiles: 2, MemoryLimit: 256 << 20}
	cfg := Config{Compaction: pol, Budget: NewBudget(256<<20, 64)}
	got := cfg.compaction()
	if got.MemoryLimit != 4<<20 || got.MinInputFiles != 2 {
		t.Errorf("under a 256 MiB budget for 64 writers: %+v, want a 4 MiB round", *got)
	}
	if pol.MemoryLimit != 256<<20 {
		t.Errorf("the caller's policy changed: %+v", *pol)
	}
	if got := (Config{Compaction: pol}).compaction(); got.MemoryLimit != pol.MemoryLimit || got.MinInputFiles != pol.MinInputFiles {
		t.Error("without a shared budget the policy is not the caller's")
	}
	// A policy that names no bound is sized like one writer's budget.
	cfg = Config{Compaction: &commit.Compaction{}, Writer: deltawriter.Options{MemoryLimit: 32 << 20}}
	if got := cfg.compaction(); got.MemoryLimit != 32<<20 {
		t.Errorf("a round under a 32 MiB writer budget: %+v", *got)
	}
	// The rounds write into the sink's folder, which its start clears of
	// what a killed round left (TestRemovesOrphansOfCrashedWindows).
	cfg = Config{SinkID: "s1", Compaction: pol}.withDefaults()
	if got := cfg.compaction(); got.Folder != commit.CompactionFolder("s1") || pol.Folder != "" {
		t.Errorf("the rounds write into %q (the caller's policy: %q), want the sink's folder %q", got.Folder, pol.Folder, commit.CompactionFolder("s1"))
	}
}
