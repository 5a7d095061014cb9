package deltawriter_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// env is a fresh embedded warehouse with one table.
type env struct {
	t   *testing.T
	wh  *warehouse.Warehouse
	tbl *table.Table
	cm  *commit.Committer
}

func newEnv(t *testing.T, schema *iceberg.Schema, spec *iceberg.PartitionSpec) *env {
	t.Helper()
	return newEnvVersion(t, schema, spec, 2)
}

// newEnvVersion is newEnv with a table of format version.
func newEnvVersion(t *testing.T, schema *iceberg.Schema, spec *iceberg.PartitionSpec, version int) *env {
	t.Helper()
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wh.Close() })
	ident := table.Identifier{"db", "t"}
	tbl, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: schema, Partition: spec,
		Properties: iceberg.Properties{"format-version": fmt.Sprint(version)}})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Metadata().Version() != version {
		t.Fatalf("created a version %d table, want %d", tbl.Metadata().Version(), version)
	}
	cm, err := commit.NewCommitter(ctx, wh.Catalog, ident, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, wh: wh, tbl: tbl, cm: cm}
}

// model is the reference: the final state of the stream, key -> row.
type model struct {
	keys *deltawriter.KeyCodec
	rows map[string][]any
}

func newModel(t *testing.T, schema *iceberg.Schema) *model {
	kc, err := deltawriter.NewKeyCodec(schema)
	if err != nil {
		t.Fatal(err)
	}
	return &model{keys: kc, rows: map[string][]any{}}
}

func (m *model) apply(ch deltawriter.Change) {
	k, err := m.keys.Append(nil, ch.Row)
	if err != nil {
		panic(err)
	}
	if ch.Op.IsDelete() {
		delete(m.rows, string(k))
	} else {
		m.rows[string(k)] = append([]any(nil), ch.Row...)
	}
}

// check compares the table, read back through iceberg-go's scanner, with m.
func (m *model) check(t *testing.T, tbl *table.Table) {
	t.Helper()
	got := map[string][]any{}
	for row, err := range warehouse.Rows(context.Background(), tbl) {
		if err != nil {
			t.Fatal(err)
		}
		k, err := m.keys.Append(nil, row)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := got[string(k)]; dup {
			t.Fatalf("key %q read twice: %v and %v", k, prev, row)
		}
		got[string(k)] = append([]any(nil), row...)
	}
	if len(got) != len(m.rows) {
		t.Errorf("table has %d live rows, the model %d", len(got), len(m.rows))
	}
	bad := 0
	for k, want := range m.rows {
		g, ok := got[k]
		if !ok {
			t.Errorf("key %q missing from the table; want %v", k, want)
		} else if !equalRows(g, want) {
			t.Errorf("key %q: table has %v, model %v", k, g, want)
		} else {
			continue
		}
		if bad++; bad > 10 {
			t.FailNow()
		}
	}
	for k, g := range got {
		if _, ok := m.rows[k]; !ok {
			t.Errorf("key %q in the table (%v) but deleted in the model", k, g)
			if bad++; bad > 10 {
				t.FailNow()
			}
		}
	}
}

