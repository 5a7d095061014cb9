//go:build linux

package membound

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReleaseBinary asks the kernel to reclaim the resident pages of the
// executable's read-only mappings (its code and constant data;
// MADV_PAGEOUT, Linux 5.4 and later) and returns the bytes those mappings
// span. Pages the process still uses come back on their next access, from
// the page cache or the file; the others (package initialization, start-up
// paths) stay out of its resident set. The writable data mapping is left
// alone. Pages another process maps too are not reclaimed.
//
// The mappings are also marked for random access (MADV_RANDOM): a page
// faulted back in is then read alone, without read-ahead. Read ahead, it
// comes back in a large folio of the page cache (ext4 on Linux 6.16 and
// later), and a fault maps the whole folio: touching one byte of the
// binary put up to 2 MiB back in the resident set. A 16 MiB writer's
// run over 1,000 commits peaked at 98-101 MiB with it, 108 without.
func ReleaseBinary() (int64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("membound: releasing the binary's pages: %w", err)
	}
	return releaseMapped(exe)
}

// releaseMapped pages out the process's read-only mappings of the file at
// path, marks them for random access, and returns the bytes they span.
func releaseMapped(path string) (int64, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("membound: releasing the pages of %s: %w", path, err)
	}
	defer f.Close()
	var spanned int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != path || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return spanned, fmt.Errorf("membound: releasing the pages of %s: /proc/self/maps line %q", path, sc.Text())
		}
		for _, advice := range []uintptr{unix.MADV_PAGEOUT, unix.MADV_RANDOM} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), advice); errno != 0 {
				return spanned, fmt.Errorf("membound: releasing the pages of %s (%s): %w", path, fields[0], errno)
			}
		}
		spanned += int64(end - start)
	}
	if err := sc.Err(); err != nil {
		return spanned, fmt.Errorf("membound: releasing the pages of %s: reading /proc/self/maps: %w", path, err)
	}
	return spanned, nil
}
