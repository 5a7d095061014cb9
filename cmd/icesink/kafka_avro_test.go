package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/internal/testcert"
)

// avroTable is a table with the types Debezium spells with logical types.
var avroTable = iceberg.NewSchemaWithIdentifiers(0, []int{1},
	iceberg.NestedField{ID: 1, Name: "order_id", Type: iceberg.Int64Type{}, Required: true},
	iceberg.NestedField{ID: 2, Name: "status", Type: iceberg.StringType{}, Required: true},
	iceberg.NestedField{ID: 3, Name: "amount", Type: iceberg.DecimalTypeOf(10, 2)},
	iceberg.NestedField{ID: 4, Name: "updated_at", Type: iceberg.TimestampTzType{}, Required: true},
	iceberg.NestedField{ID: 5, Name: "placed", Type: iceberg.DateType{}},
	iceberg.NestedField{ID: 6, Name: "shipped_at", Type: iceberg.TimestampType{}},
	iceberg.NestedField{ID: 7, Name: "note", Type: iceberg.StringType{}},
)

// TestKafkaAvroMatchesJSON: a Debezium feed in Avro through a schema
// registry (over TLS, with basic auth), whose schema gains a column
// mid-stream, fills the same table as the same feed in debezium-json
// (the Avro table created from the registry's schemas, the JSON one from
// the schema file); a wrong registry password stops the run naming the
// credentials.
func TestKafkaAvroMatchesJSON(t *testing.T) {
	const parts = 3
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "cdc", "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	caFile, serverTLS := testcert.Server(t, t.TempDir())
	reg := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("icesink:regpass"))))
	defer reg.Close()
	srv := httptest.NewUnstartedServer(reg.Handler())
	srv.TLS = serverTLS
	srv.StartTLS()
	defer srv.Close()

	// The source's first schema lacks "note".
	var older []iceberg.NestedField
	for _, f := range avroTable.Fields() {
		if f.Name != "note" {
			older = append(older, f)
		}
	}
	v1 := iceberg.NewSchemaWithIdentifiers(0, []int{1}, older...)
	src := changelog.DebeziumSource{Server: "dbserver1", DB: "shop", Schema: "public", Table: "orders"}
	registerAvro := func(s *iceberg.Schema) (valueID, keyID int, enc *changelog.AvroEncoder) {
		v, k, err := changelog.DebeziumAvroSchema(s, src)
		if err != nil {
			t.Fatal(err)
		}
		if valueID, _, err = reg.RegisterSchema("cdc-value", sr.Schema{Schema: v, Type: sr.TypeAvro}); err != nil {
			t.Fatal(err)
		}
		if keyID, _, err = reg.RegisterSchema("cdc-key", sr.Schema{Schema: k, Type: sr.TypeAvro}); err != nil {
			t.Fatal(err)
		}
		enc, err = changelog.NewAvroEncoder(s, src)
		if err != nil {
			t.Fatal(err)
		}
		return valueID, keyID, enc
	}
	v1Value, v1Key, v1Enc := registerAvro(v1)
	v2Value, v2Key, v2Enc := registerAvro(avroTable)

	jsonEnc, err := changelog.NewEncoder(avroTable)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(24, 1))
	rows := map[int64][]any{}
	var jsonLines []byte
	var recs []*kgo.Record
	const events = 3000
	for i := range events {
		k := int64(rng.IntN(200))
		after := []any{k, []string{"new", "paid", "shipped"}[rng.IntN(3)], nil,
			time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + rng.Int64N(1e12), nil, nil, nil}
		if rng.IntN(4) > 0 {
			after[2] = decimal128.FromI64(rng.Int64N(2e9) - 1e9)
		}
		if rng.IntN(4) > 0 {
			after[4] = int32(rng.IntN(40000) - 10000)
		}
		if rng.IntN(2) > 0 {
			after[5] = rng.Int64N(4e15)
		}
		enc, valueID, keyID := v1Enc, v1Value, v1Key
		if i >= events/2 {
			enc, valueID, keyID = v2Enc, v2Value, v2Key
			if rng.IntN(2) > 0 {
				after[6] = fmt.Sprintf("note %d ✓", i)
			}
		}
		before := rows[k]
		if before != nil && rng.IntN(5) == 0 {
			after = nil // a delete
		}
		if before == nil && after == nil {
			continue
		}
		line, err := jsonEnc.AppendDebeziumJSON(nil, before, after)
		if err != nil {
			t.Fatal(err)
		}
		jsonLines = append(append(jsonLines, line...), '\n')
		trim := func(img []any) []any {
			if img == nil || enc == v2Enc {
				return img
			}
			return img[:6]
		}
		value, err := enc.AppendDebeziumAvro(nil, valueID, trim(before), trim(after))
		if err != nil {
			t.Fatal(err)
		}
		img := before
		if img == nil {
			img = after
		}
		key, err := enc.AppendKeyAvro(nil, keyID, trim(img))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Key: key, Value: value, Partition: int32(k % parts)})
		rows[k] = after
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("cdc"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "schema.json")
	b, _ := avroTable.MarshalJSON()
	if err := os.WriteFile(schemaFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	jsonFile := filepath.Join(dir, "feed.jsonl")
	if err := os.WriteFile(jsonFile, jsonLines, 0o644); err != nil {
		t.Fatal(err)
	}
	wh := t.TempDir()
	// No --schema: the table is created from the registry's newest schemas
	// of the topic.
	args := []string{"run", "--warehouse", wh, "--table", "db.avro", "--format", "debezium-avro",
		"--kafka-brokers", c.ListenAddrs()[0], "--topic", "cdc", "--stop-at-end", "--quiet",
		"--schema-registry", srv.URL, "--schema-registry-ca", caFile, "--schema-registry-user", "icesink"}
	t.Setenv(registryPasswordEnv, "wrong")
	if _, stderr, code := icesink(t, args...); code == 0 || !strings.Contains(stderr, "refused the credentials") {
		t.Fatalf("a wrong registry password: exit %d, %s", code, stderr)
	}
	t.Setenv(registryPasswordEnv, "regpass")
	if _, stderr, code := icesink(t, args...); code != 0 {
		t.Fatalf("Avro run: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := icesink(t, "run", "--warehouse", wh, "--table", "db.json", "--schema", schemaFile,
		"--format", "debezium-json", "--input", jsonFile, "--quiet"); code != 0 {
		t.Fatalf("JSON run: exit %d\n%s", code, stderr)
	}
	// A table created with the source's first schema follows it: "note"
	// is added when the first event of the second schema arrives.
	// (With a dead-letter topic the source checks each change as the
	// writers would: the check follows the evolved schema too.)
	v1File := filepath.Join(dir, "v1.json")
	b, _ = v1.MarshalJSON()
	if err := os.WriteFile(v1File, b, 0o644); err != nil {
		t.Fatal(err)
	}
	args[4] = "db.evolved"
	if _, stderr, code := icesink(t, append(args, "--schema", v1File, "--dead-letter-topic", "dlq")...); code != 0 {
		t.Fatalf("Avro run into a table of the first schema: exit %d\n%s", code, stderr)
	}
	gotEvolved, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.evolved")
	gotAvro, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.avro")
	gotJSON, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.json")
	live := 0
	for _, r := range rows {
		if r != nil {
			live++
		}
	}
	if n := strings.Count(gotAvro, "\n"); gotAvro != gotJSON || n != live {
		t.Fatalf("the Avro table (%d rows) differs from the JSON one (%d rows; %d live keys)", n, strings.Count(gotJSON, "\n"), live)
	}
	if gotEvolved != gotJSON {
		t.Fatal("the table evolved from the first schema differs from the JSON one")
	}
	if !strings.Contains(gotAvro, "✓") {
		t.Fatal("no note of the second schema reached the table")
	}
}

// TestDatabaseSourceNamesAvro: a router-renamed topic of Debezium Avro
// goes to the table its events' source block names (read through the
// registry's schema of the first event).
func TestDatabaseSourceNamesAvro(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "cdc-items"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := srfake.New()
	defer reg.Close()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.StringType{}})
	src := changelog.DebeziumSource{Server: "pg1", DB: "shop", Schema: "public", Table: "items"}
	v, k, err := changelog.DebeziumAvroSchema(schema, src)
	if err != nil {
		t.Fatal(err)
	}
	valueID, _, err := reg.RegisterSchema("cdc-items-value", sr.Schema{Schema: v, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	keyID, _, err := reg.RegisterSchema("cdc-items-key", sr.Schema{Schema: k, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := changelog.NewAvroEncoder(schema, src)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range int64(3) {
		row := []any{i, fmt.Sprint("item ", i)}
		value, err := enc.AppendDebeziumAvro(nil, valueID, nil, row)
		if err != nil {
			t.Fatal(err)
		}
		key, err := enc.AppendKeyAvro(nil, keyID, row)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "cdc-items", Key: key, Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	wh := t.TempDir()
	if _, stderr, code := icesink(t, "run", "--warehouse", wh, "--table-template", "{source.db}.{source.schema}_{source.table}",
		"--format", "debezium-avro", "--schema-registry", reg.URL(), "--kafka-brokers", c.ListenAddrs()[0],
		"--topic-regex", "cdc-.*", "--stop-at-end", "--quiet"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	out, stderr, code := icesink(t, "scan", "--warehouse", wh, "--table", "shop.public_items")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, `"item 2"`) {
		t.Fatalf("scan of shop.public_items: exit %d\n%s%s", code, out, stderr)
	}
}
