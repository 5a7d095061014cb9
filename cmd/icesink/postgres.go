package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/postgres"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

// pgFlags read a PostgreSQL database by logical replication.
type pgFlags struct {
	url, publication, slot, tables string
	chunk                          string // --pg-snapshot-chunk
	chunkBytes                     int64  // set by check
	refresh                        time.Duration
}

func (f *pgFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "postgres", "", "read the tables of a PostgreSQL database at `URL` (postgres://USER@HOST:PORT/DB?sslmode=verify-full&sslrootcert=FILE) by logical replication, each into its own table (--table-template, default {schema}.{table}); the password comes from PGPASSWORD or a password file (PGPASSFILE, ~/.pgpass), never from the URL. The server needs wal_level=logical, the role REPLICATION and SELECT on the tables")
	fs.StringVar(&f.publication, "publication", "icesink", "with --postgres: the publication `NAME` whose tables are read (created for --pg-tables when missing)")
	fs.StringVar(&f.slot, "slot", "icesink", "with --postgres: the logical replication slot `NAME` (pgoutput); created on the first run, with the snapshot the tables are first read in")
	fs.StringVar(&f.chunk, "pg-snapshot-chunk", "64MiB", "with --postgres: how much of a table (`SIZE` of its heap) one query of its initial snapshot reads; a commit may come between two, and a run stopped or killed mid-snapshot goes on from the first chunk not committed")
	fs.DurationVar(&f.refresh, "pg-publication-refresh", time.Minute, "with --postgres: look for tables that joined the publication every `DURATION` (a table created in a published schema, ALTER PUBLICATION ... ADD TABLE, a refused table fixed): every table commits what it read, and the new one is read in a snapshot of its own, then streamed; 0: only at start")
	fs.StringVar(&f.tables, "pg-tables", "", "with --postgres: the tables `SCHEMA.T1,SCHEMA.T2,...` (SCHEMA.* for all tables of a schema) the publication is created for when it does not exist")
}

func (f *pgFlags) enabled() bool { return f.url != "" }

// check refuses what a PostgreSQL run cannot take.
func (f *pgFlags) check(fs *flag.FlagSet, tf *tableFlags, sf *specFlags, inputGiven, kafkaGiven bool, coordinator string) error {
	if !f.enabled() {
		for _, name := range []string{"publication", "slot", "pg-tables", "pg-snapshot-chunk", "pg-publication-refresh"} {
			if isSet(fs, name) {
				return fmt.Errorf("%w: --%s needs --postgres", errUsage, name)
			}
		}
		return nil
	}
	u, err := url.Parse(f.url)
	if err != nil {
		return fmt.Errorf("%w: --postgres: %v", errUsage, err)
	}
	if _, ok := u.User.Password(); ok || u.Query().Get("password") != "" {
		return fmt.Errorf("%w: --postgres: the URL holds a password, which the process list shows to every user: put it in PGPASSWORD or a password file (PGPASSFILE, ~/.pgpass) and drop it from the URL", errUsage)
	}
	if f.refresh < 0 {
		return fmt.Errorf("%w: --pg-publication-refresh must not be negative", errUsage)
	}
	if f.chunkBytes, err = parseSize(f.chunk); err != nil || f.chunkBytes <= 0 {
		return fmt.Errorf("%w: --pg-snapshot-chunk %q: want a size such as 64MiB", errUsage, f.chunk)
	}
	switch {
	case tf.warehouse == "":
		return fmt.Errorf("%w: --warehouse is required", errUsage)
	case tf.table != "":
		return fmt.Errorf("%w: --postgres writes each source table into its own table (--table-template); drop --table", errUsage)
	case sf.schema != "":
		return fmt.Errorf("%w: --postgres creates each table from its source table's columns; drop --schema", errUsage)
	case inputGiven || kafkaGiven:
		return fmt.Errorf("%w: --postgres is the input; drop --input and --kafka-brokers", errUsage)
	case coordinator != "":
		return fmt.Errorf("%w: --postgres runs in one process; drop --coordinator", errUsage)
	}
	return nil
}

// pgTableName spells a source table's Iceberg table from template:
// {schema} and {table} (and {db}, the database).
func pgTableName(template, db string, n postgres.TableName) (table.Identifier, error) {
	name := strings.NewReplacer("{schema}", n.Schema, "{table}", n.Table, "{db}", db).Replace(template)
	if strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("--table-template %q: with --postgres only {schema}, {table} and {db} are known", template)
	}
	return warehouse.ParseIdent(name)
}

// runPostgres replicates the database's published tables until ctx ends
// (SIGINT, SIGTERM: every table commits what it read, at a transaction
// boundary, and the run exits 0).
func runPostgres(ctx context.Context, f pgFlags, wh *warehouse.Warehouse, base sink.Config, template, whDir string, interval time.Duration, spec warehouse.TableSpec, overrides tableOverrides, stdout io.Writer, quiet bool) error {
	if template == "" {
		template = "{schema}.{table}"
	}
	u, _ := url.Parse(f.url)
	db := strings.TrimPrefix(u.Path, "/")
	if _, err := pgTableName(template, db, postgres.TableName{Schema: "s", Table: "t"}); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var err error
	if base.StateDir, err = databaseStateDir(whDir, base.StateDir, base.SinkID); err != nil {
		return err
	}
	base.BarrierInterval = interval
	var tables []string
	if f.tables != "" {
		tables = strings.Split(f.tables, ",")
	}
	res, err := postgres.Run(ctx, postgres.RunConfig{
		Source: postgres.Config{URL: f.url, Publication: f.publication, Slot: f.slot, Tables: tables, Logger: base.Logger, SnapshotChunk: f.chunkBytes, RefreshInterval: cmp.Or(f.refresh, -1),
			// --tables: key: names the key of a table without a primary key.
			Keys: func(n postgres.TableName) []string {
				ident, err := pgTableName(template, db, n)
				if err != nil {
					return nil
				}
				return overrides[strings.Join(ident, ".")].Key
			}},
		Sink: base, Warehouse: wh, Spec: warehouse.TableSpec{Partition: spec.Partition, Properties: spec.Properties},
		Table: func(n postgres.TableName) (table.Identifier, error) { return pgTableName(template, db, n) },
		Override: func(ident table.Identifier, spec *warehouse.TableSpec) error {
			_, err := overrides.apply(strings.Join(ident, "."), spec)
			return err
		},
	})
	if !quiet {
		for _, r := range res {
			if r.Err == nil {
				fmt.Fprintf(stdout, "table %s (source %s): %d changes, %d commits, epoch %d committed\n",
					strings.Join(r.Ident, "."), r.Source, r.Changes, r.Commits, r.Committed.Epoch)
			}
		}
	}
	return budgetUsage(err)
}
