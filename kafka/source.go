// Package kafka is the sink's Kafka source: it consumes every partition of
// a topic with franz-go, decodes each record's value with the changelog
// decoders (one message, one event), ends checkpoints on a timer, and
// tracks the next offset of every partition, which the sink records in each
// commit's snapshot summary (icesink.kafka.TOPIC.PARTITION) and seeks back
// to on restart: the table, not the consumer group, holds the offsets, so a
// restart after kill -9 neither loses nor repeats a record.
//
// A consumer group, when named, only receives the committed offsets after
// each Iceberg commit, for lag monitoring; it does not assign partitions
// (Membership does, for several processes under one coordinator).
// Security reaches a secured cluster (TLS, SASL); Registry asks a schema
// registry for the Avro schemas of debezium-avro records; Topics and
// FirstRecord serve a run over many topics.
package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
)

// PropPrefix prefixes the snapshot summary properties holding the offsets:
// icesink.kafka.TOPIC.PARTITION = the next offset to read.
const PropPrefix = commit.PropOffsetPrefix

// Start says where a partition with no committed offset is read from.
type Start uint8

// The start positions.
const (
	Earliest Start = iota // the partition's first retained record
	Latest                // records produced after the first run starts
)

// Config configures a Source.
type Config struct {
	Brokers []string
	Topic   string
	// Group, when set, receives the offsets of every Iceberg commit
	// (Source.Committed), for lag monitoring. It never decides where the
	// source reads: the table does.
	Group string
	// Start is where partitions the table holds no offset for begin.
	Start Start
	// CheckpointInterval ends a checkpoint (a barrier record) at every
	// multiple of it on the wall clock, also when no record arrives: for a
	// single process. Processes sharing a topic leave it 0 and end their
	// checkpoints when the coordinator asks (RequestBarrier). 0: no timer.
	CheckpointInterval time.Duration
	// StopAtEnd ends the input (io.EOF) once every partition is read up to
	// the end offsets it had when Seek ran: a backfill, or a test.
	StopAtEnd bool
	// Stop, when closed, ends the input after the records already handed
	// out (a graceful stop: the sink commits them).
	Stop <-chan struct{}
	// Partitions, when set, restricts the source to these partitions (the
	// ones a Membership assigned to this process), and each record's vnode
	// is its partition (Vnode): the sink's coordinator then aligns the
	// processes by partition. nil: every partition, records routed by key.
	Partitions []int32
	// DiscoverInterval is how often a source reading every partition
	// (Partitions nil) looks for partitions added to the topic; it reads
	// them from their start, since all their records came after the run
	// began. Default: 30s.
	DiscoverInterval time.Duration
	// DeadLetterTopic, when set, receives the records that fail to decode
	// instead of stopping the run: each is produced there (key, value and
	// headers as read, plus icesink.error.* headers naming the source
	// topic, partition, offset and the error) before the next record is
	// handed out, and skipped. Delivery is at least once: a window that
	// is read again after a crash produces its bad records again.
	DeadLetterTopic string
	// Check, when set, is applied to every decoded record: an error is
	// handled as a record that failed to decode (the dead-letter topic, or
	// the run stops naming the record). The sink's writers refuse some
	// changes the decoder passes (deltawriter.Validator checks them the
	// same way), and only the source still knows the record.
	Check func(changelog.Record) error
	// CheckSchema, when set, is told the table's schema when it changes
	// (SetSchema), so that Check follows it.
	CheckSchema func(*iceberg.Schema) error
	// FetchBytes bounds what one fetch brings ahead of the sink, per
	// partition and per broker, compressed (franz-go's default, 50 MiB
	// per broker, sits outside every budget, and a record batch of JSON
	// may take ten times its size once decompressed). Default 1 MiB,
	// Kafka's own max.partition.fetch.bytes; the broker sends a larger
	// record batch whole all the same.
	FetchBytes int32
	// Security is how to reach a secured cluster (TLS, SASL).
	Security Security
	// ClientTelemetry pushes the client's metrics to brokers that
	// subscribe to them (KIP-714). Off by default: franz-go compresses
	// each push with 4 MiB lz4 blocks, memory outside every budget, for
	// every table of a database run, and the sink exports its own
	// metrics.
	ClientTelemetry bool
	// Options are further franz-go client options.
	Options []kgo.Opt
}

