package postgres_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/postgres"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// Replicating a PostgreSQL database's tables into Iceberg tables until
// Ctrl-C (what icesink run --postgres does). It needs a server with
// wal_level=logical, so it is compiled, not run.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	wh, err := warehouse.Open(ctx, "./wh", warehouse.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer wh.Close()
	res, err := postgres.Run(ctx, postgres.RunConfig{
		Source: postgres.Config{URL: "postgres://icesink@localhost/shop", Publication: "icesink", Slot: "icesink", Tables: []string{"public.*"}},
		Sink: sink.Config{Loader: wh.Catalog, SinkID: "shop", StateDir: "./state", EvolveSchema: true,
			Writer: deltawriter.Options{MemoryLimit: 256 << 20}},
		Warehouse: wh,
		Table: func(n postgres.TableName) (table.Identifier, error) {
			return table.Identifier{"shop", n.Table}, nil
		},
	})
	for _, r := range res {
		log.Printf("%s -> %v: %d changes, %d commits", r.Source, r.Ident, r.Changes, r.Commits)
	}
	if err != nil {
		log.Fatal(err)
	}
}
