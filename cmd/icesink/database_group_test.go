package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/warehouse"
)

// TestDatabaseGroup: a Debezium connector's three topics (three
// partitions each) read by two processes of one consumer group, each
// table's writers joining its coordinator at one `icesink coordinator
// --table-template`. The orders' source adds a column and widens one
// mid-stream. At random points a random one of the three processes (a
// writer or the coordinator) is killed with SIGKILL, and started again
// after a random pause while events keep coming. Every table ends equal
// to its model with every partition's end offset committed.
func TestDatabaseGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process Kafka test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 240*time.Second)
	defer cancel()
	// A stall is reported before ctx kills the processes.
	stalled, cancelStalled := context.WithTimeout(ctx, 200*time.Second)
	defer cancelStalled()
	f, c := newConnectorFeed(t, 47, 3)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 47))
	t.Logf("kill seed %d", seed)
	whDir := t.TempDir()
	caddr, coord := mpServe(t, ctx, "coordinator", "--warehouse", whDir, "--table-template", "inventory.{table}",
		"--listen", "127.0.0.1:0", "--checkpoint-interval", "300ms", "--align-timeout", "30s")
	// The coordinator comes back on the address the writers know.
	startCoord := func() *mpProc {
		_, p := mpServe(t, ctx, "coordinator", "--warehouse", whDir, "--table-template", "inventory.{table}",
			"--listen", caddr, "--checkpoint-interval", "300ms", "--align-timeout", "30s")
		return p
	}
	// Each process is a static member of the group (--kafka-instance-id):
	// a process restarted after a kill takes its identity back. (kfake
	// keeps a member killed while its JoinGroup waited for the others in
	// the group for good, its partitions unread, where a broker times its
	// session out; a restart under the same identity replaces it.)
	start := func(i int) *mpProc {
		return mpStart(t, ctx, "run", "--kafka-instance-id", fmt.Sprintf("p%d", i), "--warehouse", whDir, "--table-template", "inventory.{table}", "--format", "debezium-json",
			"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `dbserver1\.inventory\..*`, "--group", "sink", "--coordinator", caddr,
			"--kafka-session-timeout", "6s", "--memory-limit", "4MiB", "--spill-dir", t.TempDir())
	}
	procs := []*mpProc{start(0), start(1)}
	var logs strings.Builder // the output of every process killed
	outputs := func() string {
		var b strings.Builder
		b.WriteString(logs.String())
		fmt.Fprintf(&b, "--- coordinator\n%s\n", coord.output())
		for i, p := range procs {
			fmt.Fprintf(&b, "--- process %d\n%s\n", i, p.output())
		}
		return b.String()
	}
	// waitCommitted waits until every table holds its topic's offsets up
	// to n records of each partition (nil: to the end), with no process exited.
	waitCommitted := func(atLeast func(topic string, p int32) int) {
		t.Helper()
		for {
			behind := ""
			for _, tp := range f.topics {
				got := tableOffsets(t, whDir, tp)
				for p := range f.parts {
					if got[p] < atLeast(tp.name, p) {
						behind = fmt.Sprintf("%s partition %d at %d of %d", tp.name, p, got[p], atLeast(tp.name, p))
					}
				}
			}
			if behind == "" {
				return
			}
			select {
			case <-stalled.Done():
				// Every live process prints its goroutines (SIGQUIT), so
				// that a stall says where each one waits.
				for _, p := range append([]*mpProc{coord}, procs...) {
					p.cmd.Process.Signal(syscall.SIGQUIT)
				}
				for _, p := range append([]*mpProc{coord}, procs...) {
					select {
					case <-p.done:
					case <-time.After(5 * time.Second):
					}
				}
				t.Fatalf("%s\n%s", behind, outputs())
			case <-time.After(200 * time.Millisecond):
			}
			for _, p := range append([]*mpProc{coord}, procs...) {
				select {
				case <-p.done:
					t.Fatalf("a process exited: %v\n%s", p.err, outputs())
				default:
				}
			}
		}
	}
	pause := func() { time.Sleep(100*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))) }
	f.produce(300)
	waitCommitted(func(string, int32) int { return 1 })
	const kills = 4
	victims := map[string]int{}
	for k := range kills {
		if k == kills/2 {
			f.evolve()
		}
		f.produce(100 + rng.IntN(150))
		pause()
		// The victim dies with its windows (or its epoch) open; the group
		// gives a writer's partitions to the other until it is back, and
		// the writers wait for their coordinator.
		i := rng.IntN(len(procs) + 1)
		p, name := coord, "coordinator"
		if i < len(procs) {
			p, name = procs[i], fmt.Sprintf("process %d", i)
		}
		victims[name]++
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		fmt.Fprintf(&logs, "--- %s, killed (kill %d)\n%s\n", name, k+1, p.output())
		f.produce(rng.IntN(150))
		pause()
		if i < len(procs) {
			procs[i] = start(i)
		} else {
			coord = startCoord()
		}
	}
	f.produce(200)
	t.Logf("killed: %v", victims)
	waitCommitted(func(topic string, p int32) int { return f.ends[topic][p] })
	for _, tp := range f.topics {
		f.check(whDir, tp, fmt.Sprintf("after %d kills (%v)", kills, victims))
	}
	if !strings.Contains(outputs(), "coordinating a table") {
		t.Errorf("the coordinator logged no table it started:\n%s", outputs())
	}
	// One coordinator for all tables: one state folder, none per table.
	if _, err := os.Stat(filepath.Join(whDir, "_icesink", "database", "icesink")); err != nil {
		t.Errorf("no state folder of the database's coordinator: %v", err)
	}
	if old, _ := filepath.Glob(filepath.Join(whDir, "_icesink", "inventory.*")); len(old) > 0 {
		t.Errorf("state folders of tables' own coordinators: %v", old)
	}

	// customers' email becomes a double: that table stops in both
	// processes (the group hands its partitions to the other, which
	// stops on the same record), naming table, topic and column; the
	// other tables take their new events.
	customers := f.topics[0]
	customers.fields = []string{connectField("id", "int64", false), connectField("email", "double", true)}
	bad := &kgo.Record{Topic: customers.name, Key: dbKey(1), Value: connectEnvelope(customers.fields, "null", `{"id":1,"email":1.5}`), Partition: 1}
	recs := []*kgo.Record{bad}
	for range 100 {
		for _, tp := range f.topics[1:] {
			recs = append(recs, f.event(tp, int64(rng.IntN(150))))
		}
	}
	if err := f.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitCommitted(func(topic string, p int32) int {
		if topic == customers.name {
			return 0
		}
		return f.ends[topic][p]
	})
	for {
		out := outputs()
		if strings.Contains(out, `msg="a table stopped; the other tables go on" table=inventory.customers topic=dbserver1.inventory.customers`) &&
			strings.Contains(out, `column \"email\" is string, the events now carry double`) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no process stopped the customers table on the type change:\n%s", out)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, tp := range f.topics {
		f.check(whDir, tp, "after a type change in customers")
	}
}

// tableOffsets returns the next offsets of tp's partitions that its
// table's last commit holds (none: the table does not exist yet).
func tableOffsets(t *testing.T, whDir string, tp *dbTopic) map[int32]int {
	t.Helper()
	w, err := warehouse.Open(context.Background(), whDir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cm, err := commit.NewCommitter(context.Background(), w.Catalog, dbTable(tp), "icesink")
	if err != nil {
		return nil
	}
	last, _ := cm.Last()
	out := map[int32]int{}
	for k, v := range maps.All(last.Properties) {
		if rest, ok := strings.CutPrefix(k, commit.PropOffsetPrefix+tp.name+"."); ok {
			p, _ := strconv.Atoi(rest)
			out[int32(p)], _ = strconv.Atoi(v)
		}
	}
	return out
}
