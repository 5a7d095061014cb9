package coordinator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata scripts")

// A script is a sequence of blocks:
//
//	command arg key=value ...
//	----
//	expected output (no blank lines)
//	<blank line>
//
// Lines starting with # outside a block are comments. Run with -rewrite to
// regenerate the expected output after a deliberate change.
type scriptBlock struct {
	pos      string
	comments []string
	cmd      string
	want     string
}

func parseScript(t *testing.T, path string) []scriptBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []scriptBlock
	var comments []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.TrimSpace(line) == "":
			continue
		case strings.HasPrefix(line, "#"):
			comments = append(comments, line)
			continue
		}
		b := scriptBlock{pos: fmt.Sprintf("%s:%d", path, i+1), comments: comments, cmd: line}
		comments = nil
		i++
		if i >= len(lines) || lines[i] != "----" {
			t.Fatalf("%s: command without ---- separator", b.pos)
		}
		var out []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		b.want = strings.Join(out, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			blocks := parseScript(t, path)
			r := &scriptRunner{t: t}
			var sb strings.Builder
			for i, b := range blocks {
				got := r.run(b)
				if *rewrite {
					if i > 0 {
						sb.WriteString("\n")
					}
					for _, c := range b.comments {
						sb.WriteString(c + "\n")
					}
					fmt.Fprintf(&sb, "%s\n----\n%s\n", b.cmd, got)
					continue
				}
				if got != b.want {
					t.Fatalf("%s: %s\ngot:\n%s\nwant:\n%s", b.pos, b.cmd, got, b.want)
				}
			}
			if *rewrite {
				if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

type scriptRunner struct {
	t           *testing.T
	cfg         Config
	m           *Machine
	store       *MemStore
	out         []string
	failPersist bool
}

func (r *scriptRunner) printf(format string, args ...any) {
	r.out = append(r.out, fmt.Sprintf(format, args...))
}

func (r *scriptRunner) step(ev Event) {
	if err := r.m.Step(ev); err != nil {
		r.printf("error: %v", err)
	}
}

func (r *scriptRunner) run(b scriptBlock) string {
	r.out = nil
	fields := strings.Fields(b.cmd)
	args, kv, flags := splitArgs(fields[1:])
	fail := func(format string, a ...any) { r.t.Fatalf("%s: %s: %s", b.pos, b.cmd, fmt.Sprintf(format, a...)) }
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			fail("bad number %q", s)
		}
		return v
	}
	writerArg := func(i int) WriterID {
		if len(args) <= i || !strings.HasPrefix(args[i], "w") {
			fail("want a writer like w1 as argument %d", i+1)
		}
		return WriterID(num(args[i][1:]))
	}
	errArg := func() error {
		if s, ok := kv["err"]; ok {
			err := errors.New(strings.ReplaceAll(s, "_", " "))
			if _, stale := kv["stale"]; stale {
				err = fmt.Errorf("%w: %w", ErrStale, err)
			}
			return err
		}
		return nil
	}
	if fields[0] != "config" && r.m == nil {
		fail("config first")
	}
	switch fields[0] {
	case "config":
		cfg := Config{Logf: func(format string, a ...any) { r.printf("log: "+format, a...) }}
		for k, v := range kv {
			if k == "vacant" {
				vn, err := ParseVnodes(v, 1<<20)
				if err != nil {
					fail("%v", err)
				}
				cfg.Vacant = vn
				continue
			}
			n := int(num(v))
			switch k {
			case "vnodes":
				cfg.Vnodes = n
			case "interval":
				cfg.CommitInterval = uint64(n)
			case "bytes":
				cfg.CommitBytes = int64(n)
			case "align":
				cfg.AlignTimeout = n
			case "payload":
				cfg.PayloadTimeout = n
			case "rescale":
				cfg.RescaleTimeout = n
			case "attempts":
				cfg.CommitAttempts = n
			case "backoff":
				cfg.CommitBackoff = n
			case "barrier":
				cfg.BarrierInterval = n
			case "after":
				cfg.After = uint64(n)
			default:
				fail("unknown config key %q", k)
			}
		}
		r.cfg = cfg
		r.store = &MemStore{}
		m, err := NewMachine(cfg)
		if err != nil {
			fail("%v", err)
		}
		r.m = m
		r.printf("ok")
	case "register":
		w := writerArg(0)
		if len(args) < 2 {
			fail("want vnodes")
		}
		vn, err := ParseVnodes(args[1], r.m.cfg.Vnodes*2)
		if err != nil {
			fail("%v", err)
		}
		ev := Register{Writer: w, Vnodes: vn, Rescale: flags["rescale"]}
		if c, ok := kv["count"]; ok {
			ev.VnodeCount = int(num(c))
		}
		r.step(ev)
	case "report":
		w := writerArg(0)
		ev := Report{Writer: w, Epoch: num(args[1]), Final: flags["final"]}
		if s, ok := kv["bytes"]; ok {
			ev.BufferedBytes = int64(num(s))
		}
		r.step(ev)
	case "payload":
		w := writerArg(0)
		e := num(args[1])
		data := fmt.Sprintf("%v@%d", w, e)
		if s, ok := kv["data"]; ok {
			data = s
		}
		r.step(Payload{Writer: w, Epoch: e, Data: []byte(data)})
	case "disconnect":
		r.step(Disconnect{Writer: writerArg(0), Err: errArg()})
	case "vacate":
		vn, err := ParseVnodes(args[0], r.m.cfg.Vnodes*2)
		if err != nil {
			fail("%v", err)
		}
		r.step(Vacate{Vnodes: vn})
	case "tick":
		n := 1
		if len(args) > 0 {
			n = int(num(args[0]))
		}
		for range n {
			r.step(Tick{})
		}
	case "commit-done":
		r.step(CommitDone{Epoch: num(args[0]), Err: errArg()})
	case "fail-persist":
		r.failPersist = true
	case "process-ready":
		r.processReady()
	case "restart":
		m, err := NewMachine(r.cfg)
		if err != nil {
			fail("%v", err)
		}
		r.m = m
		id, state, err := r.store.Latest(context.Background())
		switch {
		case errors.Is(err, ErrNoState):
			r.printf("no saved state")
		case err != nil:
			fail("%v", err)
		default:
			r.step(Recovered{ID: id, State: state})
		}
	case "status":
		r.printStatus()
	default:
		fail("unknown command")
	}
	if len(r.out) == 0 {
		return "ok"
	}
	return strings.Join(r.out, "\n")
}

