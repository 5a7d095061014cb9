// Package commit owns Iceberg commits: the commit payload a writer's window
// produces, its encoding, and the Committer that turns payloads into one
// RowDelta snapshot, idempotently per (sink-id, epoch).
package commit
