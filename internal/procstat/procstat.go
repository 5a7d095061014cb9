// Package procstat reads the process's memory figures from the kernel
// (/proc/self/status on Linux): what the benchmarks report, the --stats
// line shows and the soft memory limit leaves room for.
package procstat

import (
	"bytes"
	"os"
	"strconv"
)

// Status is the process's resident memory in bytes; zeros where the
// kernel does not tell (off Linux).
type Status struct {
	RSS  int64 // VmRSS: resident now
	HWM  int64 // VmHWM: the peak of RSS
	File int64 // RssFile: resident pages mapped from files (the binary's own)
}

// Read returns the process's Status.
func Read() Status {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Status{}
	}
	var s Status
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		name, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(name) {
		case "VmRSS":
			s.RSS = parseKB(rest)
		case "VmHWM":
			s.HWM = parseKB(rest)
		case "RssFile":
			s.File = parseKB(rest)
		}
	}
	return s
}

// MemTotal returns the machine's memory (MemTotal of /proc/meminfo), 0
// where the kernel does not tell.
func MemTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("MemTotal:")); ok {
			return parseKB(v)
		}
	}
	return 0
}

// parseKB reads "  1234 kB" as bytes (0 if it is not a number).
func parseKB(b []byte) int64 {
	b = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(b), []byte("kB")))
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return n << 10
}