// equalRows compares rows value by value; binaries compare by content
// (an empty binary may read back as nil).
func equalRows(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ab, aok := a[i].([]byte)
		bb, bok := b[i].([]byte)
		if aok && bok {
			if !bytes.Equal(ab, bb) {
				return false
			}
		} else if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// commitWindow prepares the writer's window and commits it as epoch.
func (e *env) commitWindow(w *deltawriter.Writer, epoch uint64) commit.Payload {
	e.t.Helper()
	ctx := context.Background()
	p, err := w.PrepareCommit(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.cm.Commit(ctx, epoch, []commit.Payload{p}, map[string]string{commit.PropInputPosition: strconv.FormatUint(epoch, 10)}); err != nil {
		e.t.Fatal(err)
	}
	e.tbl = e.cm.Table()
	if err := w.Committed(ctx); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// deleteMode is the mode a test writer runs in: a RewriteDeleted writer
// needs equality deletes.
func deleteMode(rewrite float64) deltawriter.DeleteMode {
	if rewrite > 0 {
		return deltawriter.DeleteByEquality
	}
	return deltawriter.DeleteByPosition
}

var simpleSchema = iceberg.NewSchemaWithIdentifiers(0, []int{1},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String},
	iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true},
)

var names = []string{"a", "ünïcødé", "日本語", "emoji 🚀", "", "x y z"}

// randomStream returns n changes over nkeys keys of simpleSchema: inserts
// on new and existing keys, +U without -U, -U/+U pairs, deletes of unknown
// keys, re-inserts after deletes, nulls.
func randomStream(rng *rand.Rand, n, nkeys int) []deltawriter.Change {
	out := make([]deltawriter.Change, 0, n)
	for len(out) < n {
		k := int64(rng.IntN(nkeys))
		if rng.IntN(10) == 0 {
			k = int64(rng.IntN(16)) // hot keys, updated many times
		}
		var name any = names[rng.IntN(len(names))]
		if rng.IntN(8) == 0 {
			name = nil
		}
		row := []any{k, name, rng.Int64()}
		switch r := rng.IntN(100); {
		case r < 40:
			out = append(out, deltawriter.Change{Op: deltawriter.Insert, Row: row})
		case r < 60:
			out = append(out, deltawriter.Change{Op: deltawriter.UpdateAfter, Row: row})
		case r < 75:
			out = append(out,
				deltawriter.Change{Op: deltawriter.UpdateBefore, Row: []any{k, nil, int64(0)}},
				deltawriter.Change{Op: deltawriter.UpdateAfter, Row: row})
		default:
			out = append(out, deltawriter.Change{Op: deltawriter.Delete, Row: []any{k, nil, nil}})
		}
	}
	return out
}

// budgets are the memory limits every correctness test runs under: the
// unbounded index of today's writers, a tiny budget under which nearly
// every lookup goes to disk, and a huge one that never spills.
var budgets = []struct {
	name    string
	limit   int64
	spills  bool    // the tests' streams must spill under it
	rewrite float64 // Options.RewriteDeleted
}{
	{"unbounded", 0, false, 0},
	{"tiny", 256 << 10, true, 0},
	{"huge", 1 << 30, false, 0},
	{"huge-rewrite", 1 << 30, false, 0.01}, // rewrites nearly every data file at commit
}

// checkRewritten fails the test when a writer asked to rewrite data files
// at commit never did, so a rewrite run cannot pass without rewriting.
func checkRewritten(t *testing.T, w *deltawriter.Writer, rewrite float64) {
	t.Helper()
	st := w.Stats()
	if rewrite > 0 && st.RewrittenFiles == 0 {
		t.Errorf("no data file rewritten at commit (%+v)", st)
	}
	if rewrite == 0 && st.RewrittenFiles != 0 {
		t.Errorf("%d data files rewritten without RewriteDeleted", st.RewrittenFiles)
	}
}

// checkSpilled fails the test when a budget meant to spill did not, so a
// tiny-budget run cannot pass without exercising the spill path.
func checkSpilled(t *testing.T, w *deltawriter.Writer, spills bool) {
	t.Helper()
	st := w.Stats()
	if spills && st.Index.Spills == 0 {
		t.Errorf("the tiny budget never spilled the index (%+v)", st.Index)
	}
	if !spills && st.Index.Spills != 0 {
		t.Errorf("the index spilled %d times without a tight budget", st.Index.Spills)
	}
}

func TestUpsertRandomAgainstModel(t *testing.T) {
	for _, b := range budgets {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprint(b.name, "/seed", seed), func(t *testing.T) {
				testUpsertRandom(t, seed, b.limit, b.spills, b.rewrite)
			})
		}
	}
}

func testUpsertRandom(t *testing.T, seed uint64, limit int64, spills bool, rewrite float64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	e := newEnv(t, simpleSchema, nil)
	m := newModel(t, simpleSchema)
	ctx := context.Background()
	w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 64, MemoryLimit: limit, SpillDir: t.TempDir(), RewriteDeleted: rewrite, DeleteMode: deleteMode(rewrite)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	epoch := uint64(0)
	for _, ch := range randomStream(rng, 12000, 4000) {
		if err := w.Write(ctx, ch); err != nil {
			t.Fatal(err)
		}
		m.apply(ch)
		if rng.IntN(3000) == 0 {
			epoch++
			e.commitWindow(w, epoch)
		}
	}
	checkSpilled(t, w, spills)
	epoch++
	e.commitWindow(w, epoch)
	checkRewritten(t, w, rewrite)
	m.check(t, e.tbl)
	checkNoEqualityDeletes(t, w)
}

// checkNoEqualityDeletes fails a DeleteByPosition writer that wrote an
// equality delete.
func checkNoEqualityDeletes(t *testing.T, w *deltawriter.Writer) {
	t.Helper()
	if st := w.Stats(); st.EqualityDeletes != 0 && w.DeleteMode() == deltawriter.DeleteByPosition {
		t.Errorf("%d equality-delete rows in position mode", st.EqualityDeletes)
	}
}
