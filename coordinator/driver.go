package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/icesink/icesink/coordinator/internal/mailbox"
)

// Option tunes the driver started by Start.
type Option func(*driverOptions)

type driverOptions struct {
	tick          time.Duration
	commitTimeout time.Duration
	logger        *slog.Logger
}

// WithTick sets the length of a tick (the unit of Config's timeouts).
// Default: 100ms.
func WithTick(d time.Duration) Option { return func(o *driverOptions) { o.tick = d } }

// DefaultTick is the driver's tick unless WithTick sets another: the unit
// of Config's timeouts.
const DefaultTick = 100 * time.Millisecond

// WithCommitTimeout bounds each commit attempt; the committer's context is
// cancelled after it, and the attempt counts as failed. Default: 5 minutes.
func WithCommitTimeout(d time.Duration) Option {
	return func(o *driverOptions) { o.commitTimeout = d }
}

// WithLogger sets where the driver logs: the machine's decisions (unless
// Config.Logf is set) at debug level, refused requests and failed saves at
// warn and error level. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *driverOptions) { o.logger = l } }

// Coordinator runs a Machine on its own goroutine: it persists through a
// StateStore on its loop, runs commits off the loop through an
// EpochCommitter, ticks, and delivers messages to in-process sessions (the
// gRPC transport is built on those). Its methods are safe for concurrent use.
type Coordinator struct {
	opts      driverOptions
	committer EpochCommitter
	store     StateStore
	reqs      chan request
	cancel    context.CancelFunc
	done      chan struct{}
	err       error // why the loop ended; read after done is closed
	nextID    atomic.Uint64
	vnodes    int
}

type request struct {
	ev     Event
	sess   *LocalSession // with a Register: the session to deliver to
	status chan Status
	reply  chan error // when set: the machine's answer to ev
}

