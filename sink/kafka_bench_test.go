package sink_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/kafka"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// BenchmarkInput writes the same 200k-change stream into a fresh table
// from a file and from a 3-partition Kafka topic (an in-process kfake
// broker, so the broker shares the machine), one writer, a commit every
// 50k records: the ratio of the two rec/s is the Kafka input's cost.
//
//	go test ./sink -run XXX -bench BenchmarkInput -benchtime 3x
func BenchmarkInput(b *testing.B) {
	t := &testing.T{}
	// Without genInput's barrier lines (3% of them, each a commit): the
	// commits every 50k records leave the input's cost to show.
	var lines [][]byte
	for _, l := range bytes.Split(bytes.TrimSpace(genInput(t, 3, 200000, 50000)), []byte("\n")) {
		if string(l) != changelog.BarrierLine {
			lines = append(lines, l)
		}
	}
	input := append(bytes.Join(lines, []byte("\n")), '\n')
	run := func(b *testing.B, src func(ctx context.Context) sink.Source) {
		ctx := context.Background()
		for b.Loop() {
			b.StopTimer()
			wh, err := warehouse.Open(ctx, b.TempDir(), warehouse.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ident := table.Identifier{"db", "t"}
			if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: fuzzSchema}); err != nil {
				b.Fatal(err)
			}
			s := src(ctx)
			b.StartTimer()
			if _, err := sink.Run(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, CheckpointRows: 50000, KeyIndexDir: "-"}, s); err != nil {
				b.Fatal(err)
			}
			wh.Close()
		}
		b.ReportMetric(float64(len(lines))*float64(b.N)/b.Elapsed().Seconds(), "rec/s")
	}
	b.Run("file", func(b *testing.B) {
		run(b, func(context.Context) sink.Source {
			dec, err := changelog.NewDecoder(bytes.NewReader(input), changelog.ChangelogJSON, fuzzSchema)
			if err != nil {
				b.Fatal(err)
			}
			return dec
		})
	})
	b.Run("kafka", func(b *testing.B) {
		c, produce := kafkaTopic(t)
		produce(lines)
		run(b, func(ctx context.Context) sink.Source {
			dec, _ := changelog.NewDecoder(strings.NewReader(""), changelog.ChangelogJSON, fuzzSchema)
			src, err := kafka.Open(ctx, kafka.Config{Brokers: c.ListenAddrs(), Topic: "cdc", StopAtEnd: true}, dec)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(src.Close)
			return src
		})
	})
}
