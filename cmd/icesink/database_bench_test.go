package main

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// dbFeed is one way of spreading a database benchmark's events over
// tables: event i goes to table (i) with key id(i).
type dbFeed struct {
	name   string // of its CPU profile (-database-cpuprofiles)
	tables int
	route  func(i int) (table int, id int64)
}

// dbFeedResult is what one `icesink run` over a feed did.
type dbFeedResult struct {
	perSec  float64 // records/s, process start to exit
	rssMiB  float64 // the run's own peak RSS (--stats)
	spilled float64 // MiB the key indexes spilled
}

// dbEvents is the size of BenchmarkDatabaseFeed's feeds.
var dbEvents = flag.Int("database-events", 1200000, "events of each BenchmarkDatabaseFeed feed")

// dbProfiles, when set, is a folder where each BenchmarkDatabaseFeed run
// writes its CPU profile (--cpuprofile DIR/FEED.pprof).
var dbProfiles = flag.String("database-cpuprofiles", "", "folder for each BenchmarkDatabaseFeed run's CPU profile")

// BenchmarkDatabaseFeed runs `icesink run --table-template` over the same
// number of Debezium events (JSON with schemas, -database-events, 1.2M)
// spread over 1 table, over 50 and 200 tables evenly (the same 250k keys
// in every feed, so that each ends with the same live rows), and over 50
// tables of which one takes 80% of the events over 200k keys of its own
// (skewed: more than an even share of the budget holds in memory, less
// than the share its traffic earns), all in the same run under
// --memory-limit 256MiB, and reports records/s, the ratios to the 1-table
// feed, each run's peak RSS and the MiB the skewed feed spilled.
//
//	go test ./cmd/icesink -run X -bench DatabaseFeed -benchtime 1x [-database-events 300000]
func BenchmarkDatabaseFeed(b *testing.B) {
	total := *dbEvents
	even := func(tables int) dbFeed {
		return dbFeed{fmt.Sprintf("%d-tables", tables), tables, func(i int) (int, int64) { return i % tables, int64(i / tables % (250000 / tables)) }}
	}
	skewed := dbFeed{"skewed-50-tables", 50, func(i int) (int, int64) {
		if i%5 != 0 {
			return 0, int64(i % 250000) // 200k keys
		}
		return 1 + i/5%49, int64(i / 5 / 49 % 5000)
	}}
	for b.Loop() {
		one := runDatabaseFeed(b, total, even(1))
		fifty := runDatabaseFeed(b, total, even(50))
		many := runDatabaseFeed(b, total, even(200))
		skew := runDatabaseFeed(b, total, skewed)
		b.ReportMetric(one.perSec, "1-table-records/s")
		b.ReportMetric(fifty.perSec/one.perSec, "50/1")
		b.ReportMetric(many.perSec/one.perSec, "200/1")
		b.ReportMetric(skew.perSec/one.perSec, "skewed-50/1")
		b.ReportMetric(skew.spilled, "skewed-50-MiB-spilled")
		b.ReportMetric(one.rssMiB, "1-table-peak-RSS-MiB")
		b.ReportMetric(fifty.rssMiB, "50-table-peak-RSS-MiB")
		b.ReportMetric(many.rssMiB, "200-table-peak-RSS-MiB")
		b.ReportMetric(skew.rssMiB, "skewed-50-peak-RSS-MiB")
	}
}

// runDatabaseFeed produces total events of feed into a kfake cluster
// and times one `icesink run` over them.
func runDatabaseFeed(b *testing.B, total int, feed dbFeed) dbFeedResult {
	var names []string
	for i := range feed.tables {
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
		t, id := feed.route(i)
		after := fmt.Sprintf(`{"id":%d,"name":"customer %d","qty":%d}`, id, i, i)
		recs = append(recs, &kgo.Record{Topic: names[t], Key: dbKey(id), Value: connectEnvelope(fields, "null", after)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "--warehouse", b.TempDir(), "--table-template", "shop.{table}", "--format", "debezium-json",
		"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `srv\.shop\..*`, "--stop-at-end", "--quiet", "--stats", "--memory-limit", "256MiB")
	if *dbProfiles != "" {
		cmd.Args = append(cmd.Args, "--cpuprofile", filepath.Join(*dbProfiles, feed.name+".pprof"))
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%d tables: %v\n%s", feed.tables, err, out)
	}
	el := time.Since(start)
	// The run's own VmHWM (--stats): the rusage of a child counts the RSS
	// of this process (which holds the kfake broker) at the fork.
	field := func(re string) string {
		m := regexp.MustCompile(re).FindSubmatch(out)
		if m == nil {
			b.Fatalf("%d tables: no %s in\n%s", feed.tables, re, out)
		}
		return string(m[1])
	}
	peak, err := humanize.ParseBytes(field(`peak RSS +(.*)`))
	if err != nil {
		b.Fatal(err)
	}
	spilled, err := humanize.ParseBytes(field(`spills / bytes spilled +\d+ / (.*)`))
	if err != nil {
		b.Fatal(err)
	}
	return dbFeedResult{perSec: float64(total) / el.Seconds(), rssMiB: float64(peak) / (1 << 20), spilled: float64(spilled) / (1 << 20)}
}
