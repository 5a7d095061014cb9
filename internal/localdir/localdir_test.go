//go:build unix

package localdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrivate: a missing folder is created private; one others may write,
// one another user owns and a symbolic link are refused (a key index in
// them could have been written by someone else).
func TestPrivate(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	if err := Private(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created %v, %v; want mode 0700", fi.Mode(), err)
	}
	if err := Private(dir); err != nil {
		t.Fatalf("again: %v", err)
	}

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Private(open); err != nil {
		t.Fatalf("a folder others may only read: %v", err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := Private(open); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("a folder of mode 0777: %v, want ErrNotPrivate", err)
	}

	// What the kubelet does with fsGroup at every mount: the folder (and
	// all in it) group-writable, setgid, owned by the pod's group, which
	// is one of the process's groups (issue 46 item 17: the example
	// crash-looped after a reschedule).
	pod := filepath.Join(base, "pod")
	if err := os.MkdirAll(filepath.Join(pod, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{pod, filepath.Join(pod, "sub")} {
		if err := os.Chown(d, -1, os.Getgid()); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o770|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
	}
	if err := Private(pod); err != nil {
		t.Fatalf("a folder writable by the process's own group (fsGroup): %v", err)
	}
	if err := Private(filepath.Join(pod, "sub")); err != nil {
		t.Fatalf("its subfolder: %v", err)
	}

	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := Private(link); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("a symbolic link: %v, want ErrNotPrivate", err)
	}

	if os.Getuid() != 0 {
		t.Log("not root: another user's folder is not made")
		return
	}
	theirs := filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if err := Private(theirs); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("another user's folder: %v, want ErrNotPrivate", err)
	}
	// Group-writable by a group the process is not in: refused.
	other := filepath.Join(base, "other-group")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, -1, 12345); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(other, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := Private(other); !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "group 12345") {
		t.Fatalf("a folder writable by another group: %v, want ErrNotPrivate naming the group", err)
	}
}
