package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// RunConfig configures a database's replication into Iceberg tables.
type RunConfig struct {
	Source Config
	// Sink is every table's sink configuration (Ident is set per table,
	// StateDir is the database's coordinator folder, BarrierInterval how
	// often every table's epoch ends; Writer.MemoryLimit is the process's
	// budget, shared by every table's writers).
	Sink      sink.Config
	Warehouse *warehouse.Warehouse
	// Table names the Iceberg table of a source table.
	Table func(TableName) (table.Identifier, error)
	// Spec holds the partition spec and properties of created tables
	// (their schema is the source table's); Override, when set, changes
	// them per table.
	Spec     warehouse.TableSpec
	Override func(ident table.Identifier, spec *warehouse.TableSpec) error
}

// TableResult is what one table's sink did.
type TableResult struct {
	Source TableName
	Ident  table.Identifier
	sink.Result
	Err error
}

// Run replicates the publication's tables into their Iceberg tables,
// one epoch for all of them, until ctx ends (every table then commits
// what it read, at a transaction boundary) or the stream fails. A table
// whose sink fails stops alone; the slot then stays where it committed.
//
// A table's failure aborts the epoch every table's window is in: the
// round ends, and a new one (a new stream, from what each table holds)
// goes on without the failed table, whose position keeps holding the
// slot, so that nothing is lost once it is fixed. A lost connection (a
// restarted server) is retried the same way, waiting longer each time, up
// to a minute.
func Run(ctx context.Context, rc RunConfig) ([]TableResult, error) {
	log := rc.Source.Logger
	if log == nil {
		log = slog.Default()
	}
	failed := map[TableName]error{}
	truncated := map[TableName]*TruncatedError{}
	// Tables refused when they joined the publication: later rounds
	// leave them out (the slot does not wait for them; once fixed, a new
	// run reads them whole).
	rc.Source.skip = map[TableName]bool{}
	total := map[TableName]*TableResult{}
	var order []TableName
	wait := time.Second
	for round := 1; ; round++ {
		// The first round refuses a table it cannot read (a missing key);
		// later ones leave it out, and the others go on.
		rc.Source.goOn = round > 1
		res, retry, err := runRound(ctx, rc, failed, truncated)
		// A table truncated at the source is emptied now, with every
		// table's run ended and the epochs before the truncate committed.
		for n, te := range truncated {
			for _, r := range res {
				if r.Source != n {
					continue
				}
				if terr := emptyTable(context.WithoutCancel(ctx), rc, r.Ident, te); terr != nil {
					failed[n] = fmt.Errorf("emptying the table for %w: %w", te, terr)
				} else {
					log.Info("a table truncated at the source is emptied; its changes after the truncate follow", "table", strings.Join(r.Ident, "."), "source", n.String(), "lsn", te.At)
				}
			}
			delete(truncated, n)
		}
		if ctx.Err() != nil && res == nil {
			return nil, nil // stopped while starting: nothing was read
		}
		if err != nil && round == 1 && res == nil && !transient(err) {
			return nil, err // the first start: a wrong URL, a missing privilege
		}
		for _, r := range res {
			t, ok := total[r.Source]
			if !ok {
				t = &TableResult{Source: r.Source, Ident: r.Ident, Result: r.Result}
				total[r.Source] = t
				order = append(order, r.Source)
			} else {
				t.Commits += r.Commits
				t.Changes += r.Changes
				t.Committed = r.Committed
			}
			if r.Err != nil {
				t.Err = r.Err
			}
		}
		if ctx.Err() != nil || !retry && err == nil {
			break
		}
		if err != nil {
			log.Warn("the replication failed; starting again from what the tables hold", "err", err, "in", wait)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, time.Minute)
		} else {
			wait = time.Second
			log.Info("a new round: the tables go on from what they hold")
		}
		if ctx.Err() != nil {
			break
		}
	}
	out := make([]TableResult, 0, len(order))
	var errs []error
	for _, n := range order {
		t := total[n]
		if err, ok := failed[n]; ok {
			t.Err = err
			errs = append(errs, fmt.Errorf("table %s (source %s): %w", strings.Join(t.Ident, "."), n, err))
		} else {
			t.Err = nil
		}
		out = append(out, *t)
	}
	return out, errors.Join(errs...)
}

