package sim

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/internal/tablelint"
	"github.com/icesink/icesink/warehouse"
)

var (
	seedsFlag = flag.Int("sim.seeds", 0, "how many seeds to run from -sim.from (0: the fixed set CI runs)")
	fromFlag  = flag.Uint64("sim.from", 1, "the first seed -sim.seeds runs")
	verbose   = flag.Bool("sim.v", false, "log every step of every seed")
)

// ciSeeds is the fixed set of seeds the README's test command runs
// (-short: the first few).
const ciSeeds, shortSeeds = 24, 4

// binary is the icesink command the simulation runs (and kills).
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "icesink-sim")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "icesink")
	// The runs' spill folders go with the test.
	os.Setenv("TMPDIR", filepath.Join(dir, "tmp"))
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
	if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/icesink").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building icesink: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// config is what a user sets, drawn from a seed.
type config struct {
	Version        int    // format version: 2 or 3
	DeleteMode     string // position or equality
	Writers        int    // 1-3
	Memory         string // --memory-limit: 0 (unbounded), tiny or larger
	Maintain       bool
	CompactEvery   int
	Partitioned    bool // bucket[4] of the key's id
	Composite      bool // key (id, tenant) instead of (id)
	Pipe           bool // the input on standard input instead of a file
	CheckpointRows int
	KeyIndex       bool // the key index kept between runs (--key-index-dir)
	Lines, Keys    int  // the stream's length and key space
}

func draw(rng *rand.Rand) config {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	c := config{
		Version:        2 + rng.IntN(2),
		DeleteMode:     pick("position", "position", "equality"),
		Writers:        1 + rng.IntN(3),
		Memory:         pick("0", "1MiB", "16MiB"),
		Maintain:       rng.IntN(3) > 0,
		CompactEvery:   2 + rng.IntN(5),
		Partitioned:    rng.IntN(3) == 0,
		Composite:      rng.IntN(3) == 0,
		Pipe:           rng.IntN(4) == 0,
		CheckpointRows: 40 + rng.IntN(200),
		KeyIndex:       rng.IntN(2) == 0,
		Lines:          200 + rng.IntN(700),
		Keys:           30 + rng.IntN(300),
	}
	return c
}

func (c config) String() string {
	return fmt.Sprintf("v%d %s writers=%d memory=%s maintain=%v/%d partitioned=%v composite=%v pipe=%v checkpoint-rows=%d key-index=%v lines=%d keys=%d",
		c.Version, c.DeleteMode, c.Writers, c.Memory, c.Maintain, c.CompactEvery, c.Partitioned, c.Composite, c.Pipe, c.CheckpointRows, c.KeyIndex, c.Lines, c.Keys)
}

// schema is the table's schema: (id, name, v) keyed by id, or (id,
// tenant, name, v) keyed by (id, tenant).
func (c config) schema() *iceberg.Schema {
	if c.Composite {
		return iceberg.NewSchemaWithIdentifiers(0, []int{1, 2},
			iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
			iceberg.NestedField{ID: 2, Name: "tenant", Type: iceberg.PrimitiveTypes.String, Required: true},
			iceberg.NestedField{ID: 3, Name: "name", Type: iceberg.PrimitiveTypes.String},
			iceberg.NestedField{ID: 4, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		)
	}
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	)
}

// row builds a row of the schema.
func (c config) row(id int64, tenant string, name any, v int64) []any {
	if c.Composite {
		return []any{id, tenant, name, v}
	}
	return []any{id, name, v}
}

// key is a row's key in the model.
func (c config) key(row []any) string {
	if c.Composite {
		return fmt.Sprintf("%d/%s", row[0], row[1])
	}
	return strconv.FormatInt(row[0].(int64), 10)
}

// change is one input line's change (nil: a barrier).
type change struct {
	del bool
	row []any
}

var names = []any{nil, "a", "ünïcødé", "日本語", "", "x y"}

