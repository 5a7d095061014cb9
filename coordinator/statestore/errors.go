package statestore

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by the store wrap one of these (test with
// errors.Is) and name the file or checkpoint involved.
var (
	// ErrNoState is returned by Latest and RestoreLatest when the store holds
	// no checkpoint. A caller whose interface has its own "no state" sentinel
	// maps it with errors.Is or sets Options.NoStateError.
	ErrNoState = errors.New("statestore: no checkpoint")

	// ErrCorruption is matched by every *CorruptionError: a checksum, length
	// or structure check failed on a _metadata or state file.
	ErrCorruption = errors.New("statestore: corruption")

	// ErrNewerVersion is matched by every *VersionError: a _metadata file was
	// written in a format version this reader does not know.
	ErrNewerVersion = errors.New("statestore: written by a newer version")

	// ErrStateTooLarge is returned when a state exceeds Options.MaxStateBytes,
	// on write (nothing is written) or on read.
	ErrStateTooLarge = errors.New("statestore: state exceeds MaxStateBytes")

	// ErrClosed is returned by every call on a closed store or restorer.
	ErrClosed = errors.New("statestore: closed")

	// ErrUnknownCheckpoint is returned (or delivered) when a restore or read
	// names a checkpoint id the store does not retain.
	ErrUnknownCheckpoint = errors.New("statestore: unknown checkpoint")

	// ErrIDNotIncreasing is returned by Checkpoint when the id is not greater
	// than every retained checkpoint's id.
	ErrIDNotIncreasing = errors.New("statestore: checkpoint id not increasing")
)

// CorruptionError reports a file whose content failed verification. It is
// distinct from I/O errors: retrying will not help.
type CorruptionError struct {
	Path   string // the file that failed verification
	Reason string // what failed, e.g. "body checksum mismatch"
}

// Error returns "statestore: PATH: corrupt: REASON".
func (e *CorruptionError) Error() string {
	return fmt.Sprintf("statestore: %s: corrupt: %s", e.Path, e.Reason)
}

// Is reports whether target is ErrCorruption.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

func corruptf(path, format string, args ...any) error {
	return &CorruptionError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// VersionError reports a _metadata file written by a newer release than the
// reader: its format version is above the highest one the reader knows.
type VersionError struct {
	Path    string        // the _metadata file
	Version FormatVersion // the version found in the file
	Max     FormatVersion // the highest version this reader supports
}

// Error returns "statestore: PATH: written by a newer version (V); this
// release reads up to MAX".
func (e *VersionError) Error() string {
	return fmt.Sprintf("statestore: %s: written by a newer version (%d); this release reads up to %d",
		e.Path, uint16(e.Version), uint16(e.Max))
}

// Is reports whether target is ErrNewerVersion.
func (e *VersionError) Is(target error) bool { return target == ErrNewerVersion }
