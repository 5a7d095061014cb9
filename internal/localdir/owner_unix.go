//go:build unix

package localdir

import (
	"io/fs"
	"syscall"
)

// ownerChecked: this system has owners and permission bits to check.
const ownerChecked = true

// owner returns the uid and gid owning fi's file.
func owner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
