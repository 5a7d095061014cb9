package coordinator

import (
	"context"
	"fmt"
	"sync"
)

// StateStore keeps the coordinator's durable state. coordinator/statestore
// has the file-based implementation; MemStore is the reference one.
//
// Save must be atomic and durable: when it returns nil, Latest returns this
// state (or a later one) from then on, across crashes; when it returns an
// error, the state must not become Latest. ids only increase. Latest returns
// the state with the highest id, or ErrNoState when nothing was saved.
type StateStore interface {
	Save(ctx context.Context, id uint64, state []byte) error
	Latest(ctx context.Context) (id uint64, state []byte, err error)
}

// EpochCommitter commits one epoch's payloads to the table. It must be
// idempotent per epoch: the coordinator calls it again for the same epoch
// after a failed attempt (which may have landed) and after a restart for every
// recorded epoch, so it first looks the epoch up in the table's ancestry and
// returns nil if it is there. It must honour ctx. Epochs arrive in strictly
// increasing order, one at a time.
type EpochCommitter interface {
	CommitEpoch(ctx context.Context, epoch uint64, payloads [][]byte) error
}

// EpochCommitterFunc adapts a function to EpochCommitter.
type EpochCommitterFunc func(ctx context.Context, epoch uint64, payloads [][]byte) error

// CommitEpoch calls f.
func (f EpochCommitterFunc) CommitEpoch(ctx context.Context, epoch uint64, payloads [][]byte) error {
	return f(ctx, epoch, payloads)
}

// MemStore is an in-memory StateStore for tests: it survives a coordinator
// restart within one process, not a process crash. The zero value is empty
// and ready to use; it is safe for concurrent use.
type MemStore struct {
	mu    sync.Mutex
	id    uint64
	state []byte
	saves int
}

// Save keeps a copy of state.
func (s *MemStore) Save(ctx context.Context, id uint64, state []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id <= s.id {
		return fmt.Errorf("coordinator: MemStore: save id %d not above %d", id, s.id)
	}
	s.id, s.state = id, append([]byte(nil), state...)
	s.saves++
	return nil
}

// Latest returns a copy of the last saved state, or ErrNoState.
func (s *MemStore) Latest(ctx context.Context) (uint64, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == nil {
		return 0, nil, ErrNoState
	}
	return s.id, append([]byte(nil), s.state...), nil
}

// Saves returns how many times Save succeeded.
func (s *MemStore) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}
