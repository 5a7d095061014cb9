package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
)

// kafkaStream starts an in-process Kafka broker (kfake, in this test
// process; the icesink processes connect to it) with topic cdc of three
// partitions, and returns its address and a function producing changelog
// lines: changes to partition id%3, barrier lines to 0. ends counts the
// records per partition produced so far.
func kafkaStream(t *testing.T) (addr string, produce func(lines [][]byte), ends map[int32]int) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "cdc"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("cdc"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ends = map[int32]int{}
	return c.ListenAddrs()[0], func(lines [][]byte) {
		t.Helper()
		var recs []*kgo.Record
		for _, l := range lines {
			p := partitionOf(t, l)
			ends[p]++
			recs = append(recs, &kgo.Record{Value: bytes.Clone(l), Partition: p})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}, ends
}

// checkOffsets checks that the sink's last commit holds every partition's
// end offset.
func checkOffsets(t *testing.T, wh string, ends map[int32]int) {
	t.Helper()
	w := openWarehouse(t, wh)
	cm, err := commit.NewCommitter(context.Background(), w.Catalog, []string{"db", "t"}, "icesink")
	if err != nil {
		t.Fatal(err)
	}
	last, _ := cm.Last()
	for p, n := range ends {
		k := commit.PropOffsetPrefix + "cdc." + strconv.Itoa(int(p))
		if got := last.Properties[k]; got != strconv.Itoa(n) {
			t.Errorf("commit holds %s = %q, want %d", k, got, n)
		}
	}
}

// TestKafkaCrashAndRerun kills runs reading a Kafka topic with SIGKILL at
// random moments and reruns them; then more records arrive and a last run
// reads them. The table equals the stream, each epoch is committed once,
// and the last commit holds every partition's end offset.
func TestKafkaCrashAndRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	rng := rand.New(rand.NewPCG(13, 13))
	_, lines := stream(t, rng, 24000, 3000)
	addr, produce, ends := kafkaStream(t)
	produce(lines[:20000])
	wh := t.TempDir()
	args := []string{"run", "--warehouse", wh, "--table", "db.t", "--schema", writeSchema(t), "--kafka-brokers", addr, "--topic", "cdc",
		"--group", "icesink", "--stop-at-end", "--checkpoint-rows", "1500", "--checkpoint-interval", "300ms", "--writers", "2", "--quiet"}
	kills := 0
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
		if attempt < 6 {
			select {
			case err = <-done:
			case <-time.After(time.Duration(100+rng.IntN(900)) * time.Millisecond):
				cmd.Process.Signal(syscall.SIGKILL)
				<-done
				kills++
				continue
			}
		} else {
			err = <-done
		}
		if err != nil {
			t.Fatalf("run %d failed: %v\n%s", attempt, err, stderr.String())
		}
		break
	}
	t.Logf("killed %d runs", kills)
	checkOffsets(t, wh, ends)
	produce(lines[20000:])
	if _, stderr, code := icesink(t, args...); code != 0 {
		t.Fatalf("last run: exit %d\n%s", code, stderr)
	}
	checkOffsets(t, wh, ends)
	if n := committedLine(t, wh); n != int64(len(lines)) {
		t.Errorf("the sink counted %d records, want %d (a record read twice or never)", n, len(lines))
	}
	got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
	if want := expectedScan(t, lines, len(lines)); got != want {
		t.Errorf("table after crashes and reruns differs from the stream's final state")
	}
	checkEpochsOnce(t, wh)
}

// TestKafkaSignalCommitsWhatWasRead: a run following a topic (no
// --stop-at-end) stops on SIGTERM by committing what it read, exit 0.
func TestKafkaSignalCommitsWhatWasRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 17))
	_, lines := stream(t, rng, 3000, 300)
	addr, produce, _ := kafkaStream(t)
	produce(lines)
	wh := t.TempDir()
	cmd := exec.Command(binary, "run", "--warehouse", wh, "--table", "db.t", "--schema", writeSchema(t), "--kafka-brokers", addr, "--topic", "cdc",
		"--checkpoint-interval", "1h", "--checkpoint-rows", "100000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// No checkpoint ends on its own: wait until the table exists and the
	// records are read, then stop.
	time.Sleep(3 * time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, stderr.String())
	}
	// What was read by then is committed: each partition's records up to
	// the offset the commit holds.
	w := openWarehouse(t, wh)
	cm, err := commit.NewCommitter(context.Background(), w.Catalog, []string{"db", "t"}, "icesink")
	if err != nil {
		t.Fatal(err)
	}
	last, ok := cm.Last()
	if !ok {
		t.Fatalf("nothing committed after SIGTERM\n%s", stderr.String())
	}
	var read [][]byte
	seen := map[int32]int{}
	for _, l := range lines {
		p := partitionOf(t, l)
		if off, _ := strconv.Atoi(last.Properties[commit.PropOffsetPrefix+"cdc."+strconv.Itoa(int(p))]); seen[p] < off {
			read = append(read, l)
		}
		seen[p]++
	}
	if len(read) < len(lines) {
		t.Logf("%d of %d records were read before SIGTERM", len(read), len(lines))
	}
	got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
	if want := expectedScan(t, read, len(read)); got != want {
		t.Errorf("table after SIGTERM differs from the records its offsets cover")
	}
}

// partitionOf is the partition kafkaStream sends a line to.
func partitionOf(t *testing.T, l []byte) int32 {
	dec, err := changelog.NewDecoder(strings.NewReader(""), changelog.ChangelogJSON, cliSchema)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := dec.DecodeMessage(l)
	if err != nil || rec.Barrier {
		return 0
	}
	return int32(rec.Changes[0].Row[0].(int64) % 3)
}
