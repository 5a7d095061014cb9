package statestore

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stateStore is the coordinator's interface, repeated here: the store must
// satisfy it without importing package coordinator.
type stateStore interface {
	Save(ctx context.Context, id uint64, state []byte) error
	Latest(ctx context.Context) (id uint64, state []byte, err error)
}

var _ stateStore = (*Store)(nil)

func openT(t *testing.T, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o := s.opts
	return openT(t, o)
}

func randState(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

// dirTree lists every path under dir, relative and sorted.
func dirTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func metadataVersion(t *testing.T, dir string, id uint64) FormatVersion {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "chk-"+itoa(id), metadataName))
	if err != nil {
		t.Fatal(err)
	}
	return FormatVersion(uint16(data[8]) | uint16(data[9])<<8)
}

func itoa(id uint64) string { return strconv.FormatUint(id, 10) }

func mustLatest(t *testing.T, s *Store, wantID uint64, want []byte) {
	t.Helper()
	id, got, err := s.Latest(context.Background())
	if err != nil {
		t.Fatalf("Latest: %v", err)
	}
	if id != wantID || !bytes.Equal(got, want) {
		t.Fatalf("Latest = %d (%d bytes), want %d (%d bytes)", id, len(got), wantID, len(want))
	}
}

func TestRoundTripBothFormats(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 100})
	small, large := randState(1, 100), randState(2, 5000)
	if _, _, err := s.Latest(ctx); !errors.Is(err, ErrNoState) {
		t.Fatalf("empty Latest: %v", err)
	}
	ci, err := s.Checkpoint(ctx, 1, small)
	if err != nil || ci.Format != FormatV1Inline || ci.File != nil || ci.Size != 100 {
		t.Fatalf("Checkpoint small: %+v, %v", ci, err)
	}
	ci, err = s.Checkpoint(ctx, 2, large)
	if err != nil || ci.Format != FormatV2FileHandle || ci.File == nil ||
		*ci.File != (FileHandle{Path: "_state", Size: 5000, Checksum: crc32c(0, large)}) {
		t.Fatalf("Checkpoint large: %+v, %v", ci, err)
	}
	large[0] ^= 0xff // the store must not depend on the caller's slice
	large[0] ^= 0xff
	mustLatest(t, s, 2, large)
	if got, err := s.Read(ctx, 1); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("Read(1): %v", err)
	}
	if got := s.InMemoryBytes(); got != 100 {
		t.Fatalf("InMemoryBytes = %d, want 100 (the inline state only)", got)
	}

	s = reopen(t, s)
	mustLatest(t, s, 2, large)
	if got, err := s.Read(ctx, 1); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("Read(1) after reopen: %v", err)
	}
	if got := dirTree(t, s.opts.Dir); !slices.Equal(got, []string{"chk-1", "chk-1/_metadata", "chk-2", "chk-2/_metadata", "chk-2/_state"}) {
		t.Fatalf("layout %v", got)
	}
	if v := metadataVersion(t, s.opts.Dir, 1); v != FormatV1Inline {
		t.Fatalf("chk-1 version %v", v)
	}
	if v := metadataVersion(t, s.opts.Dir, 2); v != FormatV2FileHandle {
		t.Fatalf("chk-2 version %v", v)
	}
	if _, err := s.Read(ctx, 99); !errors.Is(err, ErrUnknownCheckpoint) {
		t.Fatalf("Read(99): %v", err)
	}
}

func TestEmptyState(t *testing.T) {
	for _, threshold := range []int{0, -1} {
		s := openT(t, Options{InFileEnabled: true, InlineThreshold: threshold})
		if _, err := s.Checkpoint(context.Background(), 1, nil); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s)
		id, st, err := s.Latest(context.Background())
		if err != nil || id != 1 || st == nil || len(st) != 0 {
			t.Fatalf("threshold %d: Latest = %d %v %v", threshold, id, st, err)
		}
	}
	// A negative threshold puts every non-empty state in a file.
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: -1})
	if ci, err := s.Checkpoint(context.Background(), 1, []byte{1}); err != nil || ci.File == nil {
		t.Fatalf("1 byte, threshold -1: %+v %v", ci, err)
	}
}

func TestInlineThresholdBoundary(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{InFileEnabled: true}) // default threshold
	const th = DefaultInlineThreshold
	for i, tc := range []struct {
		size int
		want FormatVersion
	}{{th - 1, FormatV1Inline}, {th, FormatV1Inline}, {th + 1, FormatV2FileHandle}} {
		id := uint64(i + 1)
		st := randState(id, tc.size)
		ci, err := s.Checkpoint(ctx, id, st)
		if err != nil {
			t.Fatal(err)
		}
		if ci.Format != tc.want || metadataVersion(t, s.opts.Dir, id) != tc.want {
			t.Fatalf("%d bytes: format %v, want %v", tc.size, ci.Format, tc.want)
		}
		_, err = os.Stat(filepath.Join(s.opts.Dir, "chk-"+itoa(id), stateFileName))
		if hasFile := err == nil; hasFile != (tc.want == FormatV2FileHandle) {
			t.Fatalf("%d bytes: state file present = %v", tc.size, hasFile)
		}
		got, err := s.Read(ctx, id)
		if err != nil || !bytes.Equal(got, st) {
			t.Fatalf("%d bytes: Read: %v", tc.size, err)
		}
	}
	if got := s.InMemoryBytes(); got != 2*th-1 {
		t.Fatalf("InMemoryBytes = %d, want %d", got, 2*th-1)
	}
}

