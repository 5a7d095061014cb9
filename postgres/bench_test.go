package postgres

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pglogrepl"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

var (
	benchRows    = flag.Int("pg.rows", 200_000, "rows of the benchmarks' source table")
	benchChanges = flag.Int("pg.changes", 100_000, "changes BenchmarkStream replicates")
)

// benchFixture is a source table of n rows (id, name, v, at).
func benchFixture(b *testing.B, n int) *pgFixture {
	f := newFixture(b, 9)
	f.exec(`CREATE SCHEMA app`)
	f.exec(`CREATE TABLE app.bench (id bigint PRIMARY KEY, name text, v bigint NOT NULL, at timestamptz)`)
	f.exec(`ALTER TABLE app.bench REPLICA IDENTITY FULL`)
	f.exec(fmt.Sprintf(`INSERT INTO app.bench SELECT g, 'name-' || g, g * 7, timestamptz '2026-01-01' + g * interval '1 second' FROM generate_series(1, %d) g`, n))
	f.exec(`VACUUM ANALYZE app.bench`)
	return f
}

// runUntil replicates until the bench table holds the server's position.
func (f *pgFixture) runUntil(b *testing.B, memory int64) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := f.config(slog.New(slog.DiscardHandler))
	cfg.Sink.Writer.MemoryLimit = memory
	cfg.Sink.BarrierInterval = time.Second
	target := f.lsn()
	began := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, cfg)
		done <- err
	}()
	ident := table.Identifier{"pg", "app_bench"}
	for f.committedLSN(ident) < target {
		select {
		case err := <-done:
			b.Fatalf("the replication ended: %v", err)
		case <-time.After(200 * time.Millisecond): // reading the table's position costs CPU the run needs
		}
	}
	took := time.Since(began)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkSnapshot: the initial snapshot of a table into Iceberg, as
// rows/s and as a ratio to COPY (SELECT ...) TO STDOUT of the same table
// into io.Discard (the goal: at least 0.7).
func BenchmarkSnapshot(b *testing.B) {
	for range b.N {
		f := benchFixture(b, *benchRows)
		began := time.Now()
		if _, err := f.conn.PgConn().CopyTo(context.Background(), io.Discard, "COPY (SELECT * FROM app.bench) TO STDOUT"); err != nil {
			b.Fatal(err)
		}
		copyTook := time.Since(began)
		took := f.runUntil(b, 64<<20)
		b.ReportMetric(float64(*benchRows)/took.Seconds(), "rows/s")
		b.ReportMetric(float64(*benchRows)/copyTook.Seconds(), "copy-rows/s")
		b.ReportMetric(copyTook.Seconds()/took.Seconds(), "x-copy")
	}
}

