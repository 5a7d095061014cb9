package spill

import (
	"errors"
	"fmt"
)

// ErrCorruption is matched (errors.Is) by every error that reports a run file
// whose bytes are not what a Writer wrote: bad magic, checksum mismatch,
// truncation, an impossible length. I/O errors (a failed read, a full disk)
// do not match it.
var ErrCorruption = errors.New("spill: corruption")

// ErrOutOfOrder is returned by Writer.Add for an entry that does not sort
// strictly after the previous one by (hash, key).
var ErrOutOfOrder = errors.New("spill: entries out of order")

// ErrClosed is returned by the methods of a closed Writer, Reader or Set.
var ErrClosed = errors.New("spill: closed")

// ErrCompaction is matched by an error of Set.Flush that arose while
// compacting after the new run was added: the flushed entries are in the set
// (the run is readable) and the inputs of the failed compaction are intact.
var ErrCompaction = errors.New("spill: compaction failed")

// ErrLocked is returned by FS.Lock when another holder has the lock.
var ErrLocked = errors.New("spill: locked")

// CorruptionError describes corruption in one run file. It matches
// ErrCorruption under errors.Is and unwraps to its Cause, if any.
type CorruptionError struct {
	// File names the run file (the name given in the reader's options).
	File string
	// Offset is the byte offset in the file where the bad bytes start, or -1
	// if unknown.
	Offset int64
	// Msg says what is wrong.
	Msg string
	// Cause is an underlying error, or nil.
	Cause error
}

// Error names the file, the offset and what is wrong.
func (e *CorruptionError) Error() string {
	s := fmt.Sprintf("spill: corrupt run %s at offset %d: %s", e.File, e.Offset, e.Msg)
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is reports whether target is ErrCorruption.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorruption }

// Unwrap returns the cause.
func (e *CorruptionError) Unwrap() error { return e.Cause }

// IsCorruption reports whether err reports corruption of a run file.
func IsCorruption(err error) bool { return errors.Is(err, ErrCorruption) }

func corruptf(file string, off int64, format string, args ...any) error {
	return &CorruptionError{File: file, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// ErrLockUnsupported is returned by OSFS.Lock on platforms without flock:
// callers go on without the lock.
var ErrLockUnsupported = errors.New("spill: file locking not supported on this platform")
