// Package mailbox holds the writer-side bookkeeping shared by the in-process
// and gRPC sessions: who waits for which epoch's decision or result, and how
// the session ends.
package mailbox

import (
	"context"
	"math"
	"sync"
)

// Decision is an epoch's decision as a session sees it.
type Decision struct {
	Commit bool
	Retire bool
	Err    error
}

// Box is one session's mailbox. It is safe for concurrent use.
//
// A session ends in two steps. End (an abort, a refusal) stops new work:
// waits for decisions fail with the end error, and so do waits for results of
// epochs above the keep limit; results of epochs at or below it (recorded
// epochs) are still awaited. Gone means no message will arrive any more:
// every wait fails with the gone error.
type Box struct {
	mu         sync.Mutex
	decisions  map[uint64]chan Decision
	results    map[uint64]chan error
	registered chan struct{}
	resume     uint64
	regErr     error
	ended      chan struct{}
	endErr     error
	keep       uint64
	gone       chan struct{}
	goneErr    error
	retired    bool
	retiredAt  uint64
	retiredErr func(epoch, at uint64) error
	barriers   chan uint64 // the latest barrier not yet taken
}

// New returns an empty mailbox. retiredErr builds the error for a report
// after the session retired.
func New(retiredErr func(epoch, at uint64) error) *Box {
	return &Box{
		decisions:  make(map[uint64]chan Decision),
		results:    make(map[uint64]chan error),
		registered: make(chan struct{}),
		ended:      make(chan struct{}),
		gone:       make(chan struct{}),
		retiredErr: retiredErr,
		barriers:   make(chan uint64, 1),
	}
}

// Barrier keeps the coordinator's request to end epoch; it never blocks,
// and a newer request replaces one not taken yet. End and Gone request
// epoch math.MaxUint64: a writer waiting for a barrier learns of the end
// at its next Checkpoint.
func (b *Box) Barrier(epoch uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.barrierLocked(epoch)
}

func (b *Box) barrierLocked(epoch uint64) {
	select {
	case old := <-b.barriers:
		epoch = max(epoch, old)
	default:
	}
	b.barriers <- epoch
}

// Barriers delivers the coordinator's barrier requests (see Barrier).
func (b *Box) Barriers() <-chan uint64 { return b.barriers }

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Registered accepts the registration; err non-nil refuses it (and ends the
// session). Once answered, later calls do nothing.
func (b *Box) Registered(resume uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(b.registered) {
		return
	}
	b.resume, b.regErr = resume, err
	close(b.registered)
	if err != nil {
		b.endLocked(err, 0)
	}
}

// WaitRegistered waits for the registration's answer.
func (b *Box) WaitRegistered(ctx context.Context) (uint64, error) {
	select {
	case <-b.registered:
	case <-b.ended:
		b.mu.Lock()
		defer b.mu.Unlock()
		if isClosed(b.registered) && b.regErr == nil {
			return b.resume, nil
		}
		return 0, b.endErr
	case <-b.gone:
		return 0, b.goneErr
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resume, b.regErr
}

// Resume returns the accepted registration's resume epoch.
func (b *Box) Resume() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resume
}

// ExpectDecision registers interest in epoch's decision before the report
// is sent. It fails if the session can take no more reports.
func (b *Box) ExpectDecision(epoch uint64) (chan Decision, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case isClosed(b.ended):
		return nil, b.endErr
	case isClosed(b.gone):
		return nil, b.goneErr
	case b.retired && epoch > b.retiredAt:
		return nil, b.retiredErr(epoch, b.retiredAt)
	}
	return b.decisionChan(epoch), nil
}

func (b *Box) decisionChan(epoch uint64) chan Decision {
	ch, ok := b.decisions[epoch]
	if !ok {
		ch = make(chan Decision, 1)
		b.decisions[epoch] = ch
	}
	return ch
}

// Decide delivers epoch's decision.
func (b *Box) Decide(epoch uint64, d Decision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d.Retire && d.Err == nil {
		b.retired, b.retiredAt = true, epoch
	}
	ch := b.decisionChan(epoch)
	select {
	case ch <- d:
	default: // a duplicate; the first one stands
	}
}

// WaitDecision waits for the decision registered by ExpectDecision.
func (b *Box) WaitDecision(ctx context.Context, epoch uint64, ch chan Decision) (bool, error) {
	defer b.forgetDecision(epoch)
	select {
	case d := <-ch:
		return d.Commit, d.Err
	case <-b.ended:
	case <-b.gone:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case d := <-ch:
		return d.Commit, d.Err
	default:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(b.ended) {
		return false, b.endErr
	}
	return false, b.goneErr
}

func (b *Box) forgetDecision(epoch uint64) {
	b.mu.Lock()
	delete(b.decisions, epoch)
	b.mu.Unlock()
}

// ExpectResult registers interest in epoch's result before the payload is
// sent. It fails if the session ended before the epoch was recorded.
func (b *Box) ExpectResult(epoch uint64) (chan error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case isClosed(b.ended):
		return nil, b.endErr
	case isClosed(b.gone):
		return nil, b.goneErr
	}
	return b.resultChan(epoch), nil
}

func (b *Box) resultChan(epoch uint64) chan error {
	ch, ok := b.results[epoch]
	if !ok {
		ch = make(chan error, 1)
		b.results[epoch] = ch
	}
	return ch
}

// Result delivers epoch's result.
func (b *Box) Result(epoch uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.resultChan(epoch) <- err:
	default:
	}
}

// WaitResult waits for the result registered by ExpectResult.
func (b *Box) WaitResult(ctx context.Context, epoch uint64, ch chan error) error {
	defer func() {
		b.mu.Lock()
		delete(b.results, epoch)
		b.mu.Unlock()
	}()
	ended := b.ended
	for {
		select {
		case err := <-ch:
			return err
		case <-ended:
			b.mu.Lock()
			keep, err := b.keep, b.endErr
			b.mu.Unlock()
			if epoch > keep {
				select {
				case r := <-ch:
					return r
				default:
					return err
				}
			}
			ended = nil // recorded: its result still comes
		case <-b.gone:
			select {
			case r := <-ch:
				return r
			default:
				b.mu.Lock()
				defer b.mu.Unlock()
				return b.goneErr
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// End stops new work with err; results of epochs <= keep are still awaited.
// Only the first End counts.
func (b *Box) End(err error, keep uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endLocked(err, keep)
}

func (b *Box) endLocked(err error, keep uint64) {
	if isClosed(b.ended) {
		return
	}
	b.endErr, b.keep = err, keep
	close(b.ended)
	b.barrierLocked(math.MaxUint64)
}

// Gone fails every wait with err: no message will arrive any more. Only the
// first Gone counts.
func (b *Box) Gone(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(b.gone) {
		return
	}
	b.goneErr = err
	close(b.gone)
	b.barrierLocked(math.MaxUint64)
}

// Ended is closed by End.
func (b *Box) Ended() <-chan struct{} { return b.ended }

// GoneCh is closed by Gone.
func (b *Box) GoneCh() <-chan struct{} { return b.gone }

// Err returns the end error, else the gone error, else nil.
func (b *Box) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(b.ended) {
		return b.endErr
	}
	if isClosed(b.gone) {
		return b.goneErr
	}
	return nil
}
