package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/tablelint"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// binary is the icesink command built once for the tests that run it as a
// process (so that they can kill it).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "icesink-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "icesink")
	// The runs' spill folders and saved key indexes (default: under the
	// OS temp dir) go with the test binary.
	os.Setenv("TMPDIR", filepath.Join(dir, "tmp"))
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building icesink: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func icesink(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

func TestSampleRoundTrip(t *testing.T) {
	wh := t.TempDir()
	args := []string{"run", "--warehouse", wh, "--table", "demo.orders", "--schema", "../../testdata/orders.schema.json", "--input", "../../testdata/orders.changelog.jsonl"}
	if _, stderr, code := icesink(t, args...); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	want, err := os.ReadFile("../../testdata/orders.expected.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, code := icesink(t, "scan", "--warehouse", wh, "--table", "demo.orders")
	if code != 0 {
		t.Fatalf("scan exited %d: %s", code, stderr)
	}
	if got != string(want) {
		t.Errorf("scan =\n%s\nwant\n%s", got, want)
	}
	// A rerun continues after the last committed line: nothing new.
	if _, stderr, code := icesink(t, args...); code != 0 || !strings.Contains(stderr, "resumed after input line 14") {
		t.Errorf("rerun exited %d: %s", code, stderr)
	}
	snaps, _, _ := icesink(t, "snapshots", "--warehouse", wh, "--table", "demo.orders")
	if n := strings.Count(snaps, "icesink\n"); n != 3 {
		t.Errorf("snapshots lists %d icesink snapshots, want 3:\n%s", n, snaps)
	}
}

// TestMemProfile: --memprofile leaves a heap profile (gzipped protobuf, as
// runtime/pprof writes it) behind a run, and a file it cannot write is
// said, without failing the run.
func TestMemProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "heap.prof")
	args := []string{"run", "--warehouse", filepath.Join(dir, "wh"), "--table", "demo.orders", "--schema", "../../testdata/orders.schema.json",
		"--input", "../../testdata/orders.changelog.jsonl", "--quiet", "--memprofile"}
	if _, stderr, code := icesink(t, append(args, prof)...); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("heap profile of %d bytes starting %x", len(b), b[:min(len(b), 4)])
	}
	bad := filepath.Join(dir, "no-such-folder", "heap.prof")
	args[2] = filepath.Join(dir, "wh2")
	if _, stderr, code := icesink(t, append(args, bad)...); code != 0 || !strings.Contains(stderr, "--memprofile") || !strings.Contains(stderr, "no-such-folder") {
		t.Fatalf("run with an unwritable profile exited %d: %s", code, stderr)
	}
}

var cliSchema = iceberg.NewSchemaWithIdentifiers(0, []int{1},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String},
	iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true},
)

// stream writes a random changelog of n lines over nkeys keys to a file,
// with a barrier every so often, and returns the model's final state after
// each line: states[i] is the state after line i+1, as scan would print it.
func stream(t testing.TB, rng *rand.Rand, n, nkeys int) (path string, lines [][]byte) {
	t.Helper()
	enc, err := changelog.NewEncoder(cliSchema)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		var line []byte
		k := int64(rng.IntN(nkeys))
		// A barrier (a commit) every ~200 lines, a delete every ~5.
		switch r := rng.IntN(400); {
		case r < 2:
			line = []byte(changelog.BarrierLine)
		case r < 80:
			line, err = enc.AppendChangelogJSON(nil, deltawriter.Change{Op: deltawriter.Delete, Row: []any{k, nil, nil}})
		default:
			line, err = enc.AppendChangelogJSON(nil, deltawriter.Change{Op: deltawriter.UpdateAfter, Row: []any{k, "n" + strconv.Itoa(rng.IntN(50)), rng.Int64()}})
		}
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
		buf.Write(line)
		buf.WriteByte('\n')
	}
	path = filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, lines
}

