package sink_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// The whole pipeline the icesink command runs, as a library: a changelog
// into a table, with a memory budget per writer, committed exactly once
// (a second Run over the same input continues after what is committed),
// and read back.
func ExampleRun() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "icesink-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	wh, err := warehouse.Open(ctx, dir, warehouse.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer wh.Close()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "status", Type: iceberg.PrimitiveTypes.String})
	ident := table.Identifier{"shop", "orders"}
	if _, _, err := wh.LoadOrCreate(ctx, ident, warehouse.TableSpec{Schema: schema}); err != nil {
		log.Fatal(err)
	}
	input := `{"op":"+I","data":{"id":1,"status":"new"}}
{"op":"+I","data":{"id":2,"status":"new"}}
{"op":"+U","data":{"id":1,"status":"paid"}}
{"op":"-D","data":{"id":2}}
`
	dec, err := changelog.NewDecoder(strings.NewReader(input), changelog.ChangelogJSON, schema)
	if err != nil {
		log.Fatal(err)
	}
	res, err := sink.Run(ctx, sink.Config{Loader: wh.Catalog, Ident: ident, SinkID: "example", Writers: 2,
		StateDir: filepath.Join(dir, "state"), KeyIndexDir: "-"}, dec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d changes, input line %d committed\n", res.Changes, res.Committed.Line)
	tbl, err := wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		log.Fatal(err)
	}
	for row, err := range warehouse.Rows(ctx, tbl) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(row)
	}
	// Output:
	// 4 changes, input line 4 committed
	// [1 paid]
}