// stream draws the input: changes of c.Keys keys with a barrier now and
// then, as changelog-json lines.
func stream(rng *rand.Rand, c config) (lines []string, changes []*change) {
	for range c.Lines {
		if rng.IntN(100) < 3 {
			lines = append(lines, `{"barrier":true}`)
			changes = append(changes, nil)
			continue
		}
		id := int64(rng.IntN(c.Keys))
		tenant := ""
		if c.Composite {
			tenant = "t" + strconv.Itoa(rng.IntN(2))
		}
		del := rng.IntN(100) < 20
		name := names[rng.IntN(len(names))]
		v := rng.Int64N(1000)
		row := c.row(id, tenant, name, v)
		op := "+I"
		if del {
			op = "-D"
		}
		var data strings.Builder
		fmt.Fprintf(&data, `"id":%d`, id)
		if c.Composite {
			fmt.Fprintf(&data, `,"tenant":%q`, tenant)
		}
		if name != nil {
			fmt.Fprintf(&data, `,"name":%q`, name)
		}
		fmt.Fprintf(&data, `,"v":%d`, v)
		lines = append(lines, fmt.Sprintf(`{"op":%q,"data":{%s}}`, op, data.String()))
		changes = append(changes, &change{del: del, row: row})
	}
	return lines, changes
}

// event is another engine's change of the table's rows, landed when the
// sink had committed the input up to line at, in snapshot snap.
type event struct {
	at    int
	snap  int64
	what  string
	apply func(m map[string][]any)
}

// run is one seed's simulation.
type run struct {
	t       *testing.T
	ctx     context.Context
	seed    uint64
	rng     *rand.Rand
	cfg     config
	dir     string // the warehouse
	keyDir  string
	schema  string // its file
	spec    string // the partition spec's file, or ""
	lines   []string
	changes []*change
	events  []event
	given   int // input lines given to the sink so far
	line    int // the sink's committed line, last seen
	foreign int64
	tags    map[string]int // tag -> live rows it held
	log     []string
}

const ident = "sim.t"

var tableIdent = table.Identifier{"sim", "t"}

func (r *run) logf(format string, a ...any) {
	r.log = append(r.log, fmt.Sprintf(format, a...))
	if *verbose {
		r.t.Logf(format, a...)
	}
}

// fail stops the seed with what it did and how to replay it.
func (r *run) fail(format string, a ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d: %s\nconfig: %s\nsteps:\n  %s\nreplay: go test ./internal/sim -run 'TestSimulation/seed=%d$' -sim.from %d -sim.seeds 1 -sim.v",
		r.seed, fmt.Sprintf(format, a...), r.cfg, strings.Join(r.log, "\n  "), r.seed, r.seed)
}

// expected is the model of the table when the sink committed the input up
// to line: the input's changes and the other engine's, in the order they
// landed.
func (r *run) expected(line int) map[string][]any {
	m := map[string][]any{}
	cur := 0
	apply := func(upto int) {
		for ; cur < upto; cur++ {
			if ch := r.changes[cur]; ch != nil {
				if ch.del {
					delete(m, r.cfg.key(ch.row))
				} else {
					m[r.cfg.key(ch.row)] = ch.row
				}
			}
		}
	}
	for _, e := range r.events {
		apply(e.at)
		e.apply(m)
	}
	apply(line)
	return m
}

// open opens the warehouse (the sink is not running).
func (r *run) open() *warehouse.Warehouse {
	r.t.Helper()
	wh, err := warehouse.Open(r.ctx, r.dir, warehouse.Options{})
	if err != nil {
		r.fail("opening the warehouse: %v", err)
	}
	r.t.Cleanup(func() { wh.Close() })
	return wh
}

func (r *run) load(wh *warehouse.Warehouse) *table.Table {
	r.t.Helper()
	tbl, err := wh.Catalog.LoadTable(r.ctx, tableIdent)
	if err != nil {
		r.fail("loading the table: %v", err)
	}
	return tbl
}

