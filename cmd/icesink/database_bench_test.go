package main

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkDatabaseFeed runs `icesink run --table-template` over the same
// number of Debezium events (JSON with schemas) spread over 1 table and
// over 50 and 200 tables, in the same run, and reports each one's
// records/s, the ratio to the 1-table feed and the process's peak RSS.
//
//	go test ./cmd/icesink -run X -bench DatabaseFeed -benchtime 1x
func BenchmarkDatabaseFeed(b *testing.B) {
	const total = 300000
	run := func(tables int) (perSec float64, rssMiB float64) {
		var names []string
		for i := range tables {
			names = append(names, fmt.Sprintf("srv.shop.t%03d", i))
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, names...))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		fields := []string{connectField("id", "int64", false), connectField("name", "string", true), connectField("qty", "int64", true)}
		var recs []*kgo.Record
		for i := range total {
			topic := names[i%tables]
			id := int64(i / tables % 5000)
			after := fmt.Sprintf(`{"id":%d,"name":"customer %d","qty":%d}`, id, i, i)
			recs = append(recs, &kgo.Record{Topic: topic, Key: dbKey(id), Value: connectEnvelope(fields, "null", after)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(binary, "run", "--warehouse", b.TempDir(), "--table-template", "shop.{table}", "--format", "debezium-json",
			"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `srv\.shop\..*`, "--stop-at-end", "--quiet", "--memory-limit", "256MiB")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%d tables: %v\n%s", tables, err, out)
		}
		el := time.Since(start)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return total / el.Seconds(), float64(ru.Maxrss) / 1024
	}
	for b.Loop() {
		one, rss1 := run(1)
		fifty, rss50 := run(50)
		many, rss200 := run(200)
		b.ReportMetric(one, "1-table-records/s")
		b.ReportMetric(fifty/one, "50/1")
		b.ReportMetric(many/one, "200/1")
		b.ReportMetric(rss1, "1-table-peak-RSS-MiB")
		b.ReportMetric(rss50, "50-table-peak-RSS-MiB")
		b.ReportMetric(rss200, "200-table-peak-RSS-MiB")
	}
}
