// Package bench holds the end-to-end benchmarks users run with
// `icesink bench`. It drives the public APIs only (warehouse, deltawriter,
// commit, iceberg-go, arrow-go), so what it measures is what users get.
//
// A bench generates a seeded synthetic upsert stream in-process (Stream:
// rows, distinct keys, update / delete / re-insert shares, Zipf skew, row
// width, key type) and runs it through named scenarios, each on a fresh
// embedded warehouse:
//
//	unbounded        the upsert writer with MemoryLimit 0: the inserted-row
//	                 index wholly in memory, as in today's Java and Rust writers
//	bounded-SIZE     the upsert writer with a budget: the index spills
//	append-baseline  iceberg-go's Table.Append of the stream's final live rows
//	                 (table.WriteRecords + one commit), no upsert work
//	parquet-floor    pqarrow encoding the final live rows to one local file
//	                 with the writer's own Parquet properties
//
// The scenarios run in one process, alternating (the order rotates each
// repeat) and repeated, so that ratios between them hold on a noisy
// machine: they are taken repeat by repeat. Each run reports rows/s (the
// generator's own time left out), rows per CPU-second, peak RSS (the
// kernel's VmHWM reset per run where Linux allows it, else the sampled
// VmRSS), peak Go heap, the writer's peak accounted bytes, spill figures,
// files by kind, equality-delete rows, the time to scan the table back
// with iceberg-go, and a memory-over-time series. Options.RewriteDeleted
// runs the writer scenarios with deltawriter's rewrite at commit (the
// reader-cost trade: fewer row images to scan for more write work).
//
// The hot paths have their own benchmarks next to their code: key
// encoding and hashing and the position-delete sort and write in
// deltawriter, index Get/Put in dedup, block probes, flush and compaction
// in spill.
//
// # Usage
//
//	opts := bench.Options{Stream: bench.DefaultStream(), Repeat: 3}
//	opts.Scenarios, _ = bench.ParseScenarios("all", []int64{64 << 20})
//	res, err := bench.Run(ctx, opts)
//	if err != nil { ... }
//	bench.WriteMarkdown(os.Stdout, res)         // the table and the ratios
//	err = bench.WriteReport("bench-out", res)   // results.json, report.md
//	// the PNG plots: package bench/plots, or go run ./cmd/icesink-plot bench-out
//
// The `go test -bench` benchmarks of this package (BenchmarkWriterUpsert,
// BenchmarkAppendBaseline, BenchmarkParquetFloor, BenchmarkScan,
// BenchmarkStream) time one fixed-size window per operation and report
// rows/s, so that benchstat can compare two runs:
//
//	go test -run '^$' -bench . -count 10 ./bench/ > old.txt
//	# change something
//	go test -run '^$' -bench . -count 10 ./bench/ > new.txt
//	benchstat old.txt new.txt
package bench