// TestInFileOffWritesV1 checks rollback safety: with the option off, even a
// huge state is written inline in V1, and a release without the feature
// (reader capped at V1) opens the directory and restores it.
func TestInFileOffWritesV1(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{})
	big := randState(3, 4<<20) // 200x the threshold
	ci, err := s.Checkpoint(ctx, 1, big)
	if err != nil || ci.Format != FormatV1Inline || ci.File != nil {
		t.Fatalf("Checkpoint: %+v %v", ci, err)
	}
	if got := dirTree(t, s.opts.Dir); !slices.Equal(got, []string{"chk-1", "chk-1/_metadata"}) {
		t.Fatalf("layout %v", got)
	}
	s.Close()
	old := openT(t, Options{Dir: s.opts.Dir, maxReadVersion: FormatV1Inline})
	mustLatest(t, old, 1, big)
}

// TestOldReleaseRejectsV2Dir opens a directory holding a V2 checkpoint with
// a release that reads only V1: Open fails with the version error.
func TestOldReleaseRejectsV2Dir(t *testing.T) {
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 10})
	if err := s.Save(context.Background(), 4, randState(4, 11)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(context.Background(), Options{Dir: s.opts.Dir, maxReadVersion: FormatV1Inline})
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Version != 2 || ve.Max != 1 ||
		!strings.Contains(err.Error(), filepath.Join("chk-4", "_metadata")+": written by a newer version (2); this release reads up to 1") {
		t.Fatalf("old release Open: %v", err)
	}
}

func TestStateFileCorruption(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mangle func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"empty", func(b []byte) []byte { return nil }},
		{"extended", func(b []byte) []byte { return append(b, 0) }},
		{"bit flip first", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"bit flip middle", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }},
		{"bit flip last", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openT(t, Options{InFileEnabled: true, InlineThreshold: 16})
			if err := s.Save(ctx, 1, randState(5, 1000)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(s.opts.Dir, "chk-1", stateFileName)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.mangle(data), 0o644); err != nil {
				t.Fatal(err)
			}
			check := func(s *Store) {
				_, _, err = s.Latest(ctx)
				var ce *CorruptionError
				if !errors.As(err, &ce) || ce.Path != path {
					t.Fatalf("Latest: %v, want corruption of %s", err, path)
				}
			}
			check(s)
			check(reopen(t, s))
		})
	}
}

