package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkKafkaGroup measures records/s from a Kafka topic of four
// partitions into the table with 1, 2 and 4 icesink processes in one
// consumer group under one coordinator: the processes start, the group
// settles, the processes are stopped while 600,000 changes over 60,000
// keys are produced, then resumed; the clock runs from their resumption
// until the table's offsets cover every record (barriers every 500 ms). Compare the
// sub-benchmarks' records/s with each other (ratios to procs=1); on a
// machine with fewer cores than processes they contend for the CPU.
//
//	go test ./cmd/icesink -run XXX -bench KafkaGroup -benchtime 1x
func BenchmarkKafkaGroup(b *testing.B) {
	const records, keys = 600000, 60000
	_, lines := stream(b, rand.New(rand.NewPCG(5, 5)), records, keys)
	for _, procs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			var elapsed, producing time.Duration
			for i := 0; i < b.N; i++ {
				e, p := kafkaGroupOnce(b, lines, procs)
				elapsed, producing = elapsed+e, producing+p
			}
			b.ReportMetric(float64(b.N*len(lines))/elapsed.Seconds(), "records/s")
			b.ReportMetric(producing.Seconds()/float64(b.N), "produce-s/op")
		})
	}
}

// kafkaGroupOnce runs one measurement of BenchmarkKafkaGroup and returns
// the time from the consumers' resumption to the commit covering the last
// record, and the time the test spent producing the records beforehand
// (the in-process broker's rate, for reference).
func kafkaGroupOnce(b *testing.B, lines [][]byte, procs int) (elapsed, producing time.Duration) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	addr, produce, _ := kafkaStream(b, 4)
	wh := mpWarehouse(b)
	coord := mpStart(b, ctx, "coordinator", "--warehouse", wh, "--table", mpTable, "--listen", "127.0.0.1:0", "--vnode-count", "4", "--align-timeout", "60s", "--checkpoint-interval", "500ms")
	var caddr string
	for caddr == "" {
		if m := servingRE.FindStringSubmatch(coord.output()); m != nil {
			caddr = m[1]
			break
		}
		select {
		case <-coord.done:
			b.Fatalf("coordinator exited: %v\n%s", coord.err, coord.output())
		case <-time.After(5 * time.Millisecond):
		}
	}
	var ps []*mpProc
	for range procs {
		ps = append(ps, mpStart(b, ctx, "run", "--warehouse", wh, "--table", mpTable, "--kafka-brokers", addr, "--topic", "cdc",
			"--group", "sink", "--coordinator", caddr, "--spill-dir", b.TempDir(), "--log-format", "json"))
	}
	// The group has settled when every process has its partitions and no
	// assignment changed for three seconds.
	assignments := func() (n int, all bool) {
		all = true
		for _, p := range ps {
			c := strings.Count(p.output(), `"msg":"partitions assigned"`)
			n += c
			all = all && c > 0
		}
		return n, all
	}
	last, since := -1, time.Now()
	for {
		n, all := assignments()
		if n != last {
			last, since = n, time.Now()
		}
		if all && time.Since(since) > 3*time.Second {
			break
		}
		select {
		case <-ctx.Done():
			b.Fatalf("the group did not settle: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The consumers are stopped (SIGSTOP, well within the group's session
	// timeout) while the records are produced, so that the clock measures
	// them, not the in-process broker taking the records in.
	for _, p := range ps {
		p.cmd.Process.Signal(syscall.SIGSTOP)
	}
	pstart := time.Now()
	for i := 0; i < len(lines); i += 5000 {
		produce(lines[i:min(i+5000, len(lines))])
	}
	producing = time.Since(pstart)
	b.StartTimer()
	start := time.Now()
	for _, p := range ps {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	for committedLineOf(b, wh) < int64(len(lines)) {
		select {
		case <-ctx.Done():
			b.Fatalf("the table holds %d of %d records", committedLineOf(b, wh), len(lines))
		case <-time.After(50 * time.Millisecond):
		}
	}
	elapsed = time.Since(start)
	b.StopTimer()
	if n, _ := assignments(); n != last {
		b.Logf("procs=%d: a rebalance during the measurement", procs)
	}
	// The consumers first: their last checkpoint commits through the
	// coordinator.
	for _, p := range ps {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		if err := p.wait(ctx); err != nil {
			b.Errorf("consumer after SIGTERM: %v\n%s", err, p.output())
		}
	}
	coord.cmd.Process.Signal(syscall.SIGTERM)
	return elapsed, producing
}
