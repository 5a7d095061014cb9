package deltawriter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// TestFilesCompleteOnObjectStorage writes a window into a table on
// iceberg-go's in-memory object store, where a file exists only once its
// writer is closed (as an upload completes only on close), and reads the
// table back. Before, data and delete files were never closed after a
// successful write: committed files did not exist and the scan failed.
func TestFilesCompleteOnObjectStorage(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String})
	ident := table.Identifier{"db", "mem"}
	if err := wh.Catalog.CreateNamespace(ctx, table.Identifier{"db"}, nil); err != nil {
		t.Fatal(err)
	}
	loc := fmt.Sprintf("mem://%s/db/mem", t.Name())
	_, err = wh.Catalog.CreateTable(ctx, ident, schema, catalog.WithLocation(loc),
		catalog.WithProperties(iceberg.Properties{"format-version": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := commit.NewCommitter(ctx, wh.Catalog, ident, "mem")
	if err != nil {
		t.Fatal(err)
	}
	for epoch := uint64(1); epoch <= 2; epoch++ {
		w, err := deltawriter.New(ctx, cm.Table(), deltawriter.Options{SinkID: "mem", SpillDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			// Epoch 2 updates the even keys (equality deletes) and deletes
			// one it wrote itself (a position delete).
			if epoch == 2 && i%2 == 1 {
				continue
			}
			if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(i), fmt.Sprint("v", epoch, "-", i)}}); err != nil {
				t.Fatal(err)
			}
		}
		if epoch == 2 {
			if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Delete, Row: []any{int64(0), nil}}); err != nil {
				t.Fatal(err)
			}
		}
		p, err := w.PrepareCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cm.Commit(ctx, epoch, []commit.Payload{p}, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for row, err := range warehouse.Rows(ctx, cm.Table()) {
		if err != nil {
			t.Fatalf("reading the table back: %v", err)
		}
		id, v := row[0].(int64), row[1].(string)
		want := fmt.Sprint("v1-", id)
		if id%2 == 0 {
			want = fmt.Sprint("v2-", id)
		}
		if id == 0 || v != want {
			t.Fatalf("row %v, want id %d = %q (and no id 0)", row, id, want)
		}
		n++
	}
	if n != 99 {
		t.Fatalf("%d rows read back, want 99", n)
	}
}

// A format v3 table is refused with the reason (its position deletes must
// be deletion vectors), not written with v2 position-delete files.
func TestRefusesV3(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	tbl, _, err := wh.LoadOrCreate(ctx, table.Identifier{"db", "v3"}, warehouse.TableSpec{Schema: schema, Properties: iceberg.Properties{"format-version": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Metadata().Version() != 3 {
		t.Fatalf("created a version %d table", tbl.Metadata().Version())
	}
	_, err = deltawriter.New(ctx, tbl, deltawriter.Options{SpillDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "deletion vectors") {
		t.Fatalf("v3 table: got %v, want a refusal naming deletion vectors", err)
	}
}
