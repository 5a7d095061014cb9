package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/kafka"
)

var schema = iceberg.NewSchemaWithIdentifiers(1, []int{1},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String},
)

// cluster starts an in-process Kafka broker with topic "t" (and the other
// topics named) of parts partitions, and a client producing to "t".
func cluster(t *testing.T, parts int32, other ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, append([]string{"t"}, other...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

// produce sends one record per value (nil: a tombstone) to partition
// key%parts, keyed by key.
func produce(t *testing.T, cl *kgo.Client, keys []int64, values [][]byte) {
	t.Helper()
	var recs []*kgo.Record
	for i, k := range keys {
		recs = append(recs, &kgo.Record{Key: []byte(strconv.FormatInt(k, 10)), Value: values[i], Partition: int32(k % 3)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, c *kfake.Cluster, cfg kafka.Config) *kafka.Source {
	t.Helper()
	cfg.Brokers, cfg.Topic = c.ListenAddrs(), "t"
	dec, err := changelog.NewDecoder(strings.NewReader(""), changelog.ChangelogJSON, schema)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kafka.Open(context.Background(), cfg, dec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// readAll reads until io.EOF and returns the ids of the changes, and the
// barriers seen. It fails the test when the end does not come within 20 s
// (Next blocks while a source waits for records).
func readAll(t *testing.T, s *kafka.Source) (ids []int64, barriers int) {
	t.Helper()
	// The reading goroutine copies what it needs out of each record
	// before its next Next (the decoder reuses the record's memory).
	type next struct {
		ids     []int64
		barrier bool
		err     error
	}
	ch := make(chan next)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			rec, err := s.Next()
			n := next{barrier: rec.Barrier, err: err}
			for _, c := range rec.Changes {
				n.ids = append(n.ids, c.Row[0].(int64))
			}
			select {
			case ch <- n:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	deadline := time.After(20 * time.Second)
	for {
		var n next
		select {
		case n = <-ch:
		case <-deadline:
			t.Fatalf("no end of input after 20 s: %d changes read (a source that never reaches its end offsets)", len(ids))
		}
		if n.err == io.EOF {
			return ids, barriers
		}
		if n.err != nil {
			t.Fatal(n.err)
		}
		if n.barrier {
			barriers++
			continue
		}
		ids = append(ids, n.ids...)
	}
}

// produceLines produces the records of ids 0 .. n-1.
func produceLines(t *testing.T, cl *kgo.Client, n int64) {
	t.Helper()
	var keys []int64
	var vals [][]byte
	for i := range n {
		keys, vals = append(keys, i), append(vals, line(i))
	}
	produce(t, cl, keys, vals)
}

func line(id int64) []byte {
	return fmt.Appendf(nil, `{"op":"+I","data":{"id":%d,"v":"x%d"}}`, id, id)
}

// The source reads every partition to the end, skips tombstones, and a
// second source seeking to the first one's offsets reads only what was
// produced after: no record lost or read twice.
func TestSourceResumesAtOffsets(t *testing.T) {
	c, cl := cluster(t, 3)
	var keys []int64
	var vals [][]byte
	for i := range int64(300) {
		keys = append(keys, i)
		if i%10 == 9 {
			vals = append(vals, nil) // a tombstone
		} else {
			vals = append(vals, line(i))
		}
	}
	produce(t, cl, keys, vals)

	s := open(t, c, kafka.Config{StopAtEnd: true})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	ids, _ := readAll(t, s)
	if len(ids) != 270 {
		t.Fatalf("read %d changes, want 270 (300 records, 30 tombstones)", len(ids))
	}
	offsets := s.Offsets()
	want := map[string]string{"icesink.kafka.t.0": "100", "icesink.kafka.t.1": "100", "icesink.kafka.t.2": "100"}
	if !maps.Equal(offsets, want) {
		t.Fatalf("offsets %v, want %v", offsets, want)
	}
	rec, err := s.Next()
	if err != io.EOF {
		t.Fatalf("after the end: %v %v", rec, err)
	}

	keys, vals = nil, nil
	for i := int64(1000); i < 1030; i++ {
		keys, vals = append(keys, i), append(vals, line(i))
	}
	produce(t, cl, keys, vals)
	s2 := open(t, c, kafka.Config{StopAtEnd: true})
	if err := s2.Seek(context.Background(), offsets, 300); err != nil {
		t.Fatal(err)
	}
	ids, _ = readAll(t, s2)
	if len(ids) != 30 {
		t.Fatalf("resumed source read %d changes, want the 30 new ones", len(ids))
	}
	for _, id := range ids {
		if id < 1000 {
			t.Fatalf("resumed source read record %d again", id)
		}
	}
	if got := s2.Offsets()["icesink.kafka.t.1"]; got != "110" {
		t.Fatalf("partition 1 offset %s, want 110", got)
	}
}

// A bad message fails with its topic, partition and offset and the field.
func TestSourceNamesBadMessage(t *testing.T) {
	c, cl := cluster(t, 3)
	produce(t, cl, []int64{0, 3, 6}, [][]byte{line(0), []byte(`{"op":"+I","data":{"id":"x"}}`), line(6)})
	s := open(t, c, kafka.Config{StopAtEnd: true})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Next()
	var me *changelog.MessageError
	if !errors.As(err, &me) || !errors.Is(err, changelog.ErrType) || !strings.Contains(err.Error(), "topic t partition 0 offset 1: field \"id\"") {
		t.Fatalf("error %v, want one naming topic t partition 0 offset 1 and field id", err)
	}
}

// With a dead-letter topic, a record that fails to decode goes there, with
// headers naming where it came from and why, and the run goes on; a
// missing dead-letter topic is refused at Seek.
func TestSourceDeadLetterTopic(t *testing.T) {
	c, cl := cluster(t, 3, "dlq")
	bad := []byte(`{"op":"+I","data":{"id":"x"}}`)
	produce(t, cl, []int64{0, 3, 6}, [][]byte{line(0), bad, line(6)})

	s := open(t, c, kafka.Config{StopAtEnd: true, DeadLetterTopic: "nope"})
	if err := s.Seek(context.Background(), nil, 0); err == nil || !strings.Contains(err.Error(), `dead-letter topic "nope"`) {
		t.Fatalf("Seek with a missing dead-letter topic: %v", err)
	}
	s = open(t, c, kafka.Config{StopAtEnd: true, DeadLetterTopic: "dlq"})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	ids, _ := readAll(t, s)
	if !slices.Equal(ids, []int64{0, 6}) {
		t.Fatalf("ids %v, want [0 6]", ids)
	}
	if got := s.DeadLetters(); !maps.Equal(got, map[int32]int64{0: 1}) {
		t.Fatalf("DeadLetters %v, want partition 0: 1", got)
	}
	if off := s.Offsets()[kafka.PropPrefix+"t.0"]; off != "3" {
		t.Fatalf("partition 0's next offset %s, want 3 (past the bad record)", off)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) == 0 && ctx.Err() == nil {
		got = append(got, rd.PollFetches(ctx).Records()...)
	}
	if len(got) != 1 || string(got[0].Value) != string(bad) || string(got[0].Key) != "3" {
		t.Fatalf("dead-letter records %v, want the bad record", got)
	}
	h := map[string]string{}
	for _, x := range got[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if h["icesink.error.topic"] != "t" || h["icesink.error.partition"] != "0" || h["icesink.error.offset"] != "1" || !strings.Contains(h["icesink.error.message"], `field "id"`) {
		t.Fatalf("dead-letter headers %v", h)
	}
}

// Partitions added to the topic while the source runs are found and read
// from their start, and their offsets join the source's.
func TestSourceDiscoversAddedPartitions(t *testing.T) {
	c, cl := cluster(t, 1)
	produce(t, cl, []int64{0, 3}, [][]byte{line(0), line(3)})
	stop := make(chan struct{})
	s := open(t, c, kafka.Config{DiscoverInterval: 50 * time.Millisecond, Stop: stop, Options: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	next := func() int64 {
		t.Helper()
		for {
			rec, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.Changes) > 0 {
				return rec.Changes[0].Row[0].(int64)
			}
		}
	}
	if a, b := next(), next(); a != 0 || b != 3 {
		t.Fatalf("read %d, %d; want 0, 3", a, b)
	}
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 2, "t"); err != nil {
		t.Fatal(err)
	}
	cl2, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	produce(t, cl2, []int64{4, 5}, [][]byte{line(4), line(5)})
	got := []int64{next(), next()}
	slices.Sort(got)
	if !slices.Equal(got, []int64{4, 5}) {
		t.Fatalf("read %v from the added partitions, want [4 5]", got)
	}
	want := map[string]string{kafka.PropPrefix + "t.0": "2", kafka.PropPrefix + "t.1": "1", kafka.PropPrefix + "t.2": "1"}
	if got := s.Offsets(); !maps.Equal(got, want) {
		t.Fatalf("offsets %v, want %v", got, want)
	}
	close(stop)
}

// The record key reaches the decoder: a Debezium delete without a before
// image (the key only, as JSON) deletes the row the key names.
func TestSourceDebeziumDeleteByKey(t *testing.T) {
	c, cl := cluster(t, 1)
	recs := []*kgo.Record{
		{Key: []byte(`{"id":4}`), Value: []byte(`{"op":"c","after":{"id":4,"v":"a"}}`)},
		{Key: []byte(`{"schema":{"type":"struct"},"payload":{"id":4}}`), Value: []byte(`{"op":"d","before":null,"after":null}`)},
		{Key: []byte(`{"id":4}`), Value: nil}, // the tombstone that follows
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dec, err := changelog.NewDecoder(strings.NewReader(""), changelog.DebeziumJSON, schema)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kafka.Open(context.Background(), kafka.Config{Brokers: c.ListenAddrs(), Topic: "t", StopAtEnd: true}, dec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range rec.Changes {
			ops = append(ops, fmt.Sprint(ch.Op, ch.Row[0]))
		}
	}
	if want := []string{fmt.Sprint(deltawriter.Insert, int64(4)), fmt.Sprint(deltawriter.Delete, int64(4))}; !slices.Equal(ops, want) {
		t.Fatalf("changes %v, want %v", ops, want)
	}
}

// Without records, the checkpoint timer still ends checkpoints; Stop ends
// the input.
func TestSourceBarriersWhenIdle(t *testing.T) {
	c, _ := cluster(t, 3)
	stop := make(chan struct{})
	s := open(t, c, kafka.Config{CheckpointInterval: 30 * time.Millisecond, Stop: stop})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		rec, err := s.Next()
		if err != nil || !rec.Barrier {
			t.Fatalf("record %d of an idle topic: %+v %v, want a barrier", i, rec, err)
		}
	}
	close(stop)
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("after Stop: %v, want io.EOF", err)
	}
}

// A checkpoint that takes longer than the checkpoint interval (a slow
// commit) does not starve the input: between two timed barriers the
// source hands out records. Before, every Next after such a checkpoint
// was a barrier again, and a --stop-at-end run never ended.
func TestSlowCheckpointsStillRead(t *testing.T) {
	c, cl := cluster(t, 3)
	produceLines(t, cl, 200)
	s := open(t, c, kafka.Config{CheckpointInterval: 5 * time.Millisecond, StopAtEnd: true})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	read := 0
	for {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Barrier {
			time.Sleep(15 * time.Millisecond) // the checkpoint outlasts the interval
		} else {
			read++
			time.Sleep(time.Millisecond) // records take a while too: barriers fall between them
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 200 records read after 20 s of slow checkpoints", read)
		}
	}
	if read != 200 {
		t.Fatalf("%d records read, want 200", read)
	}
}

// Offsets the table holds for records that retention deleted are refused:
// the table could not equal the stream.
func TestSeekRefusesDeletedRecords(t *testing.T) {
	c, cl := cluster(t, 3)
	produceLines(t, cl, 30)
	adm := kadm.NewClient(cl)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "t", Partition: 1, At: 5})
	if _, err := adm.DeleteRecords(context.Background(), del); err != nil {
		t.Fatal(err)
	}
	s := open(t, c, kafka.Config{StopAtEnd: true})
	err := s.Seek(context.Background(), map[string]string{"icesink.kafka.t.1": "2"}, 2)
	if err == nil || !strings.Contains(err.Error(), "partition 1") || !strings.Contains(err.Error(), "starts at 5") {
		t.Fatalf("seek below the log start: %v", err)
	}
	// With no offset recorded, earliest starts at the log start.
	s2 := open(t, c, kafka.Config{StopAtEnd: true})
	if err := s2.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if ids, _ := readAll(t, s2); len(ids) != 25 {
		t.Fatalf("read %d, want 25 (5 deleted)", len(ids))
	}
}

// Committed hands the table's offsets to the consumer group.
func TestCommittedTellsGroup(t *testing.T) {
	c, cl := cluster(t, 3)
	produce(t, cl, []int64{0, 1, 2}, [][]byte{line(0), line(1), line(2)})
	s := open(t, c, kafka.Config{Group: "g", StopAtEnd: true})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	readAll(t, s)
	if err := s.Committed(context.Background(), s.Offsets()); err != nil {
		t.Fatal(err)
	}
	got, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		o, ok := got.Lookup("t", p)
		if !ok || o.At != 1 {
			t.Errorf("group offset of partition %d: %+v, want 1", p, o)
		}
	}
}

// The lag metric counts the records not committed to the table yet.
func TestLagMetric(t *testing.T) {
	c, cl := cluster(t, 3)
	produceLines(t, cl, 30)
	s := open(t, c, kafka.Config{StopAtEnd: true})
	if err := s.Seek(context.Background(), map[string]string{"icesink.kafka.t.0": "4"}, 4); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	lag := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				out[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] += m.GetGauge().GetValue()
			}
		}
		return out
	}
	if got := lag()["icesink_kafka_lag_records/0"]; got != 6 {
		t.Fatalf("partition 0 lag %v after resuming at 4 of 10, want 6", got)
	}
	readAll(t, s)
	if err := s.Committed(context.Background(), s.Offsets()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"0", "1", "2"} {
		if got := lag()["icesink_kafka_lag_records/"+p]; got != 0 {
			t.Errorf("partition %s lag %v after committing all, want 0", p, got)
		}
		if got := lag()["icesink_kafka_committed_offset/"+p]; got != 10 {
			t.Errorf("partition %s committed offset %v, want 10", p, got)
		}
	}
}

// TestSeekLatestOnlyOnFirstRun: Start Latest applies only while the table
// holds no offset of the topic; a partition without one in a table that
// holds others (added while the sink was down) is read from its start.
// Before, its records were skipped.
func TestSeekLatestOnlyOnFirstRun(t *testing.T) {
	c, cl := cluster(t, 3)
	produceLines(t, cl, 30) // 10 records in each partition
	first := open(t, c, kafka.Config{StopAtEnd: true, Start: kafka.Latest})
	if err := first.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if ids, _ := readAll(t, first); len(ids) != 0 {
		t.Fatalf("a first run from the latest offsets read %d changes", len(ids))
	}
	// The table holds partitions 0 and 1; partition 2 is new to it.
	props := map[string]string{kafka.PropPrefix + "t.0": "10", kafka.PropPrefix + "t.1": "10"}
	s := open(t, c, kafka.Config{StopAtEnd: true, Start: kafka.Latest})
	if err := s.Seek(context.Background(), props, 20); err != nil {
		t.Fatal(err)
	}
	ids, _ := readAll(t, s)
	if len(ids) != 10 {
		t.Fatalf("read %d changes, want partition 2's 10 from its start", len(ids))
	}
	for _, id := range ids {
		if id%3 != 2 {
			t.Fatalf("read record %d of a partition the table holds", id)
		}
	}
}

// TestStopAtEndTransactional: a topic written in transactions ends in a
// commit marker; StopAtEnd reaches the end offsets, and the offsets count
// the markers as read. Before, the source never ended.
func TestStopAtEndTransactional(t *testing.T) {
	c, _ := cluster(t, 3)
	tx, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ctx := context.Background()
	for _, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var keys []int64
		var vals [][]byte
		for i := range int64(6) {
			keys, vals = append(keys, i), append(vals, line(i))
		}
		produce(t, tx, keys, vals)
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, c, kafka.Config{StopAtEnd: true})
	if err := s.Seek(ctx, nil, 0); err != nil {
		t.Fatal(err)
	}
	ids, _ := readAll(t, s)
	if len(ids) != 12 {
		t.Fatalf("read %d changes, want the 12 of the two committed transactions", len(ids))
	}
	// Each partition: 2 records and a marker per transaction.
	want := map[string]string{kafka.PropPrefix + "t.0": "9", kafka.PropPrefix + "t.1": "9", kafka.PropPrefix + "t.2": "9"}
	if got := s.Offsets(); !maps.Equal(got, want) {
		t.Fatalf("offsets %v, want %v", got, want)
	}
}

// TestSourceCheckRefusalIsDeadLettered: a record that decodes but that
// Config.Check refuses (a change the writers would refuse) goes to the
// dead-letter topic like an undecodable one, or stops the source naming
// its offset. Before, the writer refused it and every restart stopped at
// the same offset.
func TestSourceCheckRefusalIsDeadLettered(t *testing.T) {
	c, cl := cluster(t, 3, "dlq")
	produce(t, cl, []int64{0, 3, 6}, [][]byte{line(0), line(3), line(6)})
	check := func(rec changelog.Record) error {
		for _, ch := range rec.Changes {
			if ch.Row[0].(int64) == 3 {
				return errors.New("refused by the writer's check")
			}
		}
		return nil
	}
	s := open(t, c, kafka.Config{StopAtEnd: true, Check: check})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err == nil || !strings.Contains(err.Error(), "topic t partition 0 offset 1: refused by the writer's check") {
		t.Fatalf("a refused record without a dead-letter topic: %v, want an error naming it", err)
	}
	s = open(t, c, kafka.Config{StopAtEnd: true, DeadLetterTopic: "dlq", Check: check})
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if ids, _ := readAll(t, s); !slices.Equal(ids, []int64{0, 6}) {
		t.Fatalf("ids %v, want [0 6]", ids)
	}
	if got := s.DeadLetters(); !maps.Equal(got, map[int32]int64{0: 1}) {
		t.Fatalf("DeadLetters %v, want partition 0: 1", got)
	}
}
