package membound

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

const mib = 1 << 20

func TestBound(t *testing.T) {
	for _, c := range []struct {
		budget  int64
		writers int
		want    int64
	}{
		{16 * mib, 1, 96 * mib},
		{32 * mib, 1, 128 * mib},
		{32 * mib, 4, 320 * mib},
		{16 * mib, 0, 96 * mib}, // no writer count: one
	} {
		if got := Bound(c.budget, c.writers); got != c.want {
			t.Errorf("Bound(%d MiB, %d) = %d MiB, want %d MiB", c.budget/mib, c.writers, got/mib, c.want/mib)
		}
	}
}

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		name           string
		bound, ceiling int64
		f              Figures
		want           int64
		floored        bool
	}{
		{
			// The binary's 52 MiB leave 44 of the bound.
			name: "bound", bound: 96 * mib, ceiling: 68 * mib,
			f:    Figures{RSS: 90 * mib, File: 52 * mib, GoMapped: 38 * mib, NonHeap: 6 * mib, Live: 16 * mib},
			want: 44 * mib,
		},
		{
			// A large budget: the ceiling is lower than the bound leaves.
			name: "ceiling", bound: 2112 * mib, ceiling: 1328 * mib,
			f:    Figures{RSS: 600 * mib, File: 55 * mib, GoMapped: 545 * mib, NonHeap: 10 * mib, Live: 300 * mib},
			want: 1328 * mib,
		},
		{
			// Memory outside the runtime besides the file pages (another
			// allocator's 10 MiB): the resident set less the runtime's.
			name: "outside", bound: 128 * mib, ceiling: 88 * mib,
			f:    Figures{RSS: 100 * mib, File: 50 * mib, GoMapped: 40 * mib, NonHeap: 6 * mib, Live: 20 * mib},
			want: 68 * mib,
		},
		{
			// A live heap of 24 MiB needs 6 + 24 + 24 MiB: more than the
			// 44 the bound leaves.
			name: "floor", bound: 96 * mib, ceiling: 68 * mib,
			f:    Figures{RSS: 100 * mib, File: 52 * mib, GoMapped: 48 * mib, NonHeap: 6 * mib, Live: 24 * mib},
			want: 54 * mib, floored: true,
		},
		{
			// The floor over the ceiling: the ceiling, the limit there was
			// without a governor.
			name: "floor over ceiling", bound: 96 * mib, ceiling: 68 * mib,
			f:    Figures{RSS: 120 * mib, File: 52 * mib, GoMapped: 68 * mib, NonHeap: 6 * mib, Live: 40 * mib},
			want: 68 * mib, floored: true,
		},
		{
			// A small live heap still gets MinHeadroom.
			name: "min headroom", bound: 70 * mib, ceiling: 68 * mib,
			f:    Figures{RSS: 60 * mib, File: 60 * mib, GoMapped: 10 * mib, NonHeap: 2 * mib, Live: 4 * mib},
			want: 2*mib + 4*mib + MinHeadroom, floored: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, floored := Limit(c.bound, c.ceiling, c.f)
			if got != c.want || floored != c.floored {
				t.Errorf("Limit = %.1f MiB (floored %v), want %.1f MiB (floored %v)", float64(got)/mib, floored, float64(c.want)/mib, c.floored)
			}
		})
	}
}

func TestReadFigures(t *testing.T) {
	keep := make([]byte, 8*mib)
	for i := range keep {
		keep[i] = byte(i)
	}
	runtime.GC()
	f := Read()
	runtime.KeepAlive(keep)
	if f.Live < 8*mib || f.GoMapped < f.Live+f.NonHeap {
		t.Errorf("figures %+v: want a live heap of at least 8 MiB inside what the runtime maps", f)
	}
	if runtime.GOOS == "linux" && (f.RSS < f.File || f.File == 0) {
		t.Errorf("figures %+v: want the binary's resident pages inside the resident set", f)
	}
}

// TestGovernor runs a real governor: it sets a limit inside [floor,
// ceiling] and gives back the limit it found.
func TestGovernor(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	debug.SetMemoryLimit(1 << 40)
	ceiling := int64(256 * mib)
	g := Start(context.Background(), 1<<40, ceiling, time.Millisecond)
	if got := debug.SetMemoryLimit(-1); got != ceiling {
		t.Errorf("limit while governed: %d MiB, want the ceiling, %d MiB (the bound is far above it)", got/mib, ceiling/mib)
	}
	time.Sleep(20 * time.Millisecond)
	s := g.Stop()
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("limit after Stop: %d, want the one Start found", got)
	}
	if s.MinLimit != ceiling || s.MaxLimit != ceiling || s.Floored != 0 || s.Bound != 1<<40 {
		t.Errorf("stats %+v: want every limit at the ceiling", s)
	}
	g.Stop() // a second Stop is harmless

	// A bound below what the process already holds: the floor decides.
	g = Start(context.Background(), mib, ceiling, time.Hour)
	got := debug.SetMemoryLimit(-1)
	s = g.Stop()
	if s.Floored != 1 || got < MinHeadroom || got >= ceiling {
		t.Errorf("a 1 MiB bound: limit %d MiB, stats %+v; want the floor (at least MinHeadroom, under the ceiling)", got/mib, s)
	}

	// A canceled context ends the adjustments; Stop still restores.
	ctx, cancel := context.WithCancel(context.Background())
	g = Start(ctx, 1<<40, ceiling, time.Millisecond)
	cancel()
	g.Stop()
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("limit after a canceled governor's Stop: %d, want the one Start found", got)
	}
}