// Decoder decodes one message, given the record's key and value;
// *changelog.Decoder and *changelog.AvroDecoder are ones (the key names
// the row of a Debezium delete without a before image). A
// *changelog.MessageError is the record's fault (the dead-letter topic's);
// any other error is not: Next returns it and reads the record again on
// the next call.
type Decoder interface {
	DecodeKeyedMessage(key, msg []byte) (rec changelog.Record, skip bool, err error)
}

// Source reads one topic for the sink (sink.OffsetSource). Next, Seek and
// Offsets are called from one goroutine; Committed and Lag from any.
type Source struct {
	cfg  Config
	dec  Decoder
	cl   *kgo.Client
	adm  *kadm.Client
	next map[int32]int64 // partition -> next offset to hand out
	end  map[int32]int64 // StopAtEnd: the end offsets at Seek
	// buf holds the polled records not handed out yet.
	buf     []*kgo.Record
	count   int64 // records handed out, counting earlier runs' (icesink.input-position)
	barrier time.Time
	// barred says the last Next returned a timed barrier: the next one
	// moves a barrier time the checkpoint outlasted an interval ahead,
	// so that a checkpoint slower than the interval cannot make every
	// Next a barrier (no record would ever be read again).
	barred   bool
	last     int32 // the partition of the record Next returned last
	nparts   int   // the topic's partition count
	mu       sync.Mutex
	high     map[int32]int64 // the latest high watermark seen per partition
	done     map[int32]int64 // the offsets of the last Iceberg commit
	dead     map[int32]int64 // records sent to the dead-letter topic, per partition
	discover time.Time       // when to look for added partitions next
	commitMu sync.Mutex      // one group offset commit at a time
	member   *Membership     // CommitThrough: commit to the group as this member
	// held is the record the last Next stopped before without blaming it
	// (DeadLetterHeld may send it away).
	held *kgo.Record
	// emptyPolls counts the polls in a row that brought nothing
	// (StopAtEnd: after two, passEmptyTails looks past emptied batches).
	emptyPolls int
	// wantBarrier is set by RequestBarrier; wake interrupts a poll.
	wantBarrier atomic.Bool
	wake        chan struct{}
}

// SetSchema makes the decoder (when it follows schemas: changelog.Decoder,
// changelog.AvroDecoder) and Check decode and check rows of schema from
// now on: the table's schema after it changed. The record that reported
// the change is read again by the next call to Next.
func (s *Source) SetSchema(schema *iceberg.Schema) error {
	d, ok := s.dec.(interface {
		SetSchema(*iceberg.Schema) error
	})
	if !ok {
		return errors.New("kafka: the source's decoder cannot change its schema")
	}
	if err := d.SetSchema(schema); err != nil {
		return err
	}
	if s.cfg.CheckSchema != nil {
		return s.cfg.CheckSchema(schema)
	}
	return nil
}

// isBadRecord reports a decode error that is the record's fault.
func isBadRecord(err error) bool {
	var bad *changelog.MessageError
	return errors.As(err, &bad)
}

// defaultFetchBytes is Config.FetchBytes's default.
const defaultFetchBytes = 1 << 20

// Open connects to the brokers; reading starts at Seek.
func Open(ctx context.Context, cfg Config, dec Decoder) (*Source, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return nil, errors.New("kafka: brokers and a topic are required")
	}
	opts := []kgo.Opt{
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.FetchMaxBytes(cmp.Or(cfg.FetchBytes, defaultFetchBytes)),
		kgo.FetchMaxPartitionBytes(cmp.Or(cfg.FetchBytes, defaultFetchBytes)),
		// Records of aborted transactions never reach the table.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A transaction's commit marker takes an offset: Next steps over
		// it, so the offsets (and StopAtEnd's end) count it as read.
		kgo.KeepControlRecords(),
	}
	if !cfg.ClientTelemetry {
		opts = append(opts, kgo.DisableClientMetrics())
	}
	cl, err := client(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return &Source{cfg: cfg, dec: dec, cl: cl, adm: kadm.NewClient(cl), high: map[int32]int64{}, done: map[int32]int64{}, dead: map[int32]int64{}, wake: make(chan struct{}, 1)}, nil
}

// Close disconnects.
func (s *Source) Close() { s.cl.Close() }

// Identity names the input in every commit ("kafka:TOPIC"); a sink resumed
// on another input is refused.
func (s *Source) Identity() string { return "kafka:" + s.cfg.Topic }

