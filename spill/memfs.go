package spill

import (
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// MemFS is an in-memory FS for tests. Files are write-once byte slices;
// directories must exist (MkdirAll) before files are created in them. Readers
// see the file as it was when opened. It is safe for concurrent use.
type MemFS struct {
	mu    sync.Mutex
	files map[string]*memFile
	dirs  map[string]bool
	locks map[string]bool
}

type memFile struct {
	data []byte
}

var _ FS = (*MemFS)(nil)

// NewMemFS returns an empty MemFS with only the root directory "/" (and ".").
func NewMemFS() *MemFS {
	return &MemFS{
		files: map[string]*memFile{},
		dirs:  map[string]bool{"/": true, ".": true},
		locks: map[string]bool{},
	}
}

func memErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// Create implements FS.
func (m *MemFS) Create(name string) (Writable, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[filepath.Dir(name)] {
		return nil, memErr("open", name, fs.ErrNotExist)
	}
	if m.dirs[name] {
		return nil, memErr("open", name, fmt.Errorf("is a directory"))
	}
	f := &memFile{}
	m.files[name] = f
	return &memWritable{fs: m, f: f}, nil
}

// Open implements FS.
func (m *MemFS) Open(name string) (Readable, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[name]
	if !ok {
		return nil, memErr("open", name, fs.ErrNotExist)
	}
	return &memReadable{name: name, data: f.data}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; ok {
		delete(m.files, name)
		return nil
	}
	if m.dirs[name] {
		if len(m.listLocked(name)) > 0 {
			return memErr("remove", name, fmt.Errorf("directory not empty"))
		}
		delete(m.dirs, name)
		return nil
	}
	return memErr("remove", name, fs.ErrNotExist)
}

// RemoveAll implements FS.
func (m *MemFS) RemoveAll(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := name + "/"
	for p := range m.files {
		if p == name || strings.HasPrefix(p, prefix) {
			delete(m.files, p)
		}
	}
	for p := range m.dirs {
		if p == name || strings.HasPrefix(p, prefix) {
			delete(m.dirs, p)
		}
	}
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := dir; !m.dirs[d]; d = filepath.Dir(d) {
		if _, ok := m.files[d]; ok {
			return memErr("mkdir", d, fmt.Errorf("not a directory"))
		}
		m.dirs[d] = true
	}
	return nil
}

// List implements FS.
func (m *MemFS) List(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, memErr("open", dir, fs.ErrNotExist)
	}
	return m.listLocked(dir), nil
}

func (m *MemFS) listLocked(dir string) []string {
	var names []string
	for p := range m.files {
		if filepath.Dir(p) == dir {
			names = append(names, filepath.Base(p))
		}
	}
	for p := range m.dirs {
		if p != dir && filepath.Dir(p) == dir {
			names = append(names, filepath.Base(p))
		}
	}
	sort.Strings(names)
	return names
}

// Lock implements FS. Locks are held per MemFS; a lock file that was removed
// while locked is not re-created.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
	}
	if _, ok := m.files[name]; !ok {
		if !m.dirs[filepath.Dir(name)] {
			return nil, memErr("open", name, fs.ErrNotExist)
		}
		m.files[name] = &memFile{}
	}
	m.locks[name] = true
	return &memLock{fs: m, name: name}, nil
}

type memLock struct {
	fs   *MemFS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.locks, l.name)
		l.fs.mu.Unlock()
	})
	return nil
}

type memWritable struct {
	fs   *MemFS
	f    *memFile
	done bool
}

func (w *memWritable) Write(p []byte) error {
	if w.done {
		return fmt.Errorf("write after finish: %w", fs.ErrClosed)
	}
	w.fs.mu.Lock()
	// Appending never changes bytes an open reader can see: readers hold a
	// slice of the old length.
	w.f.data = append(w.f.data, p...)
	w.fs.mu.Unlock()
	return nil
}

func (w *memWritable) Finish() error {
	w.done = true
	return nil
}

func (w *memWritable) Abort() { w.done = true }

type memReadable struct {
	name string
	data []byte
}

func (r *memReadable) ReadAt(p []byte, off int64) error {
	if off < 0 || off > int64(len(r.data)) || int64(len(p)) > int64(len(r.data))-off {
		return memErr("read", r.name, io.ErrUnexpectedEOF)
	}
	copy(p, r.data[off:])
	return nil
}

func (r *memReadable) Size() int64 { return int64(len(r.data)) }

func (r *memReadable) Close() error { return nil }