// committed returns the input line the sink's last commit covers (0: none).
func (r *run) committed(wh *warehouse.Warehouse) int {
	r.t.Helper()
	cm, err := commit.NewCommitter(r.ctx, wh.Catalog, tableIdent, "sim")
	if err != nil {
		r.fail("reading the sink's position: %v", err)
	}
	last, ok := cm.Last()
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(last.Properties[commit.PropInputPosition])
	if err != nil {
		r.fail("epoch %d has input position %q", last.Epoch, last.Properties[commit.PropInputPosition])
	}
	return n
}

// check reads the table back and compares it with the model at the
// sink's committed line, which must not be behind what it was (but
// after a rollback).
func (r *run) check(step string) {
	r.t.Helper()
	wh := r.open()
	defer wh.Close()
	tbl, err := wh.Catalog.LoadTable(r.ctx, tableIdent)
	if err != nil {
		if r.line == 0 && len(r.events) == 0 {
			return // a run killed before it created the table
		}
		r.fail("%s: loading the table: %v", step, err)
	}
	line := r.committed(wh)
	if line < r.line {
		r.fail("%s: the sink's committed line went back from %d to %d", step, r.line, line)
	}
	r.line = line
	if rep, err := tablelint.Lint(r.ctx, tbl); err != nil || rep.Err() != nil {
		r.fail("%s: tablelint: %v %v", step, err, rep.Err())
	}
	got := map[string][]any{}
	for row, err := range warehouse.Rows(r.ctx, tbl) {
		if err != nil {
			r.fail("%s: scanning: %v", step, err)
		}
		k := r.cfg.key(row)
		if prev, dup := got[k]; dup {
			r.fail("%s: key %s read twice: %v and %v", step, k, prev, row)
		}
		got[k] = slices.Clone(row)
	}
	want := r.expected(line)
	if !reflect.DeepEqual(got, want) {
		var diffs []string
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if g, ok := got[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("key %s missing (model %v)", k, want[k]))
			} else if !reflect.DeepEqual(g, want[k]) {
				diffs = append(diffs, fmt.Sprintf("key %s: table %v, model %v", k, g, want[k]))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if _, ok := want[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("key %s in the table (%v), not in the model", k, got[k]))
			}
		}
		r.fail("%s: at line %d the table has %d live rows, the model %d: %s", step, line, len(got), len(want), strings.Join(diffs[:min(len(diffs), 5)], "; "))
	}
	// Every epoch of the sink at most once in the history.
	seen := map[string]bool{}
	if cur := tbl.CurrentSnapshot(); cur != nil {
		for _, s := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
			if s.Summary == nil || s.Summary.Properties[commit.PropSinkID] != "sim" {
				continue
			}
			e := s.Summary.Properties[commit.PropEpoch]
			if e != "" && seen[e] {
				r.fail("%s: epoch %s committed twice", step, e)
			}
			seen[e] = true
		}
	}
	// Tags still read what they held.
	for tag, rows := range r.tags {
		snap := tbl.Metadata().SnapshotByName(tag)
		if snap == nil {
			r.fail("%s: tag %s is gone", step, tag)
		}
		id := snap.SnapshotID
		n := 0
		_, it, err := tbl.Scan(table.WithSnapshotID(id)).ToArrowRecords(r.ctx)
		if err != nil {
			r.fail("%s: reading tag %s: %v", step, tag, err)
		}
		for rec, err := range it {
			if err != nil {
				r.fail("%s: reading tag %s: %v", step, tag, err)
			}
			n += int(rec.NumRows())
			rec.Release()
		}
		if n != rows {
			r.fail("%s: tag %s reads %d rows, it held %d", step, tag, n, rows)
		}
	}
	r.logf("%s: checked at line %d (%d live rows)", step, line, len(got))
}

// killPoints are the named crash points a run may be killed at.
var killPoints = []string{"keyindex-rebuild", "keyindex-load", "keyindex-resolve", "keyindex-ingest", "keyindex-save", "epoch-committed", "compaction-committed"}

