package deltawriter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/icesink/icesink/deltawriter"
)

// TestSetMemoryLimitGivesMemoryBack changes a writer's budget while it
// writes (a process budget shared by tables whose traffic moves): after
// every shrink what the writer accounts is inside the new budget at once,
// before its next change, and the table still reads as the stream's final
// state, in both delete modes.
func TestSetMemoryLimitGivesMemoryBack(t *testing.T) {
	for _, mode := range []deltawriter.DeleteMode{deltawriter.DeleteByPosition, deltawriter.DeleteByEquality} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(mode)))
			e := newEnv(t, simpleSchema, nil)
			m := newModel(t, simpleSchema)
			ctx := context.Background()
			w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, MemoryLimit: 8 << 20, SpillDir: t.TempDir(), DeleteMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close(ctx)
			limits := []int64{8 << 20, 512 << 10, 2 << 20, 256 << 10, 4 << 20}
			shrinks, epoch := 0, uint64(0)
			for i, ch := range randomStream(rng, 30000, 12000) {
				if err := w.Write(ctx, ch); err != nil {
					t.Fatal(err)
				}
				m.apply(ch)
				if i%2500 != 2499 {
					continue
				}
				n := limits[(i/2500)%len(limits)]
				before := w.Stats().AccountedBytes
				if err := w.SetMemoryLimit(ctx, n); err != nil {
					t.Fatal(err)
				}
				if w.MemoryLimit() != n {
					t.Fatalf("MemoryLimit %d after SetMemoryLimit(%d)", w.MemoryLimit(), n)
				}
				if after := w.Stats().AccountedBytes; before > n {
					shrinks++
					if after > n {
						t.Fatalf("change %d: the writer accounts %d bytes after its budget went from %d down to %d", i, after, before, n)
					}
				}
				if i%7500 == 7499 {
					epoch++
					e.commitWindow(w, epoch)
				}
			}
			if shrinks == 0 {
				t.Fatal("no change of budget found the writer over its new budget: the test shows nothing")
			}
			if w.Stats().Index.Spills == 0 {
				t.Fatal("the writer never spilled")
			}
			epoch++
			e.commitWindow(w, epoch)
			m.check(t, e.tbl)
		})
	}
}

// TestSetMemoryLimitRefusesUnbounded: a writer created unbounded stays so.
func TestSetMemoryLimitRefusesUnbounded(t *testing.T) {
	e := newEnv(t, simpleSchema, nil)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if err := w.SetMemoryLimit(ctx, 1<<20); err == nil {
		t.Fatal("an unbounded writer took a limit")
	}
}
