// Command icesink writes upsert (CDC) streams into Apache Iceberg tables
// with a hard memory bound per writer, and reads them back.
//
//	icesink run       --warehouse DIR --table NS.NAME [--schema F] --input F|-   write a changelog
//	icesink scan      --warehouse DIR --table NS.NAME                            live rows as JSON lines
//	icesink snapshots --warehouse DIR --table NS.NAME                            snapshots and summaries
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `icesink writes upsert (CDC) streams into Apache Iceberg tables.

Commands:
  run        write a changelog into a table (creating it from --schema)
  scan       print a table's live rows as JSON lines (iceberg-go's scanner)
  snapshots  list a table's snapshots with their summaries
  coordinator  serve the vnode-aligned commit coordinator to writers in other processes
  bench      benchmark memory and throughput of upsert scenarios

Run "icesink COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a command-line mistake (exit code 2).
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stdin, stdout, stderr)
	case "scan":
		err = cmdScan(ctx, args[1:], stdout, stderr)
	case "snapshots":
		err = cmdSnapshots(ctx, args[1:], stdout, stderr)
	case "coordinator":
		err = cmdCoordinator(ctx, args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "icesink: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "icesink %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "icesink %s: %v\n", args[0], err)
		return 1
	}
}

// tableFlags are the flags every command takes to find its table.
type tableFlags struct {
	warehouse  string
	table      string
	catalogURI string
}

func (t *tableFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.warehouse, "warehouse", "", "warehouse `DIR` (embedded SQLite catalog at DIR/catalog.db, table data under DIR)")
	fs.StringVar(&t.table, "table", "", "table `NS.NAME`")
	fs.StringVar(&t.catalogURI, "catalog-uri", "", "SQL catalog `URI` (postgres://...); default: the embedded SQLite catalog")
}

func (t *tableFlags) check() error {
	if t.warehouse == "" {
		return fmt.Errorf("%w: --warehouse is required", errUsage)
	}
	if t.table == "" {
		return fmt.Errorf("%w: --table is required", errUsage)
	}
	return nil
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}
