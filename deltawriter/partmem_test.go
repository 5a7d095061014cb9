package deltawriter_test

import (
	"testing"

	"github.com/apache/iceberg-go"
)

// TestManyPartitionsMemory checks the accounting with many open
// partitions: a 16 MiB budget over 1024 bucket partitions, keys spread
// evenly. Before, each partition's open files held a full batch of
// reserved Arrow builder capacity and a Parquet writer that the
// accounting did not see: the live heap grew 574 MiB here while 10 MiB
// was accounted. Now builders grow as rows arrive, a file's Parquet
// writer is made when its first batch is encoded, both are accounted,
// and the least recently used partitions' files are closed (a local
// flush) to stay within the share. (The price of so small a budget for
// so many partitions is many small files: ~15k local flushes here.)
func TestManyPartitionsMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("a heap measurement: the race detector adds nothing to it and makes it take minutes")
	}
	n := 60_000
	if testing.Short() {
		n = 30_000
	}
	spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{1}, FieldID: 1000, Name: "id_bucket", Transform: iceberg.BucketTransform{NumBuckets: 1024}})
	e := newEnv(t, memSchema, &spec)
	runMemory(t, e, 256<<20, 5_000, 1) // warm up
	const limit = 16 << 20
	r := runMemory(t, e, limit, n, 8)
	t.Logf("%v; local flushes %d", r, r.stats.LocalFlushes)
	if b := memBound(limit, memAllowance); r.peak.growth > b {
		t.Errorf("the live heap grew %.1f MiB, over %.1f x limit + %.0f MiB = %.1f MiB", mib(r.peak.growth), memSlope, mib(memAllowance), mib(b))
	}
	for _, s := range r.samples {
		if b := memBound(s.accounted, memWriterSlack); s.settled > b {
			t.Errorf("after %d changes, encoding idle: the live heap grew %.1f MiB, the writer accounted %.1f MiB (bound %.1f MiB)",
				s.change, mib(s.settled), mib(s.accounted), mib(b))
		}
	}
	if r.stats.PeakAccountedBytes > limit {
		t.Errorf("peak accounted %.1f MiB, over the limit", mib(r.stats.PeakAccountedBytes))
	}
}
