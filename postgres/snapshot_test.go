package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/sink"
)

// logBuffer is a log destination safe for the replication's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSnapshotResume: a run stopped in the middle of a table's initial
// snapshot commits the chunks it read (the table's offsets say which
// page is next); while no run reads, rows of read and unread pages are
// updated, deleted and inserted (and, in "rewritten", the table is
// rewritten by VACUUM FULL, moving its rows between pages); the next run
// reads on from that page (from the first, after a rewrite) and every
// table ends equal to its source.
func TestSnapshotResume(t *testing.T) {
	for _, rewrite := range []bool{false, true} {
		name := map[bool]string{false: "in place", true: "rewritten"}[rewrite]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 9)
			f.create()
			// ~2,000 heap pages of orders, a page a chunk, a commit
			// every 20 ms.
			f.exec(`INSERT INTO app.orders SELECT g, 'bulk-' || g, g % 1000, g % 2 = 0, now(), repeat('x', 100) FROM generate_series(1000, 100000) g`)
			var logs logBuffer
			cfg := f.config(slog.New(slog.NewTextHandler(&logs, nil)))
			cfg.Source.SnapshotChunk = 8192
			cfg.Sink.BarrierInterval = 20 * time.Millisecond
			orders := table.Identifier{"pg", "app_orders"}
			done, cancel := runBackground(cfg)
			// Stop once a commit holds part of the snapshot.
			deadline := time.Now().Add(60 * time.Second)
			for f.snapshotProgress(orders) == "" {
				select {
				case err := <-done:
					t.Fatalf("the run ended before a commit of part of the snapshot: %v\n%s", err, logs.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("no commit of part of the snapshot in 60 s\n%s", logs.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("the stopped run: %v\n%s", err, logs.String())
			}
			stoppedAt := f.snapshotProgress(orders)
			if stoppedAt == "" {
				t.Fatalf("the stop committed the whole snapshot: the test needs a larger table\n%s", logs.String())
			}
			t.Logf("stopped with the snapshot committed up to %s", stoppedAt)
			// Changes while no run reads: rows of pages read and not read.
			f.exec(`UPDATE app.orders SET amount = amount + 1, customer = 'moved' WHERE id % 7 = 0`)
			f.exec(`DELETE FROM app.orders WHERE id % 11 = 0`)
			f.exec(`INSERT INTO app.orders SELECT g, 'late-' || g, 1, true, now(), NULL FROM generate_series(200000, 200500) g`)
			for range 40 {
				f.randomTxn()
			}
			if rewrite {
				f.exec(`VACUUM FULL app.orders`)
			}
			done, cancel = runBackground(cfg)
			defer cancel()
			for range 40 {
				f.randomTxn()
			}
			f.waitCommitted(done, orders, table.Identifier{"pg", "app_items"})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("the second run: %v\n%s", err, logs.String())
			}
			want := "reading on in a table's snapshot committed in part"
			if rewrite {
				want = "again from its start: the table was rewritten"
			}
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the second run did not log %q\n%s", want, logs.String())
			}
			if p := f.snapshotProgress(orders); p != "" {
				t.Errorf("the snapshot is still in part (%s) after the second run", p)
			}
			f.check("after a snapshot stopped in part")
		})
	}
}

// snapshotProgress is the PropSnapshotPage of table ident's last commit
// ("": none, read whole, or no commit).
func (f *pgFixture) snapshotProgress(ident table.Identifier) string {
	pos, err := sink.Resume(context.Background(), sink.Config{Loader: f.wh.Catalog, Ident: ident, SinkID: "pg"})
	if err != nil {
		return ""
	}
	if pos.Offsets[PropSnapshotFile] == "0" {
		return ""
	}
	return pos.Offsets[PropSnapshotPage]
}

// TestTableJoins: a table created in the published schema while a run
// reads the database joins it: one that cannot be read (a text column
// without REPLICA IDENTITY FULL, no key) is refused alone and the others
// go on; once fixed it is read in a snapshot of its own and then follows
// the stream (its rows written before and after); the one left unfixed is
// named in the run's error.
func TestTableJoins(t *testing.T) {
	f := newFixture(t, 10)
	f.create()
	var logs logBuffer
	cfg := f.config(slog.New(slog.NewTextHandler(&logs, nil)))
	cfg.Source.RefreshInterval = 200 * time.Millisecond
	done, cancel := runBackground(cfg)
	defer cancel()
	for range 30 {
		f.randomTxn()
	}
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"})
	// app.later joins unreadable (its text column needs REPLICA IDENTITY
	// FULL), is fixed while the run goes on, and is read then.
	f.exec(`CREATE TABLE app.later (id integer PRIMARY KEY, v text)`)
	f.exec(`INSERT INTO app.later SELECT g, 'v' || g FROM generate_series(1, 500) g`)
	f.exec(`CREATE TABLE app.nokey (v integer)`)
	f.exec(`INSERT INTO app.nokey VALUES (1), (2)`)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), `cannot be read; the other tables go on" source=app.later`); {
		if time.Now().After(deadline) {
			t.Fatalf("app.later was not refused\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.exec(`ALTER TABLE app.later REPLICA IDENTITY FULL`)
	for i := range 60 {
		f.randomTxn()
		f.exec(`UPDATE app.later SET v = v || '+' WHERE id % 60 = $1`, i)
		f.exec(`DELETE FROM app.later WHERE id = $1`, 1+f.rng.IntN(500))
		f.exec(`INSERT INTO app.later VALUES ($1, 'new') ON CONFLICT (id) DO UPDATE SET v = 'again'`, 400+f.rng.IntN(300))
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	f.waitCommitted(done, table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"}, table.Identifier{"pg", "app_later"})
	cancel()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "app.nokey") {
		t.Errorf("the run's error %v does not name the table without a key\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), `can be now: the next round reads it" source=app.later`) {
		t.Errorf("app.later was not read once fixed\n%s", logs.String())
	}
	f.check("after a table joined", TableName{"app", "orders"}, TableName{"app", "items"}, TableName{"app", "later"})
}

// TestSlotFollowsCommits: the slot confirms what the tables hold soon
// after they commit it, not at the next status interval (an hour here)
// nor when the server asks (wal_sender_timeout, a minute here):
// PostgreSQL frees the WAL once it is in Iceberg.
func TestSlotFollowsCommits(t *testing.T) {
	f := newFixtureWith(t, 11, "wal_sender_timeout=60s")
	f.create()
	cfg := f.config(slog.New(slog.DiscardHandler))
	cfg.Source.StatusInterval = time.Hour
	done, cancel := runBackground(cfg)
	defer cancel()
	for range 30 {
		f.randomTxn()
	}
	orders, items := table.Identifier{"pg", "app_orders"}, table.Identifier{"pg", "app_items"}
	f.waitCommitted(done, orders, items) // past the snapshot
	for range 30 {
		f.randomTxn()
	}
	f.waitCommitted(done, orders, items) // streamed
	held := min(f.committedLSN(orders), f.committedLSN(items))
	for deadline := time.Now().Add(10 * time.Second); f.slotLSN() < held; {
		if time.Now().After(deadline) {
			t.Fatalf("the slot confirms %s 10 s after the tables held %s", f.slotLSN(), held)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runBackground runs Run(cfg) until cancel; done receives its error.
func runBackground(cfg RunConfig) (done <-chan error, cancel context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		_, err := Run(ctx, cfg)
		ch <- err
	}()
	return ch, cancel
}
