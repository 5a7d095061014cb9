package statestore

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
)

// RestoreResult is the outcome of one restore. Exactly one is delivered per
// Restore call unless the restore was superseded or the restorer closed.
type RestoreResult struct {
	Seq   uint64 // the value Restore returned for this restore
	ID    uint64 // the checkpoint restored
	State []byte // the state, the receiver's to keep; nil on error
	Err   error  // nil, or why the state could not be read
}

// Restorer reads checkpoint states off the caller's goroutine, for a
// caller that must not block, such as a coordinator's event loop. Only the
// latest restore counts: Restore stops any earlier restore still in flight,
// by closing its stream from a separate goroutine (closing may wait for a
// Read in progress), or, if its file is still being opened, as soon as the
// open returns. A stopped restore fails nothing and delivers nothing.
//
// Results arrive on Results. A Restorer is safe for concurrent use.
type Restorer struct {
	s       *Store
	results chan RestoreResult
	wg      sync.WaitGroup

	mu     sync.Mutex
	seq    uint64
	cancel context.CancelFunc // stops the restore in flight, if any
	closed bool
}

// NewRestorer returns a restorer reading from s. Closing s closes it.
func (s *Store) NewRestorer() *Restorer {
	r := &Restorer{s: s, results: make(chan RestoreResult, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.crashed {
		r.closed = true
	} else {
		s.restorers[r] = struct{}{}
	}
	return r
}

// Results returns the channel on which results are delivered. It holds at
// most one result, that of the latest restore, and is never closed. A
// result still in the channel when a new restore starts is discarded.
func (r *Restorer) Results() <-chan RestoreResult { return r.results }

// Restore starts restoring checkpoint id and returns its sequence number,
// which its RestoreResult carries. It stops the restore in flight, if any;
// only the latest restore's result is delivered. An inline state is
// delivered before Restore returns; a state file is read on a goroutine of
// its own. If ctx is cancelled (not superseded), the read stops the same
// way and its result carries ctx's error. The only error Restore returns is
// ErrClosed, when nothing was started.
func (r *Restorer) Restore(ctx context.Context, id uint64) (uint64, error) {
	return r.start(ctx, func() (*checkpoint, error) { return r.s.lookup(id) }, id)
}

// RestoreLatest is Restore of the newest retained checkpoint; with none,
// its result carries an error matching ErrNoState.
func (r *Restorer) RestoreLatest(ctx context.Context) (uint64, error) {
	return r.start(ctx, r.s.latest, 0)
}

func (r *Restorer) start(ctx context.Context, find func() (*checkpoint, error), id uint64) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrClosed
	}
	r.stopLocked()
	r.seq++
	seq := r.seq
	c, err := find()
	if errors.Is(err, ErrClosed) {
		return 0, err
	}
	if err != nil {
		r.deliverLocked(RestoreResult{Seq: seq, ID: id, Err: err})
		return seq, nil
	}
	if c.file == nil {
		r.deliverLocked(RestoreResult{Seq: seq, ID: c.id, State: bytes.Clone(c.inline)})
		return seq, nil
	}
	opCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	path := filepath.Join(r.s.chkDir(c.id), c.file.Path)
	h := *c.file
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		state, err := readStateFile(opCtx, r.s.opts, path, h)
		r.deliver(RestoreResult{Seq: seq, ID: c.id, State: state, Err: err})
	}()
	return seq, nil
}

// stopLocked stops the restore in flight and discards an undelivered result.
func (r *Restorer) stopLocked() {
	if r.cancel != nil {
		r.cancel() // readStateFile closes the stream on another goroutine
		r.cancel = nil
	}
	select {
	case <-r.results:
	default:
	}
}

func (r *Restorer) deliver(res RestoreResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || res.Seq != r.seq {
		return // superseded or closed: a stopped read fails nothing
	}
	r.cancel = nil
	r.deliverLocked(res)
}

// deliverLocked sends the latest restore's result. The channel has room:
// each restore delivers at most once, and start empties it first.
func (r *Restorer) deliverLocked(res RestoreResult) {
	select {
	case r.results <- res:
	default:
	}
}

// Close stops the restore in flight, if any, without waiting for it, and
// discards an undelivered result; nothing is delivered afterwards. It
// returns nil; later Restore calls return ErrClosed.
func (r *Restorer) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.stopLocked()
	r.mu.Unlock()

	r.s.mu.Lock()
	delete(r.s.restorers, r)
	r.s.mu.Unlock()
	return nil
}

// Wait blocks until every goroutine the restorer started has exited, their
// streams closed. Call it when no Restore can start concurrently, typically
// after Close (or Store.Close). A stopped restore whose open never returns
// keeps Wait waiting.
func (r *Restorer) Wait() { r.wg.Wait() }
