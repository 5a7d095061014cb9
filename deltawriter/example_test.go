package deltawriter_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// The library example of the README: one window of upserts written with a
// memory budget and committed as one snapshot, read back through
// iceberg-go's scanner.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "icesink-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String})
	wh, err := warehouse.Open(ctx, dir, warehouse.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer wh.Close()
	tbl, _, err := wh.LoadOrCreate(ctx, table.Identifier{"demo", "orders"}, warehouse.TableSpec{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	w, err := deltawriter.New(ctx, tbl, deltawriter.Options{Mode: deltawriter.Upsert, MemoryLimit: 64 << 20, SinkID: "my-sink"})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close(ctx)
	for _, c := range []deltawriter.Change{
		{Op: deltawriter.Insert, Row: []any{int64(1), "alice"}},
		{Op: deltawriter.Insert, Row: []any{int64(2), "bob"}},
		{Op: deltawriter.Insert, Row: []any{int64(1), "alice v2"}}, // an upsert of key 1
		{Op: deltawriter.Delete, Row: []any{int64(2), nil}},
	} {
		if err := w.Write(ctx, c); err != nil {
			log.Fatal(err)
		}
	}
	p, err := w.PrepareCommit(ctx) // every file of the window, as one payload
	if err != nil {
		log.Fatal(err)
	}
	cm, err := commit.NewCommitter(ctx, wh.Catalog, tbl.Identifier(), "my-sink")
	if err != nil {
		log.Fatal(err)
	}
	// One snapshot, at most once per (sink, epoch).
	if _, err := cm.Commit(ctx, 1, []commit.Payload{p}, nil); err != nil {
		log.Fatal(err)
	}
	// The key index learns the window's fate; the next Write opens a new
	// window.
	if err := w.Committed(ctx); err != nil {
		log.Fatal(err)
	}
	for row, err := range warehouse.Rows(ctx, cm.Table()) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(row...)
	}
	// Output:
	// 1 alice v2
}
