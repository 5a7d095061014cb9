package coordinator

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
)

// WriterID identifies one registration (one session) of a writer. The caller
// assigns them, unique for the life of a Machine; a reconnecting writer gets a
// new one.
type WriterID uint64

// String renders the id as "w<n>".
func (w WriterID) String() string { return fmt.Sprintf("w%d", uint64(w)) }

// Event is an input to Machine.Step: one of Recovered, Register, Report,
// Payload, CommitDone, PersistFailed, Disconnect, Tick, Vacate.
type Event interface{ isEvent() }

// Recovered hands the machine the state its store returned at startup. It
// must be the first event, if any; a fresh job skips it.
type Recovered struct {
	// ID is the snapshot id the store returned; later snapshots get higher ids.
	ID uint64
	// State is the encoded state, as produced in Ready.Persist.
	State []byte
}

// Register asks to add a writer owning Vnodes.
//
// Without Rescale the vnodes must not overlap any live writer; the writer
// joins at once and starts after the last decided epoch. With Rescale the
// vnodes may overlap live writers: the registration waits for the next
// epoch boundary, which it forces to be a commit epoch; at that boundary the
// live writers it overlaps retire and it takes over, from the next epoch on.
type Register struct {
	Writer  WriterID
	Vnodes  *roaring.Bitmap
	Rescale bool
	// VnodeCount, if not zero, is the vnode count the writer routes with;
	// it must equal Config.Vnodes.
	VnodeCount int
	// Job is what the writer writes into: the table, schema and sink it
	// writes for and the settings its epochs depend on (see Config.Job).
	Job map[string]string
}

// JobTable is the Job key naming the table a writer writes into
// (NS.NAME): a server of many tables' coordinators routes a writer's
// session by it.
const JobTable = "table"

// Report is a writer's checkpoint report for Epoch. Every registered writer
// reports every epoch, including ones where it wrote nothing, in strictly
// increasing epoch order, and waits for the epoch's decision before it
// reports the next one.
type Report struct {
	Writer        WriterID
	Epoch         uint64
	BufferedBytes int64
	// Final marks the writer's last epoch (end of input): the epoch commits
	// and the writer retires after it.
	Final bool
}

// Payload is a writer's commit payload for a commit epoch, opaque to the
// coordinator. Every writer of a commit epoch sends one, empty or not.
type Payload struct {
	Writer WriterID
	Epoch  uint64
	Data   []byte
}

// CommitDone reports the end of a commit the machine asked for in
// Ready.Commit. Err nil means the epoch is in the table.
type CommitDone struct {
	Epoch uint64
	Err   error
}

// PersistFailed reports that saving Ready.Persist failed. The caller must
// not have started that Ready's Commit, and steps this right after Advance.
type PersistFailed struct {
	ID  uint64
	Err error
}

// Disconnect reports that a writer's session ended. Err is nil for a clean
// close. A writer that leaves with an uncommitted window aborts it.
type Disconnect struct {
	Writer WriterID
	Err    error
}

// Tick advances the machine's clock by one tick.
type Tick struct{}

// Vacate gives Vnodes back to the vacant set (Config.Vacant): no writer
// holds them any more, and epochs align without them until a writer
// registers them again. It is refused while a live or pending writer
// holds any of them; their windows must have ended first (a final epoch)
// or been aborted.
type Vacate struct {
	Vnodes *roaring.Bitmap
}

func (Recovered) isEvent()     {}
func (Register) isEvent()      {}
func (Report) isEvent()        {}
func (Payload) isEvent()       {}
func (CommitDone) isEvent()    {}
func (PersistFailed) isEvent() {}
func (Disconnect) isEvent()    {}
func (Tick) isEvent()          {}
func (Vacate) isEvent()        {}

// MessageType says what a Message tells a writer.
type MessageType int

