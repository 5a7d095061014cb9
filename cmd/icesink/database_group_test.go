package main

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/warehouse"
)

// TestDatabaseGroup: a Debezium connector's three topics (three
// partitions each) read by two processes of one consumer group, each
// table's writers joining its coordinator at one `icesink coordinator
// --table-template`. The orders' source adds a column and widens one
// mid-stream; one process is killed with SIGKILL and started again. Every
// table ends equal to its model with every partition's end offset
// committed.
func TestDatabaseGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process Kafka test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	f, c := newConnectorFeed(t, 47, 3)
	whDir := t.TempDir()
	caddr, coord := mpServe(t, ctx, "coordinator", "--warehouse", whDir, "--table-template", "inventory.{table}",
		"--listen", "127.0.0.1:0", "--checkpoint-interval", "300ms", "--align-timeout", "30s")
	start := func() *mpProc {
		return mpStart(t, ctx, "run", "--warehouse", whDir, "--table-template", "inventory.{table}", "--format", "debezium-json",
			"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `dbserver1\.inventory\..*`, "--group", "sink", "--coordinator", caddr,
			"--kafka-session-timeout", "6s", "--memory-limit", "4MiB", "--spill-dir", t.TempDir())
	}
	procs := []*mpProc{start(), start()}
	outputs := func() string {
		var b strings.Builder
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
			case <-ctx.Done():
				t.Fatalf("%s\n%s", behind, outputs())
			case <-time.After(200 * time.Millisecond):
			}
			for _, p := range procs {
				select {
				case <-p.done:
					t.Fatalf("a process exited: %v\n%s", p.err, outputs())
				default:
				}
			}
		}
	}
	f.produce(300)
	waitCommitted(func(string, int32) int { return 1 })
	f.evolve()
	f.produce(300)
	// One process dies with its windows open; the group gives its
	// partitions to the other until it is back.
	if err := procs[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[1].done
	f.produce(200)
	procs[1] = start()
	f.produce(200)
	waitCommitted(func(topic string, p int32) int { return f.ends[topic][p] })
	for _, tp := range f.topics {
		f.check(whDir, tp, "after the kill")
	}
	if !strings.Contains(coord.output(), "coordinating a table") {
		t.Errorf("the coordinator logged no table it started:\n%s", coord.output())
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
