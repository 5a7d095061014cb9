// Command icesink-plot draws the plots of an `icesink bench --out DIR`
// report: it reads DIR/results.json, writes the PNG figures into DIR and
// writes DIR/report.md again with them.
//
//	go run ./cmd/icesink-plot DIR [DIR ...]
//
// It is a command of its own so that the icesink binary, which a sink
// runs, does not link a plotting library and its fonts.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/icesink/icesink/bench"
	"github.com/icesink/icesink/bench/plots"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "icesink-plot:", err)
		os.Exit(1)
	}
}

// run plots every report folder of args.
func run(args []string, stderr io.Writer) error {
	const usage = "usage: icesink-plot DIR [DIR ...]   (DIR: the --out folder of icesink bench)"
	switch {
	case len(args) == 0:
		fmt.Fprintln(stderr, usage)
		return errors.New("no report folder given")
	case args[0] == "-h" || args[0] == "--help":
		fmt.Fprintln(stderr, usage)
		return nil
	}
	for _, dir := range args {
		res, err := bench.ReadResults(filepath.Join(dir, bench.ResultsFile))
		if err != nil {
			return err
		}
		ps, err := plots.Write(dir, res)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if err := bench.WriteReport(dir, res, ps...); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		fmt.Fprintf(stderr, "icesink-plot: wrote %d plots and %s to %s\n", len(ps), bench.ReportFile, dir)
	}
	return nil
}
