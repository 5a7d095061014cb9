package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/pgtest"
	"github.com/icesink/icesink/internal/tablelint"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// pgFixture is a PostgreSQL server with a publication's tables and a
// warehouse their Iceberg tables go to.
type pgFixture struct {
	t    testing.TB
	srv  *pgtest.Server
	url  string
	conn *pgx.Conn
	wh   *warehouse.Warehouse
	dir  string
	rng  *rand.Rand
}

func newFixture(t testing.TB, seed uint64) *pgFixture {
	t.Helper()
	// Keepalives every second, so that idle tables move on promptly.
	return newFixtureWith(t, seed, "wal_sender_timeout=2s")
}

// newFixtureWith is newFixture on a server with settings.
func newFixtureWith(t testing.TB, seed uint64, settings ...string) *pgFixture {
	t.Helper()
	srv := pgtest.StartServer(t, settings...)
	url := srv.URL
	ctx := context.Background()
	conn, err := connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	dir := t.TempDir()
	wh, err := warehouse.Open(ctx, dir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wh.Close() })
	return &pgFixture{t: t, srv: srv, url: url, conn: conn, wh: wh, dir: dir, rng: rand.New(rand.NewPCG(seed, 47))}
}

func (f *pgFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.conn.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// config is the replication of schema app's tables into namespace pg.
func (f *pgFixture) config(logger *slog.Logger) RunConfig {
	return RunConfig{
		Source: Config{URL: f.url, Publication: "icesink", Tables: []string{"app.*"}, Slot: "icesink", StatusInterval: 200 * time.Millisecond, Logger: logger},
		Sink: sink.Config{Loader: f.wh.Catalog, SinkID: "pg", StateDir: filepath.Join(f.dir, "_state"), Vnodes: 16,
			BarrierInterval: 200 * time.Millisecond, Writers: 2, KeyIndexDir: "-", Logger: logger, EvolveSchema: true,
			Writer:   deltawriter.Options{SpillDir: f.t.TempDir(), MemoryLimit: 8 << 20},
			Timeouts: sink.Timeouts{Align: 30 * time.Second}},
		Warehouse: f.wh,
		Table: func(n TableName) (table.Identifier, error) {
			return table.Identifier{"pg", n.Schema + "_" + n.Table}, nil
		},
	}
}

// randomTxn runs one random transaction over app.orders and app.items:
// inserts, updates (an item's key among them), deletes; one in eight is
// rolled back.
func (f *pgFixture) randomTxn() {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.conn.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	for range 1 + f.rng.IntN(6) {
		id := f.rng.IntN(400)
		var sql string
		var args []any
		switch f.rng.IntN(7) {
		case 0, 1:
			sql = `INSERT INTO app.orders VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET customer = excluded.customer, amount = excluded.amount, paid = excluded.paid`
			args = []any{id, fmt.Sprintf("cust-%d", f.rng.IntN(50)), fmt.Sprintf("%d.%02d", f.rng.IntN(100000), f.rng.IntN(100)), f.rng.IntN(2) == 0,
				time.Unix(1.7e9+f.rng.Int64N(1e8), f.rng.Int64N(1e9)).UTC(), strings.Repeat("n", f.rng.IntN(3)*1500)}
		case 2:
			sql, args = `UPDATE app.orders SET paid = NOT paid, amount = amount + 1 WHERE id = $1`, []any{id}
		case 3:
			sql, args = `DELETE FROM app.orders WHERE id = $1`, []any{id}
		case 4:
			sql = `INSERT INTO app.items VALUES ($1, $2, $3) ON CONFLICT (k, sku) DO UPDATE SET qty = excluded.qty`
			args = []any{id % 100, fmt.Sprintf("sku-%d", f.rng.IntN(4)), f.rng.IntN(1000)}
		case 5:
			// A key change: the old key's row goes, the new one comes.
			sql, args = `UPDATE app.items SET k = k + 100 WHERE k = $1 AND NOT EXISTS (SELECT 1 FROM app.items i WHERE i.k = $1 + 100)`, []any{id % 100}
		case 6:
			sql, args = `DELETE FROM app.items WHERE k = $1`, []any{id % 200}
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			f.t.Fatalf("%s: %v", sql, err)
		}
	}
	if f.rng.IntN(8) == 0 {
		err = tx.Rollback(ctx)
	} else {
		err = tx.Commit(ctx)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// create makes the source tables with some rows.
func (f *pgFixture) create() {
	f.exec(`CREATE SCHEMA app`)
	f.exec(`CREATE TABLE app.orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), paid boolean NOT NULL, created timestamptz, note text)`)
	f.exec(`ALTER TABLE app.orders REPLICA IDENTITY FULL`)
	f.exec(`CREATE TABLE app.items (k integer, sku varchar(20), qty integer, PRIMARY KEY (k, sku))`)
	for range 60 {
		f.randomTxn()
	}
}

// lsn is the server's current WAL position.
func (f *pgFixture) lsn() pglogrepl.LSN {
	f.t.Helper()
	var s string
	if err := f.conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		f.t.Fatal(err)
	}
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// committedLSN is the position table ident's commits hold (0: none).
func (f *pgFixture) committedLSN(ident table.Identifier) pglogrepl.LSN {
	pos, err := sink.Resume(context.Background(), sink.Config{Loader: f.wh.Catalog, Ident: ident, SinkID: "pg"})
	if err != nil {
		return 0
	}
	l, _ := parseLSN(pos.Offsets[PropLSN])
	return l
}

// check compares every Iceberg table with its source table (the
// source's columns, by name: a column dropped at the source stays in
// the table).
func (f *pgFixture) check(step string, tables ...TableName) {
	f.t.Helper()
	ctx := context.Background()
	if len(tables) == 0 {
		tables = []TableName{{"app", "orders"}, {"app", "items"}}
	}
	for _, n := range tables {
		st, err := describe(ctx, f.conn, n, nil)
		if errors.Is(err, errNoKey) {
			st, err = describe(ctx, f.conn, n, []string{"id"}) // the key the test gave
		}
		if err != nil {
			f.t.Fatal(err)
		}
		want := map[string][]any{}
		rows, err := f.conn.Query(ctx, "SELECT * FROM "+n.quoted(), pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			f.t.Fatal(err)
		}
		for rows.Next() {
			row := make([]any, len(st.cols))
			for i, raw := range rows.RawValues() {
				if raw != nil {
					if row[i], err = st.cols[i].decode(string(raw)); err != nil {
						f.t.Fatal(err)
					}
				}
			}
			want[keyOf(st, row)] = row
		}
		if err := rows.Err(); err != nil {
			f.t.Fatal(err)
		}
		ident := table.Identifier{"pg", n.Schema + "_" + n.Table}
		tbl, err := f.wh.Catalog.LoadTable(ctx, ident)
		if err != nil {
			f.t.Fatalf("%s: %v", step, err)
		}
		if rep, err := tablelint.Lint(ctx, tbl); err != nil || rep.Err() != nil {
			f.t.Fatalf("%s: table %v: tablelint: %v %v", step, ident, err, rep.Err())
		}
		got := map[string][]any{}
		for full, err := range warehouse.Rows(ctx, tbl) {
			if err != nil {
				f.t.Fatal(err)
			}
			row := make([]any, len(st.cols))
			for i, c := range st.cols {
				for j, fl := range tbl.Schema().Fields() {
					if fl.Name == c.name {
						row[i] = full[j]
					}
				}
			}
			k := keyOf(st, row)
			if _, dup := got[k]; dup {
				f.t.Fatalf("%s: table %v holds key %s twice", step, ident, k)
			}
			got[k] = row
		}
		if !reflect.DeepEqual(got, want) {
			var diffs []string
			for _, k := range slices.Sorted(maps.Keys(want)) {
				if !reflect.DeepEqual(got[k], want[k]) {
					diffs = append(diffs, fmt.Sprintf("key %s: iceberg %v, postgres %v", k, got[k], want[k]))
				}
			}
			for _, k := range slices.Sorted(maps.Keys(got)) {
				if _, ok := want[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("key %s only in iceberg: %v", k, got[k]))
				}
			}
			f.t.Fatalf("%s: table %v has %d rows, %s %d: %s", step, ident, len(got), n, len(want), strings.Join(diffs[:min(len(diffs), 5)], "; "))
		}
		f.t.Logf("%s: %v equals %s (%d rows)", step, ident, n, len(got))
	}
}

func keyOf(st *sourceTable, row []any) string {
	var parts []string
	for i, c := range st.cols {
		if c.key {
			parts = append(parts, fmt.Sprint(row[i]))
		}
	}
	return strings.Join(parts, "/")
}

// replicate runs the replication while txns random transactions run,
// then until every table holds the server's position, and stops it; it
// returns the metrics gathered before the stop.
func (f *pgFixture) replicate(txns int) map[string]float64 {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	type out struct {
		res []TableResult
		err error
	}
	done := make(chan out, 1)
	reg := prometheus.NewRegistry()
	cfg := f.config(logger)
	cfg.Sink.Registerer = reg
	go func() {
		res, err := Run(ctx, cfg)
		done <- out{res, err}
	}()
	for range txns {
		f.randomTxn()
		time.Sleep(time.Duration(f.rng.IntN(3)) * time.Millisecond)
	}
	target := f.lsn()
	deadline := time.Now().Add(60 * time.Second)
	for _, ident := range []table.Identifier{{"pg", "app_orders"}, {"pg", "app_items"}} {
		for f.committedLSN(ident) < target {
			select {
			case o := <-done:
				f.t.Fatalf("the replication ended early: %v", o.err)
			default:
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("table %v holds %s, the server is at %s", ident, f.committedLSN(ident), target)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	metrics := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			metrics[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	cancel()
	select {
	case o := <-done:
		if o.err != nil {
			f.t.Fatalf("the replication: %v", o.err)
		}
		return metrics
	case <-time.After(60 * time.Second):
		f.t.Fatal("the replication did not stop")
	}
	return nil
}

// slotLSN is the slot's confirmed position.
func (f *pgFixture) slotLSN() pglogrepl.LSN {
	f.t.Helper()
	var s string
	if err := f.conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'icesink'`).Scan(&s); err != nil {
		f.t.Fatal(err)
	}
	l, _ := pglogrepl.ParseLSN(s)
	return l
}

// TestReplication: a publication's tables are read in the slot's
// snapshot, then follow the stream (multi-row and rolled-back
// transactions, a key changed by an update, large unchanged values),
// stop and resume; after each run every Iceberg table equals its source
// table, and the slot has confirmed what the tables hold.
func TestReplication(t *testing.T) {
	f := newFixture(t, 1)
	f.create()
	var rows int
	if err := f.conn.QueryRow(context.Background(), "SELECT count(*) FROM app.orders").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	m := f.replicate(300)
	f.check("after the first run")
	// The snapshot is taken as the transactions run: at least the rows
	// before them.
	if got := m["icesink_postgres_snapshot_rows_total,table=app.orders"]; got < float64(rows) || got == 0 {
		t.Errorf("icesink_postgres_snapshot_rows_total of app.orders: %v, the table had %d rows before the run", got, rows)
	}
	for _, name := range []string{"icesink_postgres_slot_lag_bytes,slot=icesink", "icesink_postgres_replication_lag_seconds,slot=icesink"} {
		if v, ok := m[name]; !ok || v < 0 {
			t.Errorf("metric %s: %v %v", name, v, ok)
		}
	}
	if _, ok := m["icesink_commits_total,table=pg.app_items"]; !ok {
		var names []string
		for k := range m {
			names = append(names, k)
		}
		t.Errorf("no icesink_commits_total of pg.app_items among %v", names)
	}
	if slot, held := f.slotLSN(), f.committedLSN(table.Identifier{"pg", "app_items"}); slot == 0 || slot > held {
		t.Errorf("the slot confirmed %s, the items table holds %s", slot, held)
	}
	// Changes while no run reads them, then a run that resumes.
	for range 100 {
		f.randomTxn()
	}
	f.replicate(200)
	f.check("after the second run")
}

// TestReplicationKilled: icesink run --postgres is killed with SIGKILL at
// random moments while transactions run (in the snapshot, mid-stream,
// mid-commit), started again each time, and stopped with SIGTERM at the
// end (exit 0): every Iceberg table equals its source table.
func TestReplicationKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the icesink command")
	}
	bin := filepath.Join(t.TempDir(), "icesink")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/icesink").CombinedOutput(); err != nil {
		t.Fatalf("building icesink: %v\n%s", err, out)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	f := newFixture(t, seed)
	f.create()
	spill := t.TempDir()
	start := func() (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(bin, "run", "--postgres", f.url, "--warehouse", f.dir, "--pg-tables", "app.*",
			"--table-template", "pg.{schema}_{table}", "--sink-id", "pg", "--checkpoint-interval", "100ms",
			"--memory-limit", "4MiB", "--spill-dir", spill, "--quiet", "--pg-snapshot-chunk", "8KiB") // kills mid-snapshot too
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	var logs strings.Builder
	for k := range 4 {
		cmd, out := start()
		for range f.rng.IntN(150) {
			f.randomTxn()
		}
		time.Sleep(time.Duration(f.rng.IntN(800)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		fmt.Fprintf(&logs, "--- run %d, killed\n%s\n", k+1, out)
	}
	cmd, out := start()
	for range 100 {
		f.randomTxn()
	}
	target := f.lsn()
	deadline := time.Now().Add(90 * time.Second)
	for _, ident := range []table.Identifier{{"pg", "app_orders"}, {"pg", "app_items"}} {
		for f.committedLSN(ident) < target {
			if time.Now().After(deadline) {
				t.Fatalf("table %v holds %s, the server is at %s\n%s--- last run\n%s", ident, f.committedLSN(ident), target, logs.String(), out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("icesink after SIGTERM: %v\n%s", err, out)
	}
	f.check("after 4 kills")
}

// TestSchemaChanges: columns added, widened and dropped at the source,
// while a run reads the stream and while none does, are followed by the
// table (a dropped NOT NULL column made optional); a type change Iceberg
// cannot take stops that table alone, naming table, column and types.
func TestSchemaChanges(t *testing.T) {
	f := newFixture(t, 3)
	f.exec(`CREATE SCHEMA app`)
	f.exec(`CREATE TABLE app.orders (id bigint PRIMARY KEY, customer varchar(40), paid boolean NOT NULL, qty integer)`)
	f.exec(`ALTER TABLE app.orders REPLICA IDENTITY FULL`) // text columns come
	f.exec(`CREATE TABLE app.items (k integer PRIMARY KEY, sku varchar(20))`)
	items := true // items takes rows too
	ins := func(n int, extra string, vals func(i int) string) {
		for i := range n {
			id := f.rng.IntN(300)
			f.exec(fmt.Sprintf(`INSERT INTO app.orders (id, customer%s) VALUES (%d, 'c%d'%s) ON CONFLICT (id) DO UPDATE SET customer = excluded.customer`, extra, id, i, vals(i)))
			if !items {
				continue
			}
			f.exec(fmt.Sprintf(`INSERT INTO app.items VALUES (%d, 's%d') ON CONFLICT (k) DO UPDATE SET sku = excluded.sku`, id, i))
		}
	}
	ins(50, ", paid, qty", func(i int) string { return fmt.Sprintf(", %v, %d", i%2 == 0, i) })
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	done, cancel := runBackground(f.config(logger))
	defer cancel()
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"}) // the snapshot is read
	f.exec(`ALTER TABLE app.orders ADD COLUMN region text`)
	ins(50, ", paid, qty, region", func(i int) string { return fmt.Sprintf(", true, %d, 'r%d'", i, i%3) })
	f.exec(`ALTER TABLE app.orders ALTER COLUMN qty TYPE bigint`)
	ins(50, ", paid, qty", func(i int) string { return fmt.Sprintf(", false, %d", int64(i)<<33) })
	f.exec(`ALTER TABLE app.orders DROP COLUMN paid`)
	ins(50, ", qty", func(i int) string { return fmt.Sprintf(", %d", i) })
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.check("after changes during the run")
	// A change while no run reads: the next run's start follows it.
	f.exec(`ALTER TABLE app.orders ADD COLUMN note text`)
	ins(30, ", note", func(i int) string { return fmt.Sprintf(", 'n%d'", i) })
	done, cancel = runBackground(f.config(logger))
	defer cancel()
	// A type Iceberg cannot change to: items stops, orders goes on.
	f.exec(`ALTER TABLE app.items ALTER COLUMN sku TYPE integer USING length(sku)`)
	f.exec(`INSERT INTO app.items VALUES (1000, 5)`)
	items = false
	ins(20, ", note", func(i int) string { return fmt.Sprintf(", 'm%d'", i) })
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"})
	cancel()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "app.items") || !strings.Contains(err.Error(), `"sku"`) {
		t.Fatalf("a type change of items.sku: %v", err)
	}
	t.Logf("items stopped: %v", err)
	f.check("after a change while stopped", TableName{"app", "orders"})
	tbl, err := f.wh.Catalog.LoadTable(context.Background(), table.Identifier{"pg", "app_orders"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"paid": "boolean optional", "qty": "long optional", "region": "string optional", "note": "string optional"} {
		fl, ok := tbl.Schema().FindFieldByName(name)
		if got := fmt.Sprintf("%s optional", fl.Type); !ok || got != want || fl.Required {
			t.Errorf("column %s: %v %v, want %s", name, fl.Type, fl.Required, want)
		}
	}
}

// waitCommitted waits until each table holds the server's position now.
func (f *pgFixture) waitCommitted(done <-chan error, idents ...table.Identifier) {
	f.t.Helper()
	target := f.lsn()
	deadline := time.Now().Add(60 * time.Second)
	for _, ident := range idents {
		for f.committedLSN(ident) < target {
			select {
			case err := <-done:
				f.t.Fatalf("the replication ended early: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("table %v holds %s, the server is at %s", ident, f.committedLSN(ident), target)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestTableWithoutKey: a table without a primary key is refused, naming
// it and how to fix it; with its key given (Config.Keys, the --tables
// override) it is replicated.
func TestTableWithoutKey(t *testing.T) {
	f := newFixture(t, 4)
	f.exec(`CREATE SCHEMA app`)
	f.exec(`CREATE TABLE app.orders (id bigint NOT NULL, qty integer)`)
	f.exec(`CREATE TABLE app.items (k integer PRIMARY KEY, sku varchar(20))`)
	f.exec(`INSERT INTO app.orders VALUES (1, 10), (2, 20)`)
	f.exec(`INSERT INTO app.items VALUES (1, 'a')`)
	cfg := f.config(slog.New(slog.DiscardHandler))
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "app.orders has no primary key") || !strings.Contains(err.Error(), "--tables") {
		t.Fatalf("a table without a primary key: %v", err)
	}
	cfg.Source.Keys = func(n TableName) []string {
		if n == (TableName{"app", "orders"}) {
			return []string{"id"}
		}
		return nil
	}
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
		t.Fatalf("a key given for a table whose replica identity is not FULL: %v", err)
	}
	f.exec(`ALTER TABLE app.orders REPLICA IDENTITY FULL`)
	done, cancel := runBackground(cfg)
	defer cancel()
	f.exec(`UPDATE app.orders SET qty = 11 WHERE id = 1`)
	f.exec(`DELETE FROM app.orders WHERE id = 2`)
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.check("with the key given", TableName{"app", "orders"})
}

// TestServerRestart: PostgreSQL restarted (a crash: immediate stop) while
// the replication runs and transactions go on; the replication reconnects
// and resumes from what the tables hold, and every table equals its
// source.
func TestServerRestart(t *testing.T) {
	f := newFixture(t, 5)
	f.create()
	done, cancel := runBackground(f.config(slog.New(slog.DiscardHandler)))
	defer cancel()
	for range 100 {
		f.randomTxn()
	}
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"}) // running, past its start
	for range 50 {
		f.randomTxn()
	}
	f.srv.Restart()
	conn, err := connect(context.Background(), f.url)
	if err != nil {
		t.Fatal(err)
	}
	f.conn = conn
	t.Cleanup(func() { conn.Close(context.Background()) })
	for range 100 {
		f.randomTxn()
	}
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.check("after a restart of the server")
}

// TestTruncate: TRUNCATE at the source empties the Iceberg table at that
// transaction: changes before it in the transaction are gone, changes
// after it stay, the other tables go on; a run started later does not
// truncate again, and a truncate while no run reads is followed too.
func TestTruncate(t *testing.T) {
	f := newFixture(t, 6)
	f.create()
	done, cancel := runBackground(f.config(slog.New(slog.DiscardHandler)))
	defer cancel()
	for range 50 {
		f.randomTxn()
	}
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"})
	tx, err := f.conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`INSERT INTO app.items VALUES (500, 'gone', 1)`,
		`TRUNCATE app.items`,
		`INSERT INTO app.items VALUES (501, 'gone', 2)`,
		`TRUNCATE app.items`, // twice in one transaction (the simulation found it looping)
		`INSERT INTO app.items VALUES (502, 'kept', 3)`,
	} {
		if _, err := tx.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		f.randomTxn()
	}
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.check("after a truncate in a running replication")
	// Again, from the table's position: the truncate is not applied twice;
	// and a truncate made while no run reads.
	f.exec(`TRUNCATE app.orders`)
	for range 30 {
		f.randomTxn()
	}
	done, cancel = runBackground(f.config(slog.New(slog.DiscardHandler)))
	defer cancel()
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.check("after a truncate between runs")
}