// expectedScan returns what scan prints for the first n lines of a stream.
func expectedScan(t testing.TB, lines [][]byte, n int) string {
	t.Helper()
	var in bytes.Buffer
	for _, l := range lines[:n] {
		in.Write(l)
		in.WriteByte('\n')
	}
	dec, err := changelog.NewDecoder(&in, changelog.ChangelogJSON, cliSchema)
	if err != nil {
		t.Fatal(err)
	}
	kc, _ := deltawriter.NewKeyCodec(cliSchema)
	state := map[string][]any{}
	for {
		rec, err := dec.Next()
		if err != nil {
			break
		}
		for _, ch := range rec.Changes {
			k, _ := kc.Append(nil, ch.Row)
			if ch.Op.IsDelete() {
				delete(state, string(k))
			} else {
				state[string(k)] = ch.Row
			}
		}
	}
	keys := make([]string, 0, len(state))
	for k := range state {
		keys = append(keys, k)
	}
	slicesSort(keys)
	enc, _ := changelog.NewEncoder(cliSchema)
	var out bytes.Buffer
	for _, k := range keys {
		b, _ := enc.AppendChangelogJSON(nil, deltawriter.Change{Op: deltawriter.Insert, Row: state[k]})
		out.Write(b)
		out.WriteByte('\n')
	}
	return out.String()
}

