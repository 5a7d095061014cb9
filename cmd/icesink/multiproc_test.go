package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/warehouse"
)

// The multi-process tests run `icesink coordinator` and two
// `icesink run --coordinator` writers (vnodes 0-63 and 64-127 of 128) as
// real processes over one SQLite-catalog warehouse. Each writer reads the
// whole input and keeps the rows of its vnodes (sink.Run routes by vnode).

const (
	mpVnodes = "128"
	mpTable  = "db.t"
)

var mpOwners = []string{"0-63", "64-127"}

// abortedRE finds the committed input line in a failed run's report.
var abortedRE = regexp.MustCompile(`holds sink "[^"]*" up to input line (\d+), epoch \d+;`)

// TestMultiProcessCoordinator: the table equals the model's final state,
// and every commit epoch is one snapshot holding both writers' windows.
func TestMultiProcessCoordinator(t *testing.T) {
	ctx := mpContext(t)
	wh, in := t.TempDir(), filepath.Join(t.TempDir(), "in.jsonl")
	lines := mpChangelog(t, rand.New(rand.NewPCG(21, 21)), in, 20000, 3000)
	const ckRows, interval = 1000, 2

	// The coordinator creates the table from --schema.
	addr, _ := mpCoordinator(t, ctx, wh, "--commit-interval", strconv.Itoa(interval), "--schema", writeSchema(t))
	ws := mpWriters(t, ctx, wh, addr, in, ckRows, mpOwners)
	for i, w := range ws {
		if err := w.wait(ctx); err != nil {
			t.Fatalf("writer %s: %v\n%s", mpOwners[i], err, w.output())
		}
	}
	mpCheckTable(t, ctx, wh, lines, len(lines))
	want := mpExpectedCommits(len(lines), ckRows, interval)
	mpCheckSnapshots(t, ctx, wh, want)
	// Each writer reports the snapshots the remote coordinator committed.
	for i, w := range ws {
		if s := fmt.Sprintf("committed %d snapshots", len(want)); !strings.Contains(w.output(), s) {
			t.Errorf("writer %s does not say %q:\n%s", mpOwners[i], s, w.output())
		}
	}
	if orphans := uncommittedFiles(t, wh); len(orphans) > 0 {
		t.Errorf("files no snapshot references: %v", orphans)
	}
}