// prop is the summary property of partition p's offset.
func (s *Source) prop(p int32) string {
	return PropPrefix + s.cfg.Topic + "." + strconv.Itoa(int(p))
}

// Seek starts reading: each partition at the offset props (the icesink.*
// properties of the sink's last commit) hold for it, the others at
// Config.Start. props[icesink.input-position] continues the record count.
func (s *Source) Seek(ctx context.Context, props map[string]string, position int64) error {
	ends, err := s.adm.ListEndOffsets(ctx, s.cfg.Topic)
	if err != nil {
		return fmt.Errorf("kafka: listing the partitions of topic %q: %w%s", s.cfg.Topic, err, s.cfg.Security.hint(err))
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("kafka: listing the partitions of topic %q: %w", s.cfg.Topic, err)
	}
	if dl := s.cfg.DeadLetterTopic; dl != "" {
		// Found missing now, not at the first bad record.
		dls, err := s.adm.ListEndOffsets(ctx, dl)
		if err == nil {
			err = dls.Error()
		}
		if err == nil && len(dls[dl]) == 0 {
			err = errors.New("no partitions (does it exist?)")
		}
		if err != nil {
			return fmt.Errorf("kafka: dead-letter topic %q: %w", dl, err)
		}
	}
	starts, err := s.adm.ListStartOffsets(ctx, s.cfg.Topic)
	if err != nil {
		return fmt.Errorf("kafka: listing the start offsets of topic %q: %w", s.cfg.Topic, err)
	}
	// StopAtEnd reads up to the last stable offsets: a transaction still
	// open at the start is not waited for.
	stable, err := s.adm.ListCommittedOffsets(ctx, s.cfg.Topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: listing the stable offsets of topic %q: %w", s.cfg.Topic, err)
	}
	// Config.Start is for a table that holds no offset of the topic: once
	// it holds some, a partition it holds none of was added since (or
	// never had a record) and is read from its start.
	first := true
	for k := range props {
		if strings.HasPrefix(k, PropPrefix+s.cfg.Topic+".") {
			first = false
		}
	}
	s.next, s.end = map[int32]int64{}, map[int32]int64{}
	assign := map[int32]kgo.Offset{}
	s.mu.Lock()
	s.nparts = 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic != s.cfg.Topic {
			return
		}
		s.nparts++
		if s.cfg.Partitions != nil && !slices.Contains(s.cfg.Partitions, o.Partition) {
			return
		}
		s.end[o.Partition] = o.Offset
		if st, ok := stable.Lookup(s.cfg.Topic, o.Partition); ok && st.Err == nil && st.Offset < o.Offset {
			s.end[o.Partition] = st.Offset
		}
		s.high[o.Partition] = o.Offset
	})
	s.mu.Unlock()
	if s.nparts == 0 {
		return fmt.Errorf("kafka: topic %q has no partitions (does it exist?)", s.cfg.Topic)
	}
	for _, p := range s.cfg.Partitions {
		if _, ok := s.end[p]; !ok {
			return fmt.Errorf("kafka: topic %q has no partition %d", s.cfg.Topic, p)
		}
	}
	for p, end := range s.end {
		v, ok := props[s.prop(p)]
		var off int64
		switch {
		case ok:
			off, err = strconv.ParseInt(v, 10, 64)
			if err != nil || off < 0 {
				return fmt.Errorf("kafka: the table's %s = %q is not an offset", s.prop(p), v)
			}
			if start, ok := starts.Lookup(s.cfg.Topic, p); ok && start.Err == nil && off < start.Offset {
				// Records the sink never read are gone: the table cannot
				// equal the stream any more.
				return fmt.Errorf("kafka: topic %q partition %d: the table holds the records before offset %d, but the partition starts at %d now (retention deleted %d records the sink never read)",
					s.cfg.Topic, p, off, start.Offset, start.Offset-off)
			}
		case s.cfg.Start == Latest && first:
			off = end
		default:
			if start, ok := starts.Lookup(s.cfg.Topic, p); ok && start.Err == nil {
				off = start.Offset
			}
		}
		s.next[p] = off
		assign[p] = kgo.NewOffset().At(off)
	}
	for k := range props {
		if rest, ok := strings.CutPrefix(k, PropPrefix+s.cfg.Topic+"."); ok {
			if p, err := strconv.Atoi(rest); err == nil {
				if p >= s.nparts {
					return fmt.Errorf("kafka: the table holds offsets of partition %d of topic %q, which the topic no longer has", p, s.cfg.Topic)
				}
			}
		}
	}
	s.count, s.buf = position, nil
	s.mu.Lock()
	s.done = maps.Clone(s.next)
	s.mu.Unlock()
	s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{s.cfg.Topic: assign})
	s.barrier = s.nextBarrier()
	s.discover = time.Now().Add(s.discoverInterval())
	return nil
}

