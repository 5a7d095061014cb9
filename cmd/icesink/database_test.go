package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// dbTopic is one table of a Debezium database feed and its model.
type dbTopic struct {
	name   string
	fields []string        // the Connect schema of its rows now
	model  map[int64][]any // id -> row in the table's final layout
}

// dbKey is a record key with its Connect schema, as Debezium sends it.
func dbKey(id int64) []byte {
	return fmt.Appendf(nil, `{"schema":{"type":"struct","optional":false,"fields":[{"type":"int64","optional":false,"field":"id"}]},"payload":{"id":%d}}`, id)
}

// connectorFeed is a Debezium connector's three topics (JSON with schemas) in a
// kfake cluster, with each topic's model.
type connectorFeed struct {
	t      *testing.T
	topics []*dbTopic
	rng    *rand.Rand
	cl     *kgo.Client
	parts  int32
	ends   map[string]map[int32]int // topic -> partition -> records
}

// newConnectorFeed starts a cluster whose topics have parts partitions (and a
// topic "dlq").
func newConnectorFeed(t *testing.T, seed uint64, parts int32) (*connectorFeed, *kfake.Cluster) {
	f := &connectorFeed{t: t, rng: rand.New(rand.NewPCG(seed, 3)), parts: parts, ends: map[string]map[int32]int{}, topics: []*dbTopic{
		{name: "dbserver1.inventory.customers", fields: []string{connectField("id", "int64", false), connectField("email", "string", true)}},
		{name: "dbserver1.inventory.orders", fields: []string{connectField("id", "int64", false), connectField("qty", "int32", false)}},
		{name: "dbserver1.inventory.products", fields: []string{connectField("id", "int64", false), connectField("price", "double", true)}},
	}}
	var names []string
	for _, tp := range f.topics {
		names = append(names, tp.name)
		tp.model = map[int64][]any{}
		f.ends[tp.name] = map[int32]int{}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, append(names, "dlq")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if f.cl, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.cl.Close)
	return f, c
}

// event returns topic tp's next event for key id and applies it.
func (f *connectorFeed) event(tp *dbTopic, id int64) *kgo.Record {
	var after string
	var row []any
	switch tp.name {
	case f.topics[0].name:
		email := fmt.Sprintf("u%d@example.com", f.rng.IntN(1000))
		after, row = fmt.Sprintf(`{"id":%d,"email":%q}`, id, email), []any{id, email}
	case f.topics[1].name:
		q := int64(f.rng.IntN(100))
		if len(tp.fields) == 3 {
			q = 1<<35 + q // needs the widened long
			note := fmt.Sprint("n", f.rng.IntN(9))
			after, row = fmt.Sprintf(`{"id":%d,"qty":%d,"note":%q}`, id, q, note), []any{id, q, note}
		} else {
			after, row = fmt.Sprintf(`{"id":%d,"qty":%d}`, id, q), []any{id, q, nil}
		}
	default:
		p := float64(f.rng.IntN(10000)) / 100
		after, row = fmt.Sprintf(`{"id":%d,"price":%v}`, id, p), []any{id, p}
	}
	part := int32(id % int64(f.parts))
	f.ends[tp.name][part]++
	before := "null"
	if tp.model[id] != nil {
		before = fmt.Sprintf(`{"id":%d}`, id)
		if f.rng.IntN(5) == 0 {
			delete(tp.model, id)
			return &kgo.Record{Topic: tp.name, Key: dbKey(id), Value: connectEnvelope(tp.fields, before, "null"), Partition: part}
		}
	}
	tp.model[id] = row
	return &kgo.Record{Topic: tp.name, Key: dbKey(id), Value: connectEnvelope(tp.fields, before, after), Partition: part}
}

// produce sends n events to every topic.
func (f *connectorFeed) produce(n int) {
	var recs []*kgo.Record
	for range n {
		for _, tp := range f.topics {
			recs = append(recs, f.event(tp, int64(f.rng.IntN(150))))
		}
	}
	if err := f.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
}

// evolve makes orders' source add a column and widen qty.
func (f *connectorFeed) evolve() {
	f.topics[1].fields = []string{connectField("id", "int64", false), connectField("qty", "int64", false), connectField("note", "string", true)}
}

