package coordgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/coordpb"
	"github.com/icesink/icesink/coordinator/internal/jobtest"
)

// serve starts a coordinator behind a gRPC server on a loopback port.
func serve(t *testing.T, cfg coordinator.Config, table coordinator.EpochCommitter) (*coordinator.Coordinator, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	cfg.Logf = t.Logf
	c, err := coordinator.Start(ctx, cfg, table, &coordinator.MemStore{},
		coordinator.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, lis, c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		_ = c.Close()
	})
	return c, lis.Addr().String()
}

func grpcWriters(t *testing.T, addr string, vnodes, n int, last uint64) []*jobtest.Writer {
	t.Helper()
	parts, err := coordinator.SplitVnodes(vnodes, n)
	if err != nil {
		t.Fatal(err)
	}
	ws := make([]*jobtest.Writer, n)
	for i, p := range parts {
		ws[i] = &jobtest.Writer{
			Vnodes: p,
			Last:   last,
			Connect: func(ctx context.Context, vn *roaring.Bitmap) (coordinator.Session, error) {
				return Dial(ctx, addr, vn, coordinator.WithVnodeCount(vnodes))
			},
		}
	}
	return ws
}

func TestGRPCJob(t *testing.T) {
	table := &jobtest.Table{Delay: time.Millisecond}
	c, addr := serve(t, coordinator.Config{CommitInterval: 4}, table)
	ws := grpcWriters(t, addr, c.Vnodes(), 3, 24)
	ws[0].Pipeline = true
	ws[2].Bytes = func(e uint64) int64 { return int64(e) * 10 }
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	if err := jobtest.RunAll(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if err := table.Check(c.Vnodes(), 24); err != nil {
		t.Fatal(err)
	}
	if got := table.Epochs(); len(got) != 6 || got[5] != 24 {
		t.Fatalf("committed %v, want every 4th epoch up to 24", got)
	}
}

// TestGRPCWriterKilledMidEpoch cuts one writer's connection (as a killed
// process would) in the middle of a window: every other writer is told to
// abort over its stream, all restart after the last commit, and the table
// ends up with each commit epoch exactly once.
func TestGRPCWriterKilledMidEpoch(t *testing.T) {
	table := &jobtest.Table{}
	c, addr := serve(t, coordinator.Config{CommitInterval: 5}, table)
	ws := grpcWriters(t, addr, c.Vnodes(), 3, 15)
	var mu sync.Mutex
	conns := map[coordinator.Session]*grpc.ClientConn{}
	ws[1].Connect = func(ctx context.Context, vn *roaring.Bitmap) (coordinator.Session, error) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		s, err := Connect(ctx, cc, vn)
		if err != nil {
			_ = cc.Close()
			return nil, err
		}
		mu.Lock()
		conns[s] = cc
		mu.Unlock()
		return s, nil
	}
	ws[1].KillAt = 7
	ws[1].Kill = func(s coordinator.Session) {
		mu.Lock()
		defer mu.Unlock()
		_ = conns[s].Close() // no goodbye: the stream just breaks
	}
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	if err := jobtest.RunAll(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if err := table.Check(c.Vnodes(), 15); err != nil {
		t.Fatal(err)
	}
	if got := table.Epochs(); len(got) != 3 || got[0] != 5 || got[1] != 10 || got[2] != 15 {
		t.Fatalf("committed %v, want [5 10 15]", got)
	}
	if ws[0].Aborts == 0 || ws[2].Aborts == 0 {
		t.Fatalf("aborts seen: %d, %d; want both writers told", ws[0].Aborts, ws[2].Aborts)
	}
}

func TestGRPCOverlapRefused(t *testing.T) {
	c, addr := serve(t, coordinator.Config{Vnodes: 8}, &jobtest.Table{})
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	a, err := Dial(ctx, addr, roaring.BitmapOf(0, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = Dial(ctx, addr, roaring.BitmapOf(3, 4))
	if !errors.Is(err, coordinator.ErrOverlap) {
		t.Fatalf("got %v, want ErrOverlap", err)
	}
	_, err = Dial(ctx, addr, roaring.BitmapOf(4), coordinator.WithVnodeCount(256))
	if !errors.Is(err, coordinator.ErrProtocol) {
		t.Fatalf("got %v, want ErrProtocol for a vnode count mismatch", err)
	}
	_ = c
}

func TestErrorCodesRoundTrip(t *testing.T) {
	reason := &coordinator.TimeoutError{Epoch: 3, Wait: "alignment", Ticks: 5, Missing: roaring.BitmapOf(1)}
	abort := &coordinator.AbortError{Resume: 2, Reason: reason}
	got := decodeError(encodeError(abort))
	ae, ok := errors.AsType[*coordinator.AbortError](got)
	if !ok || ae.Resume != 2 || !errors.Is(got, coordinator.ErrTimeout) || got.Error() != abort.Error() {
		t.Fatalf("abort decoded as %v", got)
	}
	for _, tc := range []struct{ err, is error }{
		{coordinator.ErrRetired, coordinator.ErrRetired},
		{&coordinator.OverlapError{Vnodes: roaring.BitmapOf(1), Overlap: roaring.BitmapOf(1)}, coordinator.ErrOverlap},
		{coordinator.ErrProtocol, coordinator.ErrProtocol},
		{coordinator.ErrFailed, coordinator.ErrFailed},
		{&coordinator.CommitError{Epoch: 1, Attempts: 2, Err: errors.New("x")}, coordinator.ErrCommitFailed},
		{context.DeadlineExceeded, context.DeadlineExceeded},
	} {
		got := decodeError(encodeError(tc.err))
		if got.Error() != tc.err.Error() || !errors.Is(got, tc.is) {
			t.Errorf("%v decoded as %v, which does not match %v", tc.err, got, tc.is)
		}
	}
	if decodeError(encodeError(nil)) != nil {
		t.Error("nil error did not stay nil")
	}
}

// TestGRPCJobMismatchRefused: a writer of another table (a wrong port) or
// with other checkpoint settings than the writers before it is refused at
// join, with the differing keys named on both sides; before, any writer
// that connected had its files committed into the coordinator's table.
func TestGRPCJobMismatchRefused(t *testing.T) {
	c, addr := serve(t, coordinator.Config{Vnodes: 8, Job: map[string]string{"table-uuid": "u1", "sink-id": "s"}}, &jobtest.Table{})
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	_, err := Dial(ctx, addr, roaring.BitmapOf(0, 1), coordinator.WithJob(map[string]string{"table-uuid": "u2", "sink-id": "s"}))
	if !errors.Is(err, coordinator.ErrJobMismatch) || !strings.Contains(err.Error(), `table-uuid "u2", the coordinator's "u1"`) {
		t.Fatalf("writer of another table: got %v, want ErrJobMismatch naming table-uuid", err)
	}
	a, err := Dial(ctx, addr, roaring.BitmapOf(0, 1), coordinator.WithJob(map[string]string{"table-uuid": "u1", "checkpoint-rows": "50"}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = Dial(ctx, addr, roaring.BitmapOf(2, 3), coordinator.WithJob(map[string]string{"table-uuid": "u1", "checkpoint-rows": "100"}))
	if !errors.Is(err, coordinator.ErrJobMismatch) || !strings.Contains(err.Error(), "checkpoint-rows") {
		t.Fatalf("writer with other checkpoints: got %v, want ErrJobMismatch naming checkpoint-rows", err)
	}
	b, err := Dial(ctx, addr, roaring.BitmapOf(2, 3), coordinator.WithJob(map[string]string{"table-uuid": "u1", "checkpoint-rows": "50"}))
	if err != nil {
		t.Fatalf("matching writer refused: %v", err)
	}
	b.Close()
	_ = c
}

// failingTable fails every commit.
type failingTable struct{}

func (failingTable) CommitEpoch(context.Context, uint64, [][]byte) error {
	return errors.New("cannot promote double to string")
}

// TestServeReportsFailure: a coordinator whose commits keep failing stops,
// and Serve returns the failure (the command exits non-zero with it)
// instead of nil.
func TestServeReportsFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	c, err := coordinator.Start(ctx, coordinator.Config{Vnodes: 2, CommitAttempts: 2, CommitBackoff: 1}, failingTable{}, &coordinator.MemStore{},
		coordinator.WithLogger(slog.New(slog.DiscardHandler)), coordinator.WithTick(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, lis, c) }()
	sess, err := Dial(ctx, lis.Addr().String(), roaring.BitmapOf(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if commit, err := sess.Checkpoint(ctx, 1, 0, true); err != nil || !commit {
		t.Fatalf("checkpoint: %v, %v", commit, err)
	}
	_ = sess.Commit(ctx, 1, []byte("payload"))
	if err := <-done; !errors.Is(err, coordinator.ErrFailed) || !strings.Contains(err.Error(), "cannot promote") {
		t.Fatalf("Serve returned %v, want the coordinator's failure", err)
	}
}

// TestGRPCBarriers: the coordinator's barriers (Config.BarrierInterval)
// reach writers over the wire; two writers that end their epochs only on
// a barrier commit epoch after epoch, every one with both writers.
func TestGRPCBarriers(t *testing.T) {
	table := &jobtest.Table{}
	c, addr := serve(t, coordinator.Config{Vnodes: 2, BarrierInterval: 1}, table)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for v := range uint32(2) {
		go func() {
			errs <- func() error {
				sess, err := Dial(ctx, addr, roaring.BitmapOf(v))
				if err != nil {
					return err
				}
				defer sess.Close()
				bs, ok := sess.(interface{ Barriers() <-chan uint64 })
				if !ok {
					return errors.New("the gRPC session passes on no barriers")
				}
				for epoch := sess.Resume() + 1; epoch <= 3; epoch++ {
					var asked uint64
					for asked < epoch {
						select {
						case asked = <-bs.Barriers():
						case <-ctx.Done():
							return fmt.Errorf("no barrier for epoch %d: %w", epoch, ctx.Err())
						}
					}
					if asked != epoch {
						return fmt.Errorf("barrier for epoch %d while writing epoch %d", asked, epoch)
					}
					commit, err := sess.Checkpoint(ctx, epoch, 0, epoch == 3)
					if err != nil {
						return err
					}
					if commit {
						if err := sess.Commit(ctx, epoch, fmt.Appendf(nil, "%d|%d", v, epoch)); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := table.Check(c.Vnodes(), 3); err != nil {
		t.Fatal(err)
	}
}

// TestGRPCMessageLimits: a peer cannot make the coordinator take a message
// over MaxMessageSize (the stream ends with ResourceExhausted; before, the
// limit was 256 MiB per message), and a writer refuses to send a payload
// over MaxPayloadSize with an error that says what to do.
func TestGRPCMessageLimits(t *testing.T) {
	_, addr := serve(t, coordinator.Config{CommitInterval: 1}, &jobtest.Table{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := coordpb.NewCoordinatorClient(cc).Session(ctx, grpc.MaxCallSendMsgSize(2*MaxMessageSize))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, MaxMessageSize+1)
	if err := stream.Send(&coordpb.WriterMessage{Msg: &coordpb.WriterMessage_Payload{Payload: &coordpb.Payload{Epoch: 1, Data: big}}}); err != nil && status.Code(err) != codes.ResourceExhausted && !errors.Is(err, io.EOF) {
		t.Fatalf("send: %v", err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the coordinator took a message of %d bytes: %v, want ResourceExhausted", len(big), err)
	}

	vn := roaring.New()
	vn.AddRange(0, 256)
	s, err := Dial(ctx, addr, vn, coordinator.WithVnodeCount(256))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Commit(ctx, 1, make([]byte, MaxPayloadSize+1))
	if err == nil || !strings.Contains(err.Error(), "commit more often") {
		t.Fatalf("a payload over the limit: %v, want a refusal saying to commit more often", err)
	}
}

// TestGRPCLookup: one server of two tables' coordinators, each started by
// the lookup at its first writer with that writer's vnode count; writers
// of each table commit into their own table only, and a writer naming a
// table the lookup refuses is refused with that error.
func TestGRPCLookup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	tables := map[string]*jobtest.Table{"ns.a": {Delay: time.Millisecond}, "ns.b": {}}
	var mu sync.Mutex
	started := map[string]*coordinator.Coordinator{}
	lookup := func(_ context.Context, job map[string]string, vnodeCount int) (Connector, error) {
		mu.Lock()
		defer mu.Unlock()
		name := job[coordinator.JobTable]
		if c, ok := started[name]; ok {
			return c, nil
		}
		tbl, ok := tables[name]
		if !ok {
			return nil, fmt.Errorf("%w: no table %q here", coordinator.ErrJobMismatch, name)
		}
		c, err := coordinator.Start(ctx, coordinator.Config{Vnodes: vnodeCount, CommitInterval: 2, Job: map[string]string{coordinator.JobTable: name}},
			tbl, &coordinator.MemStore{}, coordinator.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = c.Close() })
		started[name] = c
		return c, nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ServeLookup(ctx, lis, lookup) }()
	addr := lis.Addr().String()
	writers := func(name string, vnodes, n int) []*jobtest.Writer {
		parts, err := coordinator.SplitVnodes(vnodes, n)
		if err != nil {
			t.Fatal(err)
		}
		ws := make([]*jobtest.Writer, n)
		for i, p := range parts {
			ws[i] = &jobtest.Writer{Vnodes: p, Last: 12, Connect: func(ctx context.Context, vn *roaring.Bitmap) (coordinator.Session, error) {
				return Dial(ctx, addr, vn, coordinator.WithVnodeCount(vnodes), coordinator.WithJob(map[string]string{coordinator.JobTable: name}))
			}}
		}
		return ws
	}
	if err := jobtest.RunAll(ctx, append(writers("ns.a", 3, 2), writers("ns.b", 8, 3)...)); err != nil {
		t.Fatal(err)
	}
	if err := tables["ns.a"].Check(3, 12); err != nil {
		t.Fatalf("table a: %v", err)
	}
	if err := tables["ns.b"].Check(8, 12); err != nil {
		t.Fatalf("table b: %v", err)
	}
	_, err = Dial(ctx, addr, roaring.BitmapOf(0), coordinator.WithVnodeCount(3), coordinator.WithJob(map[string]string{coordinator.JobTable: "ns.c"}))
	if !errors.Is(err, coordinator.ErrJobMismatch) || !strings.Contains(err.Error(), `no table "ns.c"`) {
		t.Fatalf("a writer of an unknown table: %v, want the lookup's refusal", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}
