package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sessionParams are the settings every connection runs with, so that
// values print in the forms the decoders read.
var sessionParams = map[string]string{
	"TimeZone": "UTC", "DateStyle": "ISO", "IntervalStyle": "iso_8601", "bytea_output": "hex", "extra_float_digits": "3",
}

// connConfig parses url with the session settings; replication opens a
// logical replication connection. The password comes from the URL,
// PGPASSWORD or a password file (PGPASSFILE, ~/.pgpass), as libpq's do.
func connConfig(url string, replication bool) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("--postgres: %w", err)
	}
	for k, v := range sessionParams {
		cfg.RuntimeParams[k] = v
	}
	if replication {
		cfg.RuntimeParams["replication"] = "database"
	}
	return cfg, nil
}

// connect opens a regular connection.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	pc, err := connConfig(url, false)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("--postgres: %w", err)
	}
	cfg.Config = *pc
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	return conn, nil
}

// TableName is a source table's schema-qualified name.
type TableName struct{ Schema, Table string }

func (n TableName) String() string { return n.Schema + "." + n.Table }

// quoted is n as an SQL identifier.
func (n TableName) quoted() string {
	return pgx.Identifier{n.Schema, n.Table}.Sanitize()
}

// ParseTableName parses schema.table (a name without a schema is in
// public).
func ParseTableName(s string) (TableName, error) {
	sch, tbl, ok := strings.Cut(s, ".")
	if !ok {
		sch, tbl = "public", s
	}
	if sch == "" || tbl == "" || strings.Contains(tbl, ".") {
		return TableName{}, fmt.Errorf("table %q: want schema.table", s)
	}
	return TableName{sch, tbl}, nil
}

// ensurePublication creates publication pub for tables (all tables of a
// schema for "schema.*") when it does not exist, and returns the tables
// it publishes.
func ensurePublication(ctx context.Context, conn *pgx.Conn, pub string, tables []string) ([]TableName, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
		return nil, fmt.Errorf("reading publication %s: %w", pub, err)
	}
	if !exists {
		if len(tables) == 0 {
			return nil, fmt.Errorf("publication %s does not exist: create it (CREATE PUBLICATION %s FOR TABLE ...) or give --pg-tables to have it created", pub, pub)
		}
		var list, schemas []string
		for _, t := range tables {
			if s, ok := strings.CutSuffix(t, ".*"); ok {
				schemas = append(schemas, pgx.Identifier{s}.Sanitize())
				continue
			}
			n, err := ParseTableName(t)
			if err != nil {
				return nil, fmt.Errorf("--pg-tables: %w", err)
			}
			list = append(list, n.quoted())
		}
		var parts []string
		if len(list) > 0 {
			parts = append(parts, "TABLE "+strings.Join(list, ", "))
		}
		if len(schemas) > 0 {
			parts = append(parts, "TABLES IN SCHEMA "+strings.Join(schemas, ", "))
		}
		sql := "CREATE PUBLICATION " + pgx.Identifier{pub}.Sanitize() + " FOR " + strings.Join(parts, ", ")
		if _, err := conn.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("creating publication %s: %w", pub, err)
		}
	}
	return publicationTables(ctx, conn, pub)
}