// Start recovers the coordinator's state from store (committing any
// recorded, unconfirmed epoch first, through committer) and starts its loop.
// The loop runs until Close, ctx's cancellation, or a failure (ErrFailed).
func Start(ctx context.Context, cfg Config, committer EpochCommitter, store StateStore, opts ...Option) (*Coordinator, error) {
	o := driverOptions{tick: DefaultTick, commitTimeout: 5 * time.Minute, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Logf == nil {
		logger := o.logger
		cfg.Logf = func(format string, args ...any) { logger.Debug(fmt.Sprintf(format, args...)) }
	}
	m, err := NewMachine(cfg)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{
		opts:      o,
		committer: committer,
		store:     store,
		reqs:      make(chan request, 64),
		done:      make(chan struct{}),
		vnodes:    m.cfg.Vnodes,
	}
	id, state, err := store.Latest(ctx)
	switch {
	case errors.Is(err, ErrNoState):
	case err != nil:
		return nil, fmt.Errorf("coordinator: loading state: %w", err)
	default:
		if err := m.Step(Recovered{ID: id, State: state}); err != nil {
			return nil, err
		}
		// Writer ids of the previous run stay unused, to keep logs clear.
		if s, err := DecodeState(state); err == nil {
			for _, w := range s.Writers {
				c.nextID.Store(max(c.nextID.Load(), uint64(w.Writer)))
			}
			for _, e := range s.Epochs {
				for _, p := range e.Parts {
					c.nextID.Store(max(c.nextID.Load(), uint64(p.Writer)))
				}
			}
		}
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	stop := context.AfterFunc(ctx, cancel)
	go func() {
		defer stop()
		c.run(loopCtx, m)
	}()
	return c, nil
}

// Vnodes returns the vnode count the coordinator aligns.
func (c *Coordinator) Vnodes() int { return c.vnodes }

// Connect registers an in-process writer owning vnodes and waits until it is
// accepted (after recovery and the commit of its resume epoch) or refused.
func (c *Coordinator) Connect(ctx context.Context, vnodes *roaring.Bitmap, opts ...ConnectOption) (Session, error) {
	s := &LocalSession{c: c, id: WriterID(c.nextID.Add(1)), box: mailbox.New(retiredError)}
	reg := ApplyConnectOptions(s.id, vnodes, opts...)
	if vnodes != nil {
		reg.Vnodes = vnodes.Clone()
	}
	if err := c.submit(ctx, request{ev: reg, sess: s}); err != nil {
		return nil, err
	}
	if _, err := s.box.WaitRegistered(ctx); err != nil {
		_ = s.CloseWithError(err)
		return nil, err
	}
	return s, nil
}

// Status returns a view of the machine.
func (c *Coordinator) Status(ctx context.Context) (Status, error) {
	ch := make(chan Status, 1)
	if err := c.submit(ctx, request{status: ch}); err != nil {
		return Status{}, err
	}
	select {
	case s := <-ch:
		return s, nil
	case <-c.done:
		return Status{}, c.err
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
}

// Vacate tells the coordinator that no writer holds vnodes any more (see
// Config.Vacant): epochs align without them until a writer registers
// them again. It fails while a live writer still holds one of them.
func (c *Coordinator) Vacate(ctx context.Context, vnodes *roaring.Bitmap) error {
	ch := make(chan error, 1)
	if err := c.submit(ctx, request{ev: Vacate{Vnodes: vnodes.Clone()}, reply: ch}); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the loop has ended; Err then says why.
func (c *Coordinator) Done() <-chan struct{} { return c.done }

// Err returns why the loop ended (matching ErrFailed after a failure,
// ErrClosed after Close), or nil while it runs.
func (c *Coordinator) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close stops the loop, cancels a running commit and waits for both. Pending
// session waits fail with ErrClosed. It returns the failure that stopped the
// loop earlier, if any.
func (c *Coordinator) Close() error {
	c.cancel()
	<-c.done
	if errors.Is(c.err, ErrFailed) {
		return c.err
	}
	return nil
}

func (c *Coordinator) submit(ctx context.Context, r request) error {
	select {
	case <-c.done:
		return c.err
	default:
	}
	select {
	case c.reqs <- r:
		return nil
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Coordinator) run(ctx context.Context, m *Machine) {
	sessions := make(map[WriterID]*LocalSession)
	commitDone := make(chan CommitDone, 1)
	var commits sync.WaitGroup
	uncovered := 0 // ticks since live writers stopped covering every vnode
	ticker := time.NewTicker(c.opts.tick)
	defer ticker.Stop()
	exit := func(err error) {
		c.cancel()
		commits.Wait()
		c.err = err
		close(c.done)
		for _, s := range sessions {
			s.box.Gone(err)
		}
	}
	for {
		for m.HasReady() && ctx.Err() == nil {
			c.handleReady(ctx, m, sessions, commitDone, &commits)
		}
		if m.failed != nil {
			exit(m.failed)
			return
		}
		var err error
		select {
		case r := <-c.reqs:
			switch {
			case r.status != nil:
				r.status <- m.Status()
				continue
			case r.sess != nil:
				sessions[r.sess.id] = r.sess
			}
			err = m.Step(r.ev)
			if r.reply != nil {
				r.reply <- err
				err = nil // the caller has it
			}
			if d, ok := r.ev.(Disconnect); ok {
				delete(sessions, d.Writer)
			}
			if reg, ok := r.ev.(Register); ok && err == nil {
				// Say at once which vnodes still wait for a writer: a gap
				// in the writers' ranges shows here, not as a timeout.
				if st := m.Status(); !st.Missing.IsEmpty() {
					c.opts.logger.Info("coordinator: writer joined; vnodes without a writer yet", "writer", reg.Writer,
						"vnodes", FormatVnodes(reg.Vnodes), "missing", FormatVnodes(st.Missing))
				}
			}
		case <-ticker.C:
			err = m.Step(Tick{})
			uncovered = c.warnUncovered(m, uncovered)
		case d := <-commitDone:
			err = m.Step(d)
		case <-ctx.Done():
			exit(fmt.Errorf("%w: coordinator stopped", ErrClosed))
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				c.opts.logger.Warn("coordinator: request refused", "err", err)
			}
		}
	}
}

// uncoveredGrace is how long (in ticks) live writers may leave vnodes
// uncovered before the coordinator says which, and how often it says it
// again: writers joining one by one are not warned about.
const uncoveredGrace = 50

// warnUncovered logs, after uncoveredGrace ticks and then every
// uncoveredGrace ticks, which vnodes no live writer holds while some
// writers are live: their epochs cannot align until a writer takes them.
func (c *Coordinator) warnUncovered(m *Machine, ticks int) int {
	st := m.Status()
	if len(st.Writers) == 0 || st.Missing.IsEmpty() {
		return 0
	}
	ticks++
	if ticks%uncoveredGrace == 0 {
		c.opts.logger.Warn("coordinator: no writer holds some vnodes; epochs wait until one joins with them",
			"missing", FormatVnodes(st.Missing), "epochs", st.Undecided)
	}
	return ticks
}

func (c *Coordinator) handleReady(ctx context.Context, m *Machine, sessions map[WriterID]*LocalSession, commitDone chan CommitDone, commits *sync.WaitGroup) {
	rd := m.Ready()
	var saveErr error
	if p := rd.Persist; p != nil {
		saveErr = c.store.Save(ctx, p.ID, p.State)
		if saveErr != nil && ctx.Err() == nil { // not when stopping: the caller says why
			c.opts.logger.Error("coordinator: saving state failed", "id", p.ID, "err", saveErr)
		}
	}
	if req := rd.Commit; req != nil && saveErr == nil {
		commits.Add(1)
		go func() {
			defer commits.Done()
			cctx, cancel := context.WithTimeout(ctx, c.opts.commitTimeout)
			err := c.committer.CommitEpoch(cctx, req.Epoch, req.Payloads)
			cancel()
			if err != nil {
				err = fmt.Errorf("committing epoch %d (attempt %d): %w", req.Epoch, req.Attempt, err)
				if ctx.Err() == nil { // not when stopping: the caller says why
					c.opts.logger.Warn("coordinator: commit failed", "epoch", req.Epoch, "attempt", req.Attempt, "err", err)
				}
			}
			commitDone <- CommitDone{Epoch: req.Epoch, Err: err} // one commit at a time: never blocks
		}()
	}
	for _, msg := range rd.Messages {
		if s := sessions[msg.To]; s != nil {
			s.deliver(msg)
		}
	}
	m.Advance()
	if saveErr != nil {
		if err := m.Step(PersistFailed{ID: rd.Persist.ID, Err: saveErr}); err != nil {
			if ctx.Err() == nil {
				c.opts.logger.Warn("coordinator: request refused", "err", err)
			}
		}
	}
}