// StartOffsets returns where a first run of Config.Start Latest begins
// now: every partition's end offset, as the summary properties Seek takes
// (nil for Earliest, which does not move under a crash). sink.Run records
// them in the table before anything is read, so that a run that crashes
// before its first commit, or another process of the sink, begins at the
// same offsets instead of at a later "latest".
func (s *Source) StartOffsets(ctx context.Context) (map[string]string, error) {
	if s.cfg.Start != Latest {
		return nil, nil
	}
	ends, err := s.adm.ListEndOffsets(ctx, s.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: listing the end offsets of topic %q: %w%s", s.cfg.Topic, err, s.cfg.Security.hint(err))
	}
	out := map[string]string{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == s.cfg.Topic {
			out[s.prop(o.Partition)] = strconv.FormatInt(o.Offset, 10)
		}
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("kafka: topic %q has no partitions (does it exist?)", s.cfg.Topic)
	}
	return out, nil
}

func (s *Source) discoverInterval() time.Duration {
	if s.cfg.DiscoverInterval > 0 {
		return s.cfg.DiscoverInterval
	}
	return 30 * time.Second
}

// discoverPartitions starts reading the partitions added to the topic
// since Seek (or the last look), from their start.
func (s *Source) discoverPartitions(ctx context.Context) error {
	s.discover = time.Now().Add(s.discoverInterval())
	starts, err := s.adm.ListStartOffsets(ctx, s.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: looking for partitions added to topic %q: %w", s.cfg.Topic, err)
	}
	assign := map[int32]kgo.Offset{}
	s.mu.Lock()
	starts.Each(func(o kadm.ListedOffset) {
		if _, ok := s.next[o.Partition]; ok || o.Topic != s.cfg.Topic {
			return
		}
		s.next[o.Partition] = o.Offset
		s.done[o.Partition] = o.Offset
		s.nparts = max(s.nparts, int(o.Partition)+1)
		assign[o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	s.mu.Unlock()
	if len(assign) > 0 {
		s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{s.cfg.Topic: assign})
	}
	return nil
}

// nextBarrier is the next multiple of the checkpoint interval.
func (s *Source) nextBarrier() time.Time {
	if s.cfg.CheckpointInterval <= 0 {
		return time.Time{}
	}
	return time.Now().Truncate(s.cfg.CheckpointInterval).Add(s.cfg.CheckpointInterval)
}

// Offsets returns the summary properties of the records handed out so far:
// every partition's next offset.
func (s *Source) Offsets() map[string]string {
	out := make(map[string]string, len(s.next))
	for p, off := range s.next {
		out[s.prop(p)] = strconv.FormatInt(off, 10)
	}
	return out
}

// caughtUp reports whether StopAtEnd's end offsets are all read.
func (s *Source) caughtUp() bool {
	for p, end := range s.end {
		if s.next[p] < end {
			return false
		}
	}
	return true
}

// stopped reports whether Config.Stop is closed.
func (s *Source) stopped() bool {
	select {
	case <-s.cfg.Stop:
		return true
	default:
		return false
	}
}

// RequestBarrier makes Next return a barrier before its next record, also
// while it waits for records: the coordinator asked to end the epoch
// (sink.Config.BarrierInterval). Safe from any goroutine.
func (s *Source) RequestBarrier() {
	s.wantBarrier.Store(true)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next returns the next record: a change, or a barrier when the checkpoint
// interval has passed or RequestBarrier asked for one. It returns io.EOF on Stop, or with StopAtEnd once
// caught up. A bad message fails with its topic, partition and offset.
func (s *Source) Next() (changelog.Record, error) {
	if s.next == nil {
		return changelog.Record{}, errors.New("kafka: Next before Seek")
	}
	for {
		if s.wantBarrier.Swap(false) {
			return changelog.Record{Barrier: true, Line: s.count}, nil
		}
		if s.barred {
			s.barred = false
			if now := time.Now(); !now.Before(s.barrier) {
				s.barrier = now.Add(s.cfg.CheckpointInterval)
			}
		}
		if s.cfg.CheckpointInterval > 0 && !time.Now().Before(s.barrier) {
			s.barrier, s.barred = s.nextBarrier(), true
			return changelog.Record{Barrier: true, Line: s.count}, nil
		}
		for len(s.buf) > 0 {
			r := s.buf[0]
			s.buf = s.buf[1:]
			if r.Offset < s.next[r.Partition] {
				continue // a refetch of what was handed out
			}
			s.next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				continue // a transaction marker: no record of the topic's
			}
			s.last = r.Partition
			s.count++
			if r.Value == nil {
				continue // a tombstone: compaction's marker, no change
			}
			s.held = nil
			rec, skip, err := s.dec.DecodeKeyedMessage(r.Key, r.Value)
			if err != nil && !isBadRecord(err) {
				// Not the record's fault (a schema registry out of reach):
				// stop before it, without sending it anywhere; the next
				// call reads it again.
				s.next[r.Partition] = r.Offset
				s.count--
				s.buf = append([]*kgo.Record{r}, s.buf...)
				s.held = r
				return changelog.Record{}, fmt.Errorf("kafka: topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			if err == nil && !skip && s.cfg.Check != nil {
				err = s.cfg.Check(rec)
			}
			if err != nil {
				err = fmt.Errorf("kafka: topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
				if s.cfg.DeadLetterTopic == "" {
					return changelog.Record{}, err
				}
				if err := s.deadLetter(r, err); err != nil {
					return changelog.Record{}, err
				}
				continue
			}
			if skip || rec.Barrier && s.cfg.Partitions != nil {
				// A barrier message in one partition is no barrier for
				// the processes reading the others: the coordinator
				// ends their checkpoints together.
				continue
			}
			rec.Line = s.count
			return rec, nil
		}
		if s.stopped() || s.cfg.StopAtEnd && s.caughtUp() {
			return changelog.Record{}, io.EOF
		}
		if err := s.poll(); err != nil {
			return changelog.Record{}, err
		}
		if s.cfg.StopAtEnd && len(s.buf) == 0 {
			if s.emptyPolls++; s.emptyPolls >= 2 {
				s.emptyPolls = 0
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := s.passEmptyTails(ctx)
				cancel()
				if err != nil {
					return changelog.Record{}, err
				}
			}
		} else {
			s.emptyPolls = 0
		}
	}
}

// poll fetches records into buf, waiting at most until the next barrier
// (or a second, to notice Stop).
func (s *Source) poll() error {
	if s.cfg.Partitions == nil && !time.Now().Before(s.discover) {
		// Partitions a group restricts this source to change through
		// a rebalance instead.
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.discoverPartitions(dctx)
		cancel()
		if err != nil {
			return err
		}
	}
	wait := time.Second
	if s.cfg.CheckpointInterval > 0 {
		wait = min(wait, max(time.Until(s.barrier), time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	go func() {
		select {
		case <-s.cfg.Stop: // nil: never
			cancel()
		case <-s.wake:
			cancel()
		case <-ctx.Done():
		}
	}()
	fs := s.cl.PollFetches(ctx)
	var err error
	fs.EachError(func(topic string, p int32, e error) {
		if errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled) {
			return
		}
		if err == nil {
			err = fmt.Errorf("kafka: fetching topic %s partition %d: %w", topic, p, e)
		}
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.HighWatermark > s.high[p.Partition] {
			s.high[p.Partition] = p.HighWatermark
		}
	})
	s.mu.Unlock()
	s.buf = fs.Records()
	return nil
}

// deadLetter produces the bad record r to Config.DeadLetterTopic and
// waits for the broker to have it.
func (s *Source) deadLetter(r *kgo.Record, why error) error {
	headers := append(slices.Clip(r.Headers),
		kgo.RecordHeader{Key: "icesink.error.topic", Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: "icesink.error.partition", Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: "icesink.error.offset", Value: strconv.AppendInt(nil, r.Offset, 10)},
		kgo.RecordHeader{Key: "icesink.error.message", Value: []byte(why.Error())},
	)
	dl := &kgo.Record{Topic: s.cfg.DeadLetterTopic, Key: r.Key, Value: r.Value, Headers: headers, Timestamp: r.Timestamp}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
		return fmt.Errorf("kafka: sending the bad record to dead-letter topic %s: %w (the record: %w)", s.cfg.DeadLetterTopic, err, why)
	}
	s.mu.Lock()
	s.dead[r.Partition]++
	s.mu.Unlock()
	return nil
}

// DeadLetterHeld sends the record the last Next stopped before without
// blaming it (its schema changed in a way the table cannot follow) to the
// dead-letter topic with the reason why, so that Next goes on after it.
// Without a dead-letter topic it returns why.
func (s *Source) DeadLetterHeld(why error) error {
	r := s.held
	if s.cfg.DeadLetterTopic == "" || r == nil || len(s.buf) == 0 || s.buf[0] != r {
		return why
	}
	if err := s.deadLetter(r, fmt.Errorf("kafka: topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, why)); err != nil {
		return err
	}
	s.buf, s.held = s.buf[1:], nil
	s.next[r.Partition] = r.Offset + 1
	s.count++
	return nil
}

// DeadLetters returns, per partition, how many records this source sent to
// the dead-letter topic.
func (s *Source) DeadLetters() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.dead)
}

// CommitThrough makes Committed commit to the group through m, the
// process's membership of Config.Group: a group with members refuses
// commits from outside it. Call it before Seek.
func (s *Source) CommitThrough(m *Membership) { s.member = m }

// Committed records the offsets an Iceberg commit holds (for Lag) and
// tells them to the consumer group (Config.Group), for lag monitoring.
func (s *Source) Committed(ctx context.Context, props map[string]string) error {
	// One commit at a time from the check to the send: offsets told out
	// of order must not reach the group out of order.
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	offs := kadm.Offsets{}
	s.mu.Lock()
	for _, p := range slices.Sorted(maps.Keys(props)) {
		rest, ok := strings.CutPrefix(p, PropPrefix+s.cfg.Topic+".")
		if !ok {
			continue
		}
		part, err1 := strconv.Atoi(rest)
		off, err2 := strconv.ParseInt(props[p], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if d, ok := s.done[int32(part)]; ok && off < d {
			continue // an older commit told late: the offsets only move on
		}
		s.done[int32(part)] = off
		offs.Add(kadm.Offset{Topic: s.cfg.Topic, Partition: int32(part), At: off, LeaderEpoch: -1})
	}
	s.mu.Unlock()
	if s.cfg.Group == "" {
		return nil
	}
	if s.member != nil {
		if err := s.member.commit(ctx, offs); err != nil {
			return fmt.Errorf("kafka: committing offsets to group %q: %w", s.cfg.Group, err)
		}
		return nil
	}
	resp, err := s.adm.CommitOffsets(ctx, s.cfg.Group, offs)
	if err == nil {
		resp.EachError(func(o kadm.OffsetResponse) {
			if err == nil {
				err = fmt.Errorf("partition %d: %w", o.Partition, o.Err)
			}
		})
	}
	if err != nil {
		return fmt.Errorf("kafka: committing offsets to group %q: %w", s.cfg.Group, err)
	}
	return nil
}

// Lag returns, per partition, how many records the table is behind the
// topic: from the offset of the last Iceberg commit (Committed; at start,
// the offset resumed from) to the latest high watermark seen.
func (s *Source) Lag() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]int64, len(s.high))
	for p, h := range s.high {
		out[p] = max(h-s.done[p], 0)
	}
	return out
}

// Restrict limits the source to partitions (Config.Partitions); call it
// before Seek.
func (s *Source) Restrict(partitions []int32) { s.cfg.Partitions = slices.Clone(partitions) }

// PartitionVnodes returns the topic's partition count when the source is
// restricted to assigned partitions (Config.Partitions), whose records are
// routed by partition; 0 when records are routed by key. Valid after Seek.
func (s *Source) PartitionVnodes() int {
	if s.cfg.Partitions == nil {
		return 0
	}
	return s.nparts
}

// Vnode returns the vnode of the record Next returned last: its partition.
func (s *Source) Vnode() int { return int(s.last) }

// RoutesByPartition reports whether records are routed by partition
// (Config.Partitions) rather than by key.
func (s *Source) RoutesByPartition() bool { return s.cfg.Partitions != nil }

// Skip is refused: a Kafka source resumes at the offsets the table holds
// (Seek), not after a count of lines.
func (s *Source) Skip(n int64) error {
	if n == 0 {
		return nil
	}
	return errors.New("kafka: a Kafka source resumes at offsets (Seek), not after lines")
}
