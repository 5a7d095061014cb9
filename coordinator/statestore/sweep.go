package statestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// parseChkName returns the id of a checkpoint directory name "chk-<id>",
// accepting only the spelling the store writes.
func parseChkName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, chkPrefix)
	if !ok || digits == "" {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || strconv.FormatUint(id, 10) != digits {
		return 0, false
	}
	return id, true
}

// sweep rebuilds the retained list from disk and removes orphans. Entries
// of Dir that the store does not name are left alone.
func (s *Store) sweep(ctx context.Context) error {
	dir := s.opts.Dir
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("statestore: listing %s: %w", dir, err)
	}
	var complete []uint64
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		path := filepath.Join(dir, name)
		if strings.HasPrefix(name, tmpPrefix) {
			s.removeOrphan(path)
			continue
		}
		id, ok := parseChkName(name)
		if !ok || !e.IsDir() {
			continue
		}
		if _, err := os.Lstat(filepath.Join(path, metadataName)); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("statestore: %s: %w", filepath.Join(path, metadataName), err)
			}
			s.removeOrphan(path) // partially written: _metadata is renamed in last
			continue
		}
		complete = append(complete, id)
	}
	slices.Sort(complete)
	if n := len(complete) - s.opts.Retain; n > 0 {
		for _, id := range complete[:n] {
			if err := s.removeCheckpointDir(id); err != nil {
				if errors.Is(err, errCrash) {
					return err
				}
				s.opts.report(err)
			}
		}
		complete = complete[n:]
	}
	for _, id := range complete {
		c, err := s.loadCheckpoint(id)
		if err != nil {
			return err
		}
		s.retained = append(s.retained, c)
		if err := s.sweepCheckpointDir(c); err != nil {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		s.opts.report(err)
	}
	return nil
}

func (s *Store) removeOrphan(path string) {
	if err := os.RemoveAll(path); err != nil {
		s.opts.report(fmt.Errorf("statestore: removing orphan %s: %w", path, err))
	}
}

// sweepCheckpointDir removes every entry of c's directory other than its
// _metadata and the state file it references.
func (s *Store) sweepCheckpointDir(c *checkpoint) error {
	dir := s.chkDir(c.id)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("statestore: listing %s: %w", dir, err)
	}
	removed := false
	for _, e := range entries {
		name := e.Name()
		if name == metadataName || (c.file != nil && name == c.file.Path) {
			continue
		}
		s.removeOrphan(filepath.Join(dir, name))
		removed = true
	}
	if removed {
		if err := syncDir(dir); err != nil {
			s.opts.report(err)
		}
	}
	return nil
}

// loadCheckpoint reads and decodes chk-<id>/_metadata.
func (s *Store) loadCheckpoint(id uint64) (*checkpoint, error) {
	path := filepath.Join(s.chkDir(id), metadataName)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("statestore: %s: %w", path, err)
	}
	if limit := s.opts.MaxStateBytes + maxV2FileLen; fi.Size() > limit {
		return nil, fmt.Errorf("statestore: %s: %d bytes, limit %d: %w", path, fi.Size(), limit, ErrStateTooLarge)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("statestore: reading %s: %w", path, err)
	}
	m, err := decodeMetadata(data, path, s.opts.maxReadVersion)
	if err != nil {
		return nil, err
	}
	if m.id != id {
		return nil, corruptf(path, "holds checkpoint id %d", m.id)
	}
	if m.version == FormatV1Inline && m.size > s.opts.MaxStateBytes {
		// An inline state must be held in memory now; a state file is
		// checked against the limit when read.
		return nil, fmt.Errorf("statestore: %s: state of %d bytes exceeds MaxStateBytes %d: %w",
			path, m.size, s.opts.MaxStateBytes, ErrStateTooLarge)
	}
	c := &checkpoint{id: id, version: m.version, size: m.size}
	if m.version == FormatV2FileHandle {
		h := m.file
		c.file = &h
	} else {
		c.inline = m.inline
	}
	return c, nil
}

// removeCheckpointDir deletes chk-<id> and everything in it. The directory
// is first renamed to a temporary name, one atomic step after which the
// checkpoint no longer exists; a crash afterwards leaves an orphan that Open
// sweeps.
func (s *Store) removeCheckpointDir(id uint64) error {
	dir := s.chkDir(id)
	tmp := filepath.Join(s.opts.Dir, fmt.Sprintf("%sdisposed-%s%d", tmpPrefix, chkPrefix, id))
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("statestore: disposing of checkpoint %d: removing %s: %w", id, tmp, err)
	}
	if err := os.Rename(dir, tmp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("statestore: disposing of checkpoint %d: renaming %s: %w", id, dir, err)
	}
	if err := s.hook(stepDisposeRenamed); err != nil {
		return err
	}
	if err := syncDir(s.opts.Dir); err != nil {
		s.opts.report(err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("statestore: disposing of checkpoint %d: removing %s: %w", id, tmp, err)
	}
	return nil
}

// Dispose deletes the retained checkpoint id: its directory, _metadata and
// state file. Disposing of an id the store does not retain (already
// disposed of, or beyond retention) does nothing. A restore of id in
// progress may fail if it has not opened the state file yet.
func (s *Store) Dispose(ctx context.Context, id uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	i := slices.IndexFunc(s.retained, func(c *checkpoint) bool { return c.id == id })
	if i < 0 {
		s.mu.Unlock()
		return nil
	}
	s.retained = slices.Delete(s.retained, i, i+1)
	s.mu.Unlock()
	err := s.removeCheckpointDir(id)
	if errors.Is(err, errCrash) {
		s.markCrashed()
	}
	return err
}

func (s *Store) markCrashed() {
	s.mu.Lock()
	s.crashed = true
	s.mu.Unlock()
}
