package statestore

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// crashAt returns a hook that simulates a crash the first time step is
// reached.
func crashAt(step writeStep) func(writeStep) error {
	return func(s writeStep) error {
		if s == step {
			return errCrash
		}
		return nil
	}
}

// TestCrashDuringCheckpoint crashes checkpoint 2 at every step of its write.
// Until _metadata is renamed into place, checkpoint 1 stays the latest,
// intact and restorable, and the next Open sweeps the leftovers; from then
// on, checkpoint 2 is complete.
func TestCrashDuringCheckpoint(t *testing.T) {
	ctx := context.Background()
	for _, inFile := range []bool{false, true} {
		steps := []writeStep{stepDirCreated, stepMetaPartial, stepMetaSynced, stepMetaRenamed}
		if inFile {
			steps = []writeStep{stepDirCreated, stepStatePartial, stepStateSynced, stepStateRenamed,
				stepMetaPartial, stepMetaSynced, stepMetaRenamed}
		}
		for _, step := range steps {
			name := "inline/" + step.String()
			if inFile {
				name = "file/" + step.String()
			}
			t.Run(name, func(t *testing.T) {
				first, second := randState(1, 300), randState(2, 256<<10)
				s := openT(t, Options{InFileEnabled: inFile, InlineThreshold: 1000})
				if err := s.Save(ctx, 1, first); err != nil {
					t.Fatal(err)
				}
				s.opts.hook = crashAt(step)
				if err := s.Save(ctx, 2, second); !errors.Is(err, errCrash) {
					t.Fatalf("Save: %v, want the simulated crash", err)
				}
				if err := s.Save(ctx, 3, first); !errors.Is(err, ErrClosed) {
					t.Fatalf("Save after the crash: %v", err)
				}
				if step != stepDirCreated && step != stepMetaRenamed {
					// Something of checkpoint 2 is on disk for the sweep to find.
					if entries, _ := os.ReadDir(filepath.Join(s.opts.Dir, "chk-2")); len(entries) == 0 {
						t.Fatal("the crash left nothing behind")
					}
				}

				// The next process.
				o := s.opts
				o.hook = nil
				s2 := openT(t, o)
				want := []string{"chk-1", "chk-1/_metadata"}
				if step == stepMetaRenamed {
					mustLatest(t, s2, 2, second)
					want = append(want, "chk-2", "chk-2/_metadata")
					if inFile {
						want = append(want, "chk-2/_state")
					}
				} else {
					mustLatest(t, s2, 1, first)
				}
				if got := dirTree(t, o.Dir); !slices.Equal(got, want) {
					t.Fatalf("after reopen\n got %v\nwant %v", got, want)
				}
				if err := s2.Save(ctx, 4, second); err != nil {
					t.Fatalf("Save after recovery: %v", err)
				}
				mustLatest(t, s2, 4, second)
			})
		}
	}
}

// TestCrashDuringDisposal crashes after a disposed checkpoint's directory
// was renamed away but before it was removed.
func TestCrashDuringDisposal(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{InFileEnabled: true, InlineThreshold: 10, Retain: 1})
	if err := s.Save(ctx, 1, randState(1, 100)); err != nil {
		t.Fatal(err)
	}
	s.opts.hook = crashAt(stepDisposeRenamed)
	// Checkpoint 2 is durable before retention runs, so Save succeeds.
	if err := s.Save(ctx, 2, randState(2, 100)); err != nil {
		t.Fatal(err)
	}
	if got := dirTree(t, s.opts.Dir); !slices.Contains(got, ".tmp-disposed-chk-1") {
		t.Fatalf("layout %v", got)
	}
	o := s.opts
	o.hook = nil
	s2 := openT(t, o)
	mustLatest(t, s2, 2, randState(2, 100))
	if got := dirTree(t, o.Dir); !slices.Equal(got, []string{"chk-2", "chk-2/_metadata", "chk-2/_state"}) {
		t.Fatalf("after reopen %v", got)
	}
}

// TestKilledDuringCheckpoint kills a child process (SIGKILL, no cleanup of
// any kind) in the middle of writing checkpoint 2's state file, then checks
// that checkpoint 1 is restorable and the torn files are swept.
func TestKilledDuringCheckpoint(t *testing.T) {
	if os.Getenv("STATESTORE_CRASH_DIR") != "" {
		t.Skip("in the child")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	for _, step := range []writeStep{stepStatePartial, stepMetaPartial} {
		dir := t.TempDir()
		cmd := exec.Command(exe, "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "STATESTORE_CRASH_DIR="+dir, "STATESTORE_CRASH_STEP="+strconv.Itoa(int(step)))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != -1 { // -1: killed by a signal
			t.Fatalf("child at %v: %v, want killed\n%s", step, err, out)
		}
		if !strings.Contains(dirEntries(dir, "chk-2"), ".tmp-") {
			t.Fatalf("child at %v left no torn temp file: %s", step, dirEntries(dir, "chk-2"))
		}
		s := openT(t, Options{Dir: dir})
		mustLatest(t, s, 1, randState(1, 300))
		if got := dirTree(t, dir); !slices.Equal(got, []string{"chk-1", "chk-1/_metadata"}) {
			t.Fatalf("after reopen %v", got)
		}
	}
}

func dirEntries(dir, sub string) string {
	entries, _ := os.ReadDir(filepath.Join(dir, sub))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// TestCrashChild is the child of TestKilledDuringCheckpoint: it writes
// checkpoint 1, then kills itself at the given step of checkpoint 2.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("STATESTORE_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestKilledDuringCheckpoint")
	}
	n, _ := strconv.Atoi(os.Getenv("STATESTORE_CRASH_STEP"))
	ctx := context.Background()
	s, err := Open(ctx, Options{Dir: dir, InFileEnabled: true, InlineThreshold: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, 1, randState(1, 300)); err != nil {
		t.Fatal(err)
	}
	s.opts.hook = func(step writeStep) error {
		if step == writeStep(n) {
			p, _ := os.FindProcess(os.Getpid())
			_ = p.Kill()
			select {}
		}
		return nil
	}
	_ = s.Save(ctx, 2, randState(2, 1<<20))
	t.Fatal("not killed")
}
