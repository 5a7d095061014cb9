package statestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// readStateFile opens path with o.OpenFile and reads the state h describes,
// verifying its length and checksum. When ctx is done the stream is closed
// from another goroutine (a Read in progress may make Close wait, so the
// goroutine that cancels never closes it itself); if ctx is done by the time
// the open returns, the stream is closed at once. Either way the result is
// ctx's error. readStateFile returns only after the stream is closed.
func readStateFile(ctx context.Context, o Options, path string, h FileHandle) ([]byte, error) {
	if h.Size > o.MaxStateBytes {
		return nil, fmt.Errorf("statestore: %s: state of %d bytes exceeds MaxStateBytes %d: %w",
			path, h.Size, o.MaxStateBytes, ErrStateTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("statestore: reading %s: %w", path, err)
	}
	rc, err := o.OpenFile(ctx, path)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("statestore: opening %s: %w", path, cerr)
		}
		return nil, fmt.Errorf("statestore: opening %s: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		// Stopped while the file was being opened: close as soon as the open
		// returns. This goroutine is the reader's, not the canceller's.
		_ = rc.Close()
		return nil, fmt.Errorf("statestore: reading %s: %w", path, err)
	}

	var (
		once     sync.Once
		closeErr error
	)
	closeStream := func() { once.Do(func() { closeErr = rc.Close() }) }
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		closeStream()
	})

	buf, rerr := readVerified(rc, path, h)

	if stop() {
		closeStream()
	} else {
		<-closed // the AfterFunc goroutine closed (or is closing) the stream
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("statestore: reading %s: %w", path, err)
	}
	if rerr != nil {
		return nil, rerr
	}
	if closeErr != nil {
		return nil, fmt.Errorf("statestore: closing %s: %w", path, closeErr)
	}
	return buf, nil
}

// readVerified reads exactly h.Size bytes from r and checks that the stream
// ends there and that the bytes match h.Checksum.
func readVerified(r io.Reader, path string, h FileHandle) ([]byte, error) {
	buf := make([]byte, h.Size)
	n, err := io.ReadFull(r, buf)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, corruptf(path, "truncated: %d of %d bytes", n, h.Size)
		}
		return nil, fmt.Errorf("statestore: reading %s: %w", path, err)
	}
	var one [1]byte
	if _, err := io.ReadFull(r, one[:]); err == nil {
		return nil, corruptf(path, "longer than its %d bytes", h.Size)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("statestore: reading %s: %w", path, err)
	}
	if got := crc32c(0, buf); got != h.Checksum {
		return nil, corruptf(path, "checksum mismatch: %08x, want %08x", got, h.Checksum)
	}
	return buf, nil
}
