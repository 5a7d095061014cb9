// Package localdir owns the local folders icesink keeps state in between
// runs (key indexes, the coordinator's checkpoints): where they are by
// default, and that no other local user can have planted or can read what
// is in them.
package localdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// ErrNotPrivate is returned by Private for a folder that another local
// user owns or may write to: what it holds cannot be trusted.
var ErrNotPrivate = errors.New("folder is not private to this user")

// Private creates dir (mode 0700, with its parents) when it is missing, and
// checks that it is a folder (not a symbolic link) owned by this process's
// user that no other user may write to, but through one of this process's
// own groups; otherwise it fails with ErrNotPrivate naming the folder and
// why. (Kubernetes' fsGroup makes a volume's folders group-writable, owned
// by the pod's group, at every mount: the pod's own processes only.)
func Private(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a folder (%s)", ErrNotPrivate, dir, fi.Mode().Type())
	}
	uid, gid, ok := owner(fi)
	if ok && uid != os.Getuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, this process runs as uid %d; remove it or choose another folder", ErrNotPrivate, dir, uid, os.Getuid())
	}
	if !ownerChecked {
		return nil
	}
	perm := fi.Mode().Perm()
	if perm&0o002 != 0 {
		return fmt.Errorf("%w: %s has mode %v, writable by every user; chmod o-w it or choose another folder", ErrNotPrivate, dir, perm)
	}
	if perm&0o020 != 0 && !(ok && ownGroup(gid)) {
		return fmt.Errorf("%w: %s has mode %v, writable by group %d, which is not one of this process's groups; chmod g-w it or choose another folder", ErrNotPrivate, dir, perm, gid)
	}
	return nil
}

// ownGroup reports whether gid is this process's group or one of its
// supplementary groups.
func ownGroup(gid int) bool {
	if gid == os.Getgid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, gid)
}

// DefaultKeyIndexBase is the folder under which the writers keep their key
// indexes between runs when the user names none: the user's cache folder
// (icesink/keyindex), or, without one, a folder of the system's temporary
// folder named for the user's id. Never a name shared by all users.
func DefaultKeyIndexBase() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "icesink", "keyindex")
	}
	return filepath.Join(os.TempDir(), "icesink-keyindex-"+strconv.Itoa(os.Getuid()))
}
