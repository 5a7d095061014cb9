package sink_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// gatedSource is a Source that, once its input is read, says so on
// drained and waits for gate to close before it ends.
type gatedSource struct {
	*changelog.Decoder
	drained chan struct{}
	gate    chan struct{}
	done    bool
}

func (g *gatedSource) Next() (changelog.Record, error) {
	r, err := g.Decoder.Next()
	if err == io.EOF && !g.done {
		g.done = true
		close(g.drained)
		<-g.gate
	}
	return r, err
}

// withoutBarriers drops the barrier lines of a changelog input: its
// changes stay in one window.
func withoutBarriers(input []byte) []byte {
	var out []byte
	for line := range bytes.Lines(input) {
		if !bytes.HasPrefix(line, []byte(changelog.BarrierLine)) {
			out = append(out, line...)
		}
	}
	return out
}

// TestBudgetFollowsTraffic runs two tables' sinks under one shared
// budget: a table that went idle with a full window gives its memory back
// (its writer spills while its input waits) once the other table's
// traffic takes the larger share; both tables read back as their inputs'
// final state.
func TestBudgetFollowsTraffic(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	const total = 4 << 20
	budget := sink.NewBudget(total, 2)
	type run struct {
		ident table.Identifier
		input []byte
		src   *gatedSource
		res   sink.Result
		err   error
		done  chan struct{}
	}
	start := func(name string, input []byte) *run {
		r := &run{ident: table.Identifier{"db", name}, input: input, done: make(chan struct{})}
		if _, _, err := wh.LoadOrCreate(ctx, r.ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
			t.Fatal(err)
		}
		dec, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
		if err != nil {
			t.Fatal(err)
		}
		r.src = &gatedSource{Decoder: dec, drained: make(chan struct{}), gate: make(chan struct{})}
		cfg := sink.Config{Loader: wh.Catalog, Ident: r.ident, SinkID: "s", Budget: budget,
			StateDir: t.TempDir(), Writer: deltawriter.Options{SpillDir: t.TempDir()}}
		go func() {
			defer close(r.done)
			r.res, r.err = sink.Run(ctx, cfg, r.src)
		}()
		return r
	}
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(60 * time.Second):
			t.Fatalf("no %s after 60 s", what)
		}
	}
	// The idle table's window: 8k keys, held in memory under half the
	// budget, not under the floor (a quarter).
	idle := start("idle", withoutBarriers(genInputKeys(t, 1, 8000, 1<<40, 0)))
	wait("end of the idle table's input", idle.src.drained)
	hot := start("hot", withoutBarriers(genInputKeys(t, 2, 40000, 20000, 1<<41)))
	wait("end of the hot table's input", hot.src.drained)
	budget.Rebalance() // the hot table wrote 40k changes since it joined, the idle one none
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := budget.Shares()
		if len(s) != 2 {
			t.Fatalf("%d shares, want 2", len(s))
		}
		if s[0].Limit >= s[1].Limit || s[0].Limit+s[1].Limit > total {
			t.Fatalf("shares %+v of %d: the idle table's is not the smaller, or they exceed the budget", s, total)
		}
		if s[0].Applied == s[0].Limit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle table's writer still runs at %d bytes, its share is %d", s[0].Applied, s[0].Limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(idle.src.gate)
	close(hot.src.gate)
	for _, r := range []*run{idle, hot} {
		wait("end of the run", r.done)
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkModel(t, wh, r.ident, r.input)
	}
	if idle.res.Stats.Index.Spills == 0 {
		t.Errorf("the idle table's writer did not spill when its share shrank: %+v", idle.res.Stats.Index)
	}
	if got := budget.Shares(); len(got) != 0 {
		t.Errorf("shares %+v left after both runs ended", got)
	}
}

// TestDatabaseBudget: a database's budget is refused when it leaves a
// writer less than it needs, saying how much the writers need.
func TestDatabaseBudget(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	least := int64(deltawriter.MinMemoryLimit)
	_, err := sink.DatabaseBudget(ctx, 6*least-1, 3, 2)
	be, ok := errors.AsType[*sink.BudgetError](err)
	if !ok || be.Need() != 6*least || be.Tables != 3 || be.Writers != 2 {
		t.Fatalf("6 writers at 6 x %d - 1 bytes: %v", least, err)
	}
	b, err := sink.DatabaseBudget(ctx, 6*least, 3, 2)
	if err != nil || b == nil {
		t.Fatalf("6 writers at 6 x %d bytes: %v", least, err)
	}
}
