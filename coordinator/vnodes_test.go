package coordinator

import (
	"errors"
	"testing"
)

func TestSplitVnodes(t *testing.T) {
	parts, err := SplitVnodes(10, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range parts {
		got = append(got, FormatVnodes(p))
	}
	if want := []string{"0-3", "4-6", "7-9"}; !slicesEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := SplitVnodes(2, 3); err == nil {
		t.Fatal("more writers than vnodes: no error")
	}
}

func TestParseFormatVnodes(t *testing.T) {
	for in, want := range map[string]string{
		"0-127,200-255": "0-127,200-255",
		"7":             "7",
		"3,1,2, 9-10":   "1-3,9-10",
		"0-0,5-6,6-8":   "0,5-8",
	} {
		b, err := ParseVnodes(in, 256)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := FormatVnodes(b); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"", "5-3", "256", "a", "1-x", ","} {
		if _, err := ParseVnodes(bad, 256); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if FormatVnodes(nil) != "none" {
		t.Error("nil set")
	}
}

func TestVnodeOf(t *testing.T) {
	// Pinned: the router of every writer must agree on it.
	if a, b := VnodeOf([]byte("key-1"), 256), VnodeOf([]byte("user:42"), 256); a != 158 || b != 194 {
		t.Fatalf("VnodeOf = %d, %d; want 158, 194 (xxhash64 mod 256)", a, b)
	}
	if VnodeOf(nil, 1) != 0 {
		t.Fatal("one vnode")
	}
}

func TestStateRoundTripAndCorruption(t *testing.T) {
	b1, _ := ParseVnodes("0-3", 8)
	b2, _ := ParseVnodes("4-7", 8)
	s := State{
		LastCommitted: 41,
		Writers:       []WriterVnodes{{Writer: 1, Vnodes: b1}, {Writer: 2, Vnodes: b2}},
		Epochs: []RecordedEpoch{{Epoch: 42, Parts: []EpochPart{
			{Writer: 1, Vnodes: b1, Payload: []byte("a")}, {Writer: 2, Vnodes: b2, Payload: nil}}}},
	}
	enc := EncodeState(s)
	got, err := DecodeState(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastCommitted != 41 || len(got.Writers) != 2 || FormatVnodes(got.Writers[1].Vnodes) != "4-7" ||
		len(got.Epochs) != 1 || got.Epochs[0].Epoch != 42 || string(got.Epochs[0].Parts[0].Payload) != "a" ||
		len(got.Epochs[0].Parts[1].Payload) != 0 {
		t.Fatalf("round trip: %+v", got)
	}
	for i := range enc {
		bad := append([]byte(nil), enc...)
		bad[i] ^= 0x10
		if _, err := DecodeState(bad); !errors.Is(err, ErrCorruptState) {
			t.Fatalf("flipped byte %d: %v", i, err)
		}
	}
	if _, err := DecodeState(enc[:len(enc)-1]); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("truncated: %v", err)
	}
}

func TestMisusePanics(t *testing.T) {
	mustPanic := func(name string, f func(m *Machine)) {
		t.Helper()
		m, err := NewMachine(Config{Vnodes: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f(m)
	}
	mustPanic("advance without ready", func(m *Machine) { m.Advance() })
	mustPanic("step during ready", func(m *Machine) { m.Ready(); _ = m.Step(Tick{}) })
	mustPanic("ready twice", func(m *Machine) { m.Ready(); m.Ready() })
	mustPanic("late recovered", func(m *Machine) { _ = m.Step(Tick{}); _ = m.Step(Recovered{State: EncodeState(State{})}) })
	mustPanic("stray commit done", func(m *Machine) { _ = m.Step(CommitDone{Epoch: 1}) })
	mustPanic("duplicate writer", func(m *Machine) {
		b, _ := ParseVnodes("0", 2)
		_ = m.Step(Register{Writer: 1, Vnodes: b})
		_ = m.Step(Register{Writer: 1, Vnodes: b})
	})
	if _, err := NewMachine(Config{Vnodes: -1}); err == nil {
		t.Error("negative vnodes accepted")
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