func writeSchema(t testing.TB) string {
	t.Helper()
	b, err := cliSchema.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// openWarehouse opens the warehouse at wh for the rest of the test.
func openWarehouse(t *testing.T, wh string) *warehouse.Warehouse {
	t.Helper()
	w, err := warehouse.Open(context.Background(), wh, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// committedLine reads the input position of the sink's last commit.
func committedLine(t *testing.T, wh string) int64 {
	t.Helper()
	ctx := context.Background()
	w := openWarehouse(t, wh)
	cm, err := commit.NewCommitter(ctx, w.Catalog, []string{"db", "t"}, "icesink")
	if err != nil {
		t.Fatal(err)
	}
	last, ok := cm.Last()
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(last.Properties[commit.PropInputPosition], 10, 64)
	return n
}

func TestBadInputCommitsNothingPartial(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	in, lines := stream(t, rng, 2600, 200)
	bad := []struct{ line, want string }{
		{`{"op":"+I","data":{"id":1,"name":"x"}}`, `field "v"`},
		{`{"op":"+X","data":{"id":1,"v":1}}`, `unknown op`},
		{`{"op":"+I","data":{"id":"one","v":1}}`, `field "id"`},
		{`{"op":"+I","data":{"id":1,"v":1,"nope":2}}`, `field "nope"`},
		{`{"op":"+I","data":{"id":1.5,"v":1}}`, `field "id"`},
		{`{"op":"-D","data":{"name":"x"}}`, `field "id"`},
		{`{"op":"+I","data":`, `line 2501`},
	}
	schema := writeSchema(t)
	for i, b := range bad {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			data, _ := os.ReadFile(in)
			parts := bytes.SplitAfter(data, []byte("\n"))
			var mod bytes.Buffer
			for j, p := range parts {
				if j == 2500 {
					mod.WriteString(b.line + "\n")
				}
				mod.Write(p)
			}
			path := filepath.Join(t.TempDir(), "bad.jsonl")
			os.WriteFile(path, mod.Bytes(), 0o644)
			wh := t.TempDir()
			_, stderr, code := icesink(t, "run", "--warehouse", wh, "--table", "db.t", "--schema", schema, "--input", path, "--checkpoint-rows", "700", "--quiet")
			if code != 1 {
				t.Fatalf("exit code %d, want 1; stderr: %s", code, stderr)
			}
			if !strings.Contains(stderr, "line 2501") || !strings.Contains(stderr, b.want) {
				t.Errorf("stderr %q does not name line 2501 and %q", stderr, b.want)
			}
			// The table holds exactly the committed prefix.
			n := committedLine(t, wh)
			if n <= 0 || n >= 2501 {
				t.Fatalf("committed line %d, want a checkpoint before the bad line", n)
			}
			if !strings.Contains(stderr, fmt.Sprintf("up to input line %d,", n)) {
				t.Errorf("stderr does not report the committed position %d: %s", n, stderr)
			}
			got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
			if want := expectedScan(t, lines, int(n)); got != want {
				t.Errorf("table after the bad line differs from the committed prefix (%d lines)", n)
			}
			if orphans := uncommittedFiles(t, wh); len(orphans) > 0 {
				t.Errorf("files of the aborted window remain: %v", orphans)
			}
		})
	}
}

// uncommittedFiles lists Parquet files under the warehouse that no
// snapshot of the table references.
func uncommittedFiles(t *testing.T, wh string) []string {
	t.Helper()
	ctx := context.Background()
	tbl, err := openWarehouse(t, wh).Catalog.LoadTable(ctx, []string{"db", "t"})
	if err != nil {
		t.Fatal(err)
	}
	referenced := map[string]bool{}
	fs, _ := tbl.FS(ctx)
	for _, s := range tbl.Metadata().Snapshots() {
		mans, err := s.Manifests(fs)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mans {
			for e, err := range m.Entries(fs, false) {
				if err != nil {
					t.Fatal(err)
				}
				referenced[strings.TrimPrefix(e.DataFile().FilePath(), "file://")] = true
			}
		}
	}
	var out []string
	filepath.Walk(wh, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".parquet") && !referenced[p] {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestCrashAndRerun kills the run with SIGKILL at random moments, reruns
// the same command each time, and checks that the final table equals an
// uninterrupted run's and that no epoch was committed twice.
func TestCrashAndRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	rng := rand.New(rand.NewPCG(11, 11))
	in, lines := stream(t, rng, 30000, 3000)
	schema := writeSchema(t)
	wh := t.TempDir()
	args := []string{"run", "--warehouse", wh, "--table", "db.t", "--schema", schema, "--input", in, "--checkpoint-rows", "1000", "--quiet"}
	kills := killAndRerun(t, rng, args, 6, 50*time.Millisecond, 600*time.Millisecond)
	t.Logf("killed %d runs", kills)
	if n := committedLine(t, wh); n != int64(len(lines)) {
		t.Fatalf("committed line %d, want %d", n, len(lines))
	}
	got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
	if want := expectedScan(t, lines, len(lines)); got != want {
		t.Errorf("table after crashes and reruns differs from the stream's final state")
	}
	checkEpochsOnce(t, wh)
}

// checkEpochsOnce checks that the sink committed every epoch once, in
// increasing order.
func checkEpochsOnce(t *testing.T, wh string) {
	t.Helper()
	snaps, _, _ := icesink(t, "snapshots", "--warehouse", wh, "--table", "db.t")
	seen := map[string]bool{}
	prev := -1
	for _, l := range strings.Split(snaps, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 4 || f[2] == "replace" || f[3] == "-" { // a data-manifest merge, a compaction, another engine's commit
			continue
		}
		if seen[f[3]] {
			t.Errorf("epoch %s committed twice", f[3])
		}
		seen[f[3]] = true
		e, _ := strconv.Atoi(f[3])
		if e <= prev {
			t.Errorf("epoch %d after %d", e, prev)
		}
		prev = e
	}
}

// TestSignalStopsCleanly: SIGINT and SIGTERM stop a run with exit 130 and
// 143 and one line that says what became of the table (before: "context
// canceled", exit 1); a rerun then finishes with the stream's final state.
func TestSignalStopsCleanly(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	in, lines := stream(t, rng, 12000, 3000)
	schema := writeSchema(t)
	wh := t.TempDir()
	args := []string{"run", "--warehouse", wh, "--table", "db.t", "--schema", schema, "--input", in, "--checkpoint-rows", "1000", "--quiet"}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		metadata := filepath.Join(wh, "db.db", "t", "metadata", "*.metadata.json")
		before := countFiles(metadata)
		cmd := exec.Command(binary, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		// Signal once the run has committed: a signal that comes before
		// main installed its handler (package init can take a second on a
		// loaded machine) kills the process the default way.
		waitForFiles(t, metadata, before+1, 60*time.Second)
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Logf("the run ended before %v (%v); nothing to check", sig, err)
			continue
		}
		if want := 128 + int(sig); ee.ExitCode() != want {
			t.Fatalf("%v: exit %d, want %d; stderr:\n%s", sig, ee.ExitCode(), want, stderr.String())
		}
		msg := strings.TrimSpace(stderr.String())
		if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "stopped by") || strings.Contains(msg, "context canceled") {
			t.Fatalf("%v: stderr is not one clear line:\n%q", sig, stderr.String())
		}
	}
	if _, stderr, code := icesink(t, args...); code != 0 {
		t.Fatalf("rerun exited %d: %s", code, stderr)
	}
	got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
	if want := expectedScan(t, lines, len(lines)); got != want {
		t.Errorf("table after stops and a rerun differs from the stream's final state")
	}
}

