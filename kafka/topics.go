package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// client connects to cfg's brokers with its security settings, opts and
// then cfg.Options (which win).
//
// Clients opened for one question (Topics, FirstRecord, PartitionCount)
// add kgo.DisableClientMetrics: a broker that subscribes to client
// telemetry (KIP-714) gets a final push from every client as it closes,
// gzipped, and a database's tables each asked theirs at once (a fifth of
// the CPU of a 50-table run against kfake, which subscribes to all).
func client(cfg Config, opts ...kgo.Opt) (*kgo.Client, error) {
	sec, err := cfg.Security.Options()
	if err != nil {
		return nil, err
	}
	opts = append(append(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID("icesink")}, opts...), sec...), cfg.Options...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: connecting to %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	return cl, nil
}

// Topics lists the cluster's topics whose whole name re matches, sorted
// (internal topics such as __consumer_offsets left out).
func Topics(ctx context.Context, cfg Config, re *regexp.Regexp) ([]string, error) {
	cl, err := client(cfg, kgo.DisableClientMetrics())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: listing topics: %w%s", err, cfg.Security.hint(err))
	}
	var out []string
	for _, t := range td.Sorted() {
		if t.IsInternal || strings.HasPrefix(t.Topic, "__") {
			continue
		}
		if loc := re.FindStringIndex(t.Topic); loc != nil && loc[0] == 0 && loc[1] == len(t.Topic) {
			out = append(out, t.Topic)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ErrEmptyTopic is FirstRecord's answer for a topic without a record.
var ErrEmptyTopic = errors.New("kafka: the topic holds no record")

// FirstRecord returns the earliest record of topic that has a value (not
// a tombstone), over all its partitions, to derive a new table's schema
// from. With stopAtEnd it returns ErrEmptyTopic when the topic holds none;
// otherwise it waits for one until ctx ends.
func FirstRecord(ctx context.Context, cfg Config, topic string, stopAtEnd bool) (*kgo.Record, error) {
	// One record is wanted: fetches of the broker's smallest answer (one
	// record batch) keep what the client reads ahead small, also when a
	// database's tables all look for their first record at once.
	cl, err := client(cfg, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxBytes(1), kgo.FetchMaxPartitionBytes(1), kgo.DisableClientMetrics())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if stopAtEnd {
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("kafka: end offsets of %s: %w%s", topic, err, cfg.Security.hint(err))
		}
		empty := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 {
				empty = false
			}
		})
		if empty {
			return nil, ErrEmptyTopic
		}
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var found *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if r.Value != nil && !r.Attrs.IsControl() && found == nil {
				found = r
			}
		})
		if found != nil {
			return found, nil
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.Canceled) {
				return nil, fmt.Errorf("kafka: reading %s: %w%s", topic, fe.Err, cfg.Security.hint(fe.Err))
			}
		}
	}
}

// firstRecordsWait is how long FirstRecords waits for the partitions that
// have not answered once another has.
const firstRecordsWait = 10 * time.Second

// FirstRecords returns the earliest record that has a value of every
// partition of topic that holds one now (up to the end offsets when it is
// called), by partition: a caller naming a table from a topic's events
// checks that its partitions agree, and takes the same one on every
// start. A topic none of whose partitions holds one is FirstRecord's case
// (ErrEmptyTopic with stopAtEnd, else the first record to come).
func FirstRecords(ctx context.Context, cfg Config, topic string, stopAtEnd bool) ([]*kgo.Record, error) {
	adm, err := client(cfg, kgo.DisableClientMetrics())
	if err != nil {
		return nil, err
	}
	ka := kadm.NewClient(adm)
	starts, err := ka.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = ka.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
	}
	adm.Close()
	if err != nil {
		return nil, fmt.Errorf("kafka: offsets of %s: %w%s", topic, err, cfg.Security.hint(err))
	}
	want := map[int32]kgo.Offset{}
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			want[o.Partition] = kgo.NewOffset().At(s.Offset)
			end[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		rec, err := FirstRecord(ctx, cfg, topic, stopAtEnd)
		if err != nil {
			return nil, err
		}
		return []*kgo.Record{rec}, nil
	}
	cl, err := client(cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.DisableClientMetrics())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	found := map[int32]*kgo.Record{}
	for len(end) > 0 {
		// A partition whose last offsets hold no record (compacted away)
		// never reaches its end: once one partition answered, the others
		// get firstRecordsWait to.
		pctx, cancel := context.WithTimeout(ctx, firstRecordsWait)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if fs.Empty() && pctx.Err() != nil && len(found) > 0 {
			break
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("kafka: reading %s: %w%s", topic, fe.Err, cfg.Security.hint(fe.Err))
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			e, open := end[r.Partition]
			if !open {
				return
			}
			if r.Value != nil && !r.Attrs.IsControl() {
				found[r.Partition] = r
				delete(end, r.Partition)
				return
			}
			if r.Offset+1 >= e {
				delete(end, r.Partition) // only tombstones and markers
			}
		})
	}
	if len(found) == 0 {
		rec, err := FirstRecord(ctx, cfg, topic, stopAtEnd)
		if err != nil {
			return nil, err
		}
		return []*kgo.Record{rec}, nil
	}
	out := make([]*kgo.Record, 0, len(found))
	for _, p := range slices.Sorted(maps.Keys(found)) {
		out = append(out, found[p])
	}
	return out, nil
}
