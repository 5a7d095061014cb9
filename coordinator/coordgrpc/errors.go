package coordgrpc

import (
	"context"
	"errors"

	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/coordpb"
)

// codes maps the coordinator's sentinels to wire codes; the first match
// wins, so more specific sentinels come first.
var errorCodes = []struct {
	code string
	err  error
}{
	{"retired", coordinator.ErrRetired},
	{"overlap", coordinator.ErrOverlap},
	{"job_mismatch", coordinator.ErrJobMismatch},
	{"timeout", coordinator.ErrTimeout},
	{"protocol", coordinator.ErrProtocol},
	{"failed", coordinator.ErrFailed},
	{"commit_failed", coordinator.ErrCommitFailed},
	{"closed", coordinator.ErrClosed},
	{"canceled", context.Canceled},
	{"deadline", context.DeadlineExceeded},
}

// encodeError turns an error into its wire form; nil stays nil.
func encodeError(err error) *coordpb.Error {
	if err == nil {
		return nil
	}
	if ae, ok := errors.AsType[*coordinator.AbortError](err); ok {
		return &coordpb.Error{Code: "aborted", Message: ae.Error(), Resume: ae.Resume, Cause: encodeError(ae.Reason)}
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return &coordpb.Error{Code: c.code, Message: err.Error()}
		}
	}
	return &coordpb.Error{Code: "unknown", Message: err.Error()}
}

// decodeError rebuilds an error that matches the same sentinels as the one
// encoded; nil stays nil.
func decodeError(e *coordpb.Error) error {
	if e == nil {
		return nil
	}
	if e.GetCode() == "aborted" {
		reason := decodeError(e.GetCause())
		if reason == nil {
			reason = errors.New("unknown reason")
		}
		return &coordinator.AbortError{Resume: e.GetResume(), Reason: reason}
	}
	re := &remoteError{msg: e.GetMessage()}
	for _, c := range errorCodes {
		if c.code == e.GetCode() {
			re.sentinel = c.err
		}
	}
	return re
}

// remoteError is an error that crossed the wire: its text, and the sentinel
// it matched on the other side.
type remoteError struct {
	sentinel error
	msg      string
}

// Error returns the remote text.
func (e *remoteError) Error() string { return e.msg }

// Is matches the sentinel the error matched remotely.
func (e *remoteError) Is(target error) bool { return e.sentinel != nil && target == e.sentinel }
