package spill

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// Writable is a file being written, sequentially, once.
type Writable interface {
	// Write appends p. An error is final: the file must then be aborted.
	Write(p []byte) error
	// Finish completes the file and releases the handle. The OS
	// implementation does not fsync: runs are scratch data of one process and
	// need no durability across a crash, and speed matters.
	Finish() error
	// Abort releases the handle without completing the file. It leaves the
	// partial contents in place; the caller removes the file.
	Abort()
}

// Readable is a finished file opened for random reads.
type Readable interface {
	// ReadAt reads exactly len(p) bytes at off, or returns an error (io.EOF
	// or io.ErrUnexpectedEOF if the file is shorter).
	ReadAt(p []byte, off int64) error
	// Size returns the file size, as it was when the file was opened.
	Size() int64
	// Close releases the handle.
	Close() error
}

// FS is the file system runs live on: OSFS for real use, MemFS for tests,
// FaultFS to inject failures.
type FS interface {
	// Create creates or truncates name for writing.
	Create(name string) (Writable, error)
	// Open opens name for reading.
	Open(name string) (Readable, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything below it; a missing name is not
	// an error.
	RemoveAll(name string) error
	// MkdirAll creates dir and its missing parents.
	MkdirAll(dir string) error
	// List returns the sorted names (not paths) of the entries of dir.
	List(dir string) ([]string, error)
	// Lock creates name if it does not exist and takes an exclusive lock on
	// it without waiting: if another holder (another process, or another Lock
	// call in this one) has it, the error matches ErrLocked. Closing the
	// returned Closer releases the lock. OSFS uses flock(2), which the kernel
	// releases when the process dies.
	Lock(name string) (io.Closer, error)
}

// OSFS is the operating system's file system.
type OSFS struct{}

var _ FS = OSFS{}

// Create implements FS.
func (OSFS) Create(name string) (Writable, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return osWritable{f}, nil
}

// Open implements FS.
func (OSFS) Open(name string) (Readable, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &osReadable{f: f, size: st.Size()}, nil
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// RemoveAll implements FS.
func (OSFS) RemoveAll(name string) error { return os.RemoveAll(name) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// List implements FS.
func (OSFS) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

// Lock implements FS with flock(2) where the platform has it.
func (OSFS) Lock(name string) (io.Closer, error) { return lockFile(name) }

type osWritable struct{ f *os.File }

func (w osWritable) Write(p []byte) error {
	_, err := w.f.Write(p)
	return err
}

// Finish closes the file without fsync: a run is scratch data that no one
// reads after a crash (the next process sweeps it away).
func (w osWritable) Finish() error { return w.f.Close() }

func (w osWritable) Abort() { w.f.Close() }

type osReadable struct {
	f    *os.File
	size int64
}

func (r *osReadable) ReadAt(p []byte, off int64) error {
	n, err := r.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %d of %d bytes at offset %d: %w", r.f.Name(), n, len(p), off, io.ErrUnexpectedEOF)
	}
	return err
}

func (r *osReadable) Size() int64 { return r.size }

func (r *osReadable) Close() error { return r.f.Close() }

// sameFile reports whether path still names the file f has open.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}
