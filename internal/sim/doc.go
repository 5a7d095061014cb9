// Package sim is the seeded simulation of the whole system, as a user
// combines it: from a seed its test draws a configuration (format
// version, delete mode, writers, memory budget, maintenance and its
// period, partitioning, a single or composite key, file, pipe or Kafka
// input (an in-process broker of 1-3 partitions; one table, of
// changelog-json or of debezium-avro through a schema registry that is
// down for a while at the start of some runs, or a database
// of 2-3 topics of debezium-json events into tables created from them,
// whose events may add a column mid-stream (and widen it from int32 to
// int64), make a required column optional or drop it, and whose last
// topic may appear only after the first run, found by --topic-regex), one
// process or a consumer group of two at an icesink coordinator; or the
// tables of a real PostgreSQL server by logical replication, their
// changes run as transactions, some rolled back),
// checkpoint size, commit
// interval, snapshot retention, record-size limit, a kept or no key
// index) and a schedule (the icesink
// command killed with SIGKILL at named crash points or at random moments
// (in a group: one of its processes or the coordinator, started again),
// and between runs another engine's appends, equality deletes on the key
// or part of it, compactions, tags, snapshot expiry, retry properties and
// rollbacks; during the last run, appends racing its commits), runs the
// icesink binary through it, and after every step
// checks the table, read back through iceberg-go's scanner and
// internal/tablelint, against a model of the stream and the other
// engine's changes: no key twice, nothing half-committed, every epoch at
// most once, the input position (a line, or every partition's offset)
// never behind what the table held.
//
// The configuration and the schedule are a function of the seed; where a
// kill lands in time is not (the machine's timing decides), so a failure
// names its seed and the command that replays the draw:
//
//	go test ./internal/sim -run 'TestSimulation/seed=N$' -sim.from N -sim.seeds 1
//
// CI runs a fixed set of seeds and the seeds that found a defect
// (foundSeeds); -sim.seeds N runs N seeds from -sim.from, -sim.only
// REGEXP only those whose configuration line matches.
// With SIM_KEEP=DIR a failing seed's warehouse is copied to DIR.
package sim
