package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// runDatabaseTables runs each input into its table (db.NAME) through the
// database d, all at once; a table whose window another table's failure
// aborted runs again from what it committed, as icesink run does. It
// returns each table's last error.
func runDatabaseTables(t *testing.T, ctx context.Context, wh *warehouse.Warehouse, d *sink.Database, inputs map[string][]byte) map[string]error {
	t.Helper()
	return runDatabaseTablesWith(t, ctx, wh, d, inputs, nil)
}

// runDatabaseTablesWith is runDatabaseTables with each table's config
// changed by tune (nil: none).
func runDatabaseTablesWith(t *testing.T, ctx context.Context, wh *warehouse.Warehouse, d *sink.Database, inputs map[string][]byte, tune func(name string, cfg *sink.Config)) map[string]error {
	t.Helper()
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, input := range inputs {
		cfg := databaseTable(t, ctx, wh, d, name)
		wg.Go(func() {
			if tune != nil {
				tune(name, &cfg)
			}
			var err error
			for range 20 {
				var dec *changelog.Decoder
				if dec, err = changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema); err != nil {
					break
				}
				if _, err = sink.Run(ctx, cfg, dec); !errors.Is(err, coordinator.ErrAborted) {
					break
				}
			}
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

// databaseTable creates table db.NAME (fuzzSchema) on wh and returns the
// config of its sink in the database d.
func databaseTable(t *testing.T, ctx context.Context, wh *warehouse.Warehouse, d *sink.Database, name string) sink.Config {
	t.Helper()
	ident := table.Identifier{"db", name}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
		t.Fatal(err)
	}
	return sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "s", Database: d,
		Writer: deltawriter.Options{SpillDir: t.TempDir()}, KeyIndexDir: "-"}
}

// startDatabase starts a database of slots tables on wh, checkpointing in
// dir.
func startDatabase(t *testing.T, ctx context.Context, wh *warehouse.Warehouse, dir string, slots int) *sink.Database {
	t.Helper()
	d, err := sink.StartDatabase(ctx, sink.Config{Loader: wh.Catalog, SinkID: "s", StateDir: dir, Vnodes: 16,
		Timeouts: sink.Timeouts{Align: 30 * time.Second}}, slots, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDatabaseOneEpochAcrossTables: tables of one database commit under
// one epoch count: two tables of different lengths each equal their
// model, and a table that joins later starts after the epochs the first
// two committed (with a coordinator of its own it would start at 1), also
// after a restart of the database on its state folder.
func TestDatabaseOneEpochAcrossTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wh, _ := newWarehouse(t)
	dir := t.TempDir()
	d := startDatabase(t, ctx, wh, dir, 3)
	inputs := map[string][]byte{
		"a": genInputKeys(t, 1, 3000, 300, 0),
		"b": genInputKeys(t, 2, 1200, 100, 1000),
	}
	for name, err := range runDatabaseTables(t, ctx, wh, d, inputs) {
		if err != nil {
			t.Fatalf("table %s: %v", name, err)
		}
	}
	var before uint64
	for name, input := range inputs {
		checkModel(t, wh, table.Identifier{"db", name}, input)
		pos, err := sink.Resume(ctx, sink.Config{Loader: wh.Catalog, Ident: table.Identifier{"db", name}, SinkID: "s"})
		if err != nil {
			t.Fatal(err)
		}
		before = max(before, pos.Epoch)
	}
	if before < 10 {
		t.Fatalf("the tables committed up to epoch %d; the inputs hold more barriers", before)
	}
	for round := range 2 {
		name := fmt.Sprint("late", round)
		late := map[string][]byte{name: genInputKeys(t, uint64(3+round), 600, 50, 2000)}
		for _, err := range runDatabaseTables(t, ctx, wh, d, late) {
			if err != nil {
				t.Fatal(err)
			}
		}
		checkModel(t, wh, table.Identifier{"db", name}, late[name])
		pos, err := sink.Resume(ctx, sink.Config{Loader: wh.Catalog, Ident: table.Identifier{"db", name}, SinkID: "s"})
		if err != nil {
			t.Fatal(err)
		}
		if pos.Epoch <= before {
			t.Fatalf("table %s joined after epoch %d and committed up to epoch %d: its epochs are not the database's", name, before, pos.Epoch)
		}
		before = pos.Epoch
		// The next round: the database restarts on its state folder.
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d = startDatabase(t, ctx, wh, dir, 3)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseTableFailureLeavesOthers: one table's input has a bad line
// half way; its run stops naming the line, with what it committed before
// it, and the other tables (whose open windows the failure aborted) go on
// to their inputs' ends, each equal to its model.
func TestDatabaseTableFailureLeavesOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wh, _ := newWarehouse(t)
	d := startDatabase(t, ctx, wh, t.TempDir(), 3)
	defer d.Close()
	bad := genInputKeys(t, 3, 2000, 200, 2000)
	lines := bytes.SplitAfter(bad, []byte("\n"))
	bad = bytes.Join(append(append(lines[:1000:1000], []byte("{\"op\":\"U\",\"row\":\n")), lines[1000:]...), nil)
	inputs := map[string][]byte{
		"a":   genInputKeys(t, 1, 3000, 300, 0),
		"b":   genInputKeys(t, 2, 3000, 300, 1000),
		"bad": bad,
	}
	errs := runDatabaseTables(t, ctx, wh, d, inputs)
	if err := errs["bad"]; err == nil || !strings.Contains(err.Error(), "line 1001") {
		t.Fatalf("the bad table's run ended with %v, want the error of line 1001", err)
	}
	for _, name := range []string{"a", "b"} {
		if errs[name] != nil {
			t.Fatalf("table %s: %v", name, errs[name])
		}
		checkModel(t, wh, table.Identifier{"db", name}, inputs[name])
	}
	pos, err := sink.Resume(ctx, sink.Config{Loader: wh.Catalog, Ident: table.Identifier{"db", "bad"}, SinkID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if pos.Line >= 1001 {
		t.Fatalf("the bad table committed through line %d, past its bad line", pos.Line)
	}
}

// TestDatabaseCommitRefusedForOneTable: another application appends to
// one table while its window is resolved (after the writer reloaded the
// table), so that table's commit of the epoch is refused for good (its
// key index could not see the new rows). The epoch's other table commits
// as usual and ends equal to its model; the refused table's run stops
// naming the foreign change, and its rerun ends with its input's final
// state plus the foreign rows.
func TestDatabaseCommitRefusedForOneTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wh, _ := newWarehouse(t)
	d := startDatabase(t, ctx, wh, t.TempDir(), 2)
	defer d.Close()
	inputs := map[string][]byte{
		"a": genInputKeys(t, 1, 3000, 300, 0),
		"b": genInputKeys(t, 2, 3000, 300, 1000),
	}
	foreign := [][]any{{int64(90000), "f", int32(1), int64(100)}}
	var once sync.Once
	errs := runDatabaseTablesWith(t, ctx, wh, d, inputs, func(name string, cfg *sink.Config) {
		if name != "b" {
			return
		}
		cfg.Writer.Failpoint = func(point string) {
			if point == "keyindex-resolve" {
				once.Do(func() { foreignAppend(t, ctx, wh, table.Identifier{"db", "b"}, foreign) })
			}
		}
	})
	if errs["a"] != nil {
		t.Fatalf("table a: %v", errs["a"])
	}
	checkModel(t, wh, table.Identifier{"db", "a"}, inputs["a"])
	if err := errs["b"]; err == nil || !strings.Contains(err.Error(), "changed by another writer") {
		t.Fatalf("table b's run ended with %v, want its commit refused for the foreign change", err)
	}
	if errs := runDatabaseTables(t, ctx, wh, d, map[string][]byte{"b": inputs["b"]}); errs["b"] != nil {
		t.Fatalf("table b's rerun: %v", errs["b"])
	}
	checkWithForeignRow(t, ctx, wh, inputs["b"])
}

// checkWithForeignRow fails unless table db.b holds input's final state
// and the foreign row (90000, "f", 1, 1.00).
func checkWithForeignRow(t *testing.T, ctx context.Context, wh *warehouse.Warehouse, input []byte) {
	t.Helper()
	want := modelUpTo(t, input, changelog.ChangelogJSON, 1<<62)
	kc, _ := deltawriter.NewKeyCodec(fuzzSchema)
	row := []any{int64(90000), "f", int32(1), decimalOf(100)}
	k, _ := kc.Append(nil, row)
	want[string(k)] = row
	if got := liveRowsOf(t, ctx, wh, table.Identifier{"db", "b"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("table b has %d live rows, want %d (its input's final state and the foreign row)", len(got), len(want))
	}
}

// TestDatabaseStartsAfterItsTables: a table written by a sink of its own
// (epochs 1..N) joins a database whose state folder is new: told of the
// table, the database starts after epoch N and the table goes on exact;
// not told, the table is refused naming both epochs (its epochs could
// never align with the database's).
func TestDatabaseStartsAfterItsTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wh, _ := newWarehouse(t)
	ident := table.Identifier{"db", "x"}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
		t.Fatal(err)
	}
	first := genInputKeys(t, 5, 1500, 200, 0)
	runInput(t, sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "s", StateDir: t.TempDir(), KeyIndexDir: "-"}, first)
	alone, err := sink.Resume(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	input := append(append([]byte(nil), first...), genInputKeys(t, 6, 1500, 200, 0)...)

	untold := startDatabase(t, ctx, wh, t.TempDir(), 1)
	errs := runDatabaseTables(t, ctx, wh, untold, map[string][]byte{"x": input})
	if err := errs["x"]; err == nil || !strings.Contains(err.Error(), fmt.Sprintf("holds epoch %d", alone.Epoch)) {
		t.Fatalf("a table ahead of a new database's epochs: got %v, want a refusal naming its epoch %d", err, alone.Epoch)
	}
	untold.Close()

	d, err := sink.StartDatabase(ctx, sink.Config{Loader: wh.Catalog, SinkID: "s", StateDir: t.TempDir(), Vnodes: 16}, 1, []table.Identifier{ident})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if errs := runDatabaseTables(t, ctx, wh, d, map[string][]byte{"x": input}); errs["x"] != nil {
		t.Fatal(errs["x"])
	}
	checkModel(t, wh, ident, input)
	pos, err := sink.Resume(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if pos.Epoch <= alone.Epoch {
		t.Fatalf("the table ends at epoch %d, not after its own %d", pos.Epoch, alone.Epoch)
	}
}

// TestDatabaseFinalWindowPreparedEarly: a table whose input ends writes
// its last window's files at once (a final epoch always commits), while
// another table of the same epoch still reads, instead of after the last
// table's report; once the other input ends too, both tables equal their
// models.
func TestDatabaseFinalWindowPreparedEarly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wh, _ := newWarehouse(t)
	d := startDatabase(t, ctx, wh, t.TempDir(), 2)
	defer d.Close()
	// No barrier: each table's one epoch is its final one.
	noBarriers := func(in []byte) []byte {
		var out []byte
		for line := range bytes.Lines(in) {
			if strings.TrimSpace(string(line)) != changelog.BarrierLine {
				out = append(out, line...)
			}
		}
		return out
	}
	inputs := map[string][]byte{
		"early": noBarriers(genInputKeys(t, 7, 400, 60, 0)),
		"late":  noBarriers(genInputKeys(t, 8, 400, 60, 1000)),
	}
	half := bytes.Index(inputs["late"][len(inputs["late"])/2:], []byte("\n")) + len(inputs["late"])/2 + 1
	pr, pw := io.Pipe()
	release := make(chan struct{})
	go func() {
		if _, err := pw.Write(inputs["late"][:half]); err != nil {
			return
		}
		<-release
		_, _ = pw.Write(inputs["late"][half:])
		pw.Close()
	}()
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()

	errs := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, in := range map[string]io.Reader{"early": bytes.NewReader(inputs["early"]), "late": pr} {
		cfg := databaseTable(t, ctx, wh, d, name)
		wg.Go(func() {
			dec, err := changelog.NewDecoder(in, changelog.ChangelogJSON, fuzzSchema)
			if err == nil {
				_, err = sink.Run(ctx, cfg, dec)
			}
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"db", "early"})
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(strings.TrimPrefix(tbl.Location(), "file://"), "data")
	// A complete Parquet file (its footer written) of the early table's
	// window, while the late table has not reached its epoch's end.
	complete := func() bool {
		found := false
		_ = filepath.WalkDir(dataDir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.Contains(e.Name(), "-data-") {
				return nil
			}
			b, err := os.ReadFile(p)
			found = found || err == nil && len(b) > 8 && string(b[len(b)-4:]) == "PAR1"
			return nil
		})
		return found
	}
	for deadline := time.Now().Add(30 * time.Second); !complete(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			open()
			wg.Wait()
			t.Fatalf("no complete data file of table db.early in %s after 30s while table db.late still read: the ended table waited for the epoch's decision to write its window", dataDir)
		}
	}
	open()
	wg.Wait()
	for name, err := range errs {
		if err != nil {
			t.Fatalf("table %s: %v", name, err)
		}
		checkModel(t, wh, table.Identifier{"db", name}, inputs[name])
	}
}

// TestDatabaseCommitRefusedEveryWriterHears: as above with two writers on
// the refused table, each keeping its key index between runs: every
// writer of the table hears that the epoch failed, none takes its window
// as committed (its key index, saved after each commit, would point at
// files the table never got), and the rerun ends with the input's final
// state plus the foreign rows. Before, only the first writer to ask heard
// it (issue 46 item 11).
func TestDatabaseCommitRefusedEveryWriterHears(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wh, _ := newWarehouse(t)
	d := startDatabase(t, ctx, wh, t.TempDir(), 1)
	defer d.Close()
	input := genInputKeys(t, 2, 3000, 300, 1000)
	foreign := [][]any{{int64(90000), "f", int32(1), int64(100)}}
	keyDir := t.TempDir()
	var once sync.Once
	tune := func(fail bool) func(string, *sink.Config) {
		return func(_ string, cfg *sink.Config) {
			cfg.Writers, cfg.KeyIndexDir = 2, keyDir
			cfg.Writer.MemoryLimit = 1 << 20
			if fail {
				cfg.Writer.Failpoint = func(point string) {
					if point == "keyindex-resolve" {
						once.Do(func() { foreignAppend(t, ctx, wh, table.Identifier{"db", "b"}, foreign) })
					}
				}
			}
		}
	}
	errs := runDatabaseTablesWith(t, ctx, wh, d, map[string][]byte{"b": input}, tune(true))
	if err := errs["b"]; err == nil || !strings.Contains(err.Error(), "changed by another writer") {
		t.Fatalf("table b's run ended with %v, want its commit refused for the foreign change", err)
	}
	if errs := runDatabaseTablesWith(t, ctx, wh, d, map[string][]byte{"b": input}, tune(false)); errs["b"] != nil {
		t.Fatalf("table b's rerun: %v", errs["b"])
	}
	checkWithForeignRow(t, ctx, wh, input)
}
