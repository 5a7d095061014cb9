package procstat

import (
	"runtime"
	"testing"
)

func TestRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the figures come from /proc/self/status")
	}
	s := Read()
	if s.RSS <= 0 || s.HWM < s.RSS || s.File <= 0 || s.File > s.RSS {
		t.Errorf("status %+v", s)
	}
	if m := MemTotal(); m < s.RSS {
		t.Errorf("MemTotal %d below RSS %d", m, s.RSS)
	}
	if got := parseKB([]byte("\t  1234 kB")); got != 1234<<10 {
		t.Errorf("parseKB = %d", got)
	}
}