// sink runs the icesink command over the input up to line upto: with
// kill, once killed (at a crash point or a random moment) and checked,
// then again to the end.
func (r *run) sink(upto int, kill bool) {
	r.t.Helper()
	r.given = upto
	in := filepath.Join(r.t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(r.lines[:upto], "\n")+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
	c := r.cfg
	args := []string{"run", "--warehouse", r.dir, "--table", ident, "--schema", r.schema, "--sink-id", "sim",
		"--format-version", strconv.Itoa(c.Version), "--delete-mode", c.DeleteMode, "--writers", strconv.Itoa(c.Writers),
		"--memory-limit", c.Memory, "--checkpoint-rows", strconv.Itoa(c.CheckpointRows), "--quiet",
		"--maintain=" + strconv.FormatBool(c.Maintain), "--compact-every", strconv.Itoa(c.CompactEvery), "--compact-min-files", "2"}
	if r.spec != "" {
		args = append(args, "--partition-spec", r.spec)
	}
	if c.KeyIndex {
		args = append(args, "--key-index-dir", r.keyDir)
	} else {
		args = append(args, "--key-index-dir", "-")
	}
	if c.Pipe {
		args = append(args, "--input", "-")
	} else {
		args = append(args, "--input", in)
	}
	exec1 := func(env string, after time.Duration) (killed bool) {
		r.t.Helper()
		cmd := exec.Command(binary, args...)
		if env != "" {
			cmd.Env = append(os.Environ(), "ICESINK_FAILPOINT="+env)
		}
		if c.Pipe {
			f, err := os.Open(in)
			if err != nil {
				r.t.Fatal(err)
			}
			defer f.Close()
			cmd.Stdin = f
		}
		var stderr bytes.Buffer
		cmd.Stderr, cmd.Stdout = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			r.t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		var timer <-chan time.Time
		if after > 0 {
			timer = time.After(after)
		}
		select {
		case err = <-done:
		case <-timer:
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			return true
		case <-time.After(2 * time.Minute):
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			r.fail("a run over lines 1-%d still runs after 2 minutes:\n%s", upto, stderr.String())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && env != "" {
				return true
			}
			r.fail("a run over lines 1-%d exited %d:\n%s", upto, ee.ExitCode(), stderr.String())
		} else if err != nil {
			r.t.Fatal(err)
		}
		return false
	}
	if kill {
		var env string
		var after time.Duration
		how := ""
		if r.rng.IntN(2) == 0 {
			env = killPoints[r.rng.IntN(len(killPoints))] + ":" + strconv.Itoa(1+r.rng.IntN(3))
			how = "at " + env
		} else {
			after = time.Duration(50+r.rng.IntN(700)) * time.Millisecond
			how = "after " + after.String()
		}
		if exec1(env, after) {
			r.logf("run to line %d killed %s", upto, how)
			r.check("after the kill")
		} else {
			r.logf("run to line %d ended before its kill %s", upto, how)
		}
	}
	exec1("", 0)
	r.logf("run to line %d", upto)
	r.check("after the run")
	if r.line != upto {
		r.fail("a finished run over lines 1-%d left the table at line %d", upto, r.line)
	}
}

// arrowSchema is the table's schema as iceberg-go writes it.
func (r *run) arrowSchema() *arrow.Schema {
	sc, err := table.SchemaToArrowSchema(r.cfg.schema(), nil, true, false)
	if err != nil {
		r.t.Fatal(err)
	}
	return sc
}

// foreignStep lets another engine change the table between two runs.
func (r *run) foreignStep() {
	r.t.Helper()
	wh := r.open()
	defer wh.Close()
	tbl := r.load(wh)
	c := r.cfg
	at := r.line
	var snapshotOf = func(t *table.Table) int64 {
		if s := t.CurrentSnapshot(); s != nil {
			return s.SnapshotID
		}
		return 0
	}
	switch k := r.rng.IntN(8); k {
	case 0, 1: // an append of keys the input never has
		n := 1 + r.rng.IntN(5)
		b := array.NewRecordBuilder(memory.DefaultAllocator, r.arrowSchema())
		var rows [][]any
		for range n {
			r.foreign++
			id := 1_000_000 + r.foreign
			row := c.row(id, "f", "foreign", -id)
			rows = append(rows, row)
			for i, v := range row {
				switch v := v.(type) {
				case int64:
					b.Field(i).(*array.Int64Builder).Append(v)
				case string:
					b.Field(i).(*array.StringBuilder).Append(v)
				}
			}
		}
		rec := b.NewRecordBatch()
		b.Release()
		at2 := array.NewTableFromRecords(r.arrowSchema(), []arrow.RecordBatch{rec})
		rec.Release()
		nt, err := tbl.AppendTable(r.ctx, at2, 1024, nil)
		at2.Release()
		if err != nil {
			r.fail("a foreign append: %v", err)
		}
		r.events = append(r.events, event{at: at, snap: snapshotOf(nt), what: "append", apply: func(m map[string][]any) {
			for _, row := range rows {
				m[c.key(row)] = row
			}
		}})
		r.logf("foreign append of %d rows at line %d", n, at)
	case 2, 3: // equality deletes of live keys, on the key or (composite) on id alone
		live := slices.Sorted(maps.Keys(r.expected(at)))
		if len(live) == 0 {
			return
		}
		byID := c.Composite && r.rng.IntN(2) == 0
		ids := []int{1}
		fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"1"})}}
		if c.Composite && !byID {
			ids = []int{1, 2}
			fields = append(fields, arrow.Field{Name: "tenant", Type: arrow.BinaryTypes.String, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"2"})})
		}
		b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
		m := r.expected(at)
		var gone []string
		delIDs := map[int64]bool{}
		for range 1 + r.rng.IntN(5) {
			k := live[r.rng.IntN(len(live))]
			row := m[k]
			b.Field(0).(*array.Int64Builder).Append(row[0].(int64))
			if len(ids) == 2 {
				b.Field(1).(*array.StringBuilder).Append(row[1].(string))
			}
			gone = append(gone, k)
			delIDs[row[0].(int64)] = true
		}
		rec := b.NewRecordBatch()
		b.Release()
		tx := tbl.NewTransaction()
		if err := tx.CommitEqualityDeletes(r.ctx, ids, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) }, nil); err != nil {
			r.fail("foreign equality deletes: %v", err)
		}
		nt, err := tx.Commit(r.ctx)
		rec.Release()
		if err != nil {
			r.fail("foreign equality deletes: %v", err)
		}
		r.events = append(r.events, event{at: at, snap: snapshotOf(nt), what: "equality delete", apply: func(m map[string][]any) {
			if byID {
				for k, row := range m {
					if delIDs[row[0].(int64)] {
						delete(m, k)
					}
				}
				return
			}
			for _, k := range gone {
				delete(m, k)
			}
		}})
		r.logf("foreign equality delete of %d keys (by id alone: %v) at line %d", len(gone), byID, at)
	case 4: // a compaction by another engine
		spark, err := commit.NewCommitter(r.ctx, wh.Catalog, tableIdent, "spark")
		if err != nil {
			r.fail("%v", err)
		}
		res, err := spark.Compact(r.ctx, commit.Compaction{MinInputFiles: 2})
		if err != nil {
			r.fail("a foreign compaction: %v", err)
		}
		r.logf("foreign compaction at line %d: %d data files into %d", at, res.RemovedDataFiles, res.AddedDataFiles)
	case 5: // a rollback to one of the sink's epochs
		var targets []table.Snapshot
		cur := tbl.CurrentSnapshot()
		if cur == nil {
			return
		}
		for _, s := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
			if s.Summary != nil && s.Summary.Properties[commit.PropSinkID] == "sim" && s.Summary.Properties[commit.PropEpoch] != "" && s.SnapshotID != cur.SnapshotID {
				targets = append(targets, s)
			}
		}
		if len(targets) == 0 {
			return
		}
		target := targets[r.rng.IntN(len(targets))]
		line, _ := strconv.Atoi(target.Summary.Properties[commit.PropInputPosition])
		ancestors := map[int64]bool{}
		for _, s := range table.AncestorsOf(target.SnapshotID, tbl.Metadata().SnapshotByID) {
			ancestors[s.SnapshotID] = true
		}
		tx := tbl.NewTransaction()
		if err := tx.RollbackToSnapshot(target.SnapshotID); err != nil {
			r.fail("a rollback: %v", err)
		}
		if _, err := tx.Commit(r.ctx); err != nil {
			r.fail("a rollback: %v", err)
		}
		// What the rolled-back history held of the other engine stays;
		// the input after the target's line is written again.
		kept := r.events[:0]
		for _, e := range r.events {
			if ancestors[e.snap] {
				kept = append(kept, e)
			}
		}
		r.events = kept
		r.line = line
		for tag := range r.tags {
			delete(r.tags, tag) // a tag may name a snapshot the rollback left
		}
		r.logf("rollback to epoch %s (line %d) from line %d", target.Summary.Properties[commit.PropEpoch], line, at)
		r.check("after the rollback")
	case 6: // a tag, and the table's commits retried
		cur := tbl.CurrentSnapshot()
		if cur == nil {
			return
		}
		tag := fmt.Sprintf("audit-%d", len(r.tags))
		tx := tbl.NewTransaction()
		if err := tx.SetProperties(iceberg.Properties{"commit.retry.num-retries": "3"}); err != nil {
			r.fail("%v", err)
		}
		if _, err := tx.Commit(r.ctx); err != nil {
			r.fail("setting properties: %v", err)
		}
		if _, _, err := wh.Catalog.CommitTable(r.ctx, tableIdent, nil, []table.Update{table.NewSetSnapshotRefUpdate(tag, cur.SnapshotID, table.TagRef, -1, -1, -1)}); err != nil {
			r.fail("tagging: %v", err)
		}
		if r.tags == nil {
			r.tags = map[string]int{}
		}
		r.tags[tag] = len(r.expected(at))
		r.logf("tag %s and retry properties at line %d", tag, at)
	case 7: // snapshot expiry by another engine
		tx := tbl.NewTransaction()
		if err := tx.ExpireSnapshots(table.WithRetainLast(3 + r.rng.IntN(5))); err != nil {
			r.fail("expiring snapshots: %v", err)
		}
		if _, err := tx.Commit(r.ctx); err != nil {
			r.fail("expiring snapshots: %v", err)
		}
		r.logf("foreign snapshot expiry at line %d", at)
	}
	r.check("after the foreign change")
}

