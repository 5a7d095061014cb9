package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"

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
	// (their schema is the source table's).
	Spec warehouse.TableSpec
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
func Run(ctx context.Context, rc RunConfig) ([]TableResult, error) {
	r, err := Open(ctx, rc.Source)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	srcs := r.Tables()
	results := make([]TableResult, len(srcs))
	var known []table.Identifier
	seen := map[string]TableName{}
	for i, s := range srcs {
		ident, err := rc.Table(s.Name())
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", s.Name(), err)
		}
		name := strings.Join(ident, ".")
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("tables %s and %s both go to table %s", other, s.Name(), name)
		}
		seen[name] = s.Name()
		spec := rc.Spec
		spec.Schema = s.Schema()
		tbl, _, err := rc.Warehouse.LoadOrCreate(ctx, ident, spec)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", s.Name(), err)
		}
		ps := tbl.Spec()
		if err := deltawriter.CheckTable(tbl.Schema(), &ps); err != nil {
			return nil, fmt.Errorf("table %s: %w", name, err)
		}
		results[i] = TableResult{Source: s.Name(), Ident: ident}
		known = append(known, ident)
	}
	base := rc.Sink
	if total := base.Writer.MemoryLimit; total > 0 {
		writers := len(srcs) * max(base.Writers, 1)
		if per := total / int64(writers); per < deltawriter.MinMemoryLimit {
			return nil, fmt.Errorf("a memory limit of %d bytes split over %d tables x %d writers leaves %d bytes a writer, less than the %d a writer needs", total, len(srcs), max(base.Writers, 1), per, deltawriter.MinMemoryLimit)
		}
		budget := sink.NewBudget(total, writers)
		bctx, stopBudget := context.WithCancel(ctx)
		defer stopBudget()
		go budget.Run(bctx, time.Second)
		base.Budget = budget
	}
	db, err := sink.StartDatabase(context.WithoutCancel(ctx), base, len(srcs), known)
	if err != nil {
		return nil, err
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
	var wg sync.WaitGroup
	for i, s := range srcs {
		wg.Go(func() {
			cfg := base
			cfg.Ident, cfg.Database, cfg.StateDir = results[i].Ident, db, ""
			cfg.CheckpointRows = math.MaxInt64 // the database's barriers end the epochs
			if cfg.Logger != nil {
				cfg.Logger = cfg.Logger.With("table", strings.Join(cfg.Ident, "."))
			}
			if dir := cfg.KeyIndexBase(); dir != "" {
				cfg.KeyIndexDir = filepath.Join(dir, "t-"+strings.Join(cfg.Ident, "."))
			}
			res, err := sink.Run(context.WithoutCancel(ctx), cfg, s)
			s.markSought() // a run that failed before its seek does not hold the stream
			if err != nil {
				s.Stopped()
				if cfg.Logger != nil {
					cfg.Logger.Error("a table stopped; the other tables go on", "source", s.Name().String(), "err", err)
				}
			}
			results[i].Result, results[i].Err = res, err
		})
	}
	wg.Wait()
	r.Stop()
	cancelStream()
	var errs []error
	if err := <-streamErr; err != nil {
		errs = append(errs, err)
	}
	for _, res := range results {
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("table %s (source %s): %w", strings.Join(res.Ident, "."), res.Source, res.Err))
		}
	}
	return results, errors.Join(errs...)
}
