package sink

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/icesink/icesink/deltawriter"
)

// Budget is one memory budget for the writers of several sinks in a
// process (a database's tables, Config.Budget): each writer's share
// follows its traffic. Half the budget is split evenly (the floor every
// writer keeps, busy or idle); the other half goes to the writers in
// proportion to the changes each wrote lately (smoothed over a few
// rebalances). A writer whose share shrinks flushes locally at once
// (deltawriter.Writer.SetMemoryLimit), also while its input is idle; a
// writer that joins or leaves makes every share be computed again, so
// the shares always sum to the budget.
type Budget struct {
	total  int64
	expect int // writers expected (sizes the first shares' caches)

	mu      sync.Mutex
	members []*budgetShare
}

// budgetShare is one writer's part of a Budget.
type budgetShare struct {
	b       *Budget
	changes atomic.Int64 // changes written since the last rebalance
	limit   atomic.Int64 // the share, bytes
	applied atomic.Int64 // the share the writer runs at
	wake    chan struct{}
	rate    float64 // smoothed changes per rebalance (Budget.mu)
}

// NewBudget returns a budget of total bytes for about expect writers.
func NewBudget(total int64, expect int) *Budget {
	return &Budget{total: total, expect: max(expect, 1)}
}

// Total is the budget's size in bytes.
func (b *Budget) Total() int64 { return b.total }

// Share is one writer's part of a Budget.
type Share struct {
	Limit   int64 // bytes the budget gives the writer now
	Applied int64 // the limit the writer runs at (it takes Limit promptly)
}

// Shares returns each writer's share now, in the order they joined.
func (b *Budget) Shares() []Share {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Share, len(b.members))
	for i, s := range b.members {
		out[i] = Share{Limit: s.limit.Load(), Applied: s.applied.Load()}
	}
	return out
}

// DatabaseBudget is the budget of a database run's process: total bytes
// over tables x writers writers (each table's), rebalanced every second
// until ctx ends. It refuses a total that leaves a writer less than
// deltawriter.MinMemoryLimit (a *BudgetError).
func DatabaseBudget(ctx context.Context, total int64, tables, writers int) (*Budget, error) {
	n := tables * max(writers, 1)
	if per := total / int64(max(n, 1)); per < deltawriter.MinMemoryLimit {
		return nil, &BudgetError{Total: total, Tables: tables, Writers: max(writers, 1), PerWriter: per}
	}
	b := NewBudget(total, n)
	go b.Run(ctx, time.Second)
	return b, nil
}

// BudgetError is a database run's memory budget too small for its
// writers.
type BudgetError struct {
	Total     int64 // the process's budget
	Tables    int
	Writers   int   // each table's
	PerWriter int64 // what a writer would get
}

// Need is the least budget the run's writers need.
func (e *BudgetError) Need() int64 {
	return deltawriter.MinMemoryLimit * int64(e.Tables*e.Writers)
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("a memory limit of %d bytes split over %d tables x %d writers leaves %d bytes a writer, less than the %d a writer needs (%d bytes in all)",
		e.Total, e.Tables, e.Writers, e.PerWriter, deltawriter.MinMemoryLimit, e.Need())
}

// Run rebalances the shares every interval until ctx ends.
func (b *Budget) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.Rebalance()
		}
	}
}

// initial is the budget a writer is created with before it takes its
// share: an even split over the writers expected (its spill read caches
// keep this size however its share moves), at least
// deltawriter.MinMemoryLimit (a table that joins a database whose budget
// is spread thin runs at the least a writer can, as a share that shrinks
// below it does).
func (b *Budget) initial() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(b.total/int64(max(b.expect, len(b.members)+1)), deltawriter.MinMemoryLimit)
}

// join adds a writer; the shares are computed again.
func (b *Budget) join() *budgetShare {
	s := &budgetShare{b: b, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.members = append(b.members, s)
	b.rebalance()
	return s
}

// leave removes the writer from its budget; the others share what it had.
func (s *budgetShare) leave() {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.members, s); i >= 0 {
		b.members = slices.Delete(b.members, i, i+1)
	}
	b.rebalance()
}

// Rebalance computes every share from the traffic since the last time
// (Run calls it every interval).
func (b *Budget) Rebalance() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rebalance()
}

// rebalance computes every share from the traffic since the last one
// (b.mu held) and wakes the writers whose share changed.
func (b *Budget) rebalance() {
	n := int64(len(b.members))
	if n == 0 {
		return
	}
	var sum float64
	for _, s := range b.members {
		s.rate = s.rate/2 + float64(s.changes.Swap(0))/2
		sum += s.rate
	}
	floor := b.total / (2 * n)
	pool := b.total - floor*n
	for _, s := range b.members {
		share := b.total / n
		if sum > 0 {
			share = floor + int64(float64(pool)*s.rate/sum)
		}
		if s.limit.Swap(share) != share {
			select {
			case s.wake <- struct{}{}:
			default: // already woken
			}
		}
	}
}
