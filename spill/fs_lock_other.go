//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package spill

import "io"

// lockFile is unsupported here: sets then run without a lock and the stale
// sweep skips every folder.
func lockFile(name string) (io.Closer, error) { return nil, ErrLockUnsupported }