func countFiles(pattern string) int {
	m, _ := filepath.Glob(pattern)
	return len(m)
}

// waitForFiles waits until n files match pattern, failing the test after
// the deadline.
func waitForFiles(t *testing.T, pattern string, n int, deadline time.Duration) {
	t.Helper()
	for end := time.Now().Add(deadline); ; time.Sleep(20 * time.Millisecond) {
		if countFiles(pattern) >= n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("fewer than %d files match %s after %v", n, pattern, deadline)
		}
	}
}

func TestVersion(t *testing.T) {
	out, stderr, code := icesink(t, "version")
	if code != 0 || !strings.HasPrefix(out, "icesink ") || !strings.Contains(out, "github.com/apache/iceberg-go v0.7.0") {
		t.Fatalf("version exited %d: %q %s", code, out, stderr)
	}
}

// TestFailedValidationCreatesNoTable: a run that cannot start leaves no
// table behind (before, the table was created first and the run failed
// after).
func TestFailedValidationCreatesNoTable(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := writeSchema(t)
	noKey := file("nokey.json", `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","required":true,"type":"long"}]}`)
	nested := file("nested.json", `{"type":"struct","schema-id":0,"identifier-field-ids":[1],"fields":[{"id":1,"name":"id","required":true,"type":"long"},`+
		`{"id":2,"name":"s","required":false,"type":{"type":"struct","fields":[{"id":3,"name":"x","required":false,"type":"int"}]}}]}`)
	nonKeyPart := file("part.json", `{"spec-id":0,"fields":[{"source-id":3,"field-id":1000,"name":"v_bucket","transform":"bucket[4]"}]}`)
	in := file("in.jsonl", `{"op":"+I","data":{"id":1,"name":"a","v":1}}`+"\n")
	for name, extra := range map[string][]string{
		"no identifier fields":            {"--schema", noKey, "--input", in},
		"nested column":                   {"--schema", nested, "--input", in},
		"non-key partition source":        {"--schema", good, "--partition-spec", nonKeyPart, "--input", in},
		"missing input":                   {"--schema", good, "--input", filepath.Join(dir, "absent.jsonl")},
		"bad memory limit":                {"--schema", good, "--input", in, "--memory-limit", "abc"},
		"negative memory limit":           {"--schema", good, "--input", in, "--memory-limit", "-1"},
		"negative checkpoint rows":        {"--schema", good, "--input", in, "--checkpoint-rows", "-5"},
		"zero vnodes":                     {"--schema", good, "--input", in, "--vnode-count", "0"},
		"remote writer's commit-interval": {"--schema", good, "--input", in, "--coordinator", "127.0.0.1:1", "--vnodes", "0-255", "--commit-interval", "3"},
		"remote writer's align-timeout":   {"--schema", good, "--input", in, "--coordinator", "127.0.0.1:1", "--vnodes", "0-255", "--align-timeout", "5s"},
		"zero align timeout":              {"--schema", good, "--input", in, "--align-timeout", "0s"},
	} {
		wh := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		_, stderr, code := icesink(t, append([]string{"run", "--warehouse", wh, "--table", "db.t"}, extra...)...)
		if code == 0 {
			t.Errorf("%s: the run succeeded", name)
			continue
		}
		if strings.Contains(stderr, "strconv") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%s: not one clear line: %s", name, stderr)
		}
		if _, _, code := icesink(t, "scan", "--warehouse", wh, "--table", "db.t"); code == 0 {
			t.Errorf("%s: the run failed (%s) but left a table", name, strings.TrimSpace(stderr))
		}
	}
}