// TestMultiProcessWriterKilled SIGKILLs one writer after two commits. The
// table then holds exactly a committed prefix, both writers' halves of it.
// A new writer for the dead one's vnodes, and any writer the coordinator
// aborts meanwhile (it aborts all if a window was in flight; otherwise the
// survivor waits for the vnodes), resumes against the same coordinator,
// and the table ends as an uninterrupted run's.
func TestMultiProcessWriterKilled(t *testing.T) {
	ctx := mpContext(t)
	wh, in := mpWarehouse(t), filepath.Join(t.TempDir(), "in.jsonl")
	lines := mpChangelog(t, rand.New(rand.NewPCG(22, 22)), in, 39000, 5000)
	const ckRows = 2000
	want := mpExpectedCommits(len(lines), ckRows, 1)

	addr, coord := mpCoordinator(t, ctx, wh, "-v")
	ws := mpWriters(t, ctx, wh, addr, in, ckRows, mpOwners)
	// The table's metadata files: one at creation, one per commit.
	meta := filepath.Join(wh, "db.db", "t", "metadata", "*.metadata.json")
	for {
		if m, _ := filepath.Glob(meta); len(m) >= 3 {
			break
		}
		select {
		case <-ws[0].done:
			t.Fatalf("writer %s ended before two commits: %v\n%s", mpOwners[0], ws[0].err, ws[0].output())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := ws[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := ws[0].wait(ctx); err == nil {
		t.Fatalf("writer %s finished before the kill; make the input longer", mpOwners[0])
	}
	// The coordinator says (-v) that the writer left, in a window or between.
	for !strings.Contains(coord.output(), "left") {
		select {
		case <-ctx.Done():
			t.Fatalf("the coordinator never logged the killed writer leaving:\n%s", coord.output())
		case <-time.After(10 * time.Millisecond):
		}
	}

	// Nothing partial: a prefix of whole epochs, each with both windows.
	// No epoch can commit without vnodes 0-63 but one recorded before the
	// kill: read the position before and after, and retry if it moved.
	var n int64
	var rows map[int64]mpRow
	var snaps []mpCommit
	for n2 := int64(-1); n != n2; n2 = committedLine(t, wh) {
		n = committedLine(t, wh)
		rows, snaps = mpScan(t, ctx, wh), mpSnapshots(t, ctx, wh)
	}
	k := 0
	for k < len(want) && want[k].input <= n {
		k++
	}
	if n >= int64(len(lines)) || k == 0 || want[k-1].input != n {
		t.Fatalf("committed line %d after the kill, want a checkpoint of %v before the end", n, want)
	}
	mpCompareRows(t, rows, mpModel(lines, int(n)), n)
	mpCompareSnapshots(t, snaps, want[:k])
	t.Logf("killed after input line %d (epoch %d)", n, want[k-1].epoch)

	// Supervise: start a writer for the dead one's vnodes, restart aborted
	// writers, until both complete.
	ws[0] = mpWriters(t, ctx, wh, addr, in, ckRows, mpOwners[:1])[0]
	reruns := []*mpProc{ws[0]}
	for done := 0; done < len(ws); {
		var i int
		select {
		case <-ws[0].done:
		case <-ws[1].done:
			i = 1
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		w := ws[i]
		var ee *exec.ExitError
		switch {
		case w.err == nil:
			done++
			ws[i] = &mpProc{done: make(chan struct{})} // never done
			continue
		case errors.As(w.err, &ee) && ee.ExitCode() == 1 && strings.Contains(w.output(), "aborted") && len(reruns) < 6:
			t.Logf("writer %s aborted; restarting it", mpOwners[i])
			// It reports what the table holds, not "line 0".
			if m := abortedRE.FindStringSubmatch(w.output()); m == nil {
				t.Errorf("aborted writer %s does not report the committed input:\n%s", mpOwners[i], w.output())
			} else if got, _ := strconv.ParseInt(m[1], 10, 64); got < n {
				t.Errorf("aborted writer %s reports input up to line %d committed; the table holds %d", mpOwners[i], got, n)
			}
			ws[i] = mpWriters(t, ctx, wh, addr, in, ckRows, mpOwners[i:i+1])[0]
			reruns = append(reruns, ws[i])
		default:
			t.Fatalf("writer %s: %v\n%s", mpOwners[i], w.err, w.output())
		}
	}
	// Every new writer resumed after a committed checkpoint, not before n.
	for _, w := range reruns {
		m := resumedRE.FindStringSubmatch(w.output())
		if m == nil {
			t.Errorf("a restarted writer did not resume:\n%s", w.output())
		} else if r, _ := strconv.ParseInt(m[1], 10, 64); r < n {
			t.Errorf("a restarted writer resumed after line %s, before the committed %d", m[1], n)
		}
	}
	mpCheckTable(t, ctx, wh, lines, len(lines))
	mpCheckSnapshots(t, ctx, wh, want)
	// The killed writer could not remove its open window; nothing else
	// may be left behind.
	if left := mpWindows(uncommittedFiles(t, wh)); len(left) > 1 {
		t.Errorf("uncommitted files of %d windows, want at most the killed writer's one: %v", len(left), left)
	}
}

var resumedRE = regexp.MustCompile(`resumed after input line (\d+)`)

func mpContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mpWarehouse creates the table, as a first run would.
func mpWarehouse(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	w, err := warehouse.Open(context.Background(), dir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ident, _ := warehouse.ParseIdent(mpTable)
	if _, _, err := w.LoadOrCreate(context.Background(), ident, warehouse.TableSpec{Schema: cliSchema}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mpProc is a child process; t.Cleanup kills it.
type mpProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer // stdout and stderr
	done chan struct{}
	err  error // valid once done is closed
}

func (p *mpProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *mpProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *mpProc) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("still running: %w", ctx.Err())
	}
}

func mpStart(t testing.TB, ctx context.Context, args ...string) *mpProc {
	t.Helper()
	p := &mpProc{cmd: exec.CommandContext(ctx, binary, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

var servingRE = regexp.MustCompile(`serving writers on (\S+)\n`)

// mpCoordinator starts the coordinator on a free port and returns the
// address it prints once listening.
func mpCoordinator(t *testing.T, ctx context.Context, wh string, args ...string) (string, *mpProc) {
	t.Helper()
	return mpServe(t, ctx, append([]string{"coordinator", "--warehouse", wh, "--table", mpTable,
		"--listen", "127.0.0.1:0", "--vnode-count", mpVnodes}, args...)...)
}

// mpServe starts `icesink ARGS` (a coordinator) and returns the address
// it prints once listening.
func mpServe(t *testing.T, ctx context.Context, args ...string) (string, *mpProc) {
	t.Helper()
	p := mpStart(t, ctx, args...)
	for {
		if m := servingRE.FindStringSubmatch(p.output()); m != nil {
			return m[1], p
		}
		select {
		case <-p.done:
			t.Fatalf("coordinator exited: %v\n%s", p.err, p.output())
		case <-ctx.Done():
			t.Fatalf("coordinator not listening: %v\n%s", ctx.Err(), p.output())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// mpWriters starts one writer process per vnode range of owners.
func mpWriters(t *testing.T, ctx context.Context, wh, addr, in string, ckRows int, owners []string) []*mpProc {
	t.Helper()
	var ps []*mpProc
	for _, vn := range owners {
		ps = append(ps, mpStart(t, ctx, "run", "--warehouse", wh, "--table", mpTable, "--input", in,
			"--coordinator", addr, "--vnodes", vn, "--vnode-count", mpVnodes,
			"--checkpoint-rows", strconv.Itoa(ckRows), "--spill-dir", t.TempDir()))
	}
	return ps
}

// mpRow is a live row's non-key columns.
type mpRow struct {
	name string
	null bool // name is null
	v    int64
}

// mpLine is one changelog line: the key and, for +I/+U, the row.
type mpLine struct {
	op  string
	id  int64
	row mpRow
}

// mpChangelog writes n lines of inserts, upserts, updates and deletes over nkeys keys, with no
// barrier lines, so that checkpoints fall every --checkpoint-rows lines.
func mpChangelog(t *testing.T, rng *rand.Rand, path string, n, nkeys int) []mpLine {
	t.Helper()
	var lines []mpLine
	live := map[int64]bool{}
	for len(lines) < n {
		k := rng.Int64N(int64(nkeys))
		row := mpRow{name: "n" + strconv.Itoa(rng.IntN(100)), v: int64(len(lines))}
		if rng.IntN(10) == 0 {
			row = mpRow{null: true, v: row.v}
		}
		switch r := rng.IntN(100); {
		case r < 5 || live[k] && r < 25:
			lines = append(lines, mpLine{op: "-D", id: k}) // also of absent keys
			live[k] = false
		case live[k] && r < 65 && len(lines) < n-1:
			lines = append(lines, mpLine{op: "-U", id: k}, mpLine{op: "+U", id: k, row: row})
		default:
			lines = append(lines, mpLine{op: "+I", id: k, row: row}) // an upsert if live
			live[k] = true
		}
	}
	var b bytes.Buffer
	for _, l := range lines {
		switch {
		case l.op == "-D" || l.op == "-U":
			fmt.Fprintf(&b, `{"op":%q,"data":{"id":%d}}`+"\n", l.op, l.id)
		case l.row.null:
			fmt.Fprintf(&b, `{"op":%q,"data":{"id":%d,"name":null,"v":%d}}`+"\n", l.op, l.id, l.row.v)
		default:
			fmt.Fprintf(&b, `{"op":%q,"data":{"id":%d,"name":%q,"v":%d}}`+"\n", l.op, l.id, l.row.name, l.row.v)
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return lines
}

// mpModel is the reference: the live rows after the first n lines.
func mpModel(lines []mpLine, n int) map[int64]mpRow {
	m := map[int64]mpRow{}
	for _, l := range lines[:n] {
		if l.op == "-D" || l.op == "-U" {
			delete(m, l.id)
		} else {
			m[l.id] = l.row
		}
	}
	return m
}

// mpRun runs a short icesink command and returns its stdout.
func mpRun(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("icesink %s: %v\n%s", args[0], err, stderr.String())
	}
	return string(out)
}

// mpCheckTable compares `icesink scan` with the model after n lines.
func mpCheckTable(t *testing.T, ctx context.Context, wh string, lines []mpLine, n int) {
	t.Helper()
	mpCompareRows(t, mpScan(t, ctx, wh), mpModel(lines, n), int64(n))
}

// mpScan reads the table's live rows through `icesink scan`.
func mpScan(t *testing.T, ctx context.Context, wh string) map[int64]mpRow {
	t.Helper()
	got := map[int64]mpRow{}
	for _, l := range strings.Split(mpRun(t, ctx, "scan", "--warehouse", wh, "--table", mpTable), "\n") {
		if l == "" {
			continue
		}
		var r struct {
			Data struct {
				ID   int64   `json:"id"`
				Name *string `json:"name"`
				V    int64   `json:"v"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("scan line %q: %v", l, err)
		}
		if _, dup := got[r.Data.ID]; dup {
			t.Errorf("scan: key %d twice", r.Data.ID)
		}
		row := mpRow{null: r.Data.Name == nil, v: r.Data.V}
		if r.Data.Name != nil {
			row.name = *r.Data.Name
		}
		got[r.Data.ID] = row
	}
	return got
}

func mpCompareRows(t *testing.T, got, want map[int64]mpRow, n int64) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; (!ok || g != w) && bad < 5 {
			t.Errorf("key %d: got %+v (present %v), want %+v", k, g, ok, w)
			bad++
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && bad < 10 {
			t.Errorf("key %d: got %+v, want absent", k, g)
			bad++
		}
	}
	t.Fatalf("table after line %d: %d rows, want %d", n, len(got), len(want))
}

// mpCommit is a snapshot the sink should make: its epoch and input position.
type mpCommit struct {
	epoch uint64
	input int64
}

// mpExpectedCommits lists the snapshots of a run over lines input lines:
// a checkpoint every ckRows lines and a final one at the end; every
// interval-th checkpoint and the final one commit, and a commit with no
// change since the last one leaves no snapshot.
func mpExpectedCommits(lines, ckRows, interval int) []mpCommit {
	var out []mpCommit
	last := 0
	final := uint64(lines/ckRows + 1)
	for e := uint64(1); e <= final; e++ {
		line := min(int(e)*ckRows, lines)
		if (e%uint64(interval) == 0 || e == final) && line > last {
			out = append(out, mpCommit{e, int64(line)})
			last = line
		}
	}
	return out
}

// mpCheckSnapshots compares the sink's snapshots with want.
func mpCheckSnapshots(t *testing.T, ctx context.Context, wh string, want []mpCommit) {
	t.Helper()
	mpCompareSnapshots(t, mpSnapshots(t, ctx, wh), want)
}

func mpCompareSnapshots(t *testing.T, got, want []mpCommit) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("snapshots (epoch input) = %v\nwant %v", got, want)
	}
}

// mpSnapshots reads the snapshots through `icesink snapshots` and checks
// that every one adds the files of exactly two windows, one per writer.
func mpSnapshots(t *testing.T, ctx context.Context, wh string) []mpCommit {
	t.Helper()
	out := mpRun(t, ctx, "snapshots", "--warehouse", wh, "--table", mpTable)
	windows := mpSnapshotWindows(t, wh)
	var got []mpCommit
	for _, l := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(l) // snapshot seq operation epoch input ... sink
		if len(f) < 11 || f[2] == "replace" && f[3] == "-" {
			continue // a run's claim, a manifest merge
		}
		e, err1 := strconv.ParseUint(f[3], 10, 64)
		in, err2 := strconv.ParseInt(f[4], 10, 64)
		if f[10] != "icesink" || err1 != nil || err2 != nil {
			t.Fatalf("snapshots line %q", l)
		}
		got = append(got, mpCommit{e, in})
		if id, _ := strconv.ParseInt(f[0], 10, 64); len(windows[id]) != 2 {
			t.Errorf("snapshot of epoch %d adds files of %d windows, want 2 (one per writer): %v", e, len(windows[id]), windows[id])
		}
	}
	return got
}

// mpSnapshotWindows maps each snapshot to the windows of the files it adds.
func mpSnapshotWindows(t *testing.T, wh string) map[int64]map[string]bool {
	t.Helper()
	ctx := context.Background()
	ident, _ := warehouse.ParseIdent(mpTable)
	tbl, err := openWarehouse(t, wh).Catalog.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]map[string]bool{}
	for _, s := range tbl.Metadata().Snapshots() {
		mans, err := s.Manifests(fs)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, m := range mans {
			if m.SnapshotID() != s.SnapshotID {
				continue
			}
			for e, err := range m.Entries(fs, false) {
				if err != nil {
					t.Fatal(err)
				}
				if e.Status() == iceberg.EntryStatusADDED {
					paths = append(paths, e.DataFile().FilePath())
				}
			}
		}
		out[s.SnapshotID] = mpWindows(paths)
	}
	return out
}

// windowRE finds the window in a file name SINK-WRITER-WINDOW-KIND-SEQ.parquet.
var windowRE = regexp.MustCompile(`-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-(?:data|pos|eq)-\d+\.parquet$`)

func mpWindows(paths []string) map[string]bool {
	ws := map[string]bool{}
	for _, p := range paths {
		if m := windowRE.FindStringSubmatch(p); m != nil {
			ws[m[1]] = true
		} else {
			ws["unnamed:"+filepath.Base(p)] = true
		}
	}
	return ws
}

// TestCoordinatorNeedsTableOrSchema: a coordinator on a missing table
// without --schema fails at once and says how to create the table.
func TestCoordinatorNeedsTableOrSchema(t *testing.T) {
	_, stderr, code := icesink(t, "coordinator", "--warehouse", t.TempDir(), "--table", mpTable, "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "--schema") {
		t.Fatalf("exit %d, stderr %q: want 1 and a hint at --schema", code, stderr)
	}
}