// TestMetadataCorruptionOnDisk flips a bit in, and truncates, a _metadata
// file on disk: Open reports corruption naming the file.
func TestMetadataCorruptionOnDisk(t *testing.T) {
	for _, inFile := range []bool{false, true} {
		for _, mangle := range []func([]byte) []byte{
			func(b []byte) []byte { return b[:len(b)-3] },
			func(b []byte) []byte { b[len(b)-6] ^= 4; return b },
			func(b []byte) []byte { b[9] ^= 1; return b }, // in the version field
		} {
			s := openT(t, Options{InFileEnabled: inFile, InlineThreshold: 16})
			if err := s.Save(context.Background(), 1, randState(6, 100)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			path := filepath.Join(s.opts.Dir, "chk-1", metadataName)
			data, _ := os.ReadFile(path)
			if err := os.WriteFile(path, mangle(data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(context.Background(), s.opts)
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.Path != path {
				t.Fatalf("in-file %v: Open: %v, want corruption of %s", inFile, err, path)
			}
		}
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 50, Retain: 2})
	var states [][]byte
	for id := uint64(1); id <= 5; id++ {
		st := randState(id, 40+int(id%2)*60) // odd ids in a file, even inline
		states = append(states, st)
		if err := s.Save(ctx, id, st); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []uint64 {
		var out []uint64
		for _, c := range s.Checkpoints() {
			out = append(out, c.ID)
		}
		return out
	}
	if got := ids(); !slices.Equal(got, []uint64{4, 5}) {
		t.Fatalf("retained %v", got)
	}
	if got := dirTree(t, s.opts.Dir); !slices.Equal(got, []string{"chk-4", "chk-4/_metadata", "chk-5", "chk-5/_metadata", "chk-5/_state"}) {
		t.Fatalf("layout %v", got)
	}

	if err := s.Dispose(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Dispose(ctx, 5); err != nil { // already gone: no-op
		t.Fatal(err)
	}
	mustLatest(t, s, 4, states[3])
	if got := dirTree(t, s.opts.Dir); !slices.Equal(got, []string{"chk-4", "chk-4/_metadata"}) {
		t.Fatalf("layout after Dispose %v", got)
	}
	if err := s.Save(ctx, 3, states[2]); !errors.Is(err, ErrIDNotIncreasing) {
		t.Fatalf("Save(3) after 4: %v", err)
	}

	// Retention also applies at Open, e.g. after lowering Retain.
	for id := uint64(6); id <= 7; id++ {
		if err := s.Save(ctx, id, randState(id, 200)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	o := s.opts
	o.Retain = 1
	s = openT(t, o)
	if got := ids(); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("retained after reopen with Retain 1: %v", got)
	}
	if got := dirTree(t, o.Dir); !slices.Equal(got, []string{"chk-7", "chk-7/_metadata", "chk-7/_state"}) {
		t.Fatalf("layout %v", got)
	}
}

func TestSweepOrphansAtOpen(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 10})
	if err := s.Save(ctx, 3, randState(3, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, 4, randState(4, 5)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	dir := s.opts.Dir
	write := func(rel string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".tmp-disposed-chk-1/_metadata") // a disposal cut short
	write("chk-9/_state")                  // partial: no _metadata
	write("chk-9/.tmp-_metadata-123")      //
	write("chk-10/.tmp-_state-5")          // partial
	write("chk-3/.tmp-_metadata-77")       // temp file in a complete dir
	write("chk-3/_state-unreferenced")     // state file no _metadata references
	write("chk-4/_state")                  // chk-4 is inline: unreferenced
	write("NOTES")                         // not the store's: left alone
	write("chk-x/whatever")                // not a name the store writes
	write("chk-007/_metadata")             // idem
	s = openT(t, s.opts)
	want := []string{"NOTES", "chk-007", "chk-007/_metadata", "chk-3", "chk-3/_metadata", "chk-3/_state",
		"chk-4", "chk-4/_metadata", "chk-x", "chk-x/whatever"}
	if got := dirTree(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after sweep\n got %v\nwant %v", got, want)
	}
	mustLatest(t, s, 4, randState(4, 5))
}

func TestMaxStateBytes(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 100, MaxStateBytes: 1000})
	if err := s.Save(ctx, 1, randState(1, 1000)); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	err := s.Save(ctx, 2, randState(2, 1001))
	if !errors.Is(err, ErrStateTooLarge) || !strings.Contains(err.Error(), "1001 bytes exceeds MaxStateBytes 1000") {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.opts.Dir, "chk-2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("chk-2 written: %v", err)
	}
	mustLatest(t, s, 1, randState(1, 1000))

	// Reading enforces the limit too: inline at Open, in a file when read.
	if err := s.Save(ctx, 3, randState(3, 50)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	o := s.opts
	o.MaxStateBytes = 999
	s = openT(t, o)
	if _, err := s.Read(ctx, 1); !errors.Is(err, ErrStateTooLarge) {
		t.Fatalf("Read over the limit: %v", err)
	}
	o.MaxStateBytes = 40
	o.InFileEnabled = false
	if err := s.Save(ctx, 4, randState(4, 40)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(ctx, o); !errors.Is(err, ErrStateTooLarge) {
		t.Fatalf("Open with an inline state over the limit: %v", err)
	}
}

func TestNoStateError(t *testing.T) {
	theirs := errors.New("coordinator: no state")
	s := openT(t, Options{NoStateError: theirs})
	_, _, err := s.Latest(context.Background())
	if !errors.Is(err, ErrNoState) || !errors.Is(err, theirs) {
		t.Fatalf("Latest on empty: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{})
	if err := s.Save(ctx, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, 2, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Save: %v", err)
	}
	if _, _, err := s.Latest(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Latest: %v", err)
	}
	if err := s.Dispose(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dispose: %v", err)
	}
	if _, err := s.NewRestorer().Restore(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Restore: %v", err)
	}
	if _, err := Open(ctx, Options{}); err == nil {
		t.Fatal("Open without Dir succeeded")
	}
}

func TestCancelledCheckpointLeavesNothing(t *testing.T) {
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 10})
	if err := s.Save(context.Background(), 1, []byte("first")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.opts.hook = func(step writeStep) error {
		if step == stepStatePartial {
			cancel()
		}
		return nil
	}
	if err := s.Save(ctx, 2, randState(2, 1000)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Save: %v", err)
	}
	if got := dirTree(t, s.opts.Dir); !slices.Equal(got, []string{"chk-1", "chk-1/_metadata"}) {
		t.Fatalf("layout %v", got)
	}
	s.opts.hook = nil
	mustLatest(t, s, 1, []byte("first"))
	if err := s.Save(context.Background(), 2, randState(2, 1000)); err != nil {
		t.Fatalf("retry: %v", err)
	}
}