// TestKeyIndexCrashPoints kills a run (SIGKILL through ICESINK_FAILPOINT)
// at each point of the key index's life: during a rebuild, right after a
// saved index was taken, between the window's lookups and its deletes,
// between a commit and the window's reset, and while the index is saved.
// The rerun must finish with the stream's final state and no equality
// delete.
func TestKeyIndexCrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	rng := rand.New(rand.NewPCG(21, 21))
	in, lines := stream(t, rng, 8000, 1500)
	half := writeLines(t, lines[:len(lines)/2])
	schema := writeSchema(t)
	for _, tc := range []struct {
		point  string
		nth    int
		noSave bool // remove the saved index first: the rerun rebuilds
		// reuse: the rerun takes the index saved at the last commit
		// before the kill (it is saved with every commit); otherwise
		// the kill left none consistent and the rerun rebuilds.
		reuse bool
	}{
		{"keyindex-rebuild", 1, true, false}, // (the first half ended compacted: few files)
		{"keyindex-load", 1, false, true},
		{"keyindex-resolve", 4, false, true},
		{"keyindex-ingest", 4, false, false},
		{"keyindex-save", 1, false, false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			wh, kd := t.TempDir(), t.TempDir()
			run := func(input, failpoint string) (string, int) {
				args := []string{"run", "--warehouse", wh, "--table", "db.t", "--schema", schema, "--input", input,
					"--checkpoint-rows", "400", "--writers", "2", "--memory-limit", "2MiB", "--key-index-dir", kd, "--quiet", "--stats"}
				cmd := exec.Command(binary, args...)
				cmd.Env = append(os.Environ(), failpointEnv+"="+failpoint)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				cmd.Run()
				return out.String(), cmd.ProcessState.ExitCode()
			}
			out, code := run(half, "")
			if code != 0 || !strings.Contains(out, "eq-delete files / rows    0 / 0") {
				t.Fatalf("first half: exit %d\n%s", code, out)
			}
			if tc.noSave {
				os.RemoveAll(kd)
			}
			if out, code = run(in, fmt.Sprintf("%s:%d", tc.point, tc.nth)); code != -1 {
				t.Fatalf("the run was not killed at %s (exit %d)\n%s", tc.point, code, out)
			}
			out, code = run(in, "")
			if code != 0 || !strings.Contains(out, "eq-delete files / rows    0 / 0") {
				t.Fatalf("rerun: exit %d\n%s", code, out)
			}
			if reused := strings.Contains(out, "reused by      2 writers"); reused != tc.reuse {
				t.Errorf("after a kill at %s the rerun reused the saved index: %v, want %v\n%s", tc.point, reused, tc.reuse, out)
			}
			if n := committedLine(t, wh); n != int64(len(lines)) {
				t.Fatalf("committed line %d, want %d", n, len(lines))
			}
			got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
			if want := expectedScan(t, lines, len(lines)); got != want {
				t.Errorf("table after a kill at %s and a rerun differs from the stream's final state", tc.point)
			}
			// The run after the rerun takes the saved index.
			if out, _ = run(in, ""); !strings.Contains(out, "reused by      2 writers") {
				t.Errorf("the saved index was not reused after the rerun:\n%s", out)
			}
		})
	}
}