// runRound runs one stream over the tables that have not failed, until
// ctx ends, the stream fails (err), or a table's failure aborted the
// others' windows (retry); failed gains the tables that failed.
func runRound(ctx context.Context, rc RunConfig, failed map[TableName]error, truncated map[TableName]*TruncatedError) (_ []TableResult, retry bool, _ error) {
	r, err := Open(ctx, rc.Source)
	if err != nil {
		return nil, false, err
	}
	defer r.Close()
	if reg := rc.Sink.Registerer; reg != nil {
		col := r.Collector()
		if err := reg.Register(col); err != nil {
			return nil, false, fmt.Errorf("registering the replication's metrics: %w", err)
		}
		defer reg.Unregister(col)
	}
	srcs := r.Tables()
	results := make([]TableResult, len(srcs), len(srcs)+len(r.refused))
	for n, err := range r.refused {
		cmp.Or(rc.Sink.Logger, slog.Default()).Error("a published table cannot be read; the other tables go on", "source", n.String(), "err", err)
		failed[n] = err
		rc.Source.skip[n] = true
		ident, _ := rc.Table(n)
		results = append(results, TableResult{Source: n, Ident: ident, Err: err})
	}
	var known []table.Identifier
	seen := map[string]TableName{}
	for i, s := range srcs {
		ident, err := rc.Table(s.Name())
		if err != nil {
			return nil, false, fmt.Errorf("table %s: %w", s.Name(), err)
		}
		name := strings.Join(ident, ".")
		if other, dup := seen[name]; dup {
			return nil, false, fmt.Errorf("tables %s and %s both go to table %s", other, s.Name(), name)
		}
		seen[name] = s.Name()
		results[i] = TableResult{Source: s.Name(), Ident: ident}
		known = append(known, ident)
		if err, ok := failed[s.Name()]; ok {
			holdAt(ctx, rc, s, ident)
			results[i].Err = err
			continue
		}
		if err := prepareTable(ctx, rc, s, ident); err != nil {
			failed[s.Name()] = err
			cmp.Or(rc.Sink.Logger, slog.Default()).Error("a table stopped; the other tables go on", "table", name, "source", s.Name().String(), "err", err)
			holdAt(ctx, rc, s, ident)
			results[i].Err = err
		}
	}
	base := rc.Sink
	if total := base.Writer.MemoryLimit; total > 0 {
		bctx, stopBudget := context.WithCancel(ctx)
		defer stopBudget()
		if base.Budget, err = sink.DatabaseBudget(bctx, total, len(srcs), base.Writers); err != nil {
			return nil, false, err
		}
	}
	db, err := sink.StartDatabase(context.WithoutCancel(ctx), base, len(srcs), known)
	if err != nil {
		return nil, false, err
	}
	defer db.Close()
	// The stream and the sinks outlive ctx: its end stops the input at a
	// transaction boundary, and every table commits what it read.
	stopAfter := context.AfterFunc(ctx, r.Stop)
	defer stopAfter()
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	streamErr := make(chan error, 1)
	go func() { streamErr <- r.Run(streamCtx) }()
	// Tables joining the publication end the round. The watcher alone
	// touches these (and rc.Source.skip) until watched is closed.
	var (
		joined    bool
		refused   = map[TableName]error{}
		recovered = map[TableName]bool{}
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if rc.Source.RefreshInterval < 0 {
			return
		}
		log := cmp.Or(rc.Sink.Logger, slog.Default())
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-r.stopped:
				return
			case <-time.After(r.cfg.RefreshInterval):
			}
			news, err := r.joined(watchCtx)
			if err != nil {
				if watchCtx.Err() == nil {
					log.Warn("looking for tables that joined the publication", "err", err)
				}
				continue
			}
			for n, err := range news {
				switch {
				case err != nil && !rc.Source.skip[n]:
					refused[n] = err
					rc.Source.skip[n] = true
					log.Error("a table joined the publication and cannot be read; the other tables go on", "source", n.String(), "err", err)
				case err == nil && rc.Source.skip[n]:
					// Fixed (a key added, its replica identity FULL).
					recovered[n] = true
					joined = true
					log.Info("a published table that could not be read can be now: the next round reads it", "source", n.String())
				case err == nil:
					joined = true
					log.Info("a table joined the publication: every table commits what it read, and the next round reads it in a snapshot of its own, then streams it too", "source", n.String())
				}
			}
			if joined {
				r.Stop()
				return
			}
		}
	}()
	defer func() {
		stopWatch()
		<-watched
	}()
	var wg sync.WaitGroup
	for i, s := range srcs {
		if results[i].Err != nil {
			continue // held
		}
		wg.Go(func() {
			cfg := base.ForTable(results[i].Ident)
			cfg.Database, cfg.StateDir = db, ""
			cfg.CheckpointRows = math.MaxInt64 // the database's barriers end the epochs
			res, err := sink.Run(context.WithoutCancel(ctx), cfg, s)
			s.markSought() // a run that failed before its seek does not hold the stream
			if errors.As(err, new(*TruncatedError)) {
				// The other tables commit what they read and the round
				// ends: the table is emptied between rounds.
				r.Stop()
				results[i].Result, results[i].Err = res, err
				return
			}
			if err != nil {
				s.Stopped()
				if cfg.Logger != nil && !transient(err) && !errors.Is(err, coordinator.ErrAborted) {
					cfg.Logger.Error("a table stopped; the other tables go on", "source", s.Name().String(), "err", err)
				}
			}
			results[i].Result, results[i].Err = res, err
		})
	}
	wg.Wait()
	r.Stop()
	cancelStream()
	serr := <-streamErr
	stopWatch()
	<-watched
	if joined {
		retry = true
	}
	for n := range recovered {
		delete(failed, n)
		delete(rc.Source.skip, n)
		delete(refused, n)
	}
	for n, err := range refused {
		failed[n] = err
		ident, _ := rc.Table(n)
		results = append(results, TableResult{Source: n, Ident: ident, Err: err})
	}
	for i, res := range results {
		switch {
		case errors.Is(res.Err, coordinator.ErrAborted):
			// Another table's failure: this one goes on in the next round.
			results[i].Err, retry = nil, true
		case errors.As(res.Err, new(*TruncatedError)):
			// Emptied by Run before the next round, which goes on after
			// the truncate.
			te, _ := errors.AsType[*TruncatedError](res.Err)
			truncated[res.Source] = te
			results[i].Err, retry = nil, true
		case transient(res.Err):
			// A lost connection (a restarted server) while the table
			// started or read: the next round tries again.
			results[i].Err, retry = nil, true
		case errors.Is(res.Err, commit.ErrForeignChange):
			// Another writer committed to the table while it committed:
			// the next round reads from what the table holds.
			results[i].Err, retry = nil, true
		case res.Err != nil:
			failed[res.Source] = res.Err
		}
	}
	return results, retry, serr
}