// Message types.
const (
	// MsgRegistered accepts a registration; Resume is the epoch to restart
	// after (committed in the table by the time this is sent).
	MsgRegistered MessageType = iota + 1
	// MsgDecision is the decision for Epoch: Commit says whether the writer
	// must send its payload; Retire says the session ends after this epoch.
	MsgDecision
	// MsgResult is the result of commit epoch Epoch: Err nil means committed.
	MsgResult
	// MsgAbort aborts the writer's session: Err is an *AbortError.
	MsgAbort
	// MsgError refuses a request (a registration, or a request of a session
	// that is no longer live); Err says why.
	MsgError
	// MsgBarrier asks the writer to end Epoch now (Config.BarrierInterval),
	// unless it has reported it already; it is repeated every interval.
	MsgBarrier
)

// String names the message type.
func (t MessageType) String() string {
	switch t {
	case MsgRegistered:
		return "registered"
	case MsgDecision:
		return "decision"
	case MsgResult:
		return "result"
	case MsgAbort:
		return "abort"
	case MsgError:
		return "error"
	case MsgBarrier:
		return "barrier"
	}
	return fmt.Sprintf("MessageType(%d)", int(t))
}

// Message is something to send to one writer.
type Message struct {
	// To is the writer to send to.
	To   WriterID
	Type MessageType
	// Epoch is the epoch of a decision or result.
	Epoch uint64
	// Commit and Retire are a decision's verdicts.
	Commit bool
	Retire bool
	// Resume is the epoch to restart after (registered, abort).
	Resume uint64
	// Err is a result's error, an abort's *AbortError, a refusal's reason.
	Err error
}

// String renders the message for logs and test scripts.
func (m Message) String() string {
	switch m.Type {
	case MsgRegistered:
		return fmt.Sprintf("%v registered resume=%d", m.To, m.Resume)
	case MsgDecision:
		s := fmt.Sprintf("%v decision %d commit=%t", m.To, m.Epoch, m.Commit)
		if m.Retire {
			s += " retire"
		}
		return s
	case MsgResult:
		if m.Err == nil {
			return fmt.Sprintf("%v result %d committed", m.To, m.Epoch)
		}
		return fmt.Sprintf("%v result %d error: %v", m.To, m.Epoch, m.Err)
	case MsgBarrier:
		return fmt.Sprintf("%v barrier %d", m.To, m.Epoch)
	}
	return fmt.Sprintf("%v %v: %v", m.To, m.Type, m.Err)
}

// Snapshot is a state to save through the StateStore.
type Snapshot struct {
	// ID increases with every snapshot.
	ID uint64
	// State is the encoded state (see DecodeState).
	State []byte
}

// CommitRequest asks the caller to commit one epoch through its committer.
type CommitRequest struct {
	Epoch uint64
	// Payloads are the writers' payloads, ordered by each writer's lowest
	// vnode.
	Payloads [][]byte
	// Attempt counts from 1; above 1 the committer must expect that an
	// earlier attempt may have landed.
	Attempt int
}

// Ready lists the caller's duties, to be done in this order before Advance:
//
//  1. If Persist is set, save it durably (StateStore.Save). If that fails,
//     skip step 2 and step PersistFailed after Advance.
//  2. If Commit is set, start it off the event loop and step CommitDone
//     when it ends; never start it before step 1 succeeded.
//  3. Send Messages, in order, to their writers; messages to writers that
//     are gone are dropped.
type Ready struct {
	Persist  *Snapshot
	Commit   *CommitRequest
	Messages []Message
}

// Status is a read-only view of the machine for progress output and tests.
type Status struct {
	// LastCommitted is the last epoch confirmed in the table.
	LastCommitted uint64
	// LastDecided is the last epoch whose decision was broadcast.
	LastDecided uint64
	// Recorded are the epochs recorded durably but not yet confirmed.
	Recorded []uint64
	// Committing is the epoch whose commit is running, or 0.
	Committing uint64
	// Undecided are the epochs with reports waiting for alignment.
	Undecided []uint64
	// Writers are the live writers with their vnodes, by vnode.
	Writers []WriterVnodes
	// Pending are the rescale registrations waiting for their boundary.
	Pending []WriterVnodes
	// Missing are the vnodes no live (or retiring) writer holds and that
	// are not vacant (Config.Vacant): while it is not empty and writers
	// are live, no epoch can align.
	Missing *roaring.Bitmap
	// Failed is set once the machine has given up (ErrFailed).
	Failed error
}
