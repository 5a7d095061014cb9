package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// writeStep names a point in a checkpoint write or disposal where the test
// hook runs.
type writeStep int

const (
	stepDirCreated     writeStep = iota // chk-<id>/ exists and is synced
	stepStatePartial                    // half of the state file's temp written
	stepStateSynced                     // state temp file complete and synced
	stepStateRenamed                    // _state in place, _metadata not yet
	stepMetaPartial                     // half of _metadata's temp written
	stepMetaSynced                      // _metadata temp complete and synced
	stepMetaRenamed                     // _metadata in place, dir not yet synced
	stepDisposeRenamed                  // an old chk dir renamed to .tmp-, not yet removed
)

func (s writeStep) String() string {
	switch s {
	case stepDirCreated:
		return "dir-created"
	case stepStatePartial:
		return "state-partial"
	case stepStateSynced:
		return "state-synced"
	case stepStateRenamed:
		return "state-renamed"
	case stepMetaPartial:
		return "meta-partial"
	case stepMetaSynced:
		return "meta-synced"
	case stepMetaRenamed:
		return "meta-renamed"
	case stepDisposeRenamed:
		return "dispose-renamed"
	}
	return fmt.Sprintf("step-%d", int(s))
}

// errCrash, returned by a test hook, simulates a crash: the write stops
// where it is, nothing is cleaned up, and the store refuses further calls.
var errCrash = errors.New("statestore: simulated crash")

// writeChunk bounds one Write call, so that cancellation is noticed within
// a large state.
const writeChunk = 8 << 20

// Save writes state as checkpoint id and returns once it is durable. It is
// Checkpoint without the description, and with Latest it satisfies the
// coordinator's StateStore interface.
func (s *Store) Save(ctx context.Context, id uint64, state []byte) error {
	_, err := s.Checkpoint(ctx, id, state)
	return err
}

// Checkpoint writes state as checkpoint id, durably, and retains it,
// disposing of the oldest checkpoints beyond Options.Retain. id must be
// greater than every retained id. A state of at most InlineThreshold bytes,
// or any state when InFileEnabled is false, goes inline in _metadata
// (format V1); a larger one goes to chk-<id>/_state and _metadata holds its
// handle (format V2).
//
// Each file is written to a temporary name, synced, renamed into place and
// its directory synced; _metadata comes last, so a checkpoint exists only
// once it is complete. On error nothing of id remains (or what remains is
// swept at the next Open) and the previous checkpoints are untouched. The
// store keeps a copy of an inline state; the caller keeps state.
func (s *Store) Checkpoint(ctx context.Context, id uint64, state []byte) (CheckpointInfo, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	err := s.usableLocked()
	if err == nil && len(s.retained) > 0 && id <= s.retained[len(s.retained)-1].id {
		err = fmt.Errorf("statestore: checkpoint %d after %d: %w", id, s.retained[len(s.retained)-1].id, ErrIDNotIncreasing)
	}
	s.mu.Unlock()
	if err != nil {
		return CheckpointInfo{}, err
	}
	if int64(len(state)) > s.opts.MaxStateBytes {
		return CheckpointInfo{}, fmt.Errorf("statestore: checkpoint %d: state of %d bytes exceeds MaxStateBytes %d: %w",
			id, len(state), s.opts.MaxStateBytes, ErrStateTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return CheckpointInfo{}, err
	}

	c, err := s.writeCheckpoint(ctx, id, state)
	if err != nil {
		if errors.Is(err, errCrash) {
			s.markCrashed()
		} else if rerr := os.RemoveAll(s.chkDir(id)); rerr != nil {
			s.opts.report(fmt.Errorf("statestore: cleaning up %s: %w", s.chkDir(id), rerr))
		}
		return CheckpointInfo{}, err
	}

	s.mu.Lock()
	s.retained = append(s.retained, c)
	var old []*checkpoint
	if n := len(s.retained) - s.opts.Retain; n > 0 {
		old = append(old, s.retained[:n]...)
		s.retained = append(s.retained[:0:0], s.retained[n:]...)
	}
	s.mu.Unlock()
	for _, o := range old {
		if err := s.removeCheckpointDir(o.id); err != nil {
			if errors.Is(err, errCrash) {
				s.markCrashed()
				break
			}
			s.opts.report(err)
		}
	}
	return c.info(), nil
}

func (s *Store) writeCheckpoint(ctx context.Context, id uint64, state []byte) (*checkpoint, error) {
	dir := s.chkDir(id)
	// A directory of this id is not retained (ids increase), so it is a
	// leftover of an earlier failed write.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("statestore: removing leftover %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("statestore: creating %s: %w", dir, err)
	}
	if err := syncDir(s.opts.Dir); err != nil {
		return nil, err
	}
	if err := s.hook(stepDirCreated); err != nil {
		return nil, err
	}

	c := &checkpoint{id: id, size: int64(len(state))}
	m := metadata{id: id, size: c.size}
	if s.opts.InFileEnabled && len(state) > max(s.opts.InlineThreshold, 0) {
		h := FileHandle{Path: stateFileName, Size: c.size, Checksum: crc32c(0, state)}
		if err := s.writeAtomic(ctx, dir, h.Path, [][]byte{state}, stepStatePartial, stepStateSynced); err != nil {
			return nil, err
		}
		if err := s.hook(stepStateRenamed); err != nil {
			return nil, err
		}
		c.version, c.file = FormatV2FileHandle, &h
		m.version, m.file = FormatV2FileHandle, h
	} else {
		c.version, m.version, m.inline = FormatV1Inline, FormatV1Inline, state
	}
	prefix, payload, trailer := m.parts()
	if err := s.writeAtomic(ctx, dir, metadataName, [][]byte{prefix, payload, trailer}, stepMetaPartial, stepMetaSynced); err != nil {
		return nil, err
	}
	if err := s.hook(stepMetaRenamed); err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	if c.file == nil {
		c.inline = bytes.Clone(state)
		if c.inline == nil {
			c.inline = []byte{}
		}
	}
	return c, nil
}

// writeAtomic writes parts to dir/name through a synced temporary file and
// a rename. The caller syncs dir. The hook runs at partial, once about half
// of the bytes are written, and at synced, before the rename.
func (s *Store) writeAtomic(ctx context.Context, dir, name string, parts [][]byte, partial, synced writeStep) (err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("statestore: creating temp for %s: %w", filepath.Join(dir, name), err)
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if err != nil && !errors.Is(err, errCrash) {
			_ = os.Remove(tmp)
		}
	}()
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	half, written, hooked := total/2, 0, false
	for _, p := range parts {
		for len(p) > 0 {
			if !hooked && written >= half {
				hooked = true
				if err := s.hook(partial); err != nil {
					return err
				}
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(len(p), writeChunk)
			if !hooked {
				n = min(n, half-written)
			}
			if _, err := f.Write(p[:n]); err != nil {
				return fmt.Errorf("statestore: writing %s: %w", tmp, err)
			}
			written += n
			p = p[n:]
		}
	}
	if !hooked {
		if err := s.hook(partial); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("statestore: syncing %s: %w", tmp, err)
	}
	cerr := f.Close()
	f = nil
	if cerr != nil {
		return fmt.Errorf("statestore: closing %s: %w", tmp, cerr)
	}
	if err := s.hook(synced); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("statestore: renaming %s: %w", tmp, err)
	}
	return nil
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be synced there
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("statestore: syncing %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("statestore: syncing %s: %w", dir, err)
	}
	return nil
}
