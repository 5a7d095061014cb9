package coordinator

import (
	"errors"
	"fmt"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// Sentinel errors. Match them with errors.Is; the typed errors below wrap
// them and carry the details.
var (
	// ErrAborted means the writer's uncommitted window was aborted and will
	// never be committed: the writer deletes the window's files and restarts
	// after AbortError.Resume. It is the only error that allows deleting
	// files; every other error leaves the outcome of recorded epochs to
	// recovery.
	ErrAborted = errors.New("coordinator: window aborted")
	// ErrOverlap means a registration's vnodes overlap a live writer's.
	ErrOverlap = errors.New("coordinator: vnodes overlap a live writer")
	// ErrTimeout means a wait of the coordinator ran out of ticks.
	ErrTimeout = errors.New("coordinator: timed out")
	// ErrProtocol means a writer broke the protocol (epoch order, a payload
	// for an epoch that does not commit, a report before registration, ...).
	ErrProtocol = errors.New("coordinator: protocol error")
	// ErrJobMismatch means a writer registered for another job than the
	// coordinator's: another table, schema or sink id, or other checkpoint
	// settings than the writers before it (see Config.Job).
	ErrJobMismatch = errors.New("coordinator: writer of another job")
	// ErrRetired means the session ended at an epoch boundary: after its
	// final report or at a rescale. Nothing is lost; the session takes no
	// more reports.
	ErrRetired = errors.New("coordinator: session retired")
	// ErrPermanent, wrapped by an EpochCommitter's error, says that trying
	// the epoch again cannot help: it fails at once instead of after
	// Config.CommitAttempts.
	ErrPermanent = errors.New("coordinator: permanent commit failure")
	// ErrStale, wrapped by an EpochCommitter's error, says that the epoch
	// cannot be committed as its writers prepared it: the table changed
	// under it (another writer's commit won the race, a rollback). The
	// coordinator drops it and every recorded epoch after it (prepared on
	// the same table), and aborts the windows: the writers read their
	// input again from what the table holds.
	ErrStale = errors.New("coordinator: the table changed under the epoch")
	// ErrCommitFailed means the committer failed an epoch after all
	// attempts. The epoch stays recorded: a restarted coordinator commits it
	// during recovery. Writers keep its files.
	ErrCommitFailed = errors.New("coordinator: commit failed")
	// ErrFailed means the coordinator stopped working (after ErrCommitFailed)
	// and must be restarted to recover.
	ErrFailed = errors.New("coordinator: failed")
	// ErrClosed means the session or the coordinator was closed; a pending
	// result is then unknown (it may still commit).
	ErrClosed = errors.New("coordinator: closed")
	// ErrNoState is returned by StateStore.Latest when nothing was saved yet.
	ErrNoState = errors.New("coordinator: no saved state")
	// ErrCorruptState means a saved coordinator state failed to decode or
	// its checksum did not match.
	ErrCorruptState = errors.New("coordinator: corrupt state")
)

// AbortError tells a writer that the in-flight windows were aborted, why,
// and the epoch to restart after. It matches ErrAborted and unwraps to the
// reason.
type AbortError struct {
	// Resume is the last epoch that is committed or recorded (and so will
	// be committed): the writer restarts its input after it.
	Resume uint64
	// Reason is what caused the abort.
	Reason error
}

// Error names the resume epoch and the reason.
func (e *AbortError) Error() string {
	return fmt.Sprintf("coordinator: windows after epoch %d aborted: %v", e.Resume, e.Reason)
}

// Is reports whether target is ErrAborted.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// Unwrap returns the reason.
func (e *AbortError) Unwrap() error { return e.Reason }

// TimeoutError names what an expired wait was missing. It matches ErrTimeout.
type TimeoutError struct {
	// Epoch is the epoch that waited.
	Epoch uint64
	// Wait is what it waited for: "alignment", "payloads" or "rescale".
	Wait string
	// Ticks is how long it waited.
	Ticks int
	// Missing are the vnodes nobody reported (alignment) or that belong to
	// the writers whose payloads are missing (payloads).
	Missing *roaring.Bitmap
	// Writers are the registered writers that did not answer, with their
	// vnodes.
	Writers []WriterVnodes
}

// WriterVnodes names a writer and its vnodes.
type WriterVnodes struct {
	Writer WriterID
	Vnodes *roaring.Bitmap
}

// Error names the epoch, the wait and what was missing.
func (e *TimeoutError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "coordinator: epoch %d: %s timed out after %d ticks", e.Epoch, e.Wait, e.Ticks)
	switch e.Wait {
	case "alignment":
		fmt.Fprintf(&sb, ": vnodes %s not reported", FormatVnodes(e.Missing))
	case "payloads":
		fmt.Fprintf(&sb, ": payloads missing for vnodes %s", FormatVnodes(e.Missing))
	case "rescale":
		sb.WriteString(": no epoch aligned to take over at")
	}
	if len(e.Writers) > 0 {
		sb.WriteString(" (waiting for")
		for i, w := range e.Writers {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, " %v owning %s", w.Writer, FormatVnodes(w.Vnodes))
		}
		sb.WriteByte(')')
	}
	if e.Missing != nil {
		unowned := e.Missing.Clone()
		for _, w := range e.Writers {
			unowned.AndNot(w.Vnodes)
		}
		if !unowned.IsEmpty() {
			fmt.Fprintf(&sb, "; no writer owns %s", FormatVnodes(unowned))
		}
	}
	return sb.String()
}