func splitArgs(fields []string) (args []string, kv map[string]string, flags map[string]bool) {
	kv, flags = map[string]string{}, map[string]bool{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
			continue
		}
		if f == "rescale" || f == "final" {
			flags[f] = true
			continue
		}
		args = append(args, f)
	}
	return args, kv, flags
}

func (r *scriptRunner) processReady() {
	if !r.m.HasReady() {
		r.printf("no ready")
		return
	}
	for r.m.HasReady() {
		rd := r.m.Ready()
		r.printf("ready:")
		var persistErr error
		if p := rd.Persist; p != nil {
			if r.failPersist {
				r.failPersist = false
				persistErr = errors.New("disk full")
				r.printf("  persist %d failed: %v", p.ID, persistErr)
			} else {
				if err := r.store.Save(context.Background(), p.ID, p.State); err != nil {
					r.t.Fatalf("save: %v", err)
				}
				r.printf("  persist %d: %s", p.ID, describeState(p.State))
			}
		}
		if c := rd.Commit; c != nil {
			if persistErr != nil {
				r.printf("  commit %d skipped", c.Epoch)
			} else {
				r.printf("  commit %d attempt %d payloads [%s]", c.Epoch, c.Attempt, joinPayloads(c.Payloads))
			}
		}
		for _, msg := range rd.Messages {
			r.printf("  -> %v", msg)
		}
		r.m.Advance()
		if persistErr != nil {
			r.step(PersistFailed{ID: rd.Persist.ID, Err: persistErr})
		}
	}
}

func joinPayloads(ps [][]byte) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, " ")
}

func describeState(b []byte) string {
	s, err := DecodeState(b)
	if err != nil {
		return "undecodable: " + err.Error()
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "last-committed=%d writers=[", s.LastCommitted)
	for i, w := range s.Writers {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%v:%s", w.Writer, FormatVnodes(w.Vnodes))
	}
	sb.WriteString("] recorded=[")
	for i, e := range s.Epochs {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%d:", e.Epoch)
		for j, p := range e.Parts {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.Write(p.Payload)
		}
	}
	sb.WriteString("]")
	return sb.String()
}

func (r *scriptRunner) printStatus() {
	s := r.m.Status()
	r.printf("last-committed=%d last-decided=%d recorded=%v committing=%d undecided=%v",
		s.LastCommitted, s.LastDecided, s.Recorded, s.Committing, s.Undecided)
	for _, w := range s.Writers {
		r.printf("writer %v %s", w.Writer, FormatVnodes(w.Vnodes))
	}
	for _, w := range s.Pending {
		r.printf("pending %v %s", w.Writer, FormatVnodes(w.Vnodes))
	}
	if s.Failed != nil {
		r.printf("failed: %v", s.Failed)
	}
}
