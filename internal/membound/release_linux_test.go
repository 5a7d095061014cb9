//go:build linux

package membound

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReleaseBinary: releasing the test binary's pages takes most of its
// resident read-only pages out of the resident set (package
// initialization touched more of them than the test needs again at once),
// and a governor releases them at Start.
func TestReleaseBinary(t *testing.T) {
	before := binaryResident(t)
	spanned, err := ReleaseBinary()
	if errors.Is(err, unix.EINVAL) {
		t.Skipf("the kernel has no MADV_PAGEOUT: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := binaryResident(t)
	t.Logf("the binary's resident read-only pages: %d KiB before, %d KiB after; its read-only mappings span %d KiB", before>>10, after>>10, spanned>>10)
	if spanned < before {
		t.Errorf("the read-only mappings span %d KiB, %d KiB of them were resident: the binary's mappings were not all found", spanned>>10, before>>10)
	}
	if after > before*3/4 {
		t.Errorf("the binary's resident read-only pages: %d KiB after the release, %d KiB before: want at least a quarter of them gone", after>>10, before>>10)
	}
	g := Start(t.Context(), 1<<40, 1<<40, Interval)
	if s := g.Stop(); s.Releases != 1 || s.ReleaseErr != nil {
		t.Errorf("governor stats %+v: want one release at Start", s)
	}
}

// binaryResident is the resident size of the executable's read-only
// mappings, from /proc/self/smaps.
func binaryResident(t *testing.T) int64 {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rss int64
	mine := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 6 && strings.Contains(fields[0], "-"):
			mine = strings.Join(fields[5:], " ") == exe && !strings.Contains(fields[1], "w")
		case len(fields) == 3 && fields[0] == "Rss:" && mine:
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps line %q: %v", sc.Text(), err)
			}
			rss += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rss == 0 {
		t.Fatalf("no resident read-only mapping of %s in /proc/self/smaps", exe)
	}
	return rss
}
