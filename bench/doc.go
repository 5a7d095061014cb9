// Package bench holds the end-to-end benchmarks users run with
// `icesink bench`. It drives the public APIs only.
package bench