// publicationTables lists the tables pub publishes.
func publicationTables(ctx context.Context, conn *pgx.Conn, pub string) ([]TableName, error) {
	rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2`, pub)
	if err != nil {
		return nil, fmt.Errorf("listing the tables of publication %s: %w", pub, err)
	}
	var out []TableName
	for rows.Next() {
		var n TableName
		if err := rows.Scan(&n.Schema, &n.Table); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// sourceTable is what icesink knows of a source table: its columns and
// its Iceberg schema.
type sourceTable struct {
	name TableName
	// cols are the columns as the stream now sends them (the stream's
	// goroutine owns them after Open).
	cols   []column
	keys   map[string]bool // the key columns, by name
	schema *iceberg.Schema // of the columns at Open, for a new table
}

// errNoKey is a table without a primary key (and no key given).
var errNoKey = errors.New("has no primary key")

// describe reads n's columns, key and replica identity. A table the sink
// cannot keep exact is refused, saying why and how to fix it.
func describe(ctx context.Context, conn *pgx.Conn, n TableName, key []string) (*sourceTable, error) {
	rows, err := conn.Query(ctx, `
SELECT a.attname, a.atttypid, a.atttypmod, t.typname, a.attnotnull,
       coalesce(a.attnum = ANY(i.indkey), false), c.relreplident, t.typstorage
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace s ON s.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE s.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, n.Schema, n.Table)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", n, err)
	}
	t := &sourceTable{name: n}
	var identity byte
	var toasted []string
	for rows.Next() {
		var c column
		var oid uint32
		var ident, storage string
		if err := rows.Scan(&c.name, &oid, &c.typmod, &c.typname, &c.notNull, &c.key, &ident, &storage); err != nil {
			return nil, fmt.Errorf("reading the columns of %s: %w", n, err)
		}
		c.oid, identity = oid, ident[0]
		if toastable(storage, oid, c.typmod) {
			toasted = append(toasted, c.name)
		}
		c.mapType()
		t.cols = append(t.cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", n, err)
	}
	if len(t.cols) == 0 {
		return nil, fmt.Errorf("table %s: not found, or it has no columns", n)
	}
	if len(key) > 0 {
		hasPK := false
		for i := range t.cols {
			hasPK = hasPK || t.cols[i].key
			t.cols[i].key = false
		}
		if !hasPK && identity != 'f' && identity != 'i' {
			// Without a primary key PostgreSQL sends updates and deletes
			// only with the whole old row.
			return nil, fmt.Errorf("table %s has no primary key, and its replica identity is not FULL: PostgreSQL refuses its updates and deletes in a publication, and sends no old row. Run ALTER TABLE %s REPLICA IDENTITY FULL", n, n.quoted())
		}
		for _, k := range key {
			i := t.index(k)
			if i < 0 {
				return nil, fmt.Errorf("table %s: key column %q does not exist", n, k)
			}
			t.cols[i].key = true
		}
	}
	var fields []iceberg.NestedField
	var ids []int
	t.keys = map[string]bool{}
	for i, c := range t.cols {
		if c.key {
			t.keys[c.name] = true
		}
		f := iceberg.NestedField{ID: i + 1, Name: c.name, Type: c.typ, Required: c.notNull || c.key}
		if c.key {
			ids = append(ids, f.ID)
		}
		fields = append(fields, f)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("table %s %w: add one (ALTER TABLE %s ADD PRIMARY KEY (...)), or name its key columns for its table in --tables (NS.NAME: {key: [col, ...]})", n, errNoKey, n.quoted())
	}
	if identity != 'f' && len(toasted) > 0 {
		// An update that leaves a large (TOASTed) value alone sends no
		// value for it, and without the old row the sink cannot know it.
		return nil, fmt.Errorf("table %s has columns whose large values PostgreSQL does not resend when an update leaves them unchanged (%s), and its replica identity is not FULL: the sink could not know those values. Run ALTER TABLE %s REPLICA IDENTITY FULL", n, strings.Join(toasted, ", "), n.quoted())
	}
	t.schema = iceberg.NewSchemaWithIdentifiers(0, ids, fields...)
	return t, nil
}

// index is the position of column name (-1: none).
func (t *sourceTable) index(name string) int {
	for i, c := range t.cols {
		if c.name == name {
			return i
		}
	}
	return -1
}

// toastable reports whether a column's values can be stored out of line
// (TOASTed), which an update that leaves them unchanged does not resend:
// storage extended or external, except varchar(n) and char(n) of at most
// 255 characters (at most 1 KiB, below the 2 KiB at which PostgreSQL
// moves values out of a row).
func toastable(storage string, oid uint32, typmod int32) bool {
	if storage != "x" && storage != "e" {
		return false
	}
	if (oid == oidVarchar || oid == oidBPChar) && typmod >= 4 && typmod-4 <= 255 {
		return false
	}
	return true
}