// check fails unless tp's table in whDir equals its model.
func (f *connectorFeed) check(whDir string, tp *dbTopic, phase string) {
	f.t.Helper()
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	defer wh.Close()
	tbl, err := wh.Catalog.LoadTable(ctx, dbTable(tp))
	if err != nil {
		f.t.Fatal(err)
	}
	got := map[int64][]any{}
	for row, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			f.t.Fatal(err)
		}
		got[row[0].(int64)] = append([]any(nil), row...)
	}
	if len(got) != len(tp.model) {
		f.t.Fatalf("%s: table %s has %d rows, the model %d", phase, tp.name, len(got), len(tp.model))
	}
	for id, w := range tp.model {
		if g := got[id]; !reflect.DeepEqual(g, w) {
			f.t.Fatalf("%s: table %s id %d: %v, model %v", phase, tp.name, id, g, w)
		}
	}
}

// dbTable is the table --table-template inventory.{table} gives tp.
func dbTable(tp *dbTopic) table.Identifier {
	return table.Identifier{"inventory", tp.name[strings.LastIndex(tp.name, ".")+1:]}
}

// TestDatabaseFeed: one run reads a Debezium connector's three topics
// (JSON with schemas) into three tables named by --table-template, created
// from the events' schemas; one table's source adds a column and widens
// another mid-stream; runs are killed with SIGKILL and rerun; every table
// equals its model. Then one table's source changes a column's type: that
// table stops with an error naming it, the others take their new events,
// and the run exits 1.
func TestDatabaseFeed(t *testing.T) {
	f, c := newConnectorFeed(t, 31, 2)
	topics, cl, rng := f.topics, f.cl, f.rng
	f.produce(600)
	f.evolve()
	f.produce(600)

	whDir := t.TempDir()
	args := []string{"run", "--warehouse", whDir, "--table-template", "inventory.{table}", "--format", "debezium-json",
		"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `dbserver1\.inventory\..*`, "--stop-at-end", "--quiet",
		"--checkpoint-rows", "300", "--memory-limit", "3MiB"}
	killed := killAndRerun(t, rng, args, 2, 200*time.Millisecond, 800*time.Millisecond)
	check := func(tp *dbTopic, phase string) {
		t.Helper()
		f.check(whDir, tp, fmt.Sprintf("%s (%d runs killed)", phase, killed))
	}
	for _, tp := range topics {
		check(tp, "after the kills")
	}

	// customers' email becomes a double: that table stops, the others go on.
	f.produce(100)
	topics[0].fields = []string{connectField("id", "int64", false), connectField("email", "double", true)}
	bad := &kgo.Record{Topic: topics[0].name, Key: dbKey(1), Value: connectEnvelope(topics[0].fields, "null", `{"id":1,"email":1.5}`)}
	if err := cl.ProduceSync(context.Background(), bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := icesink(t, args...)
	if code != 1 || !strings.Contains(stderr, "table inventory.customers (topic dbserver1.inventory.customers)") ||
		!strings.Contains(stderr, `column "email" is string, the events now carry double`) {
		t.Fatalf("a type change in one table: exit %d\n%s", code, stderr)
	}
	check(topics[1], "after the type change")
	check(topics[2], "after the type change")

	// With a dead-letter topic the record goes there and its table goes on.
	if _, stderr, code := icesink(t, append(args, "--dead-letter-topic", "dlq")...); code != 0 {
		t.Fatalf("with a dead-letter topic: exit %d\n%s", code, stderr)
	}
	for _, tp := range topics {
		check(tp, "with a dead-letter topic")
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var dead []*kgo.Record
	for len(dead) == 0 && ctx.Err() == nil {
		dead = append(dead, cons.PollFetches(ctx).Records()...)
	}
	if len(dead) != 1 || string(dead[0].Value) != string(bad.Value) {
		t.Fatalf("%d records in the dead-letter topic, want the one of the refused type change", len(dead))
	}
}

// TestDatabaseOverrides: the config file's tables: mapping names the key
// of a source table without a primary key (its records carry no key) and
// the properties of the table created for it; an unknown override key and
// an override of a table no topic goes to are usage errors.
func TestDatabaseOverrides(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "srv.shop.audit"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("srv.shop.audit"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fields := []string{connectField("sku", "string", true), connectField("qty", "int64", true)}
	var recs []*kgo.Record
	for i := range 30 {
		before := "null"
		if i >= 10 {
			before = fmt.Sprintf(`{"sku":"s%d","qty":%d}`, i%10, i-10)
		}
		recs = append(recs, &kgo.Record{Value: connectEnvelope(fields, before, fmt.Sprintf(`{"sku":"s%d","qty":%d}`, i%10, i))})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	whDir := t.TempDir()
	args := []string{"run", "--warehouse", whDir, "--table-template", "shop.{table}", "--format", "debezium-json",
		"--kafka-brokers", c.ListenAddrs()[0], "--topic", "srv.shop.audit", "--stop-at-end", "--quiet"}
	bad := write("bad.yaml", "tables:\n  shop.audit:\n    keys: [sku]\n")
	if _, stderr, code := icesink(t, append(args, "--config", bad)...); code != 2 || !strings.Contains(stderr, `[3:5] unknown field "keys"`) {
		t.Fatalf("an unknown override key: exit %d\n%s", code, stderr)
	}
	other := write("other.yaml", "tables:\n  shop.nope:\n    key: [sku]\n")
	if _, stderr, code := icesink(t, append(args, "--config", other)...); code != 2 || !strings.Contains(stderr, "no topic goes to shop.nope") {
		t.Fatalf("an override of no table: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := icesink(t, args...); code != 1 || !strings.Contains(stderr, "name its key columns") {
		t.Fatalf("no key and no override: exit %d\n%s", code, stderr)
	}
	good := write("good.yaml", "tables:\n  shop.audit:\n    key: [sku]\n    properties:\n      write.parquet.compression-codec: snappy\n")
	if _, stderr, code := icesink(t, append(args, "--config", good)...); code != 0 {
		t.Fatalf("with the key override: exit %d\n%s", code, stderr)
	}
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"shop", "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := tbl.Schema().FindFieldByName("sku"); len(tbl.Schema().IdentifierFieldIDs) != 1 || tbl.Schema().IdentifierFieldIDs[0] != f.ID || !f.Required {
		t.Fatalf("schema %v: want sku the key", tbl.Schema())
	}
	if tbl.Properties()["write.parquet.compression-codec"] != "snappy" {
		t.Fatalf("properties %v: want the override's", tbl.Properties())
	}
	got := map[string]int64{}
	for row, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			t.Fatal(err)
		}
		got[row[0].(string)] = row[1].(int64)
	}
	for i := 20; i < 30; i++ {
		if got[fmt.Sprintf("s%d", i%10)] != int64(i) || len(got) != 10 {
			t.Fatalf("rows %v: want s0..s9 at 20..29", got)
		}
	}
}

// TestDatabaseNewTopic: a run that reads --topic-regex without end picks
// up a matching topic created while it runs (its table created and
// filled) and keeps the tables it had; SIGTERM commits what was read.
func TestDatabaseNewTopic(t *testing.T) {
	first := &dbTopic{name: "srv.shop.a", model: map[int64][]any{}}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, first.name), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fields := []string{connectField("id", "int64", false), connectField("v", "int64", true)}
	produce := func(tp *dbTopic, from, to int) {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			id := int64(i % 20)
			recs = append(recs, &kgo.Record{Topic: tp.name, Key: dbKey(id), Value: connectEnvelope(fields, "null", fmt.Sprintf(`{"id":%d,"v":%d}`, id, i))})
			tp.model[id] = []any{id, int64(i)}
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(first, 0, 50)
	whDir := t.TempDir()
	cmd := exec.Command(binary, "run", "--warehouse", whDir, "--table-template", "shop.{table}", "--format", "debezium-json",
		"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `srv\.shop\..*`, "--topic-refresh", "300ms",
		"--checkpoint-interval", "200ms", "--quiet")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	rows := func(name string) map[int64][]any {
		tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"shop", name})
		if err != nil {
			return nil
		}
		got := map[int64][]any{}
		for row, err := range warehouse.Rows(ctx, tbl) {
			if err != nil {
				return nil
			}
			got[row[0].(int64)] = append([]any(nil), row...)
		}
		return got
	}
	waitFor := func(name string, tp *dbTopic) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !reflect.DeepEqual(rows(name), tp.model) {
			if time.Now().After(deadline) {
				t.Fatalf("table shop.%s never reached its model: %v\n%s", name, rows(name), stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("a", first)
	second := &dbTopic{name: "srv.shop.b", model: map[int64][]any{}}
	produce(second, 0, 40) // creates the topic
	waitFor("b", second)
	produce(first, 50, 80)
	waitFor("a", first)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// TestKafkaTableFromEvents: a single-table run from a debezium-json topic
// creates its missing table from the first record's Connect schema and
// its key's, without --schema.
func TestKafkaTableFromEvents(t *testing.T) {
	tp := &dbTopic{name: "srv.shop.items", model: map[int64][]any{}}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, tp.name))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(tp.name), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fields := []string{connectField("id", "int64", false), connectField("label", "string", true)}
	var recs []*kgo.Record
	for i := range 40 {
		id := int64(i % 15)
		recs = append(recs, &kgo.Record{Key: dbKey(id), Partition: int32(id % 2), Value: connectEnvelope(fields, "null", fmt.Sprintf(`{"id":%d,"label":"l%d"}`, id, i))})
		tp.model[id] = []any{id, fmt.Sprint("l", i)}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	whDir := t.TempDir()
	if _, stderr, code := icesink(t, "run", "--warehouse", whDir, "--table", "shop.items", "--format", "debezium-json",
		"--kafka-brokers", c.ListenAddrs()[0], "--topic", tp.name, "--stop-at-end", "--quiet"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"shop", "items"})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := tbl.Schema().FindFieldByName("id"); len(tbl.Schema().IdentifierFieldIDs) != 1 || tbl.Schema().IdentifierFieldIDs[0] != f.ID {
		t.Fatalf("schema %v: want id the key", tbl.Schema())
	}
	got := map[int64][]any{}
	for row, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			t.Fatal(err)
		}
		got[row[0].(int64)] = append([]any(nil), row...)
	}
	if !reflect.DeepEqual(got, tp.model) {
		t.Fatalf("table %v, model %v", got, tp.model)
	}
}

