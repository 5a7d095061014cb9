package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/iceberg-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/kafka"
	"github.com/icesink/icesink/sink"
)

// kafkaFlags select a Kafka topic as run's input.
type kafkaFlags struct {
	brokers, topic, group, start string
	deadLetter                   string
	interval, session, coordWait time.Duration
	stopAtEnd                    bool
	telemetry                    bool   // --kafka-client-telemetry
	fetchSize                    string // --kafka-fetch-bytes
	fetchBytes                   int32  // set by check; 0: the default (database mode: a share of the budget)
	coordinator                  string // set by check
	rebalance                    time.Duration
	instanceID                   string // --kafka-instance-id
	sec                          kafka.Security
	passwordFile                 string
	// The schema registry of debezium-avro input.
	registryURL, registryUser, registryPasswordFile string
	registryTLS                                     kafka.Security
	registry                                        *kafka.Registry // set by check
	// schema and spec are the table's (set once it is loaded): records
	// whose changes the writers would refuse are the source's bad records.
	schema *iceberg.Schema
	spec   iceberg.PartitionSpec
	evolve bool // decoders report schema changes (--evolve-schema)
	// maxRecord is --max-record-size (0: the decoders' default).
	maxRecord int
	// anyTopics: the topics come from --topic-regex too (database mode).
	anyTopics bool
}

func (f *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.brokers, "kafka-brokers", "", "read the changelog from Kafka: seed brokers `HOST:PORT[,...]` (one record value = one event; offsets are kept in the table)")
	fs.StringVar(&f.topic, "topic", "", "with --kafka-brokers: the `TOPIC` (all its partitions)")
	fs.StringVar(&f.group, "group", "", "with --kafka-brokers: a consumer `GROUP` told the offsets of every commit, for lag monitoring (the table, not the group, says where a run resumes)")
	fs.StringVar(&f.deadLetter, "dead-letter-topic", "", "with --kafka-brokers: send records that fail to decode to `TOPIC` (with icesink.error.* headers) and go on; default: stop the run at a bad record")
	fs.StringVar(&f.start, "kafka-start", "earliest", "with --kafka-brokers: `WHERE` partitions the table holds no offset for begin: earliest or latest")
	fs.DurationVar(&f.interval, "checkpoint-interval", 10*time.Second, "with --kafka-brokers: end a checkpoint every `DURATION`, also when idle (besides --checkpoint-rows); with --coordinator the coordinator's --checkpoint-interval does")
	fs.DurationVar(&f.session, "kafka-session-timeout", 45*time.Second, "with --group and --coordinator: how long (`DURATION`) the group waits for a silent process (killed) before its partitions go to the others")
	fs.DurationVar(&f.coordWait, "coordinator-wait", 2*time.Minute, "with --group and --coordinator: how long (`DURATION`) to wait out an unreachable or failing coordinator (a restart) before giving up")
	fs.DurationVar(&f.rebalance, "kafka-rebalance-timeout", 0, "with --group and --coordinator: how long (`DURATION`) the group waits for its members to rejoin a rebalance (a member killed while the group forms); default: --kafka-session-timeout")
	fs.StringVar(&f.instanceID, "kafka-instance-id", "", "with --group and --coordinator: static group membership (KIP-345) under this process's stable `ID` (e.g. a StatefulSet pod's name): a process restarted with the same ID within --kafka-session-timeout takes its partitions back without a rebalance, and one that stops keeps them until then; in a database run each table's client is ID.TOPIC")
	fs.StringVar(&f.fetchSize, "kafka-fetch-bytes", "", "with --kafka-brokers: what one fetch reads ahead of the writers, per partition and per broker (compressed; a larger record batch comes whole), as a `SIZE`; default 1MiB, with --table-template and --memory-limit a 128th of the budget split over the tables (32KiB to 1MiB each)")
	fs.BoolVar(&f.sec.TLS, "kafka-tls", false, "with --kafka-brokers: connect with TLS (the system's CAs unless --kafka-tls-ca)")
	fs.StringVar(&f.sec.CAFile, "kafka-tls-ca", "", "with --kafka-brokers: a PEM `FILE` of the CAs that sign the brokers' certificates (implies --kafka-tls)")
	fs.StringVar(&f.sec.CertFile, "kafka-tls-cert", "", "with --kafka-brokers: the client certificate `FILE` (PEM) for brokers that require one, with --kafka-tls-key")
	fs.StringVar(&f.sec.KeyFile, "kafka-tls-key", "", "with --kafka-brokers: the client certificate's key `FILE` (PEM)")
	fs.StringVar(&f.sec.ServerName, "kafka-tls-server-name", "", "with --kafka-brokers: the `NAME` the brokers' certificates must carry, when not the address dialed")
	fs.StringVar(&f.sec.SASLMechanism, "kafka-sasl-mechanism", "", "with --kafka-brokers: SASL `MECHANISM`: plain, scram-sha-256 or scram-sha-512 (user from --kafka-sasl-user, password from --kafka-sasl-password-file or $ICESINK_KAFKA_SASL_PASSWORD)")
	fs.StringVar(&f.sec.User, "kafka-sasl-user", "", "with --kafka-sasl-mechanism: the SASL `USER`")
	fs.StringVar(&f.passwordFile, "kafka-sasl-password-file", "", "with --kafka-sasl-mechanism: a `FILE` holding the SASL password (its first line); default: $ICESINK_KAFKA_SASL_PASSWORD. There is no flag for the password itself: it would show in ps")
	fs.StringVar(&f.registryURL, "schema-registry", "", "with --format debezium-avro: the schema registry's `URL[,...]` (Confluent's REST API); schemas are fetched by the id each record carries")
	fs.StringVar(&f.registryUser, "schema-registry-user", "", "with --schema-registry: the basic-auth `USER` (an API key); password from --schema-registry-password-file or $ICESINK_SCHEMA_REGISTRY_PASSWORD")
	fs.StringVar(&f.registryPasswordFile, "schema-registry-password-file", "", "with --schema-registry-user: a `FILE` holding the password (its first line); default: $ICESINK_SCHEMA_REGISTRY_PASSWORD")
	fs.StringVar(&f.registryTLS.CAFile, "schema-registry-ca", "", "with --schema-registry: a PEM `FILE` of the CAs that sign the registry's certificate (default: the system's, for https URLs)")
	fs.StringVar(&f.registryTLS.CertFile, "schema-registry-cert", "", "with --schema-registry: a client certificate `FILE` (PEM), with --schema-registry-key")
	fs.StringVar(&f.registryTLS.KeyFile, "schema-registry-key", "", "with --schema-registry: the client certificate's key `FILE` (PEM)")
	fs.BoolVar(&f.telemetry, "kafka-client-telemetry", false, "with --kafka-brokers: push the Kafka clients' metrics to brokers that subscribe to them (KIP-714); off by default: each push is compressed with 4 MiB lz4 blocks outside --memory-limit, for every table's client")
	fs.BoolVar(&f.stopAtEnd, "stop-at-end", false, "with --kafka-brokers: stop once the partitions are read up to their end offsets at start (a backfill); default: run until SIGINT or SIGTERM, which commit what was read")
}

