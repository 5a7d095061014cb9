package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/kafka"
)

// kafkaFlags select a Kafka topic as run's input.
type kafkaFlags struct {
	brokers, topic, group, start string
	interval                     time.Duration
	stopAtEnd                    bool
}

func (f *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.brokers, "kafka-brokers", "", "read the changelog from Kafka: seed brokers `HOST:PORT[,...]` (one record value = one event; offsets are kept in the table)")
	fs.StringVar(&f.topic, "topic", "", "with --kafka-brokers: the `TOPIC` (all its partitions)")
	fs.StringVar(&f.group, "group", "", "with --kafka-brokers: a consumer `GROUP` told the offsets of every commit, for lag monitoring (the table, not the group, says where a run resumes)")
	fs.StringVar(&f.start, "kafka-start", "earliest", "with --kafka-brokers: where partitions the table holds no offset for begin: earliest or latest")
	fs.DurationVar(&f.interval, "checkpoint-interval", 10*time.Second, "with --kafka-brokers: end a checkpoint this often, also when idle (besides --checkpoint-rows)")
	fs.BoolVar(&f.stopAtEnd, "stop-at-end", false, "with --kafka-brokers: stop once the partitions are read up to their end offsets at start (a backfill); default: run until SIGINT or SIGTERM, which commit what was read")
}

func (f *kafkaFlags) enabled() bool { return f.brokers != "" }

// check refuses flag combinations that cannot run.
func (f *kafkaFlags) check(input, coordinator string) error {
	switch {
	case !f.enabled() && input == "":
		return fmt.Errorf("%w: --input or --kafka-brokers is required", errUsage)
	case f.enabled() && input != "":
		return fmt.Errorf("%w: --input and --kafka-brokers: give one input", errUsage)
	case !f.enabled():
		return nil
	case f.topic == "":
		return fmt.Errorf("%w: --kafka-brokers needs --topic", errUsage)
	case coordinator != "":
		return fmt.Errorf("%w: --kafka-brokers with --coordinator: each process would read every partition; run one process with --writers P", errUsage)
	case f.start != "earliest" && f.start != "latest":
		return fmt.Errorf("%w: --kafka-start %q: want earliest or latest", errUsage, f.start)
	case f.interval < 0:
		return fmt.Errorf("%w: --checkpoint-interval must not be negative", errUsage)
	}
	return nil
}

// open connects to the brokers; stop ends the input.
func (f *kafkaFlags) open(ctx context.Context, dec *changelog.Decoder, stop <-chan struct{}) (*kafka.Source, error) {
	cfg := kafka.Config{
		Brokers:            strings.Split(f.brokers, ","),
		Topic:              f.topic,
		Group:              f.group,
		CheckpointInterval: f.interval,
		StopAtEnd:          f.stopAtEnd,
		Stop:               stop,
	}
	if f.start == "latest" {
		cfg.Start = kafka.Latest
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
