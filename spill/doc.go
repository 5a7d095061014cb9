// Package spill owns sorted run files on local disk: their format, bloom
// filters, the block cache, compaction and checksums. It knows nothing of
// Iceberg.
package spill
