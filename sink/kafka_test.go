package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/kafka"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// kafkaTopic starts an in-process Kafka broker (kfake: the Kafka protocol,
// not a mock of the client) with topic "cdc" of 3 partitions, and returns
// it with a function producing changelog lines to it: each change to
// partition id%3 (a key's changes stay in order), barrier lines to 0.
func kafkaTopic(t *testing.T) (*kfake.Cluster, func(lines [][]byte)) {
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
	dec, err := changelog.NewDecoder(strings.NewReader(""), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	return c, func(lines [][]byte) {
		t.Helper()
		var recs []*kgo.Record
		for _, l := range lines {
			rec, _, err := dec.DecodeMessage(l)
			if err != nil {
				t.Fatal(err)
			}
			p := int32(0)
			if !rec.Barrier {
				p = int32(rec.Changes[0].Row[0].(int64) % 3)
			}
			recs = append(recs, &kgo.Record{Value: bytes.Clone(l), Partition: p})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// kafkaRun runs the sink once over topic cdc.
func kafkaRun(ctx context.Context, t *testing.T, c *kfake.Cluster, cfg sink.Config, kcfg kafka.Config) (sink.Result, error) {
	t.Helper()
	dec, err := changelog.NewDecoder(strings.NewReader(""), changelog.ChangelogJSON, fuzzSchema)
	if err != nil {
		t.Fatal(err)
	}
	kcfg.Brokers, kcfg.Topic = c.ListenAddrs(), "cdc"
	src, err := kafka.Open(ctx, kcfg, dec)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	return sink.Run(ctx, cfg, src)
}

// A Kafka topic written by two writers over three runs (one stopped
// gracefully, one cancelled mid-window as a crash would, one to the end)
// leaves the table equal to the stream's final state, the snapshot summary
// holds every partition's end offset, and each run starts at the offsets
// the table holds: the records are counted once over all runs.
func TestKafkaSourceAgainstModel(t *testing.T) {
	c, produce := kafkaTopic(t)
	input := genInput(t, 21, 4000, 400)
	lines := bytes.Split(bytes.TrimSpace(input), []byte("\n"))
	produce(lines[:1500])

	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ident := table.Identifier{"db", "t"}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
		t.Fatal(err)
	}
	cfg := sink.Config{Loader: wh.Catalog, Ident: ident, Writers: 2, CheckpointRows: 300, StateDir: t.TempDir()}

	// Run 1 stops gracefully after its second commit: what it read is
	// committed.
	stop := make(chan struct{})
	cfg.Progress = func(p sink.Progress) {
		if p.Commits == 2 {
			select {
			case <-stop:
			default:
				close(stop)
			}
		}
	}
	r1, err := kafkaRun(ctx, t, c, cfg, kafka.Config{Stop: stop, Group: "icesink"})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Committed.Line != r1.Line || len(r1.Committed.Offsets) != 3 {
		t.Fatalf("a graceful stop committed up to record %d of %d, offsets %v", r1.Committed.Line, r1.Line, r1.Committed.Offsets)
	}

	// Run 2 is cancelled in its second window (a crash: the window is
	// dropped, the next run reads it again).
	produce(lines[1500:3000])
	rctx, cancel := context.WithCancel(ctx)
	cfg.Progress = func(p sink.Progress) {
		if p.Commits >= 1 && p.Line > r1.Line+600 {
			cancel()
		}
	}
	r2, err := kafkaRun(rctx, t, c, cfg, kafka.Config{})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run 2: %v, want cancelled", err)
	}
	if r2.Start.Line != r1.Line || r2.Committed.Line <= r1.Line {
		t.Fatalf("run 2 started at record %d (run 1 read %d) and committed up to %d", r2.Start.Line, r1.Line, r2.Committed.Line)
	}

	produce(lines[3000:])
	cfg.Progress = nil
	r3, err := kafkaRun(ctx, t, c, cfg, kafka.Config{StopAtEnd: true, CheckpointInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r3.Start.Line != r2.Committed.Line || r3.Committed.Line != int64(len(lines)) {
		t.Fatalf("run 3 read records %d..%d, want %d..%d", r3.Start.Line, r3.Committed.Line, r2.Committed.Line, len(lines))
	}
	want := modelUpTo(t, input, changelog.ChangelogJSON, 1<<62)
	tbl, err := wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, ctx, tbl); !reflect.DeepEqual(got, want) {
		t.Fatalf("table has %d live rows, the model %d (or they differ)", len(got), len(want))
	}
	sum := tbl.CurrentSnapshot().Summary.Properties
	ends := map[int]int{}
	for _, l := range lines {
		p := 0
		if !bytes.Contains(l, []byte("barrier")) {
			var id int
			fmt.Sscanf(string(l[bytes.Index(l, []byte(`"id":`))+5:]), "%d", &id)
			p = id % 3
		}
		ends[p]++
	}
	for p, n := range ends {
		k := commit.PropOffsetPrefix + "cdc." + strconv.Itoa(p)
		if sum[k] != strconv.Itoa(n) {
			t.Errorf("summary %s = %q, want %d", k, sum[k], n)
		}
	}
	if sum[commit.PropInputID] != "kafka:cdc" {
		t.Errorf("input id %q", sum[commit.PropInputID])
	}
}