// TestMaintainCrashAndRerun: runs with in-sink compaction (--maintain)
// killed with SIGKILL at random moments (during compaction rounds among
// them) and rerun; then a one-shot `maintain` and a run that appends more
// input on the compacted table. The table equals the stream's final state
// at each end.
func TestMaintainCrashAndRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	rng := rand.New(rand.NewPCG(31, 31))
	in, lines := stream(t, rng, 16000, 2500)
	schema := writeSchema(t)
	wh := t.TempDir()
	args := []string{"run", "--warehouse", wh, "--table", "db.t", "--schema", schema, "--input", in, "--checkpoint-rows", "500",
		"--writers", "2", "--memory-limit", "2MiB", "--key-index-dir", t.TempDir(), "--maintain", "--compact-every", "2", "--compact-min-files", "2", "--quiet", "--stats"}
	// The first half of the input, then the whole of it.
	half := writeLines(t, lines[:len(lines)/2])
	halfArgs := slices.Clone(args)
	halfArgs[slices.Index(halfArgs, in)] = half
	kills := 0
	for attempt := 0; attempt < 40; attempt++ {
		cmd := exec.Command(binary, halfArgs...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if attempt < 6 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run %d failed: %v\n%s", attempt, err, out.String())
				}
			case <-time.After(time.Duration(300+rng.IntN(1500)) * time.Millisecond):
				cmd.Process.Signal(syscall.SIGKILL)
				<-done
				kills++
				continue
			}
		} else if err := <-done; err != nil {
			t.Fatalf("run %d failed: %v\n%s", attempt, err, out.String())
		}
		break
	}
	t.Logf("killed %d runs", kills)
	check := func(n int) {
		t.Helper()
		if got := committedLine(t, wh); got != int64(n) {
			t.Fatalf("committed line %d, want %d", got, n)
		}
		got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
		if want := expectedScan(t, lines, n); got != want {
			t.Fatalf("table after %d lines differs from the stream's final state", n)
		}
		tbl, err := openWarehouse(t, wh).Catalog.LoadTable(context.Background(), table.Identifier{"db", "t"})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := tablelint.Lint(context.Background(), tbl); err != nil || r.Err() != nil {
			t.Fatalf("table lint after %d lines: %v %v", n, err, r.Err())
		}
	}
	check(len(lines) / 2)
	// Orphans: a crashed job's file (removed) and one of the sink's own
	// windows (left to the sink: its epoch may be recorded).
	tbl, err := openWarehouse(t, wh).Catalog.LoadTable(context.Background(), table.Identifier{"db", "t"})
	if err != nil {
		t.Fatal(err)
	}
	dataDir := strings.TrimPrefix(tbl.Location(), "file://") + "/data"
	foreign := filepath.Join(dataDir, "00000-0-crashed-compaction.parquet")
	own := filepath.Join(dataDir, "icesink-000-0b8e2c5e-8f3a-4c1e-9d2b-3f1a2b3c4d5e-data-000001.parquet")
	for _, p := range []string{foreign, own} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := icesink(t, "maintain", "--warehouse", wh, "--table", "db.t", "--compact-min-files", "2", "--retain-snapshots", "1",
		"--remove-orphans", "--orphans-older-than", "0s")
	if code != 0 || !strings.Contains(out, "compaction: ") || !strings.Contains(out, "orphans: ") {
		t.Fatalf("maintain: exit %d\n%s%s", code, out, errOut)
	}
	t.Log(strings.TrimSpace(out))
	if _, err := os.Stat(foreign); !os.IsNotExist(err) {
		t.Errorf("the crashed job's orphan is still there: %v", err)
	}
	if _, err := os.Stat(own); err != nil {
		t.Errorf("maintain removed a file of the sink's own: %v", err)
	}
	check(len(lines) / 2)
	out, errOut, code = icesink(t, args...)
	if code != 0 || !strings.Contains(out, "eq-delete files / rows    0 / 0") || !strings.Contains(out, "compactions  ") {
		t.Fatalf("the run after maintain: exit %d\n%s%s", code, out, errOut)
	}
	check(len(lines))
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Errorf("the sink's start left its crashed window's file: %v", err)
	}
}

