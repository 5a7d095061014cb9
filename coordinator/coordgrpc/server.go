package coordgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/coordpb"
)

// MaxMessageSize is the largest message either side accepts: a payload
// lists a window's files and their statistics (about 1 KB a file), so 64
// MiB holds some 60,000 files of one writer's window. A peer that is not
// trusted cannot make the coordinator buffer more per message.
const MaxMessageSize = 64 << 20

// MaxPayloadSize is the largest window payload a writer sends: the
// message limit less room for the message's own fields.
const MaxPayloadSize = MaxMessageSize - 4<<10

// MaxStreams bounds the sessions one connection may hold open at once (a
// process opens one per writer).
const MaxStreams = 1024

type server struct {
	coordpb.UnimplementedCoordinatorServer
	c      *coordinator.Coordinator
	lookup Lookup // when c is nil
}

// Lookup finds the coordinator a writer's session joins from what the
// writer registered: its job (coordinator.JobTable names its table) and
// the vnode count it routes with. A server of many tables' coordinators
// starts a table's at its first writer. An error refuses the writer.
type Lookup func(ctx context.Context, job map[string]string, vnodeCount int) (Connector, error)

// Connector is what a Lookup gives: a *coordinator.Coordinator, or a
// table's view of one shared by many tables (sink.Database). The sessions
// it returns must be served in process: *coordinator.LocalSession, or a
// type that embeds one.
type Connector interface {
	Connect(ctx context.Context, vnodes *roaring.Bitmap, opts ...coordinator.ConnectOption) (coordinator.Session, error)
}

// localSession is what the server needs of an in-process session.
type localSession interface {
	coordinator.Session
	Writer() coordinator.WriterID
	Ended() <-chan struct{}
	Gone() <-chan struct{}
	Err() error
	Barriers() <-chan uint64
	CloseWithError(err error) error
}

// RegisterLookup adds the coordinator service to s for many coordinators:
// each session joins the one lookup gives for it.
func RegisterLookup(s *grpc.Server, lookup Lookup) {
	coordpb.RegisterCoordinatorServer(s, &server{lookup: lookup})
}

// ServeLookup serves the coordinators lookup finds on lis until ctx is
// cancelled, then stops the server, breaking open streams. A coordinator
// that stops or fails ends only its own sessions.
func ServeLookup(ctx context.Context, lis net.Listener, lookup Lookup, opts ...grpc.ServerOption) error {
	s := newServer(opts)
	RegisterLookup(s, lookup)
	return serveUntil(ctx, s, lis, nil)
}

// serveUntil serves s on lis until ctx is cancelled or done is closed,
// then stops it; it returns a failure of the server itself.
func serveUntil(ctx context.Context, s *grpc.Server, lis net.Listener, done <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case <-done:
	}
	s.Stop()
	<-errc
	return nil
}

func newServer(opts []grpc.ServerOption) *grpc.Server {
	base := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize), grpc.MaxConcurrentStreams(MaxStreams)}, Security{}.ServerOptions()...)
	return grpc.NewServer(append(base, opts...)...)
}

// Register adds the coordinator service for c to s. Use it to serve with
// your own grpc.Server (TLS, interceptors); give that server
// grpc.MaxRecvMsgSize(MaxMessageSize) so that large payloads get through,
// and grpc.MaxConcurrentStreams(MaxStreams).
func Register(s *grpc.Server, c *coordinator.Coordinator) {
	coordpb.RegisterCoordinatorServer(s, &server{c: c})
}

// Serve serves c on lis until ctx is cancelled or c stops, then stops the
// server, breaking open streams. It returns nil after such a stop, unless
// c stopped because it failed (coordinator.ErrFailed): then that failure.
func Serve(ctx context.Context, lis net.Listener, c *coordinator.Coordinator, opts ...grpc.ServerOption) error {
	s := newServer(opts)
	Register(s, c)
	if err := serveUntil(ctx, s, lis, c.Done()); err != nil {
		return err
	}
	if err := c.Err(); errors.Is(err, coordinator.ErrFailed) {
		return err
	}
	return nil
}

