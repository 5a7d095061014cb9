package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/internal/jobtest"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startCoordinator(t *testing.T, ctx context.Context, cfg coordinator.Config, table coordinator.EpochCommitter, store coordinator.StateStore, opts ...coordinator.Option) *coordinator.Coordinator {
	t.Helper()
	cfg.Logf = t.Logf
	opts = append([]coordinator.Option{coordinator.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	c, err := coordinator.Start(ctx, cfg, table, store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func writers(t *testing.T, c *coordinator.Coordinator, n int, last uint64) []*jobtest.Writer {
	t.Helper()
	parts, err := coordinator.SplitVnodes(c.Vnodes(), n)
	if err != nil {
		t.Fatal(err)
	}
	ws := make([]*jobtest.Writer, n)
	for i, p := range parts {
		ws[i] = &jobtest.Writer{
			Vnodes: p,
			Last:   last,
			Connect: func(ctx context.Context, vn *roaring.Bitmap) (coordinator.Session, error) {
				return c.Connect(ctx, vn, coordinator.WithVnodeCount(c.Vnodes()))
			},
		}
	}
	return ws
}

func TestInProcessJob(t *testing.T) {
	ctx := testContext(t)
	table := &jobtest.Table{Delay: time.Millisecond}
	store := &coordinator.MemStore{}
	c := startCoordinator(t, ctx, coordinator.Config{CommitInterval: 3}, table, store)
	ws := writers(t, c, 4, 30)
	ws[0].Pipeline = true
	ws[1].Bytes = func(e uint64) int64 { return int64(e % 7) }
	if err := jobtest.RunAll(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if err := table.Check(c.Vnodes(), 30); err != nil {
		t.Fatal(err)
	}
	want := []uint64{3, 6, 9, 12, 15, 18, 21, 24, 27, 30}
	if got := table.Epochs(); !equal(got, want) {
		t.Fatalf("committed %v, want %v", got, want)
	}
}

func TestInProcessWriterKilledMidEpoch(t *testing.T) {
	ctx := testContext(t)
	table := &jobtest.Table{}
	c := startCoordinator(t, ctx, coordinator.Config{CommitInterval: 5}, table, &coordinator.MemStore{})
	ws := writers(t, c, 3, 20)
	// Epoch 7 is reported by everyone, so when the last writer dies instead
	// of reporting epoch 8 the windows since epoch 5 are in flight.
	ws[2].KillAt = 8
	ws[2].Kill = func(s coordinator.Session) {
		_ = s.(*coordinator.LocalSession).CloseWithError(errors.New("killed by the test"))
	}
	if err := jobtest.RunAll(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if err := table.Check(c.Vnodes(), 20); err != nil {
		t.Fatal(err)
	}
	if got, want := table.Epochs(), []uint64{5, 10, 15, 20}; !equal(got, want) {
		t.Fatalf("committed %v, want %v", got, want)
	}
	for i, w := range ws[:2] {
		if w.Aborts == 0 {
			t.Errorf("writer %d was not told about the abort", i)
		}
	}
}

// TestSlowCommitDoesNotBlock: while the catalog holds epoch 1's commit,
// later epochs still align and get their decisions.
func TestSlowCommitDoesNotBlock(t *testing.T) {
	ctx := testContext(t)
	release := make(chan struct{})
	table := &jobtest.Table{}
	committer := coordinator.EpochCommitterFunc(func(ctx context.Context, epoch uint64, payloads [][]byte) error {
		if epoch == 1 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return table.CommitEpoch(ctx, epoch, payloads)
	})
	c := startCoordinator(t, ctx, coordinator.Config{}, committer, &coordinator.MemStore{})
	s, err := c.Connect(ctx, allVnodes(c.Vnodes()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if commit, err := s.Checkpoint(ctx, 1, 0, false); err != nil || !commit {
		t.Fatalf("checkpoint 1: %v %v", commit, err)
	}
	result := make(chan error, 1)
	go func() { result <- s.Commit(ctx, 1, []byte("0-255|1")) }()
	for e := uint64(2); e <= 5; e++ {
		if commit, err := s.Checkpoint(ctx, e, 0, false); err != nil || !commit {
			t.Fatalf("checkpoint %d while epoch 1 commits: %v %v", e, commit, err)
		}
		go func() { _ = s.Commit(ctx, e, []byte("0-255|"+itoa(e))) }()
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastCommitted != 0 || st.LastDecided != 5 {
		t.Fatalf("status %+v, want nothing committed and epoch 5 decided", st)
	}
	close(release)
	if err := <-result; err != nil {
		t.Fatal(err)
	}
}

// TestAlignmentTimeout: a writer that never reports aborts the epoch with an
// error naming its vnodes.
func TestAlignmentTimeout(t *testing.T) {
	ctx := testContext(t)
	c := startCoordinator(t, ctx, coordinator.Config{Vnodes: 4, AlignTimeout: 3}, &jobtest.Table{}, &coordinator.MemStore{},
		coordinator.WithTick(time.Millisecond))
	a, err := c.Connect(ctx, roaring.BitmapOf(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := c.Connect(ctx, roaring.BitmapOf(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = a.Checkpoint(ctx, 1, 0, false)
	var te *coordinator.TimeoutError
	if !errors.Is(err, coordinator.ErrAborted) || !errors.As(err, &te) || coordinator.FormatVnodes(te.Missing) != "2-3" {
		t.Fatalf("got %v, want an abort naming vnodes 2-3", err)
	}
	if _, err := b.Checkpoint(ctx, 1, 0, false); !errors.Is(err, coordinator.ErrAborted) {
		t.Fatalf("idle writer: got %v, want the abort", err)
	}
}

// TestRestartRecoversRecordedEpoch: the coordinator dies after recording
// epoch 1 but before its commit ends; the next one commits it before
// accepting writers.
func TestRestartRecoversRecordedEpoch(t *testing.T) {
	ctx := testContext(t)
	store := &coordinator.MemStore{}
	started := make(chan struct{})
	hang := coordinator.EpochCommitterFunc(func(ctx context.Context, epoch uint64, payloads [][]byte) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	c1, err := coordinator.Start(ctx, coordinator.Config{Vnodes: 2, Logf: t.Logf}, hang, store)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c1.Connect(ctx, roaring.BitmapOf(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ctx, 1, 0, false); err != nil {
		t.Fatal(err)
	}
	commitErr := make(chan error, 1)
	go func() { commitErr <- s.Commit(ctx, 1, []byte("0-1|1")) }()
	<-started
	_ = c1.Close()
	if err := <-commitErr; errors.Is(err, coordinator.ErrAborted) || err == nil {
		t.Fatalf("commit across a coordinator crash: got %v, want an unknown outcome", err)
	}
	table := &jobtest.Table{}
	c2 := startCoordinator(t, ctx, coordinator.Config{Vnodes: 2}, table, store)
	s2, err := c2.Connect(ctx, roaring.BitmapOf(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Resume() != 1 {
		t.Fatalf("resume %d, want 1", s2.Resume())
	}
	if err := table.Check(2, 1); err != nil {
		t.Fatal(err)
	}
}

func allVnodes(n int) *roaring.Bitmap {
	b := roaring.New()
	b.AddRange(0, uint64(n))
	return b
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func itoa(e uint64) string { return coordinator.FormatVnodes(roaring.BitmapOf(uint32(e))) }

// TestInProcessRescale: two rescale registrations split writer b's vnodes.
// The next epoch commits as the boundary, b retires after it, and the new
// writers start after it.
func TestInProcessRescale(t *testing.T) {
	ctx := testContext(t)
	table := &jobtest.Table{}
	c := startCoordinator(t, ctx, coordinator.Config{Vnodes: 4, CommitInterval: 100}, table, &coordinator.MemStore{})
	a, err := c.Connect(ctx, roaring.BitmapOf(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := c.Connect(ctx, roaring.BitmapOf(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checkpointAll := func(epoch uint64, ss ...coordinator.Session) []bool {
		t.Helper()
		commits := make([]bool, len(ss))
		errs := make([]error, len(ss))
		done := make(chan int)
		for i, s := range ss {
			go func() { commits[i], errs[i] = s.Checkpoint(ctx, epoch, 0, false); done <- i }()
		}
		for range ss {
			<-done
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("epoch %d: %v", epoch, err)
		}
		return commits
	}
	if got := checkpointAll(1, a, b); got[0] || got[1] {
		t.Fatalf("epoch 1 commits: %v", got)
	}
	type joined struct {
		s   coordinator.Session
		err error
	}
	j2, j3 := make(chan joined, 1), make(chan joined, 1)
	go func() { s, err := c.Connect(ctx, roaring.BitmapOf(2), coordinator.WithRescale()); j2 <- joined{s, err} }()
	go func() { s, err := c.Connect(ctx, roaring.BitmapOf(3), coordinator.WithRescale()); j3 <- joined{s, err} }()
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Pending) == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if got := checkpointAll(2, a, b); !got[0] || !got[1] {
		t.Fatalf("the rescale boundary did not commit: %v", got)
	}
	errs := make(chan error, 2)
	go func() { errs <- a.Commit(ctx, 2, []byte("0-1|2")) }()
	go func() { errs <- b.Commit(ctx, 2, []byte("2-3|2")) }()
	if err := errors.Join(<-errs, <-errs); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Checkpoint(ctx, 3, 0, false); !errors.Is(err, coordinator.ErrRetired) {
		t.Fatalf("retired writer: got %v, want ErrRetired", err)
	}
	r2, r3 := <-j2, <-j3
	if r2.err != nil || r3.err != nil {
		t.Fatalf("rescale registrations: %v, %v", r2.err, r3.err)
	}
	defer r2.s.Close()
	defer r3.s.Close()
	if r2.s.Resume() != 2 || r3.s.Resume() != 2 {
		t.Fatalf("resume %d, %d; want 2", r2.s.Resume(), r3.s.Resume())
	}
	checkpointAll(3, a, r2.s, r3.s)
	if err := table.Check(4, 2); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink safe for the driver's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWarnsUncoveredVnodes: a writer whose vnodes do not cover the key
// space waits for alignment; the coordinator says, at the default log
// level, which vnodes no writer holds, and keeps saying it (before, the
// wait was silent).
func TestWarnsUncoveredVnodes(t *testing.T) {
	ctx := testContext(t)
	var log syncBuffer
	c := startCoordinator(t, ctx, coordinator.Config{Vnodes: 8}, &jobtest.Table{}, &coordinator.MemStore{},
		coordinator.WithTick(time.Millisecond), coordinator.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	sess, err := c.Connect(ctx, roaring.BitmapOf(0, 1, 2, 3, 6))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// Said at join, before any wait.
	if !strings.Contains(log.String(), "vnodes without a writer yet") || !strings.Contains(log.String(), "missing=4-5,7") {
		t.Fatalf("the join did not name the missing vnodes:\n%s", log.String())
	}
	for strings.Count(log.String(), "no writer holds") < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("no repeated warning about the uncovered vnodes; log:\n%s", log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !strings.Contains(log.String(), "missing=4-5,7") {
		t.Fatalf("the warning does not name vnodes 4-5,7:\n%s", log.String())
	}
	st, err := c.Status(ctx)
	if err != nil || st.Missing.String() != roaring.BitmapOf(4, 5, 7).String() {
		t.Fatalf("Status().Missing = %v, %v", st.Missing, err)
	}
}

// A commit error wrapping ErrPermanent fails the epoch at its first
// attempt instead of after Config.CommitAttempts with backoff.
func TestPermanentCommitErrorNotRetried(t *testing.T) {
	ctx := testContext(t)
	var calls int
	var mu sync.Mutex
	failing := coordinator.EpochCommitterFunc(func(ctx context.Context, epoch uint64, payloads [][]byte) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return fmt.Errorf("%w: the table moved", coordinator.ErrPermanent)
	})
	c := startCoordinator(t, ctx, coordinator.Config{Vnodes: 1, CommitAttempts: 5, CommitBackoff: 1}, failing, &coordinator.MemStore{},
		coordinator.WithTick(time.Millisecond))
	s, err := c.Connect(ctx, roaring.BitmapOf(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if commit, err := s.Checkpoint(ctx, 1, 0, true); err != nil || !commit {
		t.Fatalf("checkpoint: %v %v", commit, err)
	}
	err = s.Commit(ctx, 1, []byte("p"))
	var ce *coordinator.CommitError
	if !errors.As(err, &ce) || ce.Attempts != 1 || !errors.Is(err, coordinator.ErrPermanent) {
		t.Fatalf("got %v, want a commit error after 1 attempt wrapping ErrPermanent", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Fatalf("the committer was called %d times, want 1", calls)
	}
}
