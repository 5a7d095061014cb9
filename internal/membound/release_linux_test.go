//go:build linux

package membound

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestReleaseMapped: paging out a file's read-only mapping takes its pages
// out of the resident set, leaves them readable, and reads back only the
// pages touched. A file of the test's
// own, which nothing else touches, not the test binary: under load the
// runtime's threads fault the binary's hot pages back at once.
func TestReleaseMapped(t *testing.T) {
	const size = 4 << 20
	path := filepath.Join(t.TempDir(), "mapped")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i / 4096)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	sum := 0
	for i := 0; i < size; i += 4096 {
		sum += int(m[i])
	}
	before := residentOf(t, path)
	spanned, err := releaseMapped(path)
	if errors.Is(err, unix.EINVAL) {
		t.Skipf("the kernel has no MADV_PAGEOUT: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := residentOf(t, path)
	t.Logf("the mapping's resident pages: %d KiB before, %d KiB after; it spans %d KiB", before>>10, after>>10, spanned>>10)
	if spanned != size {
		t.Errorf("released mappings span %d bytes, want the file's %d", spanned, size)
	}
	if before < size/2 || after > before/4 {
		t.Errorf("resident %d KiB before the release (the test read every page), %d KiB after: want most of them gone", before>>10, after>>10)
	}
	// Read back one page in 16: under MADV_RANDOM each comes back alone,
	// not with the read-ahead around it (in a large folio a fault maps
	// whole). Only where the release took the pages out of the page cache
	// too: a tmpfs without swap keeps them, and a fault maps the cached
	// pages around it whatever the advice.
	cached := make([]byte, size/4096)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), size, uintptr(unsafe.Pointer(&cached[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	again := 0
	for i := 0; i < size; i += 16 * 4096 {
		again += int(m[i])
	}
	sparse := residentOf(t, path)
	t.Logf("one page in 16 read back: %d KiB resident; %d of %d pages were in the page cache", sparse>>10, cachedPages(cached), size/4096)
	if cachedPages(cached) <= size/4096/8 && sparse > size/4 {
		t.Errorf("one page in 16 read back after the release: %d KiB resident, want at most a quarter of the %d KiB (each page read alone)", sparse>>10, size>>10)
	}
	for i := 0; i < size; i += 4096 {
		if i%(16*4096) == 0 {
			continue
		}
		again += int(m[i])
	}
	if again != sum {
		t.Errorf("the pages read back sum to %d, want %d", again, sum)
	}
}

// TestReleaseBinary: the governor releases the binary's pages at Start.
func TestReleaseBinary(t *testing.T) {
	spanned, err := ReleaseBinary()
	if errors.Is(err, unix.EINVAL) {
		t.Skipf("the kernel has no MADV_PAGEOUT: %v", err)
	}
	if err != nil || spanned <= 0 {
		t.Fatalf("released %d bytes of mappings, %v: want the binary's", spanned, err)
	}
	g := Start(t.Context(), 1<<40, 1<<40, Interval)
	if s := g.Stop(); s.Releases != 1 || s.ReleaseErr != nil {
		t.Errorf("governor stats %+v: want one release at Start", s)
	}
}

// cachedPages counts the pages mincore found in the page cache.
func cachedPages(vec []byte) int {
	n := 0
	for _, b := range vec {
		n += int(b & 1)
	}
	return n
}

// TestGovernorReleases: after Start the governor releases the pages every
// release tick only while the process comes near its bound, and between
// ticks when the resident set is within NearBound of the bound.
func TestGovernorReleases(t *testing.T) {
	if _, err := ReleaseBinary(); err != nil {
		t.Skipf("the binary's pages cannot be released here: %v", err)
	}
	const tick, never = 5 * time.Millisecond, time.Hour
	for _, c := range []struct {
		name                  string
		bound                 int64
		releaseEvery, nearGap time.Duration
		many                  bool
	}{
		{"over the bound, gaps capped at the period", 1 << 20, tick, never, true},
		{"over the bound, near it", 1 << 20, never, tick, true},
		{"over the bound, no trigger", 1 << 20, never, never, false},
		{"far under it", 1 << 50, tick, tick, false},
	} {
		g := start(t.Context(), c.bound, 1<<50, time.Millisecond, c.releaseEvery, c.nearGap)
		time.Sleep(200 * time.Millisecond)
		s := g.Stop()
		if s.ReleaseErr != nil {
			t.Fatalf("%s: %v", c.name, s.ReleaseErr)
		}
		if many := s.Releases > 1; many != c.many {
			t.Errorf("%s (resident set %d KiB, bound %d KiB): %d releases in 200 ms, want more than one: %v",
				c.name, Read().RSS>>10, c.bound>>10, s.Releases, c.many)
		}
	}

	// A process that stays over its bound: the releases near it back
	// off (1, 2, 4 ... ms apart: about 8 in 200 ms, against one per
	// adjustment, 1 ms apart, without the backoff).
	g := start(t.Context(), 1<<20, 1<<50, time.Millisecond, never, time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	s := g.Stop()
	if s.Releases < 2 || s.Releases > 12 {
		t.Errorf("staying over the bound: %d releases in 200 ms, want 2 to 12 (backing off from 1 ms)", s.Releases)
	}
}

// residentOf is the resident size of the process's read-only mappings of
// the file at path, from /proc/self/smaps.
func residentOf(t *testing.T, path string) int64 {
	t.Helper()
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
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			// A mapping's header: address perms offset dev inode [path].
			mine = len(fields) >= 6 && strings.Join(fields[5:], " ") == path && !strings.Contains(fields[1], "w")
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
	return rss
}

// TestNearBoundBackoff steps a governor's adjustments by hand: releases
// near the bound come at least nearGap apart, the gap doubles with each
// one in a row, and it starts over once the resident set leaves the
// bound; within a quarter of the bound (not near it) the releases come
// releaseEvery apart.
func TestNearBoundBackoff(t *testing.T) {
	if _, err := ReleaseBinary(); err != nil {
		t.Skipf("the binary's pages cannot be released here: %v", err)
	}
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	// Bounds the process is over, far under, and within a quarter of but
	// not within NearBound of (taken from the resident set at the step).
	const over, under, quarter = 1 << 20, 1 << 50, 0
	g := &Governor{bound: over, ceiling: 1 << 50, nearGap: time.Second, releaseEvery: 10 * time.Second}
	for i, step := range []struct {
		bound   int64
		since   time.Duration // since the last release
		release bool
	}{
		{over, 1500 * time.Millisecond, true},  // gap 1 s
		{over, 1500 * time.Millisecond, false}, // gap 2 s now
		{over, 2500 * time.Millisecond, true},
		{over, 3500 * time.Millisecond, false}, // gap 4 s now
		{under, time.Hour, false},              // away from the bound: gap 1 s again
		{over, 1500 * time.Millisecond, true},
		{quarter, 9 * time.Second, false}, // the periodic release is not due
		{quarter, 11 * time.Second, true},
	} {
		g.bound = step.bound
		if g.bound == quarter {
			g.bound = Read().RSS * 6 / 5
		}
		g.last = time.Now().Add(-step.since)
		before := g.stats.Releases
		g.adjust()
		if released := g.stats.Releases > before; released != step.release {
			t.Fatalf("step %d (bound %d, %v since the last release, %d in a row): released %v, want %v",
				i, g.bound, step.since, g.near, released, step.release)
		}
		if g.stats.ReleaseErr != nil {
			t.Fatal(g.stats.ReleaseErr)
		}
	}
}
