//go:build !linux

package membound

import (
	"errors"
	"fmt"
)

// ReleaseBinary releases nothing off Linux (MADV_PAGEOUT is Linux's): it
// returns an error wrapping errors.ErrUnsupported.
func ReleaseBinary() (int64, error) {
	return 0, fmt.Errorf("membound: releasing the binary's pages: %w off Linux", errors.ErrUnsupported)
}
