// Package dedup owns the inserted-row index of one writer's commit window:
// for every key touched since the last commit, where its live row sits
// (data-file ordinal, row position) and whether an equality delete was
// already written for it.
//
// It knows keys as opaque canonical bytes and their xxhash64; it does not
// know Parquet, Iceberg or files. Spilling the index to disk is delegated
// to package spill.
package dedup
