package bench

import "github.com/icesink/icesink/deltawriter"

// applyStats copies the writer's own counters into r. It is the one place
// that knows the fields of deltawriter.Stats.
func applyStats(r *RunResult, s deltawriter.Stats) {
	ix := s.Index
	r.PeakAccounted = max(r.PeakAccounted, s.PeakAccountedBytes, ix.PeakMemoryBytes)
	r.LocalFlushes = s.LocalFlushes
	r.Spills = ix.Spills
	r.BytesSpilled = ix.SpilledBytes
	r.Compactions = ix.Compactions
	r.RunsCompacted = ix.RunsCompacted
	r.LookupsMemory = ix.LookupsMemory
	r.LookupsFilter = ix.LookupsFilter
	r.LookupsCache = ix.LookupsCache
	r.LookupsDisk = ix.LookupsDisk
}