func (f *kafkaFlags) enabled() bool { return f.brokers != "" }

// grouped reports whether the partitions are split among processes: a
// consumer group with an external coordinator (see runGroup).
func (f *kafkaFlags) grouped() bool { return f.enabled() && f.group != "" && f.coordinator != "" }

// check refuses flag combinations that cannot run.
func (f *kafkaFlags) check(input, coordinator string, format changelog.Format) error {
	f.coordinator = coordinator
	switch {
	case format == changelog.DebeziumAvro && (!f.enabled() || f.registryURL == ""):
		return fmt.Errorf("%w: --format debezium-avro reads Kafka records through a schema registry: it needs --kafka-brokers and --schema-registry", errUsage)
	case format != changelog.DebeziumAvro && f.registryURL != "":
		return fmt.Errorf("%w: --schema-registry is for --format debezium-avro", errUsage)
	case !f.enabled() && input == "":
		return fmt.Errorf("%w: --input, --kafka-brokers or --postgres is required", errUsage)
	case f.enabled() && input != "":
		return fmt.Errorf("%w: --input and --kafka-brokers: give one input", errUsage)
	case !f.enabled():
		return nil
	case f.topic == "" && !f.anyTopics:
		return fmt.Errorf("%w: --kafka-brokers needs --topic", errUsage)
	case coordinator != "" && f.group == "":
		return fmt.Errorf("%w: --kafka-brokers with --coordinator needs --group: the consumer group splits the partitions among the processes", errUsage)
	case f.instanceID != "" && (f.group == "" || coordinator == ""):
		return fmt.Errorf("%w: --kafka-instance-id is the identity of a member of a consumer group that splits the partitions: it needs --group and --coordinator", errUsage)
	case f.instanceID != "" && !validInstanceID(f.instanceID):
		return fmt.Errorf("%w: --kafka-instance-id %q: want at most 200 of a-z, A-Z, 0-9, '.', '_' and '-'", errUsage, f.instanceID)
	case f.start != "earliest" && f.start != "latest":
		return fmt.Errorf("%w: --kafka-start %q: want earliest or latest", errUsage, f.start)
	case f.interval < 0:
		return fmt.Errorf("%w: --checkpoint-interval must not be negative", errUsage)
	}
	n, err := parseSize(f.fetchSize)
	if err == nil && n > math.MaxInt32 {
		err = errors.New("at most 2GiB")
	}
	if err != nil {
		return fmt.Errorf("%w: --kafka-fetch-bytes: %v", errUsage, err)
	}
	f.fetchBytes = int32(n)
	if f.sec.SASLMechanism != "" {
		pw, err := secret(f.passwordFile, saslPasswordEnv)
		if err != nil {
			return fmt.Errorf("%w: --kafka-sasl-password-file: %v", errUsage, err)
		}
		f.sec.Password = pw
		if f.sec.Password == "" {
			return fmt.Errorf("%w: --kafka-sasl-mechanism needs a password: --kafka-sasl-password-file FILE or $%s", errUsage, saslPasswordEnv)
		}
	}
	if _, err := f.sec.Options(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.registryURL != "" {
		cfg := kafka.RegistryConfig{URLs: strings.Split(f.registryURL, ","), User: f.registryUser, TLS: f.registryTLS}
		if f.registryUser != "" {
			pw, err := secret(f.registryPasswordFile, registryPasswordEnv)
			if err != nil {
				return fmt.Errorf("%w: --schema-registry-password-file: %v", errUsage, err)
			}
			if pw == "" {
				return fmt.Errorf("%w: --schema-registry-user needs a password: --schema-registry-password-file FILE or $%s", errUsage, registryPasswordEnv)
			}
			cfg.Password = pw
		}
		reg, err := kafka.NewRegistry(cfg)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		f.registry = reg
	}
	return nil
}

// validInstanceID reports whether id can name a static group member
// (Kafka checks it as it checks topic names; the topic is appended).
func validInstanceID(id string) bool {
	if len(id) > 200 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// cleartextWarnings names the passwords the flags would send unencrypted:
// SASL PLAIN without TLS, the registry's basic auth over http://.
func (f *kafkaFlags) cleartextWarnings() []string {
	var out []string
	tlsOn := f.sec.TLS || f.sec.CAFile != "" || f.sec.CertFile != "" || f.sec.KeyFile != "" || f.sec.ServerName != ""
	if strings.EqualFold(f.sec.SASLMechanism, "plain") && !tlsOn {
		out = append(out, fmt.Sprintf("--kafka-sasl-mechanism plain without --kafka-tls sends the password of user %q to the brokers in clear text", f.sec.User))
	}
	if f.registryUser != "" {
		for _, u := range strings.Split(f.registryURL, ",") {
			if strings.HasPrefix(strings.ToLower(strings.TrimSpace(u)), "http://") {
				out = append(out, fmt.Sprintf("--schema-registry-user over %s sends the password of user %q in clear text (use https://)", strings.TrimSpace(u), f.registryUser))
			}
		}
	}
	return out
}

// registryPasswordEnv holds the schema registry's password without
// --schema-registry-password-file.
const registryPasswordEnv = "ICESINK_SCHEMA_REGISTRY_PASSWORD"

// secret reads a password: the first line of file, else the environment
// variable env.
func secret(file, env string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSuffix(pw, "\r"), nil
}

// registrySchema derives a new table's schema from the newest schemas of
// the topic's values and keys in the registry (subjects TOPIC-value and
// TOPIC-key, Confluent's default naming).
// keyColumns, when given, name the key instead of TOPIC-key.
func (f *kafkaFlags) registrySchema(ctx context.Context, keyColumns ...string) (*iceberg.Schema, error) {
	value, err := f.registry.Latest(ctx, f.topic+"-value")
	if err != nil {
		return nil, err
	}
	var key string
	if len(keyColumns) == 0 {
		if key, err = f.registry.Latest(ctx, f.topic+"-key"); err != nil {
			return nil, err
		}
	}
	s, err := changelog.SchemaFromDebeziumAvro(value, key, keyColumns...)
	if err != nil {
		return nil, fmt.Errorf("the table's schema from subjects %s-value and %s-key: %w", f.topic, f.topic, err)
	}
	return s, nil
}

// eventSchema derives a new table's schema from the topic's events: the
// registry's schemas (debezium-avro), or the first record's Connect schema
// and its key's (debezium-json with schemas). keyColumns, when given,
// name the key instead.
func (f *kafkaFlags) eventSchema(ctx context.Context, format changelog.Format, keyColumns ...string) (*iceberg.Schema, error) {
	if format == changelog.DebeziumAvro {
		return f.registrySchema(ctx, keyColumns...)
	}
	cfg := kafka.Config{Brokers: strings.Split(f.brokers, ","), Security: f.sec}
	rec, err := kafka.FirstRecord(ctx, cfg, f.topic, f.stopAtEnd)
	if err != nil {
		return nil, err
	}
	return changelog.SchemaFromConnect(rec.Value, rec.Key, keyColumns...)
}

// partitionSource is the source block of a partition's first event.
type partitionSource struct {
	partition int32
	src       changelog.DebeziumSource
}

// firstSources returns the source blocks of the first events of the
// topic's partitions (kafka.FirstRecords), by partition: the table they
// come from, whatever the topic is named.
func (f *kafkaFlags) firstSources(ctx context.Context, format changelog.Format) ([]partitionSource, error) {
	cfg := kafka.Config{Brokers: strings.Split(f.brokers, ","), Security: f.sec}
	recs, err := kafka.FirstRecords(ctx, cfg, f.topic, f.stopAtEnd)
	if err != nil {
		return nil, err
	}
	var out []partitionSource
	for _, rec := range recs {
		var src changelog.DebeziumSource
		if format == changelog.DebeziumAvro {
			id, body, herr := (&sr.ConfluentHeader{}).DecodeID(rec.Value)
			if herr != nil {
				err = fmt.Errorf("not in the schema registry's wire format: %w", herr)
			} else {
				var schema string
				if schema, err = f.registry.Schema(ctx, id); err == nil {
					src, err = changelog.SourceOfAvro(schema, body)
				}
			}
		} else {
			src, err = changelog.SourceOfJSON(rec.Value)
		}
		if err != nil {
			return nil, fmt.Errorf("topic %s partition %d offset %d: naming its table (--table-template): %w", f.topic, rec.Partition, rec.Offset, err)
		}
		out = append(out, partitionSource{partition: rec.Partition, src: src})
	}
	return out, nil
}

// decoder returns a decoder of format for the records of the topic.
func (f *kafkaFlags) decoder(format changelog.Format, schema *iceberg.Schema, dbz changelog.DebeziumOptions) (kafka.Decoder, error) {
	if format == changelog.DebeziumAvro {
		d, err := changelog.NewAvroDecoder(schema, f.registry)
		if err != nil {
			return nil, err
		}
		d.SetEvolution(f.evolve)
		d.SetMaxRecordSize(f.maxRecord)
		return d, nil
	}
	return changelog.NewDecoder(strings.NewReader(""), format, schema, decoderOptions(dbz, f.evolve, f.maxRecord)...)
}

// saslPasswordEnv is the environment variable the SASL password is read
// from without --kafka-sasl-password-file.
const saslPasswordEnv = "ICESINK_KAFKA_SASL_PASSWORD"

// open connects to the brokers; stop ends the input.
func (f *kafkaFlags) open(ctx context.Context, dec kafka.Decoder, stop <-chan struct{}) (*kafka.Source, error) {
	cfg := kafka.Config{
		Brokers:            strings.Split(f.brokers, ","),
		Topic:              f.topic,
		Group:              f.group,
		CheckpointInterval: f.interval,
		StopAtEnd:          f.stopAtEnd,
		DeadLetterTopic:    f.deadLetter,
		Stop:               stop,
		FetchBytes:         f.fetchBytes,
		ClientTelemetry:    f.telemetry,
	}
	if f.start == "latest" {
		cfg.Start = kafka.Latest
	}
	cfg.Security = f.sec
	if f.schema != nil && f.deadLetter != "" {
		// Only where it changes the outcome: without a dead-letter topic
		// the writer's own refusal stops the run all the same, and the
		// checks would run twice for every change.
		v, err := deltawriter.NewValidator(f.schema, f.spec)
		if err != nil {
			return nil, err
		}
		cfg.Check = func(rec changelog.Record) error {
			for _, ch := range rec.Changes {
				if err := v.Check(ch); err != nil {
					return err
				}
			}
			return nil
		}
		cfg.CheckSchema = func(schema *iceberg.Schema) error {
			nv, err := deltawriter.NewValidator(schema, f.spec)
			if err == nil {
				v = nv
			}
			return err
		}
	}
	if f.grouped() {
		// The coordinator's barriers end the checkpoints of every process
		// at once (icesink coordinator --checkpoint-interval).
		cfg.CheckpointInterval = 0
	}
	return kafka.Open(ctx, cfg, dec)
}

// formatOffsets spells a commit's offsets as PARTITION:OFFSET pairs.
func formatOffsets(offsets map[string]string) string {
	var b []string
	for _, k := range slices.Sorted(maps.Keys(offsets)) {
		b = append(b, strings.TrimPrefix(k, commit.PropOffsetPrefix)+"="+offsets[k])
	}
	return strings.Join(b, " ")
}

// coordinatorGone reports an error of a coordinator that stopped or cannot
// be reached (a restart), as opposed to one of this process's input or
// table.
func coordinatorGone(err error) bool {
	if errors.Is(err, coordinator.ErrClosed) || errors.Is(err, coordinator.ErrFailed) || errors.Is(err, coordinator.ErrTimeout) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && (st.Code() == codes.Unavailable || st.Code() == codes.Canceled)
}

// errRebalance cancels a run whose process's partitions changed.
var errRebalance = errors.New("the consumer group moved partitions")

// runGroup is run for one of several processes sharing a topic: the
// consumer group assigns this process its partitions, which are its
// vnodes at the coordinator (vnode count = partition count). Every
// assignment change cancels the run: its open window is aborted for all
// processes, and each runs again from the offsets the table holds with
// the partitions it has then. An abort caused by another process
// (coordinator.ErrAborted), or a registration refused because the
// previous owner of a partition has not left yet, is retried the same way.
// The first SIGINT or SIGTERM ends the input; what was read is committed.
func (f *kafkaFlags) runGroup(ctx context.Context, cfg sink.Config, schema *iceberg.Schema, format changelog.Format,
	dbz changelog.DebeziumOptions, vnodesGiven, rowsGiven bool, log *slog.Logger) (sink.Result, error) {
	brokers := strings.Split(f.brokers, ",")
	secOpts, err := f.sec.Options()
	if err != nil {
		return sink.Result{}, err
	}
	n, err := kafka.PartitionCount(ctx, brokers, f.topic, secOpts...)
	if err != nil {
		return sink.Result{}, err
	}
	if !vnodesGiven {
		cfg.Vnodes = n
	}
	if !rowsGiven {
		// A process counting its own rows would end its epochs sooner
		// than the others and wait for them: the coordinator's barriers end them.
		cfg.CheckpointRows = math.MaxInt64
	}
	rebalance := f.rebalance
	if rebalance <= 0 {
		rebalance = f.session
	}
	opts := append(slices.Clip(secOpts), kgo.RebalanceTimeout(rebalance))
	if f.instanceID != "" {
		// One member per table's client: each needs its own identity.
		opts = append(opts, kgo.InstanceID(f.instanceID+"."+f.topic))
	}
	if !f.telemetry {
		opts = append(opts, kgo.DisableClientMetrics())
	}
	// --stop-at-end: the group reads every partition to where it ends
	// now, whichever process ends up holding it. A process whose own
	// partitions are read keeps its writer at the coordinator (whose
	// epochs need every vnode's) and stops with the others, once the table
	// holds every partition's end: a member killed with partitions unread
	// leaves them to the group, not unread.
	var stopAt map[int32]int64
	if f.stopAtEnd {
		if stopAt, err = kafka.StopOffsets(ctx, brokers, f.topic, secOpts...); err != nil {
			return sink.Result{}, err
		}
		f.stopAtEnd = false // the source tails; allRead stops it
		stopCtx, stopAll := context.WithCancel(ctx)
		defer stopAll()
		go func() {
			for {
				select {
				case <-stopCtx.Done():
					return
				case <-time.After(500 * time.Millisecond):
				}
				if unread, err := unreadPartitions(stopCtx, cfg, f.topic, stopAt); err == nil && unread == "" {
					log.Info("every partition is read to its end at the start; stopping", "group", f.group, "topic", f.topic)
					stopAll()
					return
				}
			}
		}()
		ctx = stopCtx
	}
	m, err := kafka.JoinGroup(ctx, brokers, f.group, f.topic, f.session, opts...)
	if err != nil {
		return sink.Result{}, err
	}
	defer m.Close()
	var total sink.Result
	// Coordinator outages (a restart, kill -9 included) are waited out
	// for f.coordWait since the last commit.
	lastProgress := time.Now()
	for attempt := 1; ; attempt++ {
		parts, changed, err := m.Wait(ctx, time.Second)
		if err != nil {
			if ctx.Err() != nil {
				log.Info("stopped while waiting for partitions")
				return total, nil
			}
			return total, err
		}
		own := roaring.New()
		for _, p := range parts {
			own.Add(uint32(p))
		}
		log.Info("partitions assigned", "group", f.group, "topic", f.topic, "partitions", coordinator.FormatVnodes(own), "run", attempt)
		runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		stopWatch := make(chan struct{})
		go func() {
			select {
			case <-changed:
				cancel(errRebalance)
			case <-stopWatch:
			}
		}()
		dec, err := f.decoder(format, schema, dbz)
		if err != nil {
			cancel(nil)
			return total, err
		}
		src, err := f.open(ctx, dec, ctx.Done())
		if err != nil {
			cancel(nil)
			return total, err
		}
		src.Restrict(parts)
		src.CommitThrough(m)
		cfg.OwnVnodes = own
		var col prometheus.Collector
		if cfg.Registerer != nil {
			// This run's partitions' lag, until the next assignment.
			col = src.Collector()
			if err := cfg.Registerer.Register(col); err != nil {
				cancel(nil)
				src.Close()
				return total, fmt.Errorf("registering the Kafka source's metrics: %w", err)
			}
		}
		res, err := sink.Run(runCtx, cfg, src)
		close(stopWatch)
		if col != nil {
			cfg.Registerer.Unregister(col)
		}
		src.Close()
		cause := context.Cause(runCtx)
		cancel(nil)
		total.Changes += res.Changes
		total.Commits += res.Commits
		total.Line = res.Line
		total.Committed, total.Elapsed, total.Stats = res.Committed, total.Elapsed+res.Elapsed, res.Stats
		if total.Start.Epoch == 0 {
			total.Start = res.Start
		}
		switch {
		case err == nil:
			return total, nil
		case ctx.Err() != nil:
			if errors.Is(cause, errRebalance) || errors.Is(err, coordinator.ErrAborted) {
				// Stopping: a process that stopped first left the group
				// and the coordinator. The open window is dropped; the
				// next run reads it again from the table's offsets.
				log.Info("stopped; the window open at the stop was dropped and is read again by the next run", "committed_epoch", res.Committed.Epoch)
				return total, nil
			}
			return total, err
		case errors.Is(cause, errRebalance):
			log.Info("rebalance: the open window is dropped, the run goes on from the table's offsets", "group", f.group, "committed_epoch", res.Committed.Epoch)
		case errors.Is(err, coordinator.ErrAborted):
			log.Info("another process aborted the epoch: the run goes on from the table's offsets", "err", err)
		case errors.Is(err, coordinator.ErrOverlap):
			log.Info("a partition's previous owner has not left the coordinator yet; retrying", "err", err)
			time.Sleep(500 * time.Millisecond)
		case coordinatorGone(err):
			if res.Commits > 0 {
				lastProgress = time.Now()
			}
			if time.Since(lastProgress) > f.coordWait {
				return total, fmt.Errorf("the coordinator has been unreachable or failing for %s (--coordinator-wait): %w", f.coordWait, err)
			}
			log.Warn("the coordinator is gone; retrying from the table's offsets", "err", err)
			select {
			case <-ctx.Done():
				return total, nil
			case <-time.After(time.Second):
			}
		default:
			return total, err
		}
	}
}

// unreadPartitions lists the partitions of topic whose offsets in the
// table are below stopAt ("": none).
func unreadPartitions(ctx context.Context, cfg sink.Config, topic string, stopAt map[int32]int64) (string, error) {
	pos, err := sink.Resume(ctx, cfg)
	if err != nil {
		return "", err
	}
	var unread []string
	for _, p := range slices.Sorted(maps.Keys(stopAt)) {
		next, _ := strconv.ParseInt(pos.Offsets[kafka.PropPrefix+topic+"."+strconv.Itoa(int(p))], 10, 64)
		if next < stopAt[p] {
			unread = append(unread, fmt.Sprintf("%d (%d of %d)", p, next, stopAt[p]))
		}
	}
	return strings.Join(unread, ", "), nil
}