// Is reports whether target is ErrTimeout.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// OverlapError is the refusal of a registration whose vnodes overlap a live
// writer's. It matches ErrOverlap.
type OverlapError struct {
	// Writer is the refused writer, Vnodes what it asked for.
	Writer WriterID
	Vnodes *roaring.Bitmap
	// Owner is the live (or pending) writer that holds Overlap.
	Owner   WriterID
	Overlap *roaring.Bitmap
	// Pending is set when Owner is itself a pending rescale registration.
	Pending bool
}

// Error names both writers and the overlapping vnodes.
func (e *OverlapError) Error() string {
	kind := "live writer"
	hint := " (register with rescale to take them over at the next commit)"
	if e.Pending {
		kind, hint = "pending rescale registration of", ""
	}
	return fmt.Sprintf("coordinator: %v vnodes %s: %s overlap %s %v%s",
		e.Writer, FormatVnodes(e.Vnodes), FormatVnodes(e.Overlap), kind, e.Owner, hint)
}

// Is reports whether target is ErrOverlap.
func (e *OverlapError) Is(target error) bool { return target == ErrOverlap }

// CommitError is the result of an epoch whose commit failed after all
// attempts. It matches ErrCommitFailed and unwraps to the committer's error.
type CommitError struct {
	// Epoch is the epoch that did not commit.
	Epoch uint64
	// Attempts is how many commits were tried.
	Attempts int
	// Err is the last attempt's error.
	Err error
}

// Error names the epoch, the attempts and the last failure.
func (e *CommitError) Error() string {
	return fmt.Sprintf("coordinator: epoch %d: commit failed after %d attempts (recorded; a restart commits it): %v",
		e.Epoch, e.Attempts, e.Err)
}

// Is reports whether target is ErrCommitFailed.
func (e *CommitError) Is(target error) bool { return target == ErrCommitFailed }

// Unwrap returns the committer's error.
func (e *CommitError) Unwrap() error { return e.Err }

// WriterError is the reason of an abort caused by a writer that disconnected
// or failed.
type WriterError struct {
	// Writer is the writer that left, Vnodes what it owned.
	Writer WriterID
	Vnodes *roaring.Bitmap
	// Err is the writer's error; nil for a plain disconnect.
	Err error
}

// Error names the writer and its vnodes.
func (e *WriterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%v (vnodes %s) disconnected", e.Writer, FormatVnodes(e.Vnodes))
	}
	return fmt.Sprintf("%v (vnodes %s) failed: %v", e.Writer, FormatVnodes(e.Vnodes), e.Err)
}

// Unwrap returns the writer's error.
func (e *WriterError) Unwrap() error { return e.Err }

func protocolErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}
