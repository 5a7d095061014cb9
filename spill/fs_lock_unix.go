//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package spill

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on name, creating it if needed.
func lockFile(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// Another process may have removed the file (sweeping it as stale)
	// between our open and our flock: then we hold a lock on an orphan.
	if !sameFile(f, name) {
		f.Close()
		return nil, fmt.Errorf("lock %s: file replaced while locking: %w", name, ErrLocked)
	}
	return f, nil
}
