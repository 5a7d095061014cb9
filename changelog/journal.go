package changelog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// journalSegmentBytes is the size past which a journal starts a new
// segment file (at a line's end), so that a commit frees the ones before.
const journalSegmentBytes = 64 << 20

// Journal is a stream that cannot be read twice (a pipe, standard input)
// kept on local disk from the last committed line on, so that a run that
// must start again from what the table holds (another writer's commit won
// the race for a commit) reads the lines after it again instead of losing
// them. It reads its source as an io.Reader does, appending each byte to
// segment files in a folder of its own; Committed frees the segments whose
// lines a commit holds. Read is called from one goroutine; Committed from
// any.
type Journal struct {
	src     io.Reader
	dir     string
	segSize int64 // journalSegmentBytes; smaller in tests

	mu    sync.Mutex
	segs  []*segment // oldest first; the last is written to
	lines int64      // complete lines written
	err   error      // a write that failed: the journal is broken
}

// segment is one journal file: lines first+1 .. first+lines (the last
// may be partial), size bytes.
type segment struct {
	path         string
	f            *os.File
	first, lines int64
	size         int64
}

// NewJournal journals src in a new folder under dir (os.TempDir when
// empty). Close removes it.
func NewJournal(src io.Reader, dir string) (*Journal, error) {
	d, err := os.MkdirTemp(dir, "icesink-journal-")
	if err != nil {
		return nil, fmt.Errorf("changelog: a journal for the input: %w", err)
	}
	j := &Journal{src: src, dir: d, segSize: journalSegmentBytes}
	if err := j.newSegment(); err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	return j, nil
}

// newSegment starts a segment at the current line. Called with mu held
// (or before the journal is shared).
func (j *Journal) newSegment() error {
	path := filepath.Join(j.dir, fmt.Sprintf("segment-%012d", j.lines))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("changelog: journal of the input: %w", err)
	}
	j.segs = append(j.segs, &segment{path: path, f: f, first: j.lines})
	return nil
}

// Read reads the source and journals what it read.
func (j *Journal) Read(p []byte) (int, error) {
	n, err := j.src.Read(p)
	if n > 0 {
		if werr := j.write(p[:n]); werr != nil {
			return n, werr
		}
	}
	return n, err
}

func (j *Journal) write(b []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return j.err
	}
	for len(b) > 0 {
		s := j.segs[len(j.segs)-1]
		chunk := b
		if room := j.segSize - s.size; int64(len(b)) > room {
			// The segment ends with the line that takes it past its
			// size: the next begins at a line's start.
			from := max(room-1, 0)
			if i := bytes.IndexByte(b[from:], '\n'); i >= 0 {
				chunk = b[:from+int64(i)+1]
			}
		}
		if _, err := s.f.WriteAt(chunk, s.size); err != nil {
			j.err = fmt.Errorf("changelog: journal of the input: %w", err)
			return j.err
		}
		s.size += int64(len(chunk))
		nl := int64(bytes.Count(chunk, []byte{'\n'}))
		s.lines += nl
		j.lines += nl
		b = b[len(chunk):]
		if s.size >= j.segSize && chunk[len(chunk)-1] == '\n' {
			if err := j.newSegment(); err != nil {
				j.err = err
				return err
			}
		}
	}
	return nil
}

// Committed frees the segments whose lines are all in the table: line is
// the last line a commit holds.
func (j *Journal) Committed(line int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for len(j.segs) > 1 && j.segs[0].first+j.segs[0].lines <= line {
		s := j.segs[0]
		s.f.Close()
		os.Remove(s.path)
		j.segs = j.segs[1:]
	}
}

// Replay returns a reader of the journal from its oldest line kept on,
// then of the source (still journaled), and the number of lines before
// that oldest line: a decoder over it numbers its lines from there.
func (j *Journal) Replay() (io.Reader, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return nil, 0, j.err
	}
	rs := make([]io.Reader, 0, len(j.segs)+1)
	for _, s := range j.segs {
		rs = append(rs, io.NewSectionReader(s.f, 0, s.size))
	}
	return io.MultiReader(append(rs, j)...), j.segs[0].first, nil
}

// Bytes returns the bytes the journal holds on disk.
func (j *Journal) Bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	var n int64
	for _, s := range j.segs {
		n += s.size
	}
	return n
}

// Close removes the journal's files.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var errs []error
	for _, s := range j.segs {
		errs = append(errs, s.f.Close())
	}
	j.segs = nil
	errs = append(errs, os.RemoveAll(j.dir))
	return errors.Join(errs...)
}
