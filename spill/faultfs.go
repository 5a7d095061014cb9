package spill

import (
	"fmt"
	"io/fs"
	"sync"
	"syscall"
)

// FaultFS wraps an FS and injects failures, for tests (also of packages that
// use spill): writes that fail with ENOSPC once a byte budget is spent,
// failing creates and opens, and corruption of finished files. It is safe
// for concurrent use.
type FaultFS struct {
	FS
	mu        sync.Mutex
	budget    int64 // bytes writable before ENOSPC; < 0 is unlimited
	createErr error
	openErr   error
	written   int64
}

// NewFaultFS wraps inner with no faults armed.
func NewFaultFS(inner FS) *FaultFS { return &FaultFS{FS: inner, budget: -1} }

// FailWritesAfter makes writes fail with ENOSPC once n more bytes (over all
// files) have been written; the write that crosses the budget writes its
// first bytes, like a disk that fills up. n < 0 disarms.
func (f *FaultFS) FailWritesAfter(n int64) {
	f.mu.Lock()
	f.budget = n
	f.mu.Unlock()
}

// FailCreates makes Create fail with err (nil disarms).
func (f *FaultFS) FailCreates(err error) {
	f.mu.Lock()
	f.createErr = err
	f.mu.Unlock()
}

// FailOpens makes Open fail with err (nil disarms).
func (f *FaultFS) FailOpens(err error) {
	f.mu.Lock()
	f.openErr = err
	f.mu.Unlock()
}

// Written returns the bytes written through f so far.
func (f *FaultFS) Written() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written
}

// Create implements FS.
func (f *FaultFS) Create(name string) (Writable, error) {
	f.mu.Lock()
	err := f.createErr
	f.mu.Unlock()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	w, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultWritable{fs: f, name: name, w: w}, nil
}

// Open implements FS.
func (f *FaultFS) Open(name string) (Readable, error) {
	f.mu.Lock()
	err := f.openErr
	f.mu.Unlock()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f.FS.Open(name)
}

// Truncate cuts the finished file name to size bytes.
func (f *FaultFS) Truncate(name string, size int64) error {
	return f.rewrite(name, func(b []byte) ([]byte, error) {
		if size < 0 || size > int64(len(b)) {
			return nil, fmt.Errorf("truncate %s to %d: file has %d bytes", name, size, len(b))
		}
		return b[:size], nil
	})
}

// FlipBit inverts bit (0-7) of the byte at off in the finished file name.
func (f *FaultFS) FlipBit(name string, off int64, bit uint) error {
	return f.rewrite(name, func(b []byte) ([]byte, error) {
		if off < 0 || off >= int64(len(b)) {
			return nil, fmt.Errorf("flip bit at %d of %s: file has %d bytes", off, name, len(b))
		}
		b[off] ^= 1 << (bit % 8)
		return b, nil
	})
}

// rewrite reads name through the inner FS, edits it and writes it back.
func (f *FaultFS) rewrite(name string, edit func([]byte) ([]byte, error)) error {
	r, err := f.FS.Open(name)
	if err != nil {
		return err
	}
	b := make([]byte, r.Size())
	err = r.ReadAt(b, 0)
	r.Close()
	if err != nil {
		return err
	}
	if b, err = edit(b); err != nil {
		return err
	}
	w, err := f.FS.Create(name)
	if err != nil {
		return err
	}
	if err := w.Write(b); err != nil {
		w.Abort()
		return err
	}
	return w.Finish()
}

type faultWritable struct {
	fs   *FaultFS
	name string
	w    Writable
}

func (w *faultWritable) Write(p []byte) error {
	f := w.fs
	f.mu.Lock()
	n := int64(len(p))
	fail := false
	if f.budget >= 0 && n > f.budget {
		n, fail = f.budget, true
	}
	if f.budget >= 0 {
		f.budget -= n
	}
	f.written += n
	f.mu.Unlock()
	if n > 0 {
		if err := w.w.Write(p[:n]); err != nil {
			return err
		}
	}
	if fail {
		return &fs.PathError{Op: "write", Path: w.name, Err: syscall.ENOSPC}
	}
	return nil
}

func (w *faultWritable) Finish() error { return w.w.Finish() }

func (w *faultWritable) Abort() { w.w.Abort() }
