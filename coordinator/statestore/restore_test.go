package statestore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockingStream is a state file stream whose Reads block until it is
// closed. If gate is set, Close (after unblocking the Read) waits for gate,
// as a Close that must wait for a Read in progress would: a caller that
// closed it on its own goroutine would block.
type blockingStream struct {
	readStarted chan struct{} // closed by the first Read
	closed      chan struct{} // closed by the first Close
	gate        chan struct{}
	reads       atomic.Int32
	closes      atomic.Int32
	startOnce   sync.Once
	closeOnce   sync.Once
}

func newBlockingStream(gated bool) *blockingStream {
	b := &blockingStream{readStarted: make(chan struct{}), closed: make(chan struct{})}
	if gated {
		b.gate = make(chan struct{})
	}
	return b
}

func (b *blockingStream) Read(p []byte) (int, error) {
	b.reads.Add(1)
	b.startOnce.Do(func() { close(b.readStarted) })
	<-b.closed
	return 0, os.ErrClosed
}

func (b *blockingStream) Close() error {
	b.closes.Add(1)
	b.closeOnce.Do(func() { close(b.closed) })
	if b.gate != nil {
		<-b.gate
	}
	return nil
}

func (b *blockingStream) wasClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

// blockingOpen is an open that blocks until released, then returns rc.
type blockingOpen struct {
	entered chan struct{}
	release chan struct{}
	rc      io.ReadCloser
}

func newBlockingOpen(rc io.ReadCloser) *blockingOpen {
	return &blockingOpen{entered: make(chan struct{}), release: make(chan struct{}), rc: rc}
}

// fakeFiles is an OpenFunc: each open of a state file takes the next
// behaviour queued for its checkpoint directory, or opens the real file.
type fakeFiles struct {
	mu    sync.Mutex
	queue map[string][]any // "chk-<id>" -> *blockingStream | *blockingOpen
}

func (f *fakeFiles) push(chk string, b any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queue == nil {
		f.queue = make(map[string][]any)
	}
	f.queue[chk] = append(f.queue[chk], b)
}

func (f *fakeFiles) open(ctx context.Context, path string) (io.ReadCloser, error) {
	chk := filepath.Base(filepath.Dir(path))
	f.mu.Lock()
	var b any
	if q := f.queue[chk]; len(q) > 0 {
		b, f.queue[chk] = q[0], q[1:]
	}
	f.mu.Unlock()
	switch b := b.(type) {
	case *blockingStream:
		return b, nil
	case *blockingOpen:
		close(b.entered)
		<-b.release
		return b.rc, nil
	}
	return os.Open(path)
}

// restoreStore opens a store with checkpoints 1 and 2 in files and 3 inline.
func restoreStore(t *testing.T) (*Store, *fakeFiles, [][]byte) {
	t.Helper()
	ff := &fakeFiles{}
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 64, OpenFile: ff.open})
	states := [][]byte{nil, randState(1, 1000), randState(2, 2000), randState(3, 10)}
	for id := 1; id <= 3; id++ {
		if err := s.Save(context.Background(), uint64(id), states[id]); err != nil {
			t.Fatal(err)
		}
	}
	return s, ff, states
}

// leakCheck records the goroutines running now; its result reports the
// store's goroutines that outlive the test's Wait.
func leakCheck(t *testing.T) func() {
	t.Helper()
	base := runtime.NumGoroutine()
	return func() {
		t.Helper()
		// Wait has returned, so every goroutine the restorer started has run
		// its deferred Done; give them the instants they need to return.
		deadline := time.Now().Add(10 * time.Second)
		for {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			ours := strings.Contains(stacks, "statestore.readStateFile") ||
				strings.Contains(stacks, "statestore.(*Restorer).start")
			if !ours && runtime.NumGoroutine() <= base {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("goroutine leak: %d running, %d before\n%s", runtime.NumGoroutine(), base, stacks)
			}
			runtime.Gosched()
			time.Sleep(time.Millisecond)
		}
	}
}

// await waits for ch to be closed. The bound only turns a hang (the bug
// these tests look for) into a failure with a message; it asserts no timing.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("still waiting for %s", what)
	}
}

