package statestore

import (
	"context"
	"errors"
	"io"
	"os"
)

// Configuration keys of the two options users set, as the CLI and the
// configuration file spell them.
const (
	KeyInlineThreshold = "coordinator-state-inline-threshold"
	KeyInFileEnabled   = "coordinator-state-in-file.enabled"
)

// Defaults of Options.
const (
	DefaultInlineThreshold       = 20 << 10 // 20 KiB
	DefaultRetain                = 3
	DefaultMaxStateBytes   int64 = 1 << 30 // 1 GiB
)

// OpenFunc opens a state file for reading. The store closes the returned
// stream exactly once, possibly from another goroutine while a Read is in
// progress (to stop a superseded restore), so the stream's Close must be
// safe to call concurrently with Read; *os.File is. ctx is cancelled when
// the read is no longer wanted; an OpenFunc may honour it or ignore it.
type OpenFunc func(ctx context.Context, path string) (io.ReadCloser, error)

// Options configure a Store. The zero value of every field but Dir selects
// its default; Open fills them in with ensureDefaults.
type Options struct {
	// Dir is the state directory; checkpoints live in Dir/chk-<id>/. It is
	// created if missing. One Store owns a Dir at a time. Required.
	Dir string

	// InlineThreshold is the largest state, in bytes, stored inline in
	// _metadata (key coordinator-state-inline-threshold). Larger states go
	// to their own file when InFileEnabled is set. It is separate from any
	// other threshold so that memory can be balanced against small files.
	// A negative value puts every non-empty state in a file.
	// Default: 20 KiB (DefaultInlineThreshold).
	InlineThreshold int

	// InFileEnabled lets states above InlineThreshold be written to their own
	// file (format V2) (key coordinator-state-in-file.enabled). When false,
	// every checkpoint is written in format V1, readable by a release
	// without this feature, whatever its size. Default: false.
	InFileEnabled bool

	// Retain is how many of the newest checkpoints are kept; older ones are
	// disposed of (directory, _metadata and state file) after each
	// Checkpoint and at Open. Default: 3 (DefaultRetain).
	Retain int

	// MaxStateBytes is a hard limit on one state's size, enforced when
	// writing (nothing is written) and when reading. Default: 1 GiB
	// (DefaultMaxStateBytes).
	MaxStateBytes int64

	// OpenFile opens state files for Read, Latest and restores; tests inject
	// streams that block. Default: os.Open.
	OpenFile OpenFunc

	// NoStateError, if set, is also matched (errors.Is) by the error Latest
	// and RestoreLatest return when the store is empty, so that the store
	// satisfies an interface whose "no state" sentinel is defined elsewhere.
	// Default: nil (only ErrNoState matches).
	NoStateError error

	// ReportError receives errors that do not fail the call that met them:
	// a failed deletion of a disposed checkpoint's files (swept again at
	// the next Open). It must not call back into the store. Default: nil
	// (ignored).
	ReportError func(err error)

	// maxReadVersion is the highest format version decoded; tests set
	// FormatV1Inline to simulate a release without the in-file feature.
	// Default: FormatLatest.
	maxReadVersion FormatVersion

	// hook, if set, is called at each step of a checkpoint write and of a
	// disposal; returning errCrash simulates a crash at that point (nothing
	// is cleaned up and the store stops working). Tests only.
	hook func(step writeStep) error
}

// ensureDefaults returns a copy of o with every unset field at its default.
func (o Options) ensureDefaults() Options {
	if o.InlineThreshold == 0 {
		o.InlineThreshold = DefaultInlineThreshold
	}
	if o.Retain <= 0 {
		o.Retain = DefaultRetain
	}
	if o.MaxStateBytes <= 0 {
		o.MaxStateBytes = DefaultMaxStateBytes
	}
	if o.OpenFile == nil {
		o.OpenFile = openOS
	}
	if o.maxReadVersion == 0 {
		o.maxReadVersion = FormatLatest
	}
	return o
}

func (o Options) validate() error {
	if o.Dir == "" {
		return errors.New("statestore: Options.Dir is empty")
	}
	return nil
}

func openOS(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return os.Open(path)
}

func (o Options) report(err error) {
	if err != nil && o.ReportError != nil {
		o.ReportError(err)
	}
}
