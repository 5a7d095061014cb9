package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

func openTable(ctx context.Context, tf tableFlags) (*warehouse.Warehouse, *table.Table, error) {
	ident, err := warehouse.ParseIdent(tf.table)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --table: %v", errUsage, err)
	}
	wh, err := warehouse.Open(ctx, tf.warehouse, tf.options())
	if err != nil {
		return nil, nil, err
	}
	tbl, err := wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		wh.Close()
		return nil, nil, fmt.Errorf("loading table %s: %w", tf.table, err)
	}
	return wh, tbl, nil
}

// tableCommand parses the flags of a command that only names a table and
// opens that table.
func tableCommand(ctx context.Context, name string, args []string, stderr io.Writer) (*warehouse.Warehouse, *table.Table, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf tableFlags
	newHelpTopics(fs).add("Warehouse and table", tf.register)
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	if err := tf.check(); err != nil {
		return nil, nil, err
	}
	return openTable(ctx, tf)
}

func cmdScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	wh, th, err := tableCommand(ctx, "scan", args, stderr)
	if err != nil {
		return err
	}
	defer wh.Close()
	enc, err := changelog.NewEncoder(th.Schema())
	if err != nil {
		return err
	}
	kc, err := deltawriter.NewKeyCodec(th.Schema())
	if err != nil {
		return err
	}
	// Rows are printed in key order so that two scans of equal tables
	// print the same lines.
	type keyed struct {
		key  string
		line []byte
	}
	var rows []keyed
	for row, err := range warehouse.Rows(ctx, th) {
		if err != nil {
			return err
		}
		k, err := kc.Append(nil, row)
		if err != nil {
			return fmt.Errorf("table row: %w", err)
		}
		line, err := enc.AppendChangelogJSON(nil, deltawriter.Change{Op: deltawriter.Insert, Row: row})
		if err != nil {
			return err
		}
		rows = append(rows, keyed{string(k), line})
	}
	slices.SortFunc(rows, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	bw := bufio.NewWriter(stdout)
	for _, r := range rows {
		bw.Write(r.line)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

func cmdSnapshots(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	wh, th, err := tableCommand(ctx, "snapshots", args, stderr)
	if err != nil {
		return err
	}
	defer wh.Close()
	bw := bufio.NewWriter(stdout)
	fmt.Fprintf(bw, "%-20s %-4s %-10s %-6s %-8s %-10s %-10s %-10s %-10s %-10s %s\n",
		"snapshot", "seq", "operation", "epoch", "input", "data-files", "data-rows", "pos-dels", "eq-dels", "total-rows", "sink")
	for _, s := range th.Metadata().Snapshots() {
		p := map[string]string{}
		op := ""
		if s.Summary != nil {
			p = s.Summary.Properties
			op = string(s.Summary.Operation)
		}
		fmt.Fprintf(bw, "%-20d %-4d %-10s %-6s %-8s %-10s %-10s %-10s %-10s %-10s %s\n",
			s.SnapshotID, s.SequenceNumber, op, dash(p["icesink.epoch"]), dash(p["icesink.input-position"]),
			dash(p["added-data-files"]), dash(p["added-records"]), dash(p["added-position-deletes"]),
			dash(p["added-equality-deletes"]), dash(p["total-records"]), dash(p["icesink.sink-id"]))
	}
	return bw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
