// Package coordinator aligns the commit payloads of parallel writers by
// epoch and vnode and decides when an epoch commits, so that all writers'
// files for an epoch land in one snapshot together, exactly once.
//
// # Protocol
//
// The key space is split into vnodes (Config.Vnodes, default 256; a key's
// vnode is VnodeOf: xxhash64 of its canonical bytes modulo the count). Each
// writer registers with a disjoint set of vnodes (SplitVnodes, ParseVnodes);
// an overlap with a live writer is refused (ErrOverlap).
//
// On every checkpoint barrier every writer reports its epoch, including
// when it wrote nothing, with its buffered bytes. An epoch is aligned once
// its reporters cover every vnode; then the coordinator takes one decision
// for it and sends it to all of that epoch's writers. Writers end epochs on
// their own (the same input lines), or, when their inputs share no lines
// (a Kafka topic's partitions), when the coordinator asks: with
// Config.BarrierInterval set it sends every active writer MsgBarrier for
// the lowest undecided epoch every interval, repeated until that epoch is
// decided; the sessions deliver it on their Barriers channel. The epoch commits if
// any of these holds: the epoch is a multiple of Config.CommitInterval;
// Config.CommitBytes is set and the reports add up to at least that; a
// writer marked its report final; a rescale is pending. On a commit epoch
// every writer sends its payload (opaque bytes). Once all are in, the
// coordinator records them durably through its StateStore, and only then
// asks the EpochCommitter to commit; commits run one at a time, in epoch
// order, off the event loop, so a slow catalog holds back neither
// registrations nor the alignment and recording of later epochs. Each
// writer gets its epoch's result.
//
// A writer that disconnects or breaks the protocol while windows are in
// flight aborts every window that is not yet recorded: all writers get an
// AbortError (ErrAborted) with the epoch to restart after, and reconnect.
// Recorded epochs are never aborted: they commit, if need be after a
// restart. Every wait has a timeout in ticks (alignment, payloads, rescale)
// whose TimeoutError names the epoch and the missing vnodes and writers. A
// commit that keeps failing (Config.CommitAttempts) stops the coordinator
// (ErrFailed); a restart recovers.
//
// Rescale: a registration WithRescale may overlap live writers. It waits for
// the next epoch to align, which it forces to be a commit epoch; at that
// boundary the live writers it overlaps retire (their session ends after
// the epoch's result, later reports give ErrRetired) and it takes over from
// the next epoch on. Its Connect returns once the boundary is committed,
// with Resume set to it. A writer reconnecting with other vnodes after a
// restart needs nothing of this: nothing is in flight then.
//
// Members that come and go: with Config.Vacant, vnodes no writer holds
// count as reported (a database's tables, each a range of vnodes, that
// start at different times and stop on their own). A registration takes
// its vnodes from the vacant set and joins at the next undecided epoch;
// Vacate (Coordinator.Vacate) gives them back once their writers have
// left, so the others' epochs align without them. Config.After starts a
// job with no saved state after its tables' own last epoch.
//
// Exactly once: an epoch's payloads are durable before its commit starts.
// After a crash, Start reads the latest state and commits the recorded,
// unconfirmed epochs in order before accepting writers. The EpochCommitter
// must therefore be idempotent per epoch: it looks the epoch up in the
// table's ancestry (the snapshot summary carries the sink id and the epoch)
// and does nothing if it is there. The same holds for the retry after a
// failed attempt, whose outcome is unknown.
//
// # Writers
//
// A writer holds a Session, from Coordinator.Connect in process or from
// coordgrpc.Dial over gRPC; both behave the same:
//
//	sess, err := coord.Connect(ctx, vnodes) // or coordgrpc.Dial(ctx, addr, vnodes)
//	if err != nil { ... }
//	defer sess.Close()
//	for epoch := sess.Resume() + 1; ; epoch++ {
//		// ... write the epoch's changes into the window ...
//		commit, err := sess.Checkpoint(ctx, epoch, window.BufferedBytes(), endOfInput)
//		if err != nil { return err } // ErrAborted: drop the window, reconnect, restart after Resume
//		if commit {
//			payload, err := window.PrepareCommit(ctx)
//			if err != nil { return err } // closing the session aborts the epoch for everyone
//			if err := sess.Commit(ctx, epoch, payload); err != nil { return err }
//			window.Reset()
//		}
//		if endOfInput { return nil }
//	}
//
// Commit may also run in its own goroutine while the writer goes on with
// the next epochs. Only ErrAborted allows deleting a window's files; after
// any other error (ErrClosed, a context error, ErrCommitFailed) the epoch
// may still commit during recovery.
//
// # The state machine and its caller
//
// Machine is the algorithm alone, shaped like etcd raft's RawNode: no
// goroutines, no I/O, no clock. Start wraps it in a driver; a different
// caller (a test, another runtime) owes it these duties:
//
//  1. Create it with NewMachine; if the store has a state, Step
//     Recovered{ID, State} before anything else.
//  2. Step every input: Register, Report, Payload and Disconnect from
//     writers, CommitDone when a commit ends, Tick at a steady rate,
//     Vacate when the caller's members leave.
//  3. Whenever HasReady, take Ready and, in this order: save Ready.Persist
//     through the store; only if that succeeded start Ready.Commit off the
//     loop; send Ready.Messages to their writers. Then Advance, and if the
//     save failed Step PersistFailed. Never Step between Ready and Advance.
//
// A complete driver loop:
//
//	for {
//		for m.HasReady() {
//			rd := m.Ready()
//			var saveErr error
//			if p := rd.Persist; p != nil {
//				saveErr = store.Save(ctx, p.ID, p.State)
//			}
//			if c := rd.Commit; c != nil && saveErr == nil {
//				go func() { done <- CommitDone{Epoch: c.Epoch, Err: committer.CommitEpoch(ctx, c.Epoch, c.Payloads)} }()
//			}
//			for _, msg := range rd.Messages {
//				send(msg.To, msg)
//			}
//			m.Advance()
//			if saveErr != nil {
//				m.Step(PersistFailed{ID: rd.Persist.ID, Err: saveErr})
//			}
//		}
//		select {
//		case ev := <-fromWriters:
//			m.Step(ev)
//		case d := <-done:
//			m.Step(d)
//		case <-ticker.C:
//			m.Step(Tick{})
//		}
//	}
//
// The saved state is EncodeState's format (StateVersion 1, checksummed;
// see state.go): the last committed epoch, the writer registry and every
// recorded, unconfirmed epoch's payloads.
//
// # Tests and regeneration
//
// testdata/*.txt are interaction scripts run by TestScripts; after a
// deliberate change regenerate their expected output with
//
//	go test ./coordinator -run TestScripts -rewrite
//
// and review the diff. The gRPC code in coordpb is generated from
// coordpb/coordinator.proto and committed; regenerate it with protoc
// (Debian: protobuf-compiler) and the two plugins on PATH:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./coordinator/coordpb
package coordinator