// BenchmarkStream: changes replicated from the stream (single-row updates
// in transactions of 100, made while no run read them), as changes/s and
// as a ratio to the same changes as changelog-json lines through a file
// run of the same settings (2 writers of 32 MiB each: the database run's
// 64 MiB is the process's); server-decode-changes/s is the server's
// pgoutput decoding of the same changes alone (peeked from the slot).
func BenchmarkStream(b *testing.B) {
	for range b.N {
		f := benchFixture(b, *benchRows)
		f.runUntil(b, 64<<20) // the snapshot
		var lines bytes.Buffer
		for i := 0; i < *benchChanges; i += 100 {
			f.exec(fmt.Sprintf(`UPDATE app.bench SET v = v + 1, name = 'u-' || id WHERE id IN (SELECT (random() * %d)::bigint + 1 FROM generate_series(1, 100))`, *benchRows-1))
		}
		// What the server's decoding alone takes: the same changes peeked
		// from the slot through pgoutput, nothing written.
		began := time.Now()
		var msgs int64
		if err := f.conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_logical_slot_peek_binary_changes('icesink', NULL, NULL, 'proto_version', '1', 'publication_names', 'icesink')`).Scan(&msgs); err != nil {
			b.Fatal(err)
		}
		decodeTook := time.Since(began)
		took := f.runUntil(b, 64<<20)
		// The baseline: the same table loaded (not timed), then as many
		// changelog-json updates through a file run of the same settings.
		wh, err := warehouse.Open(context.Background(), filepath.Join(b.TempDir(), "wh"), warehouse.Options{})
		if err != nil {
			b.Fatal(err)
		}
		tbl, err := f.wh.Catalog.LoadTable(context.Background(), table.Identifier{"pg", "app_bench"})
		if err != nil {
			b.Fatal(err)
		}
		ident := table.Identifier{"pg", "json"}
		if _, _, err := wh.LoadOrCreate(context.Background(), ident, warehouse.TableSpec{Schema: tbl.Schema()}); err != nil {
			b.Fatal(err)
		}
		runJSON := func(id string, lines *bytes.Buffer) time.Duration {
			dec, err := changelog.NewDecoder(lines, changelog.ChangelogJSON, tbl.Schema())
			if err != nil {
				b.Fatal(err)
			}
			began := time.Now()
			if _, err := sink.Run(context.Background(), sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: id, StateDir: filepath.Join(b.TempDir(), "state"),
				Writers: 2, KeyIndexDir: "-", CheckpointRows: 20_000, Writer: deltawriter.Options{SpillDir: b.TempDir(), MemoryLimit: 32 << 20}}, dec); err != nil {
				b.Fatal(err)
			}
			return time.Since(began)
		}
		var load bytes.Buffer
		for id := 1; id <= *benchRows; id++ {
			fmt.Fprintf(&load, `{"op":"+I","data":{"id":%d,"name":"name-%d","v":%d}}`+"\n", id, id, id*7)
		}
		runJSON("load", &load)
		for i := range *benchChanges {
			id := f.rng.IntN(*benchRows) + 1
			fmt.Fprintf(&lines, `{"op":"+U","data":{"id":%d,"name":"u-%d","v":%d}}`+"\n", id, id, id*7+i)
		}
		jsonTook := runJSON("json", &lines)
		wh.Close()
		b.ReportMetric(float64(*benchChanges)/took.Seconds(), "changes/s")
		b.ReportMetric(float64(*benchChanges)/jsonTook.Seconds(), "json-changes/s")
		b.ReportMetric(jsonTook.Seconds()/took.Seconds(), "x-json")
		b.ReportMetric(float64(*benchChanges)/decodeTook.Seconds(), "server-decode-changes/s")
	}
}

var (
	benchLagRate = flag.Int("pg.lag-rate", 2000, "changes/s BenchmarkLag sustains (transactions of 10 updates)")
	benchLagFor  = flag.Duration("pg.lag-for", 15*time.Second, "how long BenchmarkLag sustains its load")
)

// BenchmarkLag: the time from a source transaction's commit to the
// Iceberg commit holding it (p50, p99, max), and the WAL the slot keeps
// (bytes between the server's position and the slot's confirmed one,
// sampled every 50 ms), at a sustained load, a checkpoint every second.
func BenchmarkLag(b *testing.B) {
	for range b.N {
		f := benchFixture(b, *benchRows)
		f.runUntil(b, 64<<20) // the snapshot
		ctx, cancel := context.WithCancel(context.Background())
		cfg := f.config(slog.New(slog.DiscardHandler))
		cfg.Sink.Writer.MemoryLimit = 64 << 20
		cfg.Sink.BarrierInterval = time.Second
		cfg.Source.StatusInterval = 0 // the default: a status follows each commit
		done := make(chan error, 1)
		go func() {
			_, err := Run(ctx, cfg)
			done <- err
		}()
		type txn struct {
			at  time.Time
			lsn pglogrepl.LSN
		}
		sent := make(chan txn, 1<<16)
		loadDone := make(chan struct{})
		go func() {
			defer close(loadDone)
			defer close(sent)
			tick := time.NewTicker(time.Second / time.Duration(max(*benchLagRate/10, 1)))
			defer tick.Stop()
			for end := time.Now().Add(*benchLagFor); time.Now().Before(end); <-tick.C {
				f.exec(fmt.Sprintf(`UPDATE app.bench SET v = v + 1 WHERE id IN (SELECT (random() * %d)::bigint + 1 FROM generate_series(1, 10))`, *benchRows-1))
				sent <- txn{time.Now(), f.lsn()}
			}
		}()
		ident := table.Identifier{"pg", "app_bench"}
		poll, err := connect(context.Background(), f.url) // f.conn is the load's
		if err != nil {
			b.Fatal(err)
		}
		defer poll.Close(context.Background())
		var lags []time.Duration
		var retained []float64
		var pending []txn
		for open := true; open || len(pending) > 0; {
			time.Sleep(50 * time.Millisecond)
		drain:
			for {
				select {
				case t, ok := <-sent:
					if !ok {
						open = false
						break drain
					}
					pending = append(pending, t)
				default:
					break drain
				}
			}
			committed := f.committedLSN(ident)
			now := time.Now()
			for len(pending) > 0 && pending[0].lsn <= committed {
				lags = append(lags, now.Sub(pending[0].at))
				pending = pending[1:]
			}
			if open {
				var kept int64
				if err := poll.QueryRow(context.Background(), `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = 'icesink'`).Scan(&kept); err != nil {
					b.Fatal(err)
				}
				retained = append(retained, float64(kept))
			}
			select {
			case err := <-done:
				b.Fatalf("the replication ended: %v", err)
			default:
			}
		}
		<-loadDone
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		slices.Sort(lags)
		slices.Sort(retained)
		at := func(q float64) float64 { return lags[int(q*float64(len(lags)-1))].Seconds() }
		b.ReportMetric(float64(len(lags))*10/benchLagFor.Seconds(), "changes/s")
		b.ReportMetric(at(0.5), "lag-p50-s")
		b.ReportMetric(at(0.99), "lag-p99-s")
		b.ReportMetric(lags[len(lags)-1].Seconds(), "lag-max-s")
		b.ReportMetric(retained[len(retained)/2]/1024, "wal-kept-p50-KiB")
		b.ReportMetric(retained[len(retained)-1]/1024, "wal-kept-max-KiB")
	}
}

// BenchmarkStreamRead: the stream's changes read through the tables'
// Sources with no sink behind them: what the replication alone delivers
// (the ceiling of BenchmarkStream's changes/s).
func BenchmarkStreamRead(b *testing.B) {
	for range b.N {
		f := benchFixture(b, *benchRows)
		f.runUntil(b, 64<<20) // the snapshot
		for i := 0; i < *benchChanges; i += 100 {
			f.exec(fmt.Sprintf(`UPDATE app.bench SET v = v + 1, name = 'u-' || id WHERE id IN (SELECT (random() * %d)::bigint + 1 FROM generate_series(1, 100))`, *benchRows-1))
		}
		target := f.lsn()
		ctx := context.Background()
		cfg := f.config(slog.New(slog.DiscardHandler)).Source
		r, err := Open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		pos, err := sink.Resume(ctx, sink.Config{Loader: f.wh.Catalog, Ident: table.Identifier{"pg", "app_bench"}, SinkID: "pg"})
		if err != nil {
			b.Fatal(err)
		}
		s := r.Tables()[0]
		tbl, err := f.wh.Catalog.LoadTable(ctx, table.Identifier{"pg", "app_bench"})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.SetSchema(tbl.Schema()); err != nil {
			b.Fatal(err)
		}
		if err := s.Seek(ctx, pos.Offsets, 0); err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		go r.Run(ctx)
		// Barriers make Next return at transaction boundaries once the
		// changes are read (marks move the position on without a record).
		tick := time.NewTicker(50 * time.Millisecond)
		go func() {
			for range tick.C {
				s.RequestBarrier()
			}
		}()
		n := 0
		for s.pos < target {
			rec, err := s.Next()
			if err != nil {
				b.Fatal(err)
			}
			n += len(rec.Changes)
		}
		took := time.Since(began)
		tick.Stop()
		r.Close()
		b.ReportMetric(float64(n)/took.Seconds(), "changes/s")
	}
}
