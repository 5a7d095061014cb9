package coordinator

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/icesink/icesink/coordinator/internal/mailbox"
)

// Session is one writer's registration, the same for every transport
// (Coordinator.Connect in process, coordgrpc.Dial over gRPC). It is safe for
// concurrent use: Commit may run in its own goroutine while Checkpoint
// reports later epochs.
//
// Errors: errors.Is(err, ErrAborted) means the windows after
// AbortError.Resume will never commit: delete their files, Close, Connect
// again and restart the input after Resume. Any other error (ErrClosed, a
// ctx error, ErrCommitFailed, ErrFailed) leaves recorded epochs to recovery:
// keep their files.
type Session interface {
	// Resume is the epoch the writer starts after: committed in the table
	// by the time Connect returned.
	Resume() uint64
	// Checkpoint reports the writer's barrier for epoch, always, even when
	// it wrote nothing, with its buffered bytes; final marks the end of its
	// input. It blocks until the epoch's decision, broadcast to all writers
	// of the epoch: commit true means call Commit for this epoch. Epochs
	// must increase, and a Checkpoint must return before the next starts.
	Checkpoint(ctx context.Context, epoch uint64, bufferedBytes int64, final bool) (commit bool, err error)
	// Commit sends the writer's payload for a commit epoch (opaque bytes,
	// possibly empty) and blocks until the epoch's result: nil once it is
	// committed in the table.
	Commit(ctx context.Context, epoch uint64, payload []byte) error
	// Close ends the session. Closing with an uncommitted window aborts it
	// for every writer; after a final epoch's result it is a clean leave.
	Close() error
}

// ConnectOption tunes a registration.
type ConnectOption func(*connectOptions)

type connectOptions struct {
	rescale    bool
	vnodeCount int
	job        map[string]string
}

// WithRescale makes the registration a rescale: its vnodes may overlap live
// writers, and it takes them over after the next epoch boundary, which it
// forces to commit (see Register).
func WithRescale() ConnectOption { return func(o *connectOptions) { o.rescale = true } }

// WithVnodeCount makes the coordinator check that the writer routes keys
// with n vnodes, the same count as the coordinator.
func WithVnodeCount(n int) ConnectOption { return func(o *connectOptions) { o.vnodeCount = n } }

// WithJob makes the coordinator check that the writer writes into the
// same job as itself and its other writers (see Config.Job).
func WithJob(job map[string]string) ConnectOption {
	return func(o *connectOptions) { o.job = job }
}

// ApplyConnectOptions returns the registration that opts ask for; transports
// use it to carry the options.
func ApplyConnectOptions(w WriterID, vnodes *roaring.Bitmap, opts ...ConnectOption) Register {
	var o connectOptions
	for _, opt := range opts {
		opt(&o)
	}
	return Register{Writer: w, Vnodes: vnodes, Rescale: o.rescale, VnodeCount: o.vnodeCount, Job: o.job}
}

func retiredError(epoch, at uint64) error {
	return fmt.Errorf("%w: epoch %d reported after the session retired at epoch %d", ErrRetired, epoch, at)
}

// LocalSession is the in-process Session returned by Coordinator.Connect.
type LocalSession struct {
	c         *Coordinator
	id        WriterID
	box       *mailbox.Box
	closeOnce sync.Once
}

var _ Session = (*LocalSession)(nil)

// Writer returns the session's writer id.
func (s *LocalSession) Writer() WriterID { return s.id }

// Resume implements Session.
func (s *LocalSession) Resume() uint64 { return s.box.Resume() }

// Checkpoint implements Session.
func (s *LocalSession) Checkpoint(ctx context.Context, epoch uint64, bufferedBytes int64, final bool) (bool, error) {
	ch, err := s.box.ExpectDecision(epoch)
	if err != nil {
		return false, err
	}
	if err := s.c.submit(ctx, request{ev: Report{Writer: s.id, Epoch: epoch, BufferedBytes: bufferedBytes, Final: final}}); err != nil {
		return false, err
	}
	return s.box.WaitDecision(ctx, epoch, ch)
}

// Commit implements Session.
func (s *LocalSession) Commit(ctx context.Context, epoch uint64, payload []byte) error {
	ch, err := s.box.ExpectResult(epoch)
	if err != nil {
		return err
	}
	if err := s.c.submit(ctx, request{ev: Payload{Writer: s.id, Epoch: epoch, Data: payload}}); err != nil {
		return err
	}
	return s.box.WaitResult(ctx, epoch, ch)
}

// Close implements Session.
func (s *LocalSession) Close() error { return s.CloseWithError(nil) }

// CloseWithError ends the session because of err (a writer failure); nil is
// a plain Close. Waits still pending fail with ErrClosed.
func (s *LocalSession) CloseWithError(err error) error {
	s.closeOnce.Do(func() {
		s.box.Gone(fmt.Errorf("%w: session of %v", ErrClosed, s.id))
		// The coordinator may be gone already; then there is nobody to tell.
		_ = s.c.submit(context.Background(), request{ev: Disconnect{Writer: s.id, Err: err}})
	})
	return nil
}

// Ended is closed when the session can take no more work: aborted, refused,
// closed, or the coordinator stopped. Err then says why.
func (s *LocalSession) Ended() <-chan struct{} { return s.box.Ended() }

// Gone is closed when no message will reach the session any more.
func (s *LocalSession) Gone() <-chan struct{} { return s.box.GoneCh() }

// Err returns why the session ended, or nil.
func (s *LocalSession) Err() error { return s.box.Err() }

// Barriers delivers the coordinator's requests to end an epoch
// (Config.BarrierInterval): the epoch to end. A request the writer has not
// taken is replaced by a newer one. When the session ends (an abort, the
// coordinator gone) it delivers math.MaxUint64: the writer's next
// Checkpoint returns why.
func (s *LocalSession) Barriers() <-chan uint64 { return s.box.Barriers() }

// deliver hands a message from the machine to the session; it never blocks.
func (s *LocalSession) deliver(m Message) {
	switch m.Type {
	case MsgRegistered:
		s.box.Registered(m.Resume, nil)
	case MsgDecision:
		s.box.Decide(m.Epoch, mailbox.Decision{Commit: m.Commit, Retire: m.Retire})
	case MsgResult:
		s.box.Result(m.Epoch, m.Err)
	case MsgAbort:
		s.box.Registered(0, m.Err) // a registration still waiting is refused
		s.box.End(m.Err, m.Resume)
	case MsgBarrier:
		s.box.Barrier(m.Epoch)
	case MsgError:
		s.box.Registered(0, m.Err)
		// Not an abort: results of epochs already sent may still come.
		s.box.End(m.Err, math.MaxUint64)
	}
}