// prepareTable creates the Iceberg table of s, or makes the existing
// one's schema hold the source's columns (changed while no run read
// them), and lays s's rows out in it.
func prepareTable(ctx context.Context, rc RunConfig, s *Source, ident table.Identifier) error {
	name := strings.Join(ident, ".")
	tbl, err := rc.Warehouse.Catalog.LoadTable(ctx, ident)
	switch {
	case errors.Is(err, catalog.ErrNoSuchTable):
		spec := rc.Spec
		spec.Schema = s.Schema()
		if rc.Override != nil {
			if err := rc.Override(ident, &spec); err != nil {
				return err
			}
		}
		if tbl, _, err = rc.Warehouse.LoadOrCreate(ctx, ident, spec); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		if changes := s.SchemaChanges(tbl.Schema()); len(changes) > 0 {
			if !rc.Sink.EvolveSchema {
				return fmt.Errorf("the columns of %s changed (%v), and the schema does not follow the source (--evolve-schema=false)", s.Name(), changes)
			}
			if tbl, err = commit.EvolveSchema(ctx, rc.Warehouse.Catalog, ident, changes); err != nil {
				return err
			}
		}
	}
	if v, ok := tbl.Properties()[PropTruncated]; ok {
		at, n, err := parseTruncated(v)
		if err != nil {
			return fmt.Errorf("table %s: property %s %q: %w", name, PropTruncated, v, err)
		}
		s.truncatedAt, s.truncatedN = at, n
	}
	if err := s.SetSchema(tbl.Schema()); err != nil {
		return err
	}
	ps := tbl.Spec()
	if err := deltawriter.CheckTable(tbl.Schema(), &ps); err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	return nil
}

// holdAt leaves s out of the round: the stream does not queue its
// changes, and the slot keeps them from what its table holds on.
func holdAt(ctx context.Context, rc RunConfig, s *Source, ident table.Identifier) {
	if pos, err := sink.Resume(ctx, sink.Config{Loader: rc.Sink.Loader, Ident: ident, SinkID: rc.Sink.SinkID}); err == nil {
		if lsn, err := parseLSN(pos.Offsets[PropLSN]); err == nil {
			s.committed.Store(uint64(lsn))
		}
	}
	s.Stopped()
	s.markSought()
}

// transient reports whether err is a server restarting or a connection
// lost (retried), not a refusal (a wrong password, a missing privilege,
// a database that does not exist).
func transient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57: operator intervention
		// (shutting down, starting up).
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57")
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || pgconn.SafeToRetry(err) ||
		strings.Contains(err.Error(), "conn closed")
}

// emptyTable removes every data and delete file of table ident in one
// snapshot, and records at (PropTruncated): the table's next run skips
// what came before the truncate.
func emptyTable(ctx context.Context, rc RunConfig, ident table.Identifier, te *TruncatedError) error {
	tbl, err := rc.Warehouse.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return err
	}
	tx := tbl.NewTransaction()
	if tbl.CurrentSnapshot() != nil {
		tasks, err := tbl.Scan().PlanFiles(ctx)
		if err != nil {
			return fmt.Errorf("listing its files: %w", err)
		}
		seen := map[string]bool{}
		var data, deletes []iceberg.DataFile
		for _, t := range tasks {
			if !seen[t.File.FilePath()] {
				seen[t.File.FilePath()] = true
				data = append(data, t.File)
			}
			for _, group := range [][]iceberg.DataFile{t.DeleteFiles, t.EqualityDeleteFiles, t.DeletionVectorFiles} {
				for _, d := range group {
					if !seen[d.FilePath()] {
						seen[d.FilePath()] = true
						deletes = append(deletes, d)
					}
				}
			}
		}
		if len(data) > 0 {
			props := iceberg.Properties{"icesink.postgres.truncate": te.truncatedValue()}
			if err := tx.ReplaceFiles(ctx, data, nil, deletes, props); err != nil {
				return err
			}
		}
	}
	if err := tx.SetProperties(iceberg.Properties{PropTruncated: te.truncatedValue()}); err != nil {
		return err
	}
	_, err = tx.Commit(ctx)
	return err
}
