package coordgrpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/grpc"

	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/coordpb"
	"github.com/icesink/icesink/coordinator/internal/mailbox"
)

// closeWait bounds how long Close waits for the coordinator to acknowledge
// the end of the stream before cutting it.
const closeWait = 5 * time.Second

// Dial joins the coordinator at addr over plaintext gRPC (see DialSecure).
func Dial(ctx context.Context, addr string, vnodes *roaring.Bitmap, opts ...coordinator.ConnectOption) (coordinator.Session, error) {
	return DialSecure(ctx, addr, Security{}, vnodes, opts...)
}

// DialSecure connects a writer owning vnodes to the coordinator at addr
// with sec's TLS and token (the zero Security: plaintext, for loopback or
// a trusted network only), and waits until it is accepted. Connections
// send keepalives. Closing the session closes the connection.
func DialSecure(ctx context.Context, addr string, sec Security, vnodes *roaring.Bitmap, opts ...coordinator.ConnectOption) (coordinator.Session, error) {
	dopts := append(sec.dialOptions(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)))
	cc, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("coordinator: dialing %s: %w", addr, err)
	}
	s, err := open(ctx, cc, vnodes, opts)
	if err != nil {
		_ = cc.Close()
		return nil, err
	}
	s.owned = cc
	return s, nil
}

// Connect opens a session over cc and waits until it is accepted. Closing
// the session leaves cc open.
func Connect(ctx context.Context, cc grpc.ClientConnInterface, vnodes *roaring.Bitmap, opts ...coordinator.ConnectOption) (coordinator.Session, error) {
	s, err := open(ctx, cc, vnodes, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

type session struct {
	stream    coordpb.Coordinator_SessionClient
	cancel    context.CancelFunc
	owned     *grpc.ClientConn
	box       *mailbox.Box
	sendMu    sync.Mutex
	closeOnce sync.Once
	recvDone  chan struct{}
}

func open(ctx context.Context, cc grpc.ClientConnInterface, vnodes *roaring.Bitmap, opts []coordinator.ConnectOption) (*session, error) {
	if vnodes == nil {
		vnodes = roaring.New()
	}
	reg := coordinator.ApplyConnectOptions(0, vnodes, opts...)
	raw, err := vnodes.ToBytes()
	if err != nil {
		return nil, fmt.Errorf("coordinator: encoding vnodes: %w", err)
	}
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := coordpb.NewCoordinatorClient(cc).Session(streamCtx,
		grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("coordinator: opening session: %w", err)
	}
	s := &session{
		stream:   stream,
		cancel:   cancel,
		box:      mailbox.New(retiredError),
		recvDone: make(chan struct{}),
	}
	go s.recv()
	err = s.send(&coordpb.WriterMessage{Msg: &coordpb.WriterMessage_Register{Register: &coordpb.Register{
		Vnodes: raw, Rescale: reg.Rescale, VnodeCount: uint32(reg.VnodeCount), Job: reg.Job}}})
	// A stream the server ended at once (a refused token) fails the send
	// with a bare EOF; the reason comes with the receive side.
	_, werr := s.box.WaitRegistered(ctx)
	if werr != nil || err != nil {
		err = cmp.Or(werr, err)
	}
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func retiredError(epoch, at uint64) error {
	return fmt.Errorf("%w: epoch %d reported after the session retired at epoch %d", coordinator.ErrRetired, epoch, at)
}

func (s *session) send(m *coordpb.WriterMessage) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.stream.Send(m); err != nil {
		return fmt.Errorf("%w: sending to the coordinator: %v", coordinator.ErrClosed, err)
	}
	return nil
}

func (s *session) recv() {
	defer close(s.recvDone)
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			s.box.Gone(fmt.Errorf("%w: coordinator stream ended: %v", coordinator.ErrClosed, err))
			return
		}
		switch m := msg.GetMsg().(type) {
		case *coordpb.CoordinatorMessage_Registered:
			s.box.Registered(m.Registered.GetResume(), nil)
		case *coordpb.CoordinatorMessage_Decision:
			err := decodeError(m.Decision.GetError())
			s.endIfAborted(err)
			s.box.Decide(m.Decision.GetEpoch(), mailbox.Decision{Commit: m.Decision.GetCommit(), Err: err})
		case *coordpb.CoordinatorMessage_Result:
			s.box.Result(m.Result.GetEpoch(), decodeError(m.Result.GetError()))
		case *coordpb.CoordinatorMessage_Abort:
			err := decodeError(m.Abort.GetError())
			s.box.Registered(0, err)
			s.endIfAborted(err)
		case *coordpb.CoordinatorMessage_Barrier:
			s.box.Barrier(m.Barrier.GetEpoch())
		case *coordpb.CoordinatorMessage_Error:
			err := decodeError(m.Error)
			s.box.Registered(0, err)
			s.box.End(err, math.MaxUint64)
		}
	}
}

func (s *session) endIfAborted(err error) {
	if ae, ok := errors.AsType[*coordinator.AbortError](err); ok {
		s.box.End(ae, ae.Resume)
	}
}

// Resume implements coordinator.Session.
func (s *session) Resume() uint64 { return s.box.Resume() }

// Barriers delivers the coordinator's requests to end an epoch (see
// coordinator.LocalSession.Barriers).
func (s *session) Barriers() <-chan uint64 { return s.box.Barriers() }

// Checkpoint implements coordinator.Session.
func (s *session) Checkpoint(ctx context.Context, epoch uint64, bufferedBytes int64, final bool) (bool, error) {
	ch, err := s.box.ExpectDecision(epoch)
	if err != nil {
		return false, err
	}
	if err := s.send(&coordpb.WriterMessage{Msg: &coordpb.WriterMessage_Report{Report: &coordpb.Report{
		Epoch: epoch, BufferedBytes: bufferedBytes, Final: final}}}); err != nil {
		return false, err
	}
	return s.box.WaitDecision(ctx, epoch, ch)
}

// Commit implements coordinator.Session.
func (s *session) Commit(ctx context.Context, epoch uint64, payload []byte) error {
	if len(payload) > MaxPayloadSize {
		return fmt.Errorf("coordinator: epoch %d: the window's payload is %d bytes, over the coordinator's limit of %d (a file record is about 1 KB): commit more often (--commit-bytes, --commit-interval)", epoch, len(payload), MaxPayloadSize)
	}
	ch, err := s.box.ExpectResult(epoch)
	if err != nil {
		return err
	}
	if err := s.send(&coordpb.WriterMessage{Msg: &coordpb.WriterMessage_Payload{Payload: &coordpb.Payload{
		Epoch: epoch, Data: payload}}}); err != nil {
		return err
	}
	return s.box.WaitResult(ctx, epoch, ch)
}

// Close implements coordinator.Session: it ends the stream cleanly, waits
// briefly for the coordinator to acknowledge, then cuts it.
func (s *session) Close() error {
	s.closeOnce.Do(func() {
		s.box.Gone(fmt.Errorf("%w: session closed", coordinator.ErrClosed))
		s.sendMu.Lock()
		_ = s.stream.CloseSend()
		s.sendMu.Unlock()
		select {
		case <-s.recvDone:
		case <-time.After(closeWait):
		}
		s.cancel()
		<-s.recvDone
		if s.owned != nil {
			_ = s.owned.Close()
		}
	})
	return nil
}
