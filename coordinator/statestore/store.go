package statestore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Store keeps the coordinator's checkpointed state in a state directory.
// It is safe for concurrent use; checkpoint writes are serialized.
//
// For every retained checkpoint the store keeps in memory either the state
// bytes (inline checkpoints, as Flink's JobManager does) or only a
// FileHandle (checkpoints whose state is in a file).
type Store struct {
	opts Options

	writeMu sync.Mutex // serializes Checkpoint, Dispose and Close

	mu        sync.Mutex
	retained  []*checkpoint // ascending id
	closed    bool
	crashed   bool // a test hook simulated a crash
	restorers map[*Restorer]struct{}
}

// checkpoint is a retained checkpoint as held in memory.
type checkpoint struct {
	id      uint64
	version FormatVersion
	size    int64
	inline  []byte      // inline state; nil for a file
	file    *FileHandle // nil for inline
}

// CheckpointInfo describes a retained checkpoint.
type CheckpointInfo struct {
	ID     uint64        // the checkpoint id given to Checkpoint
	Format FormatVersion // the format its _metadata was written in
	Size   int64         // state length in bytes
	File   *FileHandle   // nil when the state is inline
}

func (c *checkpoint) info() CheckpointInfo {
	ci := CheckpointInfo{ID: c.id, Format: c.version, Size: c.size}
	if c.file != nil {
		h := *c.file
		ci.File = &h
	}
	return ci
}

// Open opens the state directory opts.Dir, creating it if needed. It sweeps
// what a crash can leave behind (temporary files, checkpoint directories
// without _metadata, files in a checkpoint directory that its _metadata
// does not reference), disposes of complete checkpoints beyond the newest
// opts.Retain, and loads the _metadata of the rest.
//
// Open fails if a retained _metadata is corrupt (*CorruptionError) or was
// written by a newer release (*VersionError); remove that checkpoint's
// directory to start from the previous one. State files are verified when
// read, not at Open.
func Open(ctx context.Context, opts Options) (*Store, error) {
	o := opts.ensureDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Store{opts: o, restorers: make(map[*Restorer]struct{})}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("statestore: creating %s: %w", o.Dir, err)
	}
	if err := s.sweep(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) chkDir(id uint64) string {
	return filepath.Join(s.opts.Dir, fmt.Sprintf("%s%d", chkPrefix, id))
}

func (s *Store) hook(step writeStep) error {
	if s.opts.hook == nil {
		return nil
	}
	return s.opts.hook(step)
}

// Checkpoints returns the retained checkpoints, oldest first.
func (s *Store) Checkpoints() []CheckpointInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CheckpointInfo, len(s.retained))
	for i, c := range s.retained {
		out[i] = c.info()
	}
	return out
}

// InMemoryBytes returns the state bytes the store holds in memory for its
// retained checkpoints: the sum of their inline states. File-backed
// checkpoints count nothing.
func (s *Store) InMemoryBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, c := range s.retained {
		n += int64(len(c.inline))
	}
	return n
}

func (s *Store) usableLocked() error {
	if s.closed || s.crashed {
		return ErrClosed
	}
	return nil
}

func (s *Store) lookup(id uint64) (*checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	for _, c := range s.retained {
		if c.id == id {
			return c, nil
		}
	}
	return nil, fmt.Errorf("statestore: checkpoint %d in %s: %w", id, s.opts.Dir, ErrUnknownCheckpoint)
}

func (s *Store) latest() (*checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	if len(s.retained) == 0 {
		return nil, s.noState()
	}
	return s.retained[len(s.retained)-1], nil
}

func (s *Store) noState() error {
	if s.opts.NoStateError != nil {
		return fmt.Errorf("statestore: %s: %w (%w)", s.opts.Dir, ErrNoState, s.opts.NoStateError)
	}
	return fmt.Errorf("statestore: %s: %w", s.opts.Dir, ErrNoState)
}

// Read returns the state of the retained checkpoint id, reading and
// verifying its state file on the caller's goroutine if it has one. The
// returned slice is the caller's.
func (s *Store) Read(ctx context.Context, id uint64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	return s.readCheckpoint(ctx, c)
}

// Latest returns the newest retained checkpoint's id and state, reading its
// state file on the caller's goroutine if it has one (use a Restorer to read
// off the caller's goroutine). With no checkpoint it returns an error
// matching ErrNoState (and Options.NoStateError). A state file that fails
// verification is an error; Latest does not fall back to an older
// checkpoint.
func (s *Store) Latest(ctx context.Context) (uint64, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	c, err := s.latest()
	if err != nil {
		return 0, nil, err
	}
	state, err := s.readCheckpoint(ctx, c)
	if err != nil {
		return 0, nil, err
	}
	return c.id, state, nil
}

func (s *Store) readCheckpoint(ctx context.Context, c *checkpoint) ([]byte, error) {
	if c.file == nil {
		return bytes.Clone(c.inline), nil
	}
	return readStateFile(ctx, s.opts, filepath.Join(s.chkDir(c.id), c.file.Path), *c.file)
}

// Close closes the store and every restorer made by NewRestorer: in-flight
// restores are stopped (their streams closed from another goroutine) and
// deliver nothing. Close waits for a checkpoint write in progress but not
// for stopped reads; Restorer.Wait does. Later calls return ErrClosed.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	rs := make([]*Restorer, 0, len(s.restorers))
	for r := range s.restorers {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	for _, r := range rs {
		_ = r.Close()
	}
	return nil
}
