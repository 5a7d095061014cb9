package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/icesink/icesink/warehouse"
)

// TestTypes: each supported PostgreSQL type, read from a real server in
// the snapshot (row 1) and from the stream (row 2), lands in Iceberg as
// the type and value documented in types.go.
func TestTypes(t *testing.T) {
	f := newFixture(t, 2)
	f.exec(`CREATE SCHEMA app`)
	f.exec(`CREATE TYPE app.mood AS ENUM ('sad', 'happy')`)
	f.exec(`CREATE TABLE app.types (id integer PRIMARY KEY, s smallint, i integer, b bigint, n numeric(10,3), nu numeric, r real,
		d double precision, ok boolean, tx text, vc varchar(10), ch char(3), by bytea, dt date, tm time, ts timestamp,
		tz timestamptz, u uuid, j json, jb jsonb, m app.mood, arr integer[], iv interval)`)
	f.exec(`ALTER TABLE app.types REPLICA IDENTITY FULL`)
	const values = `(%d, 7, -3, 9000000000000000, 12.5, 3.14159265358979323846264338327950288419716939937510, 1.5, 2.25, true, 'héllo', 'v', 'ab',
		'\x00ff', '2024-02-29', '13:45:30.123456', '2024-02-29 13:45:30.5', '2024-02-29 13:45:30.5+02',
		'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": 1}', '{"a": 1}', 'happy', '{1,2,3}', '1 year 2 months 3 days 04:05:06')`
	f.exec(`INSERT INTO app.types VALUES ` + sprintf(values, 1))
	f.exec(`INSERT INTO app.types (id) VALUES (3)`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := f.config(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, cfg)
		done <- err
	}()
	f.exec(`INSERT INTO app.types VALUES ` + sprintf(values, 2))
	target := f.lsn()
	ident := table.Identifier{"pg", "app_types"}
	deadline := time.Now().Add(60 * time.Second)
	for f.committedLSN(ident) < target {
		if time.Now().After(deadline) {
			t.Fatalf("the table holds %s, the server is at %s", f.committedLSN(ident), target)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tbl, err := f.wh.Catalog.LoadTable(context.Background(), ident)
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []iceberg.Type{iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.Int32, iceberg.PrimitiveTypes.Int64,
		iceberg.DecimalTypeOf(10, 3), iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.Float32, iceberg.PrimitiveTypes.Float64,
		iceberg.PrimitiveTypes.Bool, iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.String,
		iceberg.PrimitiveTypes.Binary, iceberg.PrimitiveTypes.Date, iceberg.PrimitiveTypes.Time, iceberg.PrimitiveTypes.Timestamp,
		iceberg.PrimitiveTypes.TimestampTz, iceberg.PrimitiveTypes.UUID, iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.String,
		iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.String}
	for i, fl := range tbl.Schema().Fields() {
		if !fl.Type.Equals(wantTypes[i]) {
			t.Errorf("column %s is %s, want %s", fl.Name, fl.Type, wantTypes[i])
		}
	}
	ts := time.Date(2024, 2, 29, 13, 45, 30, 500_000_000, time.UTC)
	want := func(id int32) []any {
		return []any{id, int32(7), int32(-3), int64(9000000000000000), decimal128.FromI64(12500),
			"3.14159265358979323846264338327950288419716939937510", float32(1.5), 2.25, true, "héllo", "v", "ab ",
			[]byte{0, 0xff}, int32(ts.Unix() / 86400), int64(13*3600+45*60+30)*1e6 + 123456, ts.UnixMicro(), ts.Add(-2 * time.Hour).UnixMicro(),
			uuid.MustParse("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), `{"a": 1}`, `{"a": 1}`, "happy", "{1,2,3}", "P1Y2M3DT4H5M6S"}
	}
	null := make([]any, 23)
	null[0] = int32(3)
	got := map[int32][]any{}
	for row, err := range warehouse.Rows(context.Background(), tbl) {
		if err != nil {
			t.Fatal(err)
		}
		got[row[0].(int32)] = append([]any(nil), row...)
	}
	for id, w := range map[int32][]any{1: want(1), 2: want(2), 3: null} {
		g := got[id]
		if len(g) != len(w) {
			t.Fatalf("row %d: %v", id, g)
		}
		for i := range w {
			if !reflect.DeepEqual(g[i], w[i]) {
				t.Errorf("row %d (snapshot: %v), column %s: %#v, want %#v", id, id != 2, tbl.Schema().Fields()[i].Name, g[i], w[i])
			}
		}
	}
}

func sprintf(format string, id int) string { return fmt.Sprintf(format, id) }
