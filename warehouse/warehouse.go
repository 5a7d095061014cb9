// Package warehouse opens the catalogs icesink writes through: the embedded
// default (an iceberg-go SQL catalog on SQLite at DIR/catalog.db, table data
// under DIR) and a shared SQL catalog on PostgreSQL. It also reads tables
// back as rows through iceberg-go's scanner. It knows nothing of upserts.
package warehouse

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // s3:// table IO
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver
)

// CatalogName is the name of the catalog icesink opens.
const CatalogName = "icesink"

// Options configure Open.
type Options struct {
	// CatalogURI names the SQL catalog: empty for the embedded SQLite
	// catalog at DIR/catalog.db, sqlite:FILE for an SQLite catalog
	// elsewhere (required with an object-storage warehouse), or a
	// postgres:// URL.
	CatalogURI string
	// Properties are the catalog's and its file IO's properties: for an
	// s3:// warehouse s3.endpoint, s3.region, s3.access-key-id, ...
	// (iceberg-go's io.S3* keys; credentials otherwise come from the AWS
	// environment: AWS_ACCESS_KEY_ID, AWS_PROFILE, ...).
	Properties iceberg.Properties
}

// IsObjectStore reports whether a warehouse location is object storage
// (s3://, gs://, abfs://, ...) rather than a local folder.
func IsObjectStore(location string) bool {
	scheme, _, ok := strings.Cut(location, "://")
	return ok && scheme != "file" && !strings.ContainsAny(scheme, `/\`)
}

// Warehouse is an open catalog with its warehouse location.
type Warehouse struct {
	Catalog  catalog.Catalog // iceberg-go's SQL or REST catalog
	Location string          // file:// URL of the warehouse folder, or its s3:// (...) location
	db       *sql.DB         // nil for a REST catalog
}

// ErrUnsupported is returned for a warehouse location icesink cannot use.
var ErrUnsupported = errors.New("not supported")

// Open opens (creating when absent) the warehouse in dir: a local folder,
// or an object-storage location (s3://BUCKET/PATH) whose catalog
// opts.CatalogURI names.
func Open(ctx context.Context, dir string, opts Options) (*Warehouse, error) {
	var abs, loc string
	if IsObjectStore(dir) {
		scheme, _, _ := strings.Cut(dir, "://")
		switch scheme {
		case "s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs":
		default:
			return nil, fmt.Errorf("warehouse %s: %w: icesink writes to local folders, s3://, gs:// and abfs:// locations", dir, ErrUnsupported)
		}
		if opts.CatalogURI == "" {
			return nil, fmt.Errorf("warehouse %s: an object-storage warehouse needs a catalog: give --catalog-uri postgres://... or sqlite:LOCAL-FILE", dir)
		}
		loc = strings.TrimSuffix(dir, "/")
	} else {
		var err error
		if abs, err = filepath.Abs(dir); err != nil {
			return nil, fmt.Errorf("warehouse %s: %w", dir, err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, fmt.Errorf("warehouse %s: %w", dir, err)
		}
		loc = (&url.URL{Scheme: "file", Path: abs}).String()
	}
	props := iceberg.Properties{}
	for k, v := range opts.Properties {
		props[k] = v
	}
	props["warehouse"] = loc
	var db *sql.DB
	var dialect sqlcat.SupportedDialect
	var err error
	switch {
	case strings.HasPrefix(opts.CatalogURI, "http://"), strings.HasPrefix(opts.CatalogURI, "https://"):
		// An Iceberg REST catalog; the warehouse location is the one
		// asked for, its IO properties go along.
		cat, err := rest.NewCatalog(ctx, CatalogName, opts.CatalogURI, rest.WithWarehouseLocation(loc), rest.WithAdditionalProps(props))
		if err != nil {
			return nil, fmt.Errorf("warehouse %s: opening the REST catalog %s: %w", dir, opts.CatalogURI, err)
		}
		return &Warehouse{Catalog: cat, Location: loc}, nil
	case strings.HasPrefix(opts.CatalogURI, "sqlite:"):
		file, err := filepath.Abs(strings.TrimPrefix(strings.TrimPrefix(opts.CatalogURI, "sqlite:"), "//"))
		if err != nil {
			return nil, fmt.Errorf("warehouse %s: catalog %s: %w", dir, opts.CatalogURI, err)
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return nil, fmt.Errorf("warehouse %s: catalog %s: %w", dir, opts.CatalogURI, err)
		}
		if db, err = openSQLite(filepath.Dir(file), file); err != nil {
			return nil, fmt.Errorf("warehouse %s: catalog %s: %w", dir, opts.CatalogURI, err)
		}
		dialect = sqlcat.SQLite
	case opts.CatalogURI == "":
		// SQLite says only "unable to open database file (14)" when it
		// cannot create its journal: name the folder and the cause.
		db, err = openSQLite(abs, filepath.Join(abs, "catalog.db"))
		if err != nil {
			return nil, fmt.Errorf("warehouse %s: %w", dir, err)
		}
		dialect = sqlcat.SQLite
	case strings.HasPrefix(opts.CatalogURI, "postgres://"), strings.HasPrefix(opts.CatalogURI, "postgresql://"):
		db, err = sql.Open("pgx", opts.CatalogURI)
		dialect = sqlcat.Postgres
	default:
		return nil, fmt.Errorf("warehouse %s: catalog URI %q: want empty (embedded SQLite), sqlite:FILE, postgres:// or an Iceberg REST catalog's http(s):// URL", dir, opts.CatalogURI)
	}
	if err != nil {
		return nil, fmt.Errorf("warehouse %s: opening the catalog database: %w", dir, err)
	}
	if err := ping(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("warehouse %s: connecting to the catalog database: %w", dir, err)
	}
	cat, err := sqlcat.NewCatalog(CatalogName, db, dialect, props)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("warehouse %s: opening the SQL catalog: %w", dir, err)
	}
	return &Warehouse{Catalog: cat, Location: loc, db: db}, nil
}

// ping connects to the catalog database. A new SQLite connection switches
// the file to WAL, which needs a moment of exclusive access: another
// process opening the same catalog then sees SQLITE_BUSY before the busy
// timeout applies, so that is retried for up to 10 s.
func ping(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := db.PingContext(ctx)
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// openSQLite opens the SQLite catalog database file in dir.
func openSQLite(dir, file string) (*sql.DB, error) {
	// SQLite says only "unable to open database file (14)" when it
	// cannot create its journal: name the folder and the cause.
	if err := checkWritable(dir); err != nil {
		return nil, fmt.Errorf("the embedded catalog needs a writable folder: %w", err)
	}
	// The path is a URI path: '#', '?' and '%' must be escaped.
	esc := strings.NewReplacer("%", "%25", "#", "%23", "?", "%3f").Replace(file)
	// Transactions take the write lock at BEGIN (_txlock=immediate): a
	// deferred one that read before another connection committed cannot
	// upgrade (SQLITE_BUSY_SNAPSHOT, which no busy timeout waits out), as
	// when many sinks of one process create and commit tables at once.
	return sql.Open("sqlite", "file:"+esc+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
}

// checkWritable reports why dir is not writable, if it is not.
func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".icesink-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Close closes the catalog database.
func (w *Warehouse) Close() error {
	if w.db == nil {
		return nil
	}
	return w.db.Close()
}

// ParseIdent parses "ns.name" (the last dot separates the table name).
// Both parts become folder names under the warehouse, so CheckName
// applies to each.
func ParseIdent(s string) (table.Identifier, error) {
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || i == len(s)-1 {
		return nil, fmt.Errorf("table name %q: want NAMESPACE.NAME", s)
	}
	ident := table.Identifier{s[:i], s[i+1:]}
	for _, part := range ident {
		if err := CheckName(part); err != nil {
			return nil, fmt.Errorf("table name %q: %w", s, err)
		}
	}
	return ident, nil
}

// CheckName refuses a name that becomes part of a file path (a namespace,
// a table name, a sink id) and could lead out of its folder: path
// separators, "..", control characters, and '%', since iceberg-go decodes
// file locations as URLs (so "%2e%2e%2f" is "../"), and '?' and '#', which end
// a URL's path.
func CheckName(s string) error {
	switch {
	case s == "":
		return errors.New("empty name")
	case strings.ContainsAny(s, `/\%`):
		return fmt.Errorf("name %q holds a '/', '\\' or '%%', which would lead out of its folder", s)
	case strings.Contains(s, ".."):
		return fmt.Errorf("name %q holds \"..\", which would lead out of its folder", s)
	case strings.ContainsAny(s, "?#"):
		return fmt.Errorf("name %q holds a '?' or '#', which would end the path of its location (iceberg-go parses locations as URLs)", s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("name %q holds a control character", s)
		}
	}
	return nil
}

// TableSpec describes a table to create.
type TableSpec struct {
	Schema     *iceberg.Schema
	Partition  *iceberg.PartitionSpec // nil: unpartitioned
	Properties iceberg.Properties
}

// LoadOrCreate loads the table ident, creating it (and its namespace) from
// spec when absent. When the table exists and spec.Schema is set, the
// schemas must match (fields and identifier fields), or spec.Schema be one
// the table's schema evolved from.
func (w *Warehouse) LoadOrCreate(ctx context.Context, ident table.Identifier, spec TableSpec) (*table.Table, bool, error) {
	tbl, err := w.Catalog.LoadTable(ctx, ident)
	if err == nil {
		if spec.Schema != nil {
			diff := schemaDiff(tbl.Schema(), spec.Schema)
			for _, old := range tbl.Metadata().Schemas() {
				if diff != "" && schemaDiff(old, spec.Schema) == "" {
					diff = "" // the table evolved from the given schema
				}
			}
			if diff != "" {
				return nil, false, fmt.Errorf("table %s exists with another schema than the given one:\n%s", strings.Join(ident, "."), diff)
			}
		}
		return tbl, false, nil
	}
	if !errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, false, fmt.Errorf("loading table %s: %w", strings.Join(ident, "."), err)
	}
	if spec.Schema == nil {
		return nil, false, fmt.Errorf("table %s does not exist; give its schema (--schema) to create it", strings.Join(ident, "."))
	}
	ns := catalog.NamespaceFromIdent(ident)
	if err := w.Catalog.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return nil, false, fmt.Errorf("creating namespace %s: %w", strings.Join(ns, "."), err)
	}
	props := iceberg.Properties{
		"format-version": "2",
		// A long-running sink commits often: keep the metadata folder to
		// the newest 100 metadata files instead of one per commit forever.
		table.MetadataDeleteAfterCommitEnabledKey: "true",
		table.MetadataPreviousVersionsMaxKey:      "100",
	}
	for k, v := range spec.Properties {
		props[k] = v
	}
	opts := []catalog.CreateTableOpt{catalog.WithProperties(props)}
	if spec.Partition != nil {
		opts = append(opts, catalog.WithPartitionSpec(spec.Partition))
	}
	tbl, err = w.Catalog.CreateTable(ctx, ident, spec.Schema, opts...)
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		// Another process created it since the load: use theirs, if it
		// has the same schema.
		return w.LoadOrCreate(ctx, ident, TableSpec{Schema: spec.Schema})
	}
	if err != nil {
		return nil, false, fmt.Errorf("creating table %s: %w", strings.Join(ident, "."), err)
	}
	return tbl, true, nil
}

// schemaDiff lists, field by field, how the given schema differs from the
// table's ("" when they match: the same fields and identifier fields).
func schemaDiff(table, given *iceberg.Schema) string {
	var b strings.Builder
	byID := func(s *iceberg.Schema) map[int]iceberg.NestedField {
		m := map[int]iceberg.NestedField{}
		for _, f := range s.Fields() {
			m[f.ID] = f
		}
		return m
	}
	tf, gf := byID(table), byID(given)
	for _, f := range table.Fields() {
		g, ok := gf[f.ID]
		switch {
		case !ok:
			fmt.Fprintf(&b, "  field %d %q: in the table, not in the given schema\n", f.ID, f.Name)
		case g.Name != f.Name || !g.Type.Equals(f.Type) || g.Required != f.Required:
			fmt.Fprintf(&b, "  field %d: table %s, given %s\n", f.ID, f, g)
		}
	}
	for _, g := range given.Fields() {
		if _, ok := tf[g.ID]; !ok {
			fmt.Fprintf(&b, "  field %d %q: in the given schema, not in the table\n", g.ID, g.Name)
		}
	}
	if !slices.Equal(table.IdentifierFieldIDs, given.IdentifierFieldIDs) {
		fmt.Fprintf(&b, "  identifier fields: table %v, given %v\n", table.IdentifierFieldIDs, given.IdentifierFieldIDs)
	}
	if b.Len() == 0 && len(table.Fields()) == len(given.Fields()) {
		for i, f := range table.Fields() {
			if given.Fields()[i].ID != f.ID {
				fmt.Fprintf(&b, "  field order: table %v, given %v\n", table, given)
				break
			}
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
