package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// passEmptyTails moves the next offset of every partition StopAtEnd has
// not read to its end past offsets that hold no record: a compacted
// topic keeps the header of a batch whose records were all cleaned
// (KAFKA-5443), and a partition whose last records went that way ends
// before its end offset for every record the client hands out. The client
// steps over such a batch without a word, so the source asks the
// partition's leader itself. Called after a poll that brought nothing.
func (s *Source) passEmptyTails(ctx context.Context) error {
	var behind []int32
	for p, end := range s.end {
		if s.next[p] < end {
			behind = append(behind, p)
		}
	}
	if len(behind) == 0 {
		return nil
	}
	md, err := s.adm.Metadata(ctx, s.cfg.Topic)
	if err != nil {
		return fmt.Errorf("kafka: topic %s: finding the partitions' leaders: %w", s.cfg.Topic, err)
	}
	td, ok := md.Topics[s.cfg.Topic]
	if !ok || td.Err != nil {
		return nil // the next poll says what is wrong
	}
	for _, p := range behind {
		pd, ok := td.Partitions[p]
		if !ok || pd.Err != nil || pd.Leader < 0 {
			continue
		}
		rp, err := s.probe(ctx, p, pd.Leader, td.ID)
		if err != nil {
			return err
		}
		if rp == nil || rp.ErrorCode != 0 {
			continue // the client's polls meet it and say what is wrong
		}
		if next, ok := emptyUpTo(s.cfg.Topic, s.next[p], rp); ok {
			s.next[p] = next
		}
	}
	return nil
}

// probe fetches partition p of the source's topic (id) from its next
// offset at its leader: the partition's answer, nil when there is none.
func (s *Source) probe(ctx context.Context, p, leader int32, id [16]byte) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes = -1, 0, 1
	req.MaxBytes = int32(defaultFetchBytes)
	req.IsolationLevel = 1 // read committed, as the client
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = s.cfg.Topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, s.next[p], int32(defaultFetchBytes)
	rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, s.cl.Broker(int(leader)))
	if err != nil {
		return nil, fmt.Errorf("kafka: topic %s partition %d: fetching offset %d: %w", s.cfg.Topic, p, s.next[p], err)
	}
	for _, t := range resp.Topics {
		for i := range t.Partitions {
			if t.Partitions[i].Partition == p {
				return &t.Partitions[i], nil
			}
		}
	}
	return nil, nil
}

// emptyUpTo reads a fetch answer for partition rp of topic from offset
// from: when its batches hold no record at or after from but end past
// it, the offset they end at and true. Records the answer holds are the
// client's to hand out: then false.
func emptyUpTo(topic string, from int64, rp *kmsg.FetchResponseTopicPartition) (int64, bool) {
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: true, // the client keeps them too: they are handed out
		Offset:             from,
		IsolationLevel:     kgo.ReadCommitted(),
		Topic:              topic,
		Partition:          rp.Partition,
	}, rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil || len(fp.Records) > 0 || next <= from {
		return 0, false
	}
	return next, true
}
