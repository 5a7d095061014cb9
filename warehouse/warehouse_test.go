package warehouse_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 2, Name: "note", Type: iceberg.PrimitiveTypes.String})
	_, _, err = wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: other})
	// The difference is shown field by field.
	for _, want := range []string{"field 1: table 1: id: required long, given 1: id: required string", `field 2 "note": in the given schema, not in the table`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a different schema for an existing table: got %v, want it to say %q", err, want)
		}
	}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})}); err != nil {
		t.Errorf("the same schema refused: %v", err)
	}
	if _, created, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{}); err != nil || created {
		t.Errorf("loading the existing table: created %v, %v", created, err)
	}
}

// Table names that would lead out of the warehouse are refused, also when
// URL-encoded (iceberg-go decodes file locations: "%2e%2e%2f" wrote table
// data and metadata outside the warehouse).
func TestParseIdentRefusesEscapes(t *testing.T) {
	for _, s := range []string{"db.%2e%2e%2fx", "%2e%2e.t", "db.a/b", `db.a\b`, "..db.t", "db.\x00", "db.t?x=1", "db.t#frag", "d?b.t"} {
		if id, err := warehouse.ParseIdent(s); err == nil {
			t.Errorf("ParseIdent(%q) = %v, want an error", s, id)
		}
	}
	for _, s := range []string{"db.t", "a.b.orders", "db.t-1_x"} {
		if _, err := warehouse.ParseIdent(s); err != nil {
			t.Errorf("ParseIdent(%q): %v", s, err)
		}
	}
}

// Two processes creating the same table at once: the loser loads the
// winner's table instead of failing with "table already exists".
func TestLoadOrCreateConcurrently(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const n = 4
	uuids := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			wh, err := warehouse.Open(ctx, dir, warehouse.Options{})
			if err != nil {
				errs <- err
				return
			}
			defer wh.Close()
			tbl, _, err := wh.LoadOrCreate(ctx, table.Identifier{"db", "t"}, warehouse.TableSpec{Schema: schema})
			if err != nil {
				errs <- err
				return
			}
			uuids <- tbl.Metadata().TableUUID().String()
		}()
	}
	seen := map[string]bool{}
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case u := <-uuids:
			seen[u] = true
		}
	}
	if len(seen) != 1 {
		t.Fatalf("%d different tables created: %v", len(seen), seen)
	}
}

// A read-only warehouse folder is named, with the cause, instead of
// SQLite's "unable to open database file (14)". As root, a folder is made
// read-only by a read-only bind mount (chmod does not stop root).
func TestReadOnlyWarehouseNamed(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		if out, err := exec.Command("mount", "--bind", "-o", "ro", dir, dir).CombinedOutput(); err != nil {
			t.Skipf("cannot make a read-only folder as this user: mount: %v %s", err, out)
		}
		defer exec.Command("umount", dir).Run()
	}
	_, err := warehouse.Open(context.Background(), dir, warehouse.Options{})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("got %v, want an error naming %s and why", err, dir)
	}
	t.Log(err)
}

// An object-store warehouse needs a catalog named by URI, an unknown
// scheme is refused by name, and nothing is created locally (before,
// "s3://b/w" became a local folder "s3:/b/w").
func TestObjectStoreWarehouseRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, loc := range []string{"s3://bucket/wh", "gs://b/w", "abfss://c@a.dfs.core.windows.net/w"} {
		_, err := warehouse.Open(context.Background(), loc, warehouse.Options{})
		if err == nil || !strings.Contains(err.Error(), loc) || !strings.Contains(err.Error(), "--catalog-uri") {
			t.Errorf("%s: got %v, want an error naming it and --catalog-uri", loc, err)
		}
	}
	if _, err := warehouse.Open(context.Background(), "ftp://h/w", warehouse.Options{CatalogURI: "sqlite:x.db"}); !errors.Is(err, warehouse.ErrUnsupported) {
		t.Errorf("ftp://: got %v, want ErrUnsupported", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("created %v", ents)
	}
}

// TestManyTablesOfOneProcess: many sinks of one process (icesink run
// --table-template) create tables and commit to them at once through one
// embedded catalog; none fails with SQLite's "database is locked" (a
// deferred transaction that cannot upgrade, SQLITE_BUSY_SNAPSHOT).
func TestManyTablesOfOneProcess(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		go func() {
			tbl, _, err := wh.LoadOrCreate(ctx, table.Identifier{"db", fmt.Sprintf("t%d", i)}, warehouse.TableSpec{Schema: schema})
			for j := 0; err == nil && j < 3; j++ {
				tx := tbl.NewTransaction()
				if err = tx.SetProperties(iceberg.Properties{"k": fmt.Sprint(j)}); err == nil {
					tbl, err = tx.Commit(ctx)
				}
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
