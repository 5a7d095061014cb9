package spill

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Syncer is implemented by a file system that can make a file (or a
// folder's entries) durable; OSFS does it with fsync(2). Set.Sync uses it
// when the set's FS has it.
type Syncer interface {
	Sync(name string) error
}

// Sync implements Syncer.
func (OSFS) Sync(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}

// OpenSetIn opens a set whose folder is exactly dir, to keep runs beyond
// the process (a key index that outlives a run of the sink): no private
// subfolder and no sweep. It creates dir if needed and takes the
// exclusive lock dir/LOCK (an error matching ErrLocked if another set holds
// it). runs are the base names of the runs, oldest first, that an earlier
// set in dir listed with Runs before Release: each is opened and checked
// (magic, version and checksum of its footer, index and filter); any
// failure closes the set and is returned. Other run files in dir are
// removed. Close removes dir; Release keeps it.
func OpenSetIn(dir string, runs []string, opts SetOptions) (*Set, error) {
	opts = opts.ensureDefaults()
	fs := opts.FS
	if err := fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("spill: create folder %s: %w", dir, err)
	}
	s := &Set{opts: opts, fs: fs, dir: dir}
	lock, err := fs.Lock(filepath.Join(dir, lockName))
	if err != nil && !errors.Is(err, ErrLockUnsupported) {
		return nil, fmt.Errorf("spill: lock folder %s: %w", dir, err)
	}
	s.lock = lock
	if err := s.openCache(); err != nil {
		s.Release()
		return nil, err
	}
	for _, name := range runs {
		seq, ok := runSeq(name)
		if !ok {
			s.Release()
			return nil, fmt.Errorf("spill: %q in %s is not a run name", name, dir)
		}
		rn, err := s.openRun(filepath.Join(dir, name))
		if err != nil {
			s.Release()
			return nil, err
		}
		rn.synced = true // named by a manifest, written after their Sync
		s.runs = append(s.runs, rn)
		s.nextID = max(s.nextID, seq+1)
	}
	names, err := fs.List(dir)
	if err != nil {
		s.Release()
		return nil, fmt.Errorf("spill: list folder %s: %w", dir, err)
	}
	for _, name := range names {
		if _, ok := runSeq(name); ok && !slices.Contains(runs, name) {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				s.Release()
				return nil, fmt.Errorf("spill: remove unlisted run %s: %w", name, err)
			}
		}
	}
	s.updateGauges()
	return s, nil
}

// runSeq parses a run file name run-<seq>.spill.
func runSeq(name string) (uint64, bool) {
	num, ok := strings.CutPrefix(name, "run-")
	if !ok {
		return 0, false
	}
	if num, ok = strings.CutSuffix(num, ".spill"); !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	return seq, err == nil
}

// Runs returns the base names of the set's runs, oldest first: what
// OpenSetIn takes to open them again.
func (s *Set) Runs() []string {
	names := make([]string, len(s.runs))
	for i, rn := range s.runs {
		names[i] = filepath.Base(rn.path)
	}
	return names
}

// Sync makes the runs and the folder's entries durable when the set's FS
// implements Syncer, and does nothing otherwise.
func (s *Set) Sync() error {
	sy, ok := s.fs.(Syncer)
	if !ok {
		return nil
	}
	for _, rn := range s.runs {
		if rn.synced {
			continue
		}
		if err := sy.Sync(rn.path); err != nil {
			return fmt.Errorf("spill: sync run %s: %w", rn.path, err)
		}
		rn.synced = true
	}
	if s.dirSynced {
		return nil
	}
	if err := sy.Sync(s.dir); err != nil {
		return fmt.Errorf("spill: sync folder %s: %w", s.dir, err)
	}
	s.dirSynced = true
	return nil
}

// Release closes the set like Close but keeps its folder and runs, for
// OpenSetIn. Release is idempotent, and a no-op after Close.
func (s *Set) Release() error {
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, rn := range s.runs {
		if err := rn.r.Close(); err != nil {
			errs = append(errs, err)
		}
		if s.cache != nil {
			s.cache.EvictRun(rn.id)
		}
	}
	s.runs = nil
	s.updateGauges()
	if s.lock != nil {
		s.lock.Close()
	}
	if s.ownCache && s.cache != nil {
		s.cache.Close()
	}
	return errors.Join(errs...)
}