// Session serves one writer's stream on top of an in-process session.
func (s *server) Session(stream coordpb.Coordinator_SessionServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	reg := first.GetRegister()
	if reg == nil {
		return status.Error(codes.InvalidArgument, "coordinator: the first message of a session must be a Register")
	}
	vnodes := roaring.New()
	if err := vnodes.UnmarshalBinary(reg.GetVnodes()); err != nil {
		return status.Errorf(codes.InvalidArgument, "coordinator: bad vnode bitmap: %v", err)
	}
	var opts []coordinator.ConnectOption
	if reg.GetRescale() {
		opts = append(opts, coordinator.WithRescale())
	}
	if n := reg.GetVnodeCount(); n != 0 {
		opts = append(opts, coordinator.WithVnodeCount(int(n)))
	}
	if job := reg.GetJob(); len(job) > 0 {
		opts = append(opts, coordinator.WithJob(job))
	}
	var c Connector = s.c
	if s.c == nil {
		if c, err = s.lookup(ctx, reg.GetJob(), int(reg.GetVnodeCount())); err != nil {
			return stream.Send(&coordpb.CoordinatorMessage{Msg: &coordpb.CoordinatorMessage_Error{Error: encodeError(err)}})
		}
	}
	sess, err := c.Connect(ctx, vnodes, opts...)
	if err != nil {
		return stream.Send(&coordpb.CoordinatorMessage{Msg: &coordpb.CoordinatorMessage_Error{Error: encodeError(err)}})
	}
	ls, ok := sess.(localSession)
	if !ok {
		_ = sess.Close()
		return status.Errorf(codes.Internal, "coordinator: a %T session cannot be served", sess)
	}

	var sendMu sync.Mutex
	send := func(m *coordpb.CoordinatorMessage) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = stream.Send(m) // a broken stream shows up in Recv
	}
	send(&coordpb.CoordinatorMessage{Msg: &coordpb.CoordinatorMessage_Registered{
		Registered: &coordpb.Registered{Resume: sess.Resume(), WriterId: uint64(ls.Writer())}}})

	var wg sync.WaitGroup
	handlerDone := make(chan struct{})
	// Push an abort as soon as it happens, not at the writer's next request.
	wg.Go(func() {
		select {
		case <-ls.Ended():
			if err := ls.Err(); errors.Is(err, coordinator.ErrAborted) {
				send(&coordpb.CoordinatorMessage{Msg: &coordpb.CoordinatorMessage_Abort{Abort: &coordpb.Abort{Error: encodeError(err)}}})
			}
		case <-handlerDone:
		}
	})
	// Pass the coordinator's barriers on as they come.
	wg.Go(func() {
		for {
			select {
			case e := <-ls.Barriers():
				if e == math.MaxUint64 {
					continue // the session ended: the stream says so itself
				}
				send(&coordpb.CoordinatorMessage{Msg: &coordpb.CoordinatorMessage_Barrier{Barrier: &coordpb.Barrier{Epoch: e}}})
			case <-ls.Gone():
				return
			case <-handlerDone:
				return
			}
		}
	})
	var recvErr error
	for {
		msg, err := stream.Recv()
		if err != nil {
			recvErr = err
			break
		}
		switch m := msg.GetMsg().(type) {
		case *coordpb.WriterMessage_Report:
			r := m.Report
			wg.Go(func() {
				commit, err := sess.Checkpoint(ctx, r.GetEpoch(), r.GetBufferedBytes(), r.GetFinal())
				send(&coordpb.CoordinatorMessage{Msg: &coordpb.CoordinatorMessage_Decision{
					Decision: &coordpb.Decision{Epoch: r.GetEpoch(), Commit: commit, Error: encodeError(err)}}})
			})
		case *coordpb.WriterMessage_Payload:
			p := m.Payload
			wg.Go(func() {
				err := sess.Commit(ctx, p.GetEpoch(), p.GetData())
				send(&coordpb.CoordinatorMessage{Msg: &coordpb.CoordinatorMessage_Result{
					Result: &coordpb.Result{Epoch: p.GetEpoch(), Error: encodeError(err)}}})
			})
		default:
			recvErr = fmt.Errorf("%w: unexpected message %T", coordinator.ErrProtocol, m)
		}
		if recvErr != nil {
			break
		}
	}
	// The writer is gone: a clean end of stream is a Close, anything else a
	// failure. Either way pending waits end, and so do their goroutines.
	if errors.Is(recvErr, io.EOF) {
		_ = ls.Close()
	} else {
		_ = ls.CloseWithError(fmt.Errorf("stream: %w", recvErr))
	}
	close(handlerDone)
	wg.Wait()
	return nil
}
