// Package postgres reads a PostgreSQL database's tables into Iceberg
// tables without Kafka: logical replication (pgoutput) from a slot, after
// an initial snapshot consistent with it, one stream for every table of a
// publication, each table a sink run (sink.OffsetSource) of one
// sink.Database, so that one epoch covers them all.
//
// Positions. A table's commits record PropLSN: the end LSN of the last
// source transaction the table holds whole (a checkpoint ends only
// between transactions, so no commit holds part of one). On resume the
// stream applies a transaction to a table only if it committed at or
// above that position. The slot confirms the least position every
// table's commits hold, so PostgreSQL keeps the WAL until it is in
// Iceberg and frees it after; keepalives move idle tables on.
//
// Snapshots. A slot created by the run exports a snapshot: every table is
// read in it (SELECT in text form, decoded as the stream's values are),
// as inserts, then follows the stream from the slot's consistent point. A
// table with no commit while the slot exists (a crash before its first
// commit, or a table added to the publication) is read in the snapshot
// of a temporary slot, and takes the stream's transactions from that
// slot's consistent point on. A snapshot is read a chunk of heap pages
// at a time (Config.SnapshotChunk; TID range scans, PostgreSQL 14+), and a
// checkpoint may end between two chunks: the commit records the next page
// and the table's storage (PropSnapshotPage, PropSnapshotFile) beside
// PropLSN, the snapshot's position. A run resumes such a table from that
// page in a snapshot of its own and applies the stream from PropLSN on
// top: every change replayed is a whole row (or a delete) by key, so rows
// the newer snapshot holds already changed end as the source's. A table
// rewritten since (another filenode: rows moved between pages) is read
// again from its first page.
//
// Types. Values travel as PostgreSQL's text forms (connections run with
// TimeZone UTC, DateStyle ISO, IntervalStyle iso_8601, bytea_output hex)
// and are decoded per column (types.go): integers, numeric(p,s) up to
// p = 38 as decimal, floats, boolean, text, bytea, date, time, timestamp
// and timestamptz (microseconds), uuid; what has no exact Iceberg
// counterpart (an unconstrained numeric, json and jsonb, arrays, enums,
// interval, money, timetz) is a string of PostgreSQL's own text form,
// never a rounded value.
//
// Tables joining. Run looks at the publication every
// Config.RefreshInterval: a table that joined ends the round (every table
// commits what it read, at a transaction boundary or between snapshot
// chunks), and the next round reads it in a snapshot of its own. A table
// that cannot be read fails the first round; in later rounds it is left
// out alone (reported with the run's result) until it can be.
//
// TRUNCATE. A table's run ends at a TRUNCATE of its source table
// (TruncatedError) and the round ends with it (the others commit what they
// read); between rounds Run empties the Iceberg table in one snapshot and
// records the truncating transaction (PropTruncated), and the next round
// skips that transaction's changes of the table up to the truncate.
package postgres