// TestDatabaseFetchShare: in database mode each table's Kafka client reads
// ahead a 128th of --memory-limit split over the tables (the fetches of
// many tables sit outside the writers' shares); --kafka-fetch-bytes sets
// it; without a budget it is 1 MiB. Seen in the Fetch requests the broker
// gets.
func TestDatabaseFetchShare(t *testing.T) {
	f, c := newConnectorFeed(t, 53, 2)
	f.produce(50)
	var mu sync.Mutex
	var largest int32 // the largest per-partition fetch bytes asked
	c.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.FetchRequest)
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				largest = max(largest, min(p.PartitionMaxBytes, req.MaxBytes))
			}
		}
		return nil, nil, false // observed only
	})
	for _, tc := range []struct {
		args []string
		want int32
	}{
		{[]string{"--memory-limit", "24MiB"}, 24 << 20 / 128 / 3},
		{[]string{"--memory-limit", "24MiB", "--kafka-fetch-bytes", "100KiB"}, 100 << 10},
		{nil, 1 << 20},
	} {
		mu.Lock()
		largest = 0
		mu.Unlock()
		args := append([]string{"run", "--warehouse", t.TempDir(), "--table-template", "inventory.{table}", "--format", "debezium-json",
			"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `dbserver1\.inventory\..*`, "--stop-at-end", "--quiet"}, tc.args...)
		if _, stderr, code := icesink(t, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", tc.args, code, stderr)
		}
		mu.Lock()
		got := largest
		mu.Unlock()
		if got != tc.want {
			t.Errorf("%v: fetches of up to %d bytes per partition, want %d", tc.args, got, tc.want)
		}
	}
	if _, stderr, code := icesink(t, "run", "--warehouse", t.TempDir(), "--table", "a.b", "--kafka-brokers", c.ListenAddrs()[0],
		"--topic", f.topics[0].name, "--kafka-fetch-bytes", "3GiB"); code != 2 || !strings.Contains(stderr, "--kafka-fetch-bytes: at most 2GiB") {
		t.Errorf("--kafka-fetch-bytes 3GiB: exit %d, %s", code, stderr)
	}
}

// TestDatabaseClientTelemetry: the tables' Kafka clients push no client
// metrics (KIP-714) to a broker that subscribes to them (kfake does)
// unless --kafka-client-telemetry asks: each push is compressed with
// 4 MiB lz4 blocks outside the memory budget, for every table.
func TestDatabaseClientTelemetry(t *testing.T) {
	f, c := newConnectorFeed(t, 54, 2)
	f.produce(30)
	f.cl.Close()           // its own last push goes before the count starts
	var asked atomic.Int64 // telemetry requests the broker got
	for _, key := range []int16{kmsg.GetTelemetrySubscriptions.Int16(), kmsg.PushTelemetry.Int16()} {
		c.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			asked.Add(1)
			return nil, nil, false // observed only
		})
	}
	for _, tc := range []struct {
		args []string
		push bool
	}{
		{nil, false},
		{[]string{"--kafka-client-telemetry"}, true},
	} {
		asked.Store(0)
		args := append([]string{"run", "--warehouse", t.TempDir(), "--table-template", "inventory.{table}", "--format", "debezium-json",
			"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `dbserver1\.inventory\..*`, "--stop-at-end", "--quiet", "--memory-limit", "24MiB"}, tc.args...)
		if _, stderr, code := icesink(t, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", tc.args, code, stderr)
		}
		if got := asked.Load(); (got > 0) != tc.push {
			t.Errorf("%v: %d telemetry requests, want pushes: %v", tc.args, got, tc.push)
		}
	}
}

// TestDatabaseSourceNames: topics renamed by a router (no
// SERVER.SCHEMA.TABLE in their names) go to the tables their events'
// source blocks name, through {source.db} and {source.table}; two topics
// whose events name one table are refused, and a template placeholder the
// source block lacks (MySQL sends no schema) is an error naming it.
func TestDatabaseSourceNames(t *testing.T) {
	topics := []string{"cdc-customers", "cdc-orders", "cdc-orders-copy"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fields := []string{connectField("id", "int64", false), connectField("n", "int64", true)}
	event := func(topic, table string, id, n int) *kgo.Record {
		v := connectEnvelope(fields, "null", fmt.Sprintf(`{"id":%d,"n":%d}`, id, n))
		v = bytes.Replace(v, []byte(`"payload":{`), fmt.Appendf(nil, `"payload":{"source":{"name":"mysql1","db":"shop","schema":null,"table":%q},`, table), 1)
		return &kgo.Record{Topic: topic, Key: dbKey(int64(id)), Value: v}
	}
	recs := []*kgo.Record{event("cdc-customers", "customers", 1, 10), event("cdc-customers", "customers", 2, 20), event("cdc-orders", "orders", 1, 5)}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	whDir := t.TempDir()
	run := func(template, regex string, more ...string) (string, int) {
		_, stderr, code := icesink(t, append([]string{"run", "--warehouse", whDir, "--table-template", template, "--format", "debezium-json",
			"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", regex, "--stop-at-end", "--quiet"}, more...)...)
		return stderr, code
	}
	// The overrides reach the tables named from the source blocks; one
	// of a table no topic's events went to is warned of (the names are
	// known only once the events are read).
	config := filepath.Join(t.TempDir(), "tables.yaml")
	if err := os.WriteFile(config, []byte("tables:\n  shop.customers:\n    properties:\n      write.parquet.compression-codec: snappy\n  shop.nope:\n    key: [id]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr, code := run("{source.db}.{source.table}", `cdc-(customers|orders)`, "--config", config)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "--tables names tables no topic's events went to") || !strings.Contains(stderr, "shop.nope") {
		t.Errorf("no warning of the override of shop.nope:\n%s", stderr)
	}
	for name, want := range map[string]map[int64]int64{"customers": {1: 10, 2: 20}, "orders": {1: 5}} {
		ctx := context.Background()
		wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"shop", name})
		if err != nil {
			t.Fatalf("table shop.%s: %v", name, err)
		}
		if codec := tbl.Properties()["write.parquet.compression-codec"]; (codec == "snappy") != (name == "customers") {
			t.Errorf("shop.%s: codec property %q; only customers has the override", name, codec)
		}
		got := map[int64]int64{}
		for row, err := range warehouse.Rows(ctx, tbl) {
			if err != nil {
				t.Fatal(err)
			}
			got[row[0].(int64)] = row[1].(int64)
		}
		wh.Close()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("shop.%s: %v, want %v", name, got, want)
		}
	}

	// A second topic whose events name orders too.
	if err := cl.ProduceSync(context.Background(), event("cdc-orders-copy", "orders", 9, 9)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if stderr, code := run("{source.db}.{source.table}", `cdc-.*`); code != 1 || !strings.Contains(stderr, "both go to table shop.orders") {
		t.Errorf("two topics into one table: exit %d\n%s", code, stderr)
	}
	// A topic whose partitions' first events name different tables: the
	// partition that answered first decided before (and could differ from
	// one start to the next); now refused (issue 46 item 10).
	mixed := func(p int32, table string, id int) *kgo.Record {
		r := event("cdc-mixed", table, id, id)
		r.Partition = p
		return r
	}
	if err := c.CreateTopic("cdc-mixed", 2, nil); err != nil {
		t.Fatal(err)
	}
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	if err := pcl.ProduceSync(context.Background(), mixed(0, "payments", 1), mixed(1, "refunds", 2)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if stderr, code := run("{source.db}.{source.table}", `cdc-mixed`); code != 1 ||
		!strings.Contains(stderr, "partition 0 names table shop.payments, that of partition 1 names shop.refunds") {
		t.Errorf("a topic of two tables: exit %d\n%s", code, stderr)
	}
	if stderr, code := run("{source.schema}.{source.table}", `cdc-customers`); code != 1 ||
		!strings.Contains(stderr, "topic cdc-customers: its events' source block has no schema for {source.schema}") {
		t.Errorf("a placeholder the source block lacks: exit %d\n%s", code, stderr)
	}
}

// TestDatabaseKilledBetweenTables: the tables of one process commit each
// epoch in their own transactions; runs killed (SIGKILL) right after one
// table's commit of an epoch, the others' not done, and run again: every
// table equals its model, and no table holds an epoch twice.
func TestDatabaseKilledBetweenTables(t *testing.T) {
	f, c := newConnectorFeed(t, 37, 2)
	f.produce(300)
	f.evolve()
	f.produce(100)
	whDir := t.TempDir()
	args := []string{"run", "--warehouse", whDir, "--table-template", "inventory.{table}", "--format", "debezium-json",
		"--kafka-brokers", c.ListenAddrs()[0], "--topic-regex", `dbserver1\.inventory\..*`, "--stop-at-end", "--quiet",
		"--checkpoint-rows", "150"}
	split := false // a kill left the tables at different epochs
	for _, nth := range []int{2, 4, 5} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=database-table-committed:%d", failpointEnv, nth))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !st.Signaled() || st.Signal() != syscall.SIGKILL || timedOut {
			t.Fatalf("the run with the failpoint at the %d. table commit was not killed there: %v\n%s", nth, err, stderr.String())
		}
		epochs := map[uint64]bool{}
		for _, tp := range f.topics {
			pos, err := resumeOf(whDir, dbTable(tp))
			if err != nil {
				t.Fatal(err)
			}
			epochs[pos.Epoch] = true
		}
		split = split || len(epochs) > 1
		f.produce(100)
	}
	if !split {
		t.Fatal("no kill fell between two tables' commits of an epoch")
	}
	if _, stderr, code := icesink(t, args...); code != 0 {
		t.Fatalf("the run after the kills: exit %d\n%s", code, stderr)
	}
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	for _, tp := range f.topics {
		f.check(whDir, tp, "after kills between two tables' commits")
		tbl, err := wh.Catalog.LoadTable(ctx, dbTable(tp))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, s := range tbl.Metadata().Snapshots() {
			if s.Summary == nil {
				continue
			}
			if e, ok := s.Summary.Properties[commit.PropEpoch]; ok {
				if seen[e] {
					t.Fatalf("table %s holds epoch %s twice", tp.name, e)
				}
				seen[e] = true
			}
		}
	}
}

