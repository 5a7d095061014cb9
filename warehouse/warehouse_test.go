package warehouse_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/warehouse"
)

var schema = iceberg.NewSchemaWithIdentifiers(0, []int{1},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})

// A warehouse folder whose name holds URI metacharacters gets its own
// catalog.db in that folder, not one at a truncated path.
func TestOpenPathWithURIMetacharacters(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	for _, name := range []string{"a#1", "a#2", "b?x=1", "c%20d"} {
		dir := filepath.Join(base, name)
		wh, err := warehouse.Open(ctx, dir, warehouse.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := wh.LoadOrCreate(ctx, table.Identifier{"db", "t"}, warehouse.TableSpec{Schema: schema}); err != nil || !created {
			t.Fatalf("%s: LoadOrCreate = created %v, %v; want a new table", name, created, err)
		}
		wh.Close()
		if _, err := os.Stat(filepath.Join(dir, "catalog.db")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestLoadOrCreateChecksSchema(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	ident := table.Identifier{"db", "t"}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{}); err == nil {
		t.Error("creating a table without a schema succeeded")
	}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	other := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.String, Required: true})
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: other}); err == nil {
		t.Error("a different schema for an existing table was accepted")
	}
	if _, created, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{}); err != nil || created {
		t.Errorf("loading the existing table: created %v, %v", created, err)
	}
}
