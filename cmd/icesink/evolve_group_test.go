package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/warehouse"
)

// TestKafkaGroupSchemaEvolution: two processes of one consumer group,
// under one coordinator, read a Debezium feed (JSON with schemas, three
// partitions) whose source adds a column, widens a column and makes one
// optional; partitions run at their own pace, so each process meets the
// new schema on its own (and both may evolve the table). The table ends
// with the new schema, equal to the model, with every partition's end
// offset committed.
func TestKafkaGroupSchemaEvolution(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process Kafka test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	rng := rand.New(rand.NewPCG(29, 3))
	lines, model := evolvingFeed(rng, 3000, false)

	brokers, cl := kafkaCluster(t, 3)
	ends := map[int32]int{}
	var recs []*kgo.Record
	for _, l := range lines {
		var ev struct {
			Payload struct {
				Before, After *struct{ ID int64 }
			}
		}
		if err := json.Unmarshal(l, &ev); err != nil {
			t.Fatal(err)
		}
		row := ev.Payload.After
		if row == nil {
			row = ev.Payload.Before
		}
		p := int32(row.ID % 3)
		ends[p]++
		recs = append(recs, &kgo.Record{Value: l, Partition: p})
	}

	whDir := t.TempDir()
	wh, err := warehouse.Open(ctx, whDir, warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	var first iceberg.Schema
	if err := json.Unmarshal([]byte(firstSchema), &first); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wh.LoadOrCreate(ctx, table.Identifier{"db", "t"}, warehouse.TableSpec{Schema: &first}); err != nil {
		t.Fatal(err)
	}
	caddr, coord := mpCoordinator(t, ctx, whDir, "--vnode-count", "3", "--checkpoint-interval", "300ms", "--align-timeout", "30s")
	var procs []*mpProc
	for range 2 {
		procs = append(procs, mpStart(t, ctx, "run", "--warehouse", whDir, "--table", mpTable, "--kafka-brokers", brokers, "--topic", "cdc",
			"--group", "sink", "--coordinator", caddr, "--format", "debezium-json", "--memory-limit", "1MiB", "--spill-dir", t.TempDir()))
	}
	// The records arrive in three bursts: each process holds its
	// partitions' windows open across a schema change.
	for i := 0; i < len(recs); i += 1000 {
		if err := cl.ProduceSync(ctx, recs[i:min(i+1000, len(recs))]...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	outputs := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "--- coordinator\n%s\n", coord.output())
		for i, p := range procs {
			fmt.Fprintf(&b, "--- consumer %d\n%s\n", i, p.output())
		}
		return b.String()
	}
	for p, n := range ends {
		for committedOffset(t, whDir, p) < n {
			select {
			case <-ctx.Done():
				t.Fatalf("partition %d: offset %d committed, want %d\n%s", p, committedOffset(t, whDir, p), n, outputs())
			case <-time.After(100 * time.Millisecond):
			}
			for _, pr := range procs {
				select {
				case <-pr.done:
					t.Fatalf("a consumer exited: %v\n%s", pr.err, outputs())
				default:
				}
			}
		}
	}
	tbl, err := wh.Catalog.LoadTable(ctx, table.Identifier{"db", "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !tbl.Schema().Equals(evolvedSchema) {
		t.Fatalf("the table's schema is\n%v\nwant\n%v", tbl.Schema(), evolvedSchema)
	}
	got := cliTable(t, wh)
	if len(got) != len(model) {
		t.Errorf("%d rows, the model %d", len(got), len(model))
	}
	for id, w := range model {
		if g := got[id]; !reflect.DeepEqual(g, w) {
			t.Fatalf("id %d: table %v, model %v", id, g, w)
		}
	}
}