// resumeOf is where sink "icesink" resumes in table ident of whDir.
func resumeOf(whDir string, ident table.Identifier) (sink.Position, error) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		return sink.Position{}, err
	}
	defer wh.Close()
	return sink.Resume(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "icesink"})
}

// TestTableForSourceValues: event content fills one name part of a
// {source.*} template, no more: a source.table "x.y" under
// shop.{source.table} is refused (it made table shop.x.y, outside the
// template), and so are path characters and dots twice over; a plain name
// and a topic's own parts still resolve (issue 46 item 10).
func TestTableForSourceValues(t *testing.T) {
	src := func(table string) *changelog.DebeziumSource {
		return &changelog.DebeziumSource{Server: "srv", DB: "shop", Schema: "public", Table: table}
	}
	for _, tc := range []struct {
		template, table string
		want            string // "" : refused
	}{
		{"shop.{source.table}", "orders", "shop.orders"},
		{"shop.{source.table}", "x.y", ""},
		{"shop.{source.table}", "../etc", ""},
		{"shop.{source.table}", `a\b`, ""},
		{"shop.{source.table}", "a?b", ""},
		{"{source.db}_raw.{source.table}", "orders", "shop_raw.orders"},
	} {
		ident, err := tableFor(tc.template, "cdc-orders", src(tc.table))
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s with source.table %q: table %v, want a refusal", tc.template, tc.table, ident)
		case tc.want != "" && (err != nil || strings.Join(ident, ".") != tc.want):
			t.Errorf("%s with source.table %q: %v %v, want %s", tc.template, tc.table, ident, err, tc.want)
		}
	}
	if ident, err := tableFor("raw.{topic}", "srv.shop.orders", nil); err != nil || strings.Join(ident, ".") != "raw.srv_shop_orders" {
		t.Errorf("{topic}: %v %v", ident, err)
	}
}