// simulate runs one seed.
func simulate(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x51e5))
	cfg := draw(rng)
	r := &run{t: t, ctx: context.Background(), seed: seed, rng: rng, cfg: cfg, dir: t.TempDir(), keyDir: filepath.Join(t.TempDir(), "keyindex")}
	r.lines, r.changes = stream(rng, cfg)
	b, err := cfg.schema().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r.schema = filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(r.schema, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg.Partitioned {
		r.spec = filepath.Join(t.TempDir(), "spec.json")
		if err := os.WriteFile(r.spec, []byte(`{"spec-id":0,"fields":[{"source-id":1,"field-id":1000,"name":"id_bucket","transform":"bucket[4]"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.logf("config %s", cfg)
	phases := 2 + rng.IntN(3)
	for p := 1; p <= phases; p++ {
		upto := len(r.lines) * p / phases
		if upto < r.line {
			upto = r.line // a rollback took the table back: the input grows again from there
		}
		r.sink(upto, rng.IntN(2) == 0)
		if p < phases {
			for range rng.IntN(3) {
				r.foreignStep()
			}
		}
	}
	// A last run over the whole input after what came last.
	if r.line != len(r.lines) {
		r.sink(len(r.lines), false)
	}
}

// TestSimulation runs the seeds: the fixed CI set, or -sim.seeds from
// -sim.from.
func TestSimulation(t *testing.T) {
	from, n := uint64(1), ciSeeds
	if testing.Short() {
		n = shortSeeds
	}
	if *seedsFlag > 0 {
		from, n = *fromFlag, *seedsFlag
	}
	for s := from; s < from+uint64(n); s++ {
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			t.Parallel()
			simulate(t, s)
		})
	}
}