func receive(t *testing.T, r *Restorer) RestoreResult {
	t.Helper()
	select {
	case res := <-r.Results():
		return res
	case <-time.After(time.Minute):
		t.Fatal("still waiting for a restore result")
	}
	panic("unreachable")
}

func expectResult(t *testing.T, r *Restorer, seq, id uint64, want []byte) {
	t.Helper()
	res := receive(t, r)
	if res.Err != nil || res.Seq != seq || res.ID != id || !bytes.Equal(res.State, want) {
		t.Fatalf("result seq %d id %d (%d bytes, err %v), want seq %d id %d (%d bytes)",
			res.Seq, res.ID, len(res.State), res.Err, seq, id, len(want))
	}
}

func expectNoResult(t *testing.T, r *Restorer) {
	t.Helper()
	select {
	case res := <-r.Results():
		t.Fatalf("unexpected result seq %d id %d err %v", res.Seq, res.ID, res.Err)
	default:
	}
}

func TestRestoreSupersededWhileReading(t *testing.T) {
	ctx := context.Background()
	s, ff, states := restoreStore(t)
	done := leakCheck(t)
	r := s.NewRestorer()

	b := newBlockingStream(true)
	ff.push("chk-1", b)
	seq1, err := r.Restore(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	await(t, b.readStarted, "the read to start")
	// Restore returns although b.Close blocks on its gate: the stream is
	// closed from another goroutine.
	seq2, err := r.Restore(ctx, 2)
	if err != nil || seq2 <= seq1 {
		t.Fatalf("Restore(2) = %d, %v", seq2, err)
	}
	expectResult(t, r, seq2, 2, states[2])
	await(t, b.closed, "the stream to be closed")
	close(b.gate)

	// No restore can start now, so Wait may run before Close: once the
	// superseded reader has exited, its result must not be in the channel.
	r.Wait()
	expectNoResult(t, r)
	r.Close()
	done()
	if n := b.closes.Load(); n != 1 {
		t.Fatalf("stream closed %d times", n)
	}
	// A stopped read fails nothing: the store still works.
	mustLatest(t, s, 3, states[3])
}

func TestRestoreClosedWhileReading(t *testing.T) {
	for _, closeStore := range []bool{false, true} {
		ctx := context.Background()
		s, ff, _ := restoreStore(t)
		done := leakCheck(t)
		r := s.NewRestorer()
		b := newBlockingStream(true)
		ff.push("chk-2", b)
		if _, err := r.Restore(ctx, 2); err != nil {
			t.Fatal(err)
		}
		await(t, b.readStarted, "the read to start")
		if closeStore {
			if err := s.Close(); err != nil { // closes r
				t.Fatal(err)
			}
		} else {
			r.Close()
		}
		await(t, b.closed, "the stream to be closed")
		close(b.gate)
		r.Wait()
		done()
		expectNoResult(t, r)
		if _, err := r.Restore(ctx, 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("Restore after close: %v", err)
		}
	}
}

func TestRestoreSupersededWhileOpening(t *testing.T) {
	ctx := context.Background()
	s, ff, states := restoreStore(t)
	done := leakCheck(t)
	r := s.NewRestorer()

	// The superseded open returns a readable stream: it must still be closed
	// unread, and its state never delivered.
	b := newBlockingStream(false)
	o := newBlockingOpen(b)
	ff.push("chk-1", o)
	if _, err := r.Restore(ctx, 1); err != nil {
		t.Fatal(err)
	}
	await(t, o.entered, "the open to start")
	seq2, _ := r.Restore(ctx, 2)
	expectResult(t, r, seq2, 2, states[2])
	seq3, _ := r.Restore(ctx, 3) // inline: delivered at once
	expectResult(t, r, seq3, 3, states[3])

	close(o.release) // the open returns now, after being superseded
	await(t, b.closed, "the stream to be closed")
	r.Wait()
	expectNoResult(t, r)
	r.Close()
	done()
	if n := b.reads.Load(); n != 0 {
		t.Fatalf("superseded stream read %d times", n)
	}
}

func TestRestoreClosedWhileOpening(t *testing.T) {
	for _, closeStore := range []bool{false, true} {
		ctx := context.Background()
		s, ff, _ := restoreStore(t)
		done := leakCheck(t)
		r := s.NewRestorer()
		b := newBlockingStream(false)
		o := newBlockingOpen(b)
		ff.push("chk-2", o)
		if _, err := r.Restore(ctx, 2); err != nil {
			t.Fatal(err)
		}
		await(t, o.entered, "the open to start")
		if closeStore {
			s.Close()
		} else {
			r.Close()
		}
		if b.wasClosed() {
			t.Fatal("stream closed before its open returned")
		}
		close(o.release)
		await(t, b.closed, "the stream to be closed")
		r.Wait()
		done()
		expectNoResult(t, r)
		if n := b.reads.Load(); n != 0 {
			t.Fatalf("stream read %d times after close", n)
		}
	}
}

// TestRestoreCallerCancel: cancelling the restore's own ctx (not
// superseding it) stops the read the same way and delivers ctx's error.
func TestRestoreCallerCancel(t *testing.T) {
	s, ff, _ := restoreStore(t)
	done := leakCheck(t)
	r := s.NewRestorer()
	b := newBlockingStream(false)
	ff.push("chk-1", b)
	ctx, cancel := context.WithCancel(context.Background())
	seq, _ := r.Restore(ctx, 1)
	await(t, b.readStarted, "the read to start")
	cancel()
	res := receive(t, r)
	if res.Seq != seq || !errors.Is(res.Err, context.Canceled) || res.State != nil {
		t.Fatalf("result %+v", res)
	}
	if !b.wasClosed() {
		t.Fatal("stream not closed")
	}
	r.Close()
	r.Wait()
	done()
}

func TestRestoreResults(t *testing.T) {
	ctx := context.Background()
	s, _, states := restoreStore(t)
	r := s.NewRestorer()
	defer r.Wait()
	defer r.Close()
	seq, _ := r.RestoreLatest(ctx)
	expectResult(t, r, seq, 3, states[3])
	seq, _ = r.Restore(ctx, 1)
	expectResult(t, r, seq, 1, states[1])
	seq, _ = r.Restore(ctx, 42)
	if res := receive(t, r); res.Seq != seq || !errors.Is(res.Err, ErrUnknownCheckpoint) {
		t.Fatalf("unknown id: %+v", res)
	}
	// An undelivered result is discarded by the next restore.
	r.Restore(ctx, 3)
	seq, _ = r.Restore(ctx, 1)
	expectResult(t, r, seq, 1, states[1])
	expectNoResult(t, r)

	// Corruption is delivered, not lost.
	path := filepath.Join(s.opts.Dir, "chk-2", stateFileName)
	data, _ := os.ReadFile(path)
	data[7] ^= 2
	os.WriteFile(path, data, 0o644)
	seq, _ = r.Restore(ctx, 2)
	if res := receive(t, r); res.Seq != seq || !errors.Is(res.Err, ErrCorruption) {
		t.Fatalf("corrupt: %+v", res)
	}

	empty := openT(t, Options{})
	er := empty.NewRestorer()
	seq, _ = er.RestoreLatest(ctx)
	if res := receive(t, er); res.Seq != seq || !errors.Is(res.Err, ErrNoState) {
		t.Fatalf("empty: %+v", res)
	}
}

// TestRestoreLatestWins fires bursts of restores over real files and checks
// that the first result after a burst is the burst's last restore, whatever
// the earlier ones were doing.
func TestRestoreLatestWins(t *testing.T) {
	ctx := context.Background()
	s, _, states := restoreStore(t)
	done := leakCheck(t)
	r := s.NewRestorer()
	for i := range 200 {
		var seq, id uint64
		for j := range 1 + i%4 {
			id = uint64(1 + (i+j)%3)
			seq, _ = r.Restore(ctx, id)
		}
		expectResult(t, r, seq, id, states[id])
	}
	r.Close()
	r.Wait()
	done()
}
