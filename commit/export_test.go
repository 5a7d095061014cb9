package commit

// CommitThroughRowDelta makes c commit deletion vector replacements with
// iceberg-go's RowDelta, as before commitVectors: the reference the
// vector commits are compared with.
func CommitThroughRowDelta(c *Committer) { c.rowDeltaOnly = true }
