package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Membership is this process's place in a consumer group that splits a
// topic's partitions among the sink's processes. It assigns: it fetches
// nothing (the topic is paused), and the records are read by a Source
// restricted to the assigned partitions, at the offsets the table holds.
// It commits to the group only the offsets of Iceberg commits, for lag
// tools (Source.CommitThrough).
type Membership struct {
	cl    *kgo.Client
	topic string
	mu    sync.Mutex
	parts map[int32]bool
	// changed is closed, and replaced, at every assignment change.
	changed chan struct{}
	last    time.Time
}

// JoinGroup joins group for topic. sessionTimeout is how long the group
// waits for a silent member (a killed process) before its partitions go
// to the others (0: franz-go's default, 45s).
func JoinGroup(ctx context.Context, brokers []string, group, topic string, sessionTimeout time.Duration, opts ...kgo.Opt) (*Membership, error) {
	m := &Membership{topic: topic, parts: map[int32]bool{}, changed: make(chan struct{})}
	all := append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("icesink"),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.update(a[topic], true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { m.update(r[topic], false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { m.update(r[topic], false) }),
	}, opts...)
	if sessionTimeout > 0 {
		all = append(all, kgo.SessionTimeout(sessionTimeout), kgo.HeartbeatInterval(max(sessionTimeout/10, 100*time.Millisecond)))
	}
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("kafka: joining group %q at %s: %w", group, strings.Join(brokers, ","), err)
	}
	cl.PauseFetchTopics(topic)
	m.cl = cl
	// The group is joined by the client's first poll; it returns nothing
	// (the topic is paused) and the session goes on in the background.
	go cl.PollFetches(ctx)
	return m, nil
}

func (m *Membership) update(parts []int32, add bool) {
	if len(parts) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range parts {
		if add {
			m.parts[p] = true
		} else {
			delete(m.parts, p)
		}
	}
	m.last = time.Now()
	close(m.changed)
	m.changed = make(chan struct{})
}

// Wait returns this process's partitions once it has some and no change
// came for settle (a rebalance may take a revoke and an assign), with a
// channel closed at the next change.
func (m *Membership) Wait(ctx context.Context, settle time.Duration) ([]int32, <-chan struct{}, error) {
	for {
		m.mu.Lock()
		parts := make([]int32, 0, len(m.parts))
		for p := range m.parts {
			parts = append(parts, p)
		}
		changed, quiet := m.changed, time.Since(m.last)
		m.mu.Unlock()
		if len(parts) > 0 && quiet >= settle {
			slices.Sort(parts)
			return parts, changed, nil
		}
		wait := settle - quiet
		if len(parts) == 0 {
			wait = time.Hour
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// commit commits offs to the group as this member (its generation: an
// active group refuses commits from outside it).
func (m *Membership) commit(ctx context.Context, offs kadm.Offsets) error {
	req := map[string]map[int32]kgo.EpochOffset{}
	offs.Each(func(o kadm.Offset) {
		if req[o.Topic] == nil {
			req[o.Topic] = map[int32]kgo.EpochOffset{}
		}
		req[o.Topic][o.Partition] = kgo.EpochOffset{Epoch: o.LeaderEpoch, Offset: o.At}
	})
	var err error
	m.cl.CommitOffsetsSync(ctx, req, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, cerr error) {
		if cerr != nil {
			err = cerr
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && err == nil {
					err = fmt.Errorf("partition %d: %w", p.Partition, e)
				}
			}
		}
	})
	return err
}

// Close leaves the group: the other members get this one's partitions.
func (m *Membership) Close() { m.cl.Close() }

// PartitionCount returns the number of partitions of topic.
func PartitionCount(ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) (int, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("icesink"), kgo.DisableClientMetrics()}, opts...)...)
	if err != nil {
		return 0, fmt.Errorf("kafka: connecting to %s: %w", strings.Join(brokers, ","), err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: listing the partitions of topic %q: %w", topic, err)
	}
	n := len(ends[topic])
	if n == 0 {
		return 0, fmt.Errorf("kafka: topic %q has no partitions (does it exist?)", topic)
	}
	return n, nil
}

// StopOffsets returns, per partition of topic, the offset a --stop-at-end
// read ends at now: the end offset, or the last stable offset below it
// (a transaction still open is not waited for).
func StopOffsets(ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) (map[int32]int64, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("icesink"), kgo.DisableClientMetrics()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: connecting to %s: %w", strings.Join(brokers, ","), err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: listing the end offsets of topic %q: %w", topic, err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: listing the stable offsets of topic %q: %w", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic != topic {
			return
		}
		out[o.Partition] = o.Offset
		if st, ok := stable.Lookup(topic, o.Partition); ok && st.Err == nil && st.Offset < o.Offset {
			out[o.Partition] = st.Offset
		}
	})
	return out, nil
}
