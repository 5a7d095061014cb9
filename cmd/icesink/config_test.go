package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go/table"
)

// A --config file sets the flags its keys name, lists give --property
// several times, the command line wins, and the new table gets the
// properties; the written data files use the codec they name.
func TestConfigFileAndProperties(t *testing.T) {
	wh := t.TempDir()
	schema, _ := filepath.Abs("../../testdata/orders.schema.json")
	input, _ := filepath.Abs("../../testdata/orders.changelog.jsonl")
	cfg := filepath.Join(t.TempDir(), "icesink.yaml")
	os.WriteFile(cfg, []byte(`# a deployment's settings
warehouse: `+wh+`
table: demo.orders
schema: "`+schema+`"
input: `+input+`
checkpoint-rows: 5
sink-id: from-file
property:
  - write.parquet.compression-codec=snappy
  - write.target-file-size-bytes=1048576
quiet: true
`), 0o644)
	if _, stderr, code := icesink(t, "run", "--config", cfg, "--sink-id", "from-flag"); code != 0 {
		t.Fatalf("run --config exited %d: %s", code, stderr)
	}
	want, _ := os.ReadFile("../../testdata/orders.expected.jsonl")
	if got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "demo.orders"); got != string(want) {
		t.Errorf("scan after run --config =\n%s\nwant\n%s", got, want)
	}
	w := openWarehouse(t, wh)
	tbl, err := w.Catalog.LoadTable(context.Background(), table.Identifier{"demo", "orders"})
	if err != nil {
		t.Fatal(err)
	}
	props := tbl.Properties()
	if props["write.parquet.compression-codec"] != "snappy" || props["write.target-file-size-bytes"] != "1048576" {
		t.Errorf("table properties %v lack the --property values", props)
	}
	snap := tbl.CurrentSnapshot()
	if snap.Summary.Properties["icesink.sink-id"] != "from-flag" {
		t.Errorf("sink id %q: the command line should win over the file", snap.Summary.Properties["icesink.sink-id"])
	}
	// The data files are snappy-compressed.
	var parquet []string
	filepath.Walk(wh, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".parquet") {
			parquet = append(parquet, p)
		}
		return nil
	})
	if len(parquet) == 0 {
		t.Fatal("no data files")
	}
	if codec := parquetCodec(t, parquet[0]); codec != "SNAPPY" {
		t.Errorf("%s is compressed with %s, want SNAPPY", parquet[0], codec)
	}
}

// Bad config files and properties are refused with the file, line and
// key, before any table is created.
func TestConfigAndPropertyErrors(t *testing.T) {
	dir := t.TempDir()
	n := 0
	write := func(body string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", n))
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", write("table: a.b\nwarehous: x\n")}, "line 2: warehous: run has no such flag"},
		{[]string{"--config", write("table:\n  - a.b\n  - c.d\n")}, "line 1: table: a list, but the flag takes one value"},
		{[]string{"--config", write("checkpoint-rows: many\n")}, "line 1: checkpoint-rows: parse error"},
		{[]string{"--config", write("- a\n- b\n")}, "want a mapping of flag names to values"},
		{[]string{"--warehouse", dir, "--table", "a.b", "--input", "-", "--schema", "../../testdata/orders.schema.json",
			"--property", "write.parquet.compression-codec=brotli"}, "compression-codec=\"brotli\": want zstd"},
		{[]string{"--warehouse", dir, "--table", "a.b", "--input", "-", "--schema", "../../testdata/orders.schema.json",
			"--property", "format-version=3"}, "give --format-version instead"},
		{[]string{"--warehouse", dir, "--table", "a.b", "--kafka-brokers", "127.0.0.1:1", "--topic", "t",
			"--kafka-instance-id", "p0"}, "--kafka-instance-id is the identity of a member of a consumer group"},
		{[]string{"--warehouse", dir, "--table", "a.b", "--kafka-brokers", "127.0.0.1:1", "--topic", "t", "--group", "g",
			"--coordinator", "127.0.0.1:1", "--kafka-instance-id", "pod/0"}, `--kafka-instance-id "pod/0": want at most 200 of`},
	} {
		_, stderr, code := icesink(t, append([]string{"run"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("run %v: exit %d, %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "catalog.db")); err == nil {
		t.Errorf("a refused run created the catalog")
	}
}

// parquetCodec returns the compression codec of a Parquet file's first
// column chunk.
func parquetCodec(t *testing.T, path string) string {
	t.Helper()
	r, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cc, err := r.MetaData().RowGroup(0).ColumnChunk(0)
	if err != nil {
		t.Fatal(err)
	}
	return cc.Compression().String()
}
