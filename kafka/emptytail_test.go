package kafka

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// batch encodes a record batch at offset first spanning span offsets that
// holds recs (a compacted topic's emptied batch holds none).
func batch(first int64, span int32, recs ...kmsg.Record) []byte {
	b := kmsg.RecordBatch{FirstOffset: first, Magic: 2, LastOffsetDelta: span - 1, NumRecords: int32(len(recs)), ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1}
	for _, r := range recs {
		b.Records = r.AppendTo(b.Records)
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:12], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

// TestEmptyUpTo reads fetch answers: an emptied batch (KAFKA-5443) ends
// the partition past its offsets; a batch with a record is the client's.
func TestEmptyUpTo(t *testing.T) {
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.HighWatermark, rp.LastStableOffset = 8, 8
	rp.RecordBatches = batch(5, 3)
	if next, ok := emptyUpTo("t", 5, &rp); !ok || next != 8 {
		t.Errorf("an emptied batch at 5-7: next %d, %v; want 8, true", next, ok)
	}
	rec := kmsg.NewRecord()
	rec.OffsetDelta, rec.Key, rec.Value = 2, []byte("k"), []byte("v")
	rp.RecordBatches = batch(5, 3, rec)
	if next, ok := emptyUpTo("t", 5, &rp); ok {
		t.Errorf("a batch holding offset 7's record: moved to %d", next)
	}
	rp.RecordBatches = nil
	if next, ok := emptyUpTo("t", 5, &rp); ok {
		t.Errorf("no batch: moved to %d", next)
	}
}

// TestPassEmptyTailsAsksTheLeader runs the probe against a broker: a
// partition whose next offset holds a record stays where it is, and one
// that is read to its end is not asked about.
func TestPassEmptyTailsAsksTheLeader(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte{byte(i)}, Value: []byte("v"), Partition: 1}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(context.Background(), Config{Brokers: c.ListenAddrs(), Topic: "t", StopAtEnd: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.next, s.end = map[int32]int64{0: 0, 1: 1}, map[int32]int64{0: 0, 1: 3}
	md, err := s.adm.Metadata(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	pd := md.Topics["t"].Partitions[1]
	rp, err := s.probe(context.Background(), 1, pd.Leader, md.Topics["t"].ID)
	if err != nil || rp == nil || rp.ErrorCode != 0 {
		t.Fatalf("probing partition 1 at its leader %d: answer %v, error %v", pd.Leader, rp, err)
	}
	if fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: 1, Topic: "t", Partition: 1}, rp, kgo.DefaultDecompressor(), nil); len(fp.Records) != 2 {
		t.Fatalf("the probe from offset 1 read %d records, want 2", len(fp.Records))
	}
	if err := s.passEmptyTails(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.next[0] != 0 || s.next[1] != 1 {
		t.Errorf("next offsets %v, want 0:0 1:1 (offset 1 of partition 1 holds a record)", s.next)
	}
}