// TestMetricsEndpoint: `run --metrics-listen` serves icesink_* metrics
// while the run lasts (here a run reading stdin), and they move as it
// commits.
func TestMetricsEndpoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 41))
	_, lines := stream(t, rng, 3000, 500)
	cmd := exec.Command(binary, "run", "--warehouse", t.TempDir(), "--table", "db.t", "--schema", writeSchema(t), "--input", "-",
		"--checkpoint-rows", "200", "--metrics-listen", "127.0.0.1:0", "--quiet")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	var url string
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "icesink: metrics at "); ok {
			url = rest
			break
		}
	}
	if url == "" {
		t.Fatal("no metrics address on stderr")
	}
	go io.Copy(io.Discard, stderr)
	for _, l := range lines[:2000] {
		stdin.Write(append(l, '\n'))
	}
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if strings.Contains(body, "icesink_commits_total ") && !strings.Contains(body, "icesink_commits_total 0\n") {
			break
		}
	}
	for _, want := range []string{`icesink_changes_total{writer="0"}`, `icesink_deletes_total{kind="position",writer="0"}`, "icesink_commit_duration_seconds_bucket",
		"icesink_last_commit_timestamp_seconds", `icesink_index_lookups_total{index="window",tier="memory",writer="0"}`, "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, want) {
			t.Errorf("no %s in the metrics:\n%s", want, body)
		}
	}
	if strings.Contains(body, "icesink_commits_total 0\n") {
		t.Error("no commit counted")
	}
	for _, l := range lines[2000:] {
		stdin.Write(append(l, '\n'))
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// writeLines writes lines to a new file and returns its path.
func writeLines(t *testing.T, lines [][]byte) string {
	t.Helper()
	var buf bytes.Buffer
	for _, l := range lines {
		buf.Write(l)
		buf.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "lines.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// killAndRerun runs icesink with args, killing the first `kills` runs with
// SIGKILL after a random wait in [minWait, minWait+spread) unless they end
// first, then lets the next run finish; it fails on a run that fails and
// returns how many were killed.
func killAndRerun(t *testing.T, rng *rand.Rand, args []string, kills int, minWait, spread time.Duration) int {
	t.Helper()
	killed := 0
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(binary, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		if attempt < kills {
			select {
			case err = <-done:
			case <-time.After(minWait + time.Duration(rng.Int64N(int64(spread)))):
				cmd.Process.Signal(syscall.SIGKILL)
				<-done
				killed++
				continue
			}
		} else {
			err = <-done
		}
		if err != nil {
			t.Fatalf("run %d failed: %v\n%s", attempt, err, stderr.String())
		}
		return killed
	}
}

// TestMaintainByDefault: a plain run compacts its table (issue 25: a table
// that stays fast by default) and reads back as the stream; with
// --maintain=false it does not compact.
func TestMaintainByDefault(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 41))
	in, lines := stream(t, rng, 6000, 800)
	schema := writeSchema(t)
	for _, maintain := range []bool{true, false} {
		wh := t.TempDir()
		args := []string{"run", "--warehouse", wh, "--table", "db.t", "--schema", schema, "--input", in, "--checkpoint-rows", "200",
			"--compact-every", "3", "--compact-min-files", "2", "--quiet", "--stats"}
		if !maintain {
			args = append(args, "--maintain=false")
		}
		out, stderr, code := icesink(t, args...)
		if code != 0 {
			t.Fatalf("run exited %d: %s", code, stderr)
		}
		if compacted := regexp.MustCompile(`(?m)^compactions +\d+: `).MatchString(out + stderr); compacted != maintain {
			t.Errorf("--maintain=%v: compacted %v; stats:\n%s%s", maintain, compacted, out, stderr)
		}
		got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
		if want := expectedScan(t, lines, len(lines)); got != want {
			t.Errorf("--maintain=%v: table differs from the stream's final state", maintain)
		}
	}
}

// TestMaintainWithCoordinator: writers joining a coordinator do not
// compact (they could not follow a round), and asking them to is refused.
func TestMaintainWithCoordinator(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		refused bool
	}{
		{nil, false},
		{[]string{"--maintain=false"}, false},
		{[]string{"--maintain"}, true},
	} {
		var f commitFlags
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var cfg sink.Config
		err := f.apply(fs, &cfg, true)
		if refused := err != nil; refused != tc.refused {
			t.Errorf("%v with --coordinator: error %v, want refused %v", tc.args, err, tc.refused)
		}
		if cfg.Compaction != nil {
			t.Errorf("%v with --coordinator: compaction set", tc.args)
		}
		// In process, the default compacts.
		cfg = sink.Config{}
		if err := f.apply(fs, &cfg, false); err != nil || (cfg.Compaction == nil) == f.maintain {
			t.Errorf("%v in process: error %v, compaction %v", tc.args, err, cfg.Compaction)
		}
	}
}

// TestBenchPlots: icesink bench --out DIR leaves the report and its PNG
// plots in DIR in one command (icesink-plot built from the source tree,
// as a user's clone has it).
func TestBenchPlots(t *testing.T) {
	if testing.Short() {
		t.Skip("builds icesink-plot")
	}
	out := t.TempDir()
	_, stderr, code := icesink(t, "bench", "--rows", "4000", "--scenarios", "unbounded,bounded", "--memory-limit", "1MiB", "--repeat", "1",
		"--work-dir", t.TempDir(), "--out", out)
	if code != 0 {
		t.Fatalf("icesink bench: exit %d\n%s", code, stderr)
	}
	pngs, _ := filepath.Glob(filepath.Join(out, "*.png"))
	if len(pngs) == 0 {
		t.Fatalf("no PNG plot in %s:\n%s", out, stderr)
	}
	for _, f := range []string{"results.json", "report.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	t.Logf("%d plots: %v", len(pngs), pngs)
}
