// Package jobtest runs a small job of writers against a coordinator through
// any transport, and checks the table it produces. Tests only.
package jobtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/icesink/icesink/coordinator"
)

// Table is a fake idempotent committer that records what it applied.
type Table struct {
	// Delay, if set, slows each commit down (a slow catalog).
	Delay time.Duration

	mu      sync.Mutex
	applied map[uint64][][]byte
	order   []uint64
	calls   int
	err     error
}

// CommitEpoch implements coordinator.EpochCommitter.
func (t *Table) CommitEpoch(ctx context.Context, epoch uint64, payloads [][]byte) error {
	if t.Delay > 0 {
		select {
		case <-time.After(t.Delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	if t.applied == nil {
		t.applied = map[uint64][][]byte{}
	}
	if _, ok := t.applied[epoch]; ok {
		return nil // already in the table's ancestry
	}
	if n := len(t.order); n > 0 && epoch <= t.order[n-1] {
		t.err = errors.Join(t.err, fmt.Errorf("epoch %d committed after epoch %d", epoch, t.order[n-1]))
	}
	t.applied[epoch] = payloads
	t.order = append(t.order, epoch)
	return nil
}

// Epochs returns the applied epochs in order.
func (t *Table) Epochs() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.order)
}

// Check verifies that every applied epoch has payloads covering exactly all
// vnodes, each made for that epoch, and that last was applied.
func (t *Table) Check(vnodes int, last uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.err
	for _, e := range t.order {
		covered := roaring.New()
		for _, p := range t.applied[e] {
			vn, pe, _ := strings.Cut(string(p), "|")
			if pe != strconv.FormatUint(e, 10) {
				err = errors.Join(err, fmt.Errorf("epoch %d has payload %q", e, p))
				continue
			}
			b, perr := coordinator.ParseVnodes(vn, vnodes)
			if perr != nil || covered.Intersects(b) {
				err = errors.Join(err, fmt.Errorf("epoch %d: bad or overlapping payload %q", e, p))
				continue
			}
			covered.Or(b)
		}
		if covered.GetCardinality() != uint64(vnodes) {
			err = errors.Join(err, fmt.Errorf("epoch %d covers only %s", e, coordinator.FormatVnodes(covered)))
		}
	}
	if _, ok := t.applied[last]; !ok {
		err = errors.Join(err, fmt.Errorf("final epoch %d not applied (applied %v)", last, t.order))
	}
	return err
}

// Writer is one simulated writer: it reports every epoch up to Last (final),
// commits when told, and reconnects after an abort.
type Writer struct {
	Vnodes  *roaring.Bitmap
	Connect func(ctx context.Context, vnodes *roaring.Bitmap) (coordinator.Session, error)
	Last    uint64
	// Bytes returns the buffered bytes to report for an epoch; nil = 0.
	Bytes func(epoch uint64) int64
	// Pipeline runs Commit in its own goroutine while later epochs go on.
	Pipeline bool
	// KillAt, with Kill, kills the writer's session once, instead of
	// reporting that epoch; the writer then reconnects.
	KillAt uint64
	Kill   func(coordinator.Session)

	killed bool
	// Aborts counts the aborts the writer saw.
	Aborts int
}

var errKilled = errors.New("jobtest: killed")

// Run runs the writer until its final epoch is committed.
func (w *Writer) Run(ctx context.Context) error {
	for {
		sess, err := w.Connect(ctx, w.Vnodes)
		if errors.Is(err, coordinator.ErrOverlap) && w.killed {
			// The coordinator has not yet seen the killed session's
			// stream break: try again, as a restarted process would.
			select {
			case <-ctx.Done():
				return fmt.Errorf("connect: %w", err)
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		err = w.session(ctx, sess)
		_ = sess.Close()
		switch {
		case errors.Is(err, coordinator.ErrAborted):
			w.Aborts++
		case errors.Is(err, errKilled):
		default:
			return err
		}
	}
}

func (w *Writer) session(ctx context.Context, sess coordinator.Session) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var commitErr error
	setErr := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if commitErr == nil {
			commitErr = err
		}
	}
	getErr := func() error {
		mu.Lock()
		defer mu.Unlock()
		return commitErr
	}
	defer wg.Wait()
	for e := sess.Resume() + 1; e <= w.Last; e++ {
		if w.Kill != nil && e == w.KillAt && !w.killed {
			w.killed = true
			w.Kill(sess)
			return errKilled
		}
		var b int64
		if w.Bytes != nil {
			b = w.Bytes(e)
		}
		commit, err := sess.Checkpoint(ctx, e, b, e == w.Last)
		if err != nil {
			return fmt.Errorf("checkpoint %d: %w", e, err)
		}
		if !commit {
			continue
		}
		payload := []byte(fmt.Sprintf("%s|%d", coordinator.FormatVnodes(w.Vnodes), e))
		if w.Pipeline && e != w.Last {
			wg.Go(func() {
				if err := sess.Commit(ctx, e, payload); err != nil {
					setErr(fmt.Errorf("commit %d: %w", e, err))
				}
			})
		} else if err := sess.Commit(ctx, e, payload); err != nil {
			return fmt.Errorf("commit %d: %w", e, err)
		}
		if err := getErr(); err != nil {
			return err
		}
	}
	wg.Wait()
	return getErr()
}

// RunAll runs the writers concurrently and returns their errors joined.
func RunAll(ctx context.Context, ws []*Writer) error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("writer %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
