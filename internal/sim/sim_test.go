package sim

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/internal/pgtest"
	"github.com/icesink/icesink/internal/tablelint"
	"github.com/icesink/icesink/postgres"
	"github.com/icesink/icesink/warehouse"
)

var (
	seedsFlag = flag.Int("sim.seeds", 0, "how many seeds to run from -sim.from (0: the fixed set CI runs)")
	fromFlag  = flag.Uint64("sim.from", 1, "the first seed -sim.seeds runs")
	verbose   = flag.Bool("sim.v", false, "log every step of every seed")
	onlyFlag  = flag.String("sim.only", "", "run only the seeds whose drawn configuration matches this `REGEXP` (e.g. 'group=true')")
)

// ciSeeds is the fixed set of seeds the README's test command runs
// (-short: the first few).
const ciSeeds, shortSeeds = 24, 4

// foundSeeds are seeds beyond the fixed set that found a defect, run
// with it (not with -short) so that the defect stays fixed: 2528, a lower
// bound above "" in a compacted file (arrowval.WithValueBuffers); 992, a
// consumer group with --stop-at-end whose processes all exited while a
// killed member's partitions were still unread (about one run in two
// before the fix: cmd/icesink unreadPartitions).
var foundSeeds = []uint64{2528, 992}

// binary is the icesink command the simulation runs (and kills).
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "icesink-sim")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "icesink")
	// The runs' spill folders go with the test.
	os.Setenv("TMPDIR", filepath.Join(dir, "tmp"))
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
	if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/icesink").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building icesink: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// config is what a user sets, drawn from a seed.
type config struct {
	Version        int    // format version: 2 or 3
	DeleteMode     string // position or equality
	Writers        int    // 1-3
	Memory         string // --memory-limit: 0 (unbounded), tiny or larger
	Maintain       bool
	CompactEvery   int
	Partitioned    bool   // bucket[4] of the key's id
	Composite      bool   // key (id, tenant) instead of (id)
	Input          string // file, pipe (standard input) or kafka (a topic of Partitions)
	Tables         int    // kafka: 1 (one table), or a database of 2-3 topics into tables of their own
	Partitions     int
	CheckpointRows int
	CommitInterval int    // --commit-interval: checkpoints per commit
	Retain         int    // --retain-snapshots (0: the default)
	MaxRecord      string // --max-record-size
	KeyIndex       bool   // the key index kept between runs (--key-index-dir)
	Evolve         int    // a database: from this line of a topic on, its events carry one more column, w (0: never)
	Widen          int    // with Evolve: w is an int32 until this line, an int64 from it on (0: an int64 from the start)
	Optional       int    // a database: from this line on, the required column v is optional in the events, and some carry null (0: never)
	Drop           int    // a database: from this line on, the events no longer carry the required column v (0: never)
	NewTopic       bool   // a database: its last topic appears after the first run (--topic-regex)
	Avro           bool   // one table over Kafka: debezium-avro events through a schema registry
	Group          bool   // kafka: two processes in a consumer group with an icesink coordinator (one writer each, no maintenance)
	Static         bool   // group: the processes are static members (--kafka-instance-id), a restarted one under its old identity
	PgChunk        string // postgres: --pg-snapshot-chunk ("": the default; 8KiB: a page a query, a commit between any two)
	// Input "postgres": the changes are transactions on 1-2 tables of a
	// PostgreSQL server (some rolled back), read by logical replication.
	Lines, Keys int // the stream's length and key space
}

// draw draws a configuration from rng; later additions to the draw come
// from later, so that a seed's earlier draws (and the defects the found
// seeds replay) stay what they were.
func draw(rng, later *rand.Rand) config {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	c := config{
		Version:        2 + rng.IntN(2),
		DeleteMode:     pick("position", "position", "equality"),
		Writers:        1 + rng.IntN(3),
		Memory:         pick("0", "1MiB", "16MiB"),
		Maintain:       rng.IntN(3) > 0,
		CompactEvery:   2 + rng.IntN(5),
		Partitioned:    rng.IntN(3) == 0,
		Composite:      rng.IntN(3) == 0,
		Input:          pick("file", "file", "pipe", "kafka", "kafka"),
		Partitions:     1 + rng.IntN(3),
		CheckpointRows: 40 + rng.IntN(200),
		CommitInterval: 1 + rng.IntN(3),
		Retain:         []int{0, 0, 3, 8}[rng.IntN(4)],
		MaxRecord:      pick("64MiB", "4KiB"),
		KeyIndex:       rng.IntN(2) == 0,
		Lines:          200 + rng.IntN(700),
		Keys:           30 + rng.IntN(300),
	}
	if c.Input == "kafka" && rng.IntN(3) == 0 {
		// A database: debezium-json events with Connect schemas, each
		// topic into a table created from them (no partition spec).
		c.Tables, c.Partitioned = 2+rng.IntN(2), false
		if rng.IntN(2) == 0 {
			c.Evolve = 1 + rng.IntN(c.Lines)
		}
		c.NewTopic = rng.IntN(2) == 0 && !c.refused() // (a first run of fewer tables is not refused)
	} else {
		c.Tables = 1
		c.Avro = c.Input == "kafka" && rng.IntN(2) == 0
	}
	if c.Tables > 1 {
		// Schema changes at the source beyond an added column.
		if c.Evolve > 0 && later.IntN(2) == 0 {
			c.Widen = c.Evolve + later.IntN(c.Lines-c.Evolve+1)
		}
		if later.IntN(3) == 0 {
			c.Optional = 1 + later.IntN(c.Lines)
		}
		if later.IntN(3) == 0 {
			c.Drop = 1 + later.IntN(c.Lines)
		}
	}
	if c.Input == "kafka" && later.IntN(3) == 0 {
		// Two processes of a consumer group, each one writer at an
		// icesink coordinator of its own (which does no maintenance).
		c.Group, c.Writers, c.Maintain = true, 1, false
	}
	if later.IntN(6) == 0 {
		// A PostgreSQL database's tables by logical replication, one
		// process. (Not drawn with it yet: schema changes at the source.)
		c.Input, c.Tables, c.Partitions = "postgres", 1+later.IntN(2), 1
		c.Avro, c.Group, c.NewTopic, c.Evolve, c.Widen, c.Optional, c.Drop = false, false, false, 0, 0, 0, 0
		if c.refused() {
			c.Memory = "16MiB"
		}
	}
	// The last draw, so that the draws before it keep their seeds.
	if c.Group && later.IntN(2) == 0 {
		c.Static = true
	}
	if c.Input == "postgres" && later.IntN(2) == 0 {
		c.PgChunk = "8KiB"
	}
	return c
}

func (c config) String() string {
	return fmt.Sprintf("v%d %s writers=%d memory=%s maintain=%v/%d partitioned=%v composite=%v input=%s/%d tables=%d checkpoint-rows=%d commit-interval=%d retain=%d max-record=%s key-index=%v lines=%d keys=%d evolve=%d widen=%d optional=%d drop=%d new-topic=%v avro=%v group=%v static=%v pg-chunk=%s",
		c.Version, c.DeleteMode, c.Writers, c.Memory, c.Maintain, c.CompactEvery, c.Partitioned, c.Composite, c.Input, c.Partitions, c.Tables, c.CheckpointRows, c.CommitInterval, c.Retain, c.MaxRecord, c.KeyIndex, c.Lines, c.Keys, c.Evolve, c.Widen, c.Optional, c.Drop, c.NewTopic, c.Avro, c.Group, c.Static, c.PgChunk)
}

// refused reports a configuration icesink refuses at start: a database's
// memory budget too thin for every table's writers
// (deltawriter.MinMemoryLimit each).
func (c config) refused() bool {
	mem := map[string]int64{"0": 0, "1MiB": 1 << 20, "16MiB": 16 << 20}[c.Memory]
	return c.Tables > 1 && mem > 0 && mem/int64(c.Tables*c.Writers) < deltawriter.MinMemoryLimit
}

// schema is the table's schema: (id, name, v) keyed by id, or (id,
// tenant, name, v) keyed by (id, tenant).
func (c config) schema() *iceberg.Schema {
	if c.Composite {
		return iceberg.NewSchemaWithIdentifiers(0, []int{1, 2},
			iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
			iceberg.NestedField{ID: 2, Name: "tenant", Type: iceberg.PrimitiveTypes.String, Required: true},
			iceberg.NestedField{ID: 3, Name: "name", Type: iceberg.PrimitiveTypes.String},
			iceberg.NestedField{ID: 4, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		)
	}
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	)
}

// row builds a row of the schema.
func (c config) row(id int64, tenant string, name any, v int64) []any {
	if c.Composite {
		return []any{id, tenant, name, v}
	}
	return []any{id, name, v}
}

// key is a row's key in the model.
func (c config) key(row []any) string {
	if c.Composite {
		return fmt.Sprintf("%d/%s", row[0], row[1])
	}
	return strconv.FormatInt(row[0].(int64), 10)
}

// change is one input line's change (nil: a barrier), and where the sink
// reads it: partition and offset (a file: partition 0, offset the line's
// index).
type change struct {
	del  bool
	row  []any
	part int32
	off  int64
	lsn  uint64 // postgres: the WAL position inside its transaction, before its commit
	// truncate: postgres: this change became a TRUNCATE of the source
	// table (its row unused): the model empties the table.
	truncate bool
}

// position is how far the sink's input is committed: per partition, the
// next offset (a file: partition 0, the lines read).
type position map[int32]int64

func (p position) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, fmt.Sprintf("%d:%d", k, p[k]))
	}
	return strings.Join(parts, ",")
}

// behind reports whether p is behind q in some partition.
func (p position) behind(q position) bool {
	for k, v := range q {
		if p[k] < v {
			return true
		}
	}
	return false
}

var names = []any{nil, "a", "ünïcødé", "日本語", "", "x y"}

// stream draws the input: changes of c.Keys keys with a barrier now and
// then, as changelog-json lines (a database's: debezium-json events with
// their Connect schema, and record keys).
func stream(rng *rand.Rand, c config) (lines, keys []string, changes []*change) {
	for range c.Lines {
		if c.Tables > 1 && rng.IntN(100) < 3 {
			continue // no barrier lines in a topic of Debezium events
		}
		if rng.IntN(100) < 3 {
			lines = append(lines, `{"barrier":true}`)
			keys = append(keys, "")
			changes = append(changes, nil)
			continue
		}
		id := int64(rng.IntN(c.Keys))
		tenant := ""
		if c.Composite {
			tenant = "t" + strconv.Itoa(rng.IntN(2))
		}
		del := rng.IntN(100) < 20
		name := names[rng.IntN(len(names))]
		v := rng.Int64N(1000)
		row := c.row(id, tenant, name, v)
		op := "+I"
		if del {
			op = "-D"
		}
		sh := c.shapeAt(len(lines))
		var data strings.Builder
		fmt.Fprintf(&data, `"id":%d`, id)
		if c.Composite {
			fmt.Fprintf(&data, `,"tenant":%q`, tenant)
		}
		if name != nil {
			fmt.Fprintf(&data, `,"name":%q`, name)
		}
		switch {
		case sh.dropV:
			// The source dropped v: it reads back null (made optional).
			row[len(row)-1] = nil
		case sh.optionalV && rng.IntN(10) < 3:
			data.WriteString(`,"v":null`)
			row[len(row)-1] = nil
		default:
			fmt.Fprintf(&data, `,"v":%d`, v)
		}
		if sh.w != "" {
			// The source added a column: the table follows (--evolve-schema).
			w := rng.Int64N(100)
			if sh.w == "int64" && c.Widen > 0 {
				w += 1 << 33 // widened: beyond an int32
			}
			fmt.Fprintf(&data, `,"w":%d`, w)
			row = append(row, w)
		}
		if c.Tables > 1 {
			lines = append(lines, debeziumEvent(c, del, sh, data.String()))
			keys = append(keys, debeziumKey(c, id, tenant))
		} else {
			lines = append(lines, fmt.Sprintf(`{"op":%q,"data":{%s}}`, op, data.String()))
			keys = append(keys, "")
		}
		changes = append(changes, &change{del: del, row: row})
	}
	// Where the sink reads each line.
	offs := map[int32]int64{}
	for i, ch := range changes {
		switch {
		case c.Input != "kafka":
			if ch != nil {
				ch.part, ch.off = 0, int64(i)
			}
		case ch != nil:
			ch.part = int32(ch.row[0].(int64) % int64(c.Partitions))
			ch.off = offs[ch.part]
			offs[ch.part]++
		}
	}
	return lines, keys, changes
}

// debeziumEvent is a debezium-json event with its Kafka Connect schema: a
// create (an upsert) of the row data, or a delete with data as before.
func debeziumEvent(c config, del bool, sh shape, data string) string {
	fields := `{"type":"int64","field":"id"},`
	if c.Composite {
		fields += `{"type":"string","field":"tenant"},`
	}
	fields += `{"type":"string","optional":true,"field":"name"}`
	switch {
	case sh.dropV:
	case sh.optionalV:
		fields += `,{"type":"int64","optional":true,"field":"v"}`
	default:
		fields += `,{"type":"int64","field":"v"}`
	}
	if sh.w != "" {
		fields += `,{"type":"` + sh.w + `","optional":true,"field":"w"}`
	}
	schema := `{"type":"struct","fields":[{"type":"struct","optional":true,"field":"before","fields":[` + fields +
		`]},{"type":"struct","optional":true,"field":"after","fields":[` + fields + `]},{"type":"string","field":"op"}]}`
	if del {
		return `{"schema":` + schema + `,"payload":{"before":{` + data + `},"after":null,"op":"d"}}`
	}
	return `{"schema":` + schema + `,"payload":{"before":null,"after":{` + data + `},"op":"c"}}`
}

// shape is the columns a database's events carry at a line.
type shape struct {
	w                string // the added column's type ("": not added yet)
	optionalV, dropV bool
}

// shapeAt is the shape of the events from line i (0-based) on.
func (c config) shapeAt(i int) shape {
	var sh shape
	if c.Evolve > 0 && i >= c.Evolve-1 {
		sh.w = "int64"
		if c.Widen > 0 && i < c.Widen-1 {
			sh.w = "int32"
		}
	}
	sh.optionalV = c.Optional > 0 && i >= c.Optional-1
	sh.dropV = c.Drop > 0 && i >= c.Drop-1
	return sh
}

// debeziumKey is the record key of a debezium-json event.
func debeziumKey(c config, id int64, tenant string) string {
	if c.Composite {
		return fmt.Sprintf(`{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"},{"type":"string","field":"tenant"}]},"payload":{"id":%d,"tenant":%q}}`, id, tenant)
	}
	return fmt.Sprintf(`{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":%d}}`, id)
}

// event is another engine's change of the table's rows, landed when the
// sink had committed the input up to at, in a snapshot of sequence number
// seq (a rollback to a snapshot of a lower one undoes it; the snapshot
// itself may have expired since).
type event struct {
	at    position
	seq   int64
	what  string
	apply func(m map[string][]any)
}

// run is one seed's simulation.
type run struct {
	t       *testing.T
	ctx     context.Context
	seed    uint64
	rng     *rand.Rand
	cfg     config
	dir     string // the warehouse
	keyDir  string
	schema  string // its file
	spec    string // the partition spec's file, or ""
	tables  []*tableSim
	kafka   *kgo.Client
	broker  string
	foreign int64
	log     []string
	refused bool // the configuration was refused at start, as config.refused expects
	runs    int  // sink runs started (sink)
	// Avro: the registry and the encoder of the topic's events.
	registry       *srfake.Registry
	registryURL    string       // the registry behind a proxy that can fail
	outageUntil    atomic.Int64 // the proxy answers 503 until then (unix nanoseconds)
	avro           *changelog.AvroEncoder
	valueID, keyID int
	pg             *pgx.Conn // postgres: the source database
	pgURL          string
	pgSrv          *pgtest.Server
}

// tableSim is one table's input and model.
type tableSim struct {
	ident   table.Identifier
	topic   string // its Kafka topic
	lines   []string
	keys    []string // the lines' Kafka record keys (a database's)
	changes []*change
	events  []event
	given   int            // input lines given to the sink so far
	pos     position       // the sink's committed position, last seen
	tags    map[string]int // tag -> live rows it held
	late    bool           // its topic is created after the first run (Config.NewTopic)
}

func (ts *tableSim) name() string { return strings.Join(ts.ident, ".") }

func (r *run) logf(format string, a ...any) {
	r.log = append(r.log, fmt.Sprintf(format, a...))
	if *verbose {
		r.t.Logf(format, a...)
	}
}

// fail stops the seed with what it did and how to replay it.
func (r *run) fail(format string, a ...any) {
	r.t.Helper()
	if keep := os.Getenv("SIM_KEEP"); keep != "" {
		_ = exec.Command("cp", "-r", r.dir, keep).Run()
	}
	r.t.Fatalf("seed %d: %s\nconfig: %s\nsteps:\n  %s\nreplay: go test ./internal/sim -run 'TestSimulation/seed=%d$' -sim.from %d -sim.seeds 1 -sim.v",
		r.seed, fmt.Sprintf(format, a...), r.cfg, strings.Join(r.log, "\n  "), r.seed, r.seed)
}

// expected is the model of the table when the sink committed the input up
// to pos: the input's changes and the other engine's, in the order they
// landed.
func (r *run) expected(ts *tableSim, pos position) map[string][]any {
	m := map[string][]any{}
	applied := make([]bool, len(ts.changes))
	apply := func(upto position) {
		for i, ch := range ts.changes {
			if ch == nil || applied[i] || ch.off >= upto[ch.part] {
				continue
			}
			applied[i] = true
			if ch.truncate {
				clear(m) // the foreign rows too: the sink empties the table
				continue
			}
			if ch.del {
				delete(m, r.cfg.key(ch.row))
			} else {
				m[r.cfg.key(ch.row)] = ch.row
			}
		}
	}
	for _, e := range ts.events {
		apply(e.at)
		e.apply(m)
	}
	apply(pos)
	return m
}

// positionOf is the input position a commit's summary properties hold.
func (r *run) positionOf(ts *tableSim, props iceberg.Properties) position {
	r.t.Helper()
	pos := position{}
	if r.cfg.Input == "postgres" {
		lsn, err := strconv.ParseUint(props[postgres.PropLSN], 10, 64)
		if err != nil {
			r.fail("a commit's LSN %q", props[postgres.PropLSN])
		}
		// Every transaction that began below the LSN is in the table
		// (changes not given yet have none).
		for i, ch := range ts.changes {
			if ch != nil && ch.lsn > 0 && ch.lsn < lsn {
				pos[0] = int64(i) + 1
			}
		}
		return pos
	}
	if r.cfg.Input != "kafka" {
		n, err := strconv.ParseInt(props[commit.PropInputPosition], 10, 64)
		if err != nil {
			r.fail("a commit's input position %q", props[commit.PropInputPosition])
		}
		pos[0] = n
		return pos
	}
	for p := range int32(r.cfg.Partitions) {
		if v, ok := props[fmt.Sprintf("%s%s.%d", commit.PropOffsetPrefix, ts.topic, p)]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				r.fail("a commit's offset of partition %d: %q", p, v)
			}
			pos[p] = n
		}
	}
	return pos
}

// end is the position of the whole input given so far.
func (r *run) end(ts *tableSim) position {
	pos := position{}
	if r.cfg.Input != "kafka" {
		pos[0] = int64(ts.given)
		return pos
	}
	for _, ch := range ts.changes[:ts.given] {
		if ch != nil && ch.off+1 > pos[ch.part] {
			pos[ch.part] = ch.off + 1
		}
	}
	return pos
}

// covering is the least position that holds every change given so far.
func (r *run) covering(ts *tableSim) position {
	pos := position{}
	for i, ch := range ts.changes[:ts.given] {
		if ch == nil {
			continue
		}
		if r.cfg.Input != "kafka" {
			pos[0] = int64(i) + 1
		} else if ch.off+1 > pos[ch.part] {
			pos[ch.part] = ch.off + 1
		}
	}
	return pos
}

// open opens the warehouse (the sink is not running).
func (r *run) open() *warehouse.Warehouse {
	r.t.Helper()
	wh, err := warehouse.Open(r.ctx, r.dir, warehouse.Options{})
	if err != nil {
		r.fail("opening the warehouse: %v", err)
	}
	r.t.Cleanup(func() { wh.Close() })
	return wh
}

func (r *run) load(wh *warehouse.Warehouse, ts *tableSim) *table.Table {
	r.t.Helper()
	tbl, err := wh.Catalog.LoadTable(r.ctx, ts.ident)
	if err != nil {
		r.fail("loading the table: %v", err)
	}
	return tbl
}

// committed returns the input position of the sink's last commit.
func (r *run) committed(wh *warehouse.Warehouse, ts *tableSim) position {
	r.t.Helper()
	cm, err := commit.NewCommitter(r.ctx, wh.Catalog, ts.ident, "sim")
	if err != nil {
		r.fail("reading the sink's position: %v", err)
	}
	last, ok := cm.Last()
	pos := position{}
	if ok {
		pos = r.positionOf(ts, last.Properties)
	}
	return r.truncatedTo(ts, pos, cm.Table().Properties())
}

// truncatedTo is pos, or past it the TRUNCATE the table was emptied for
// after the commit at pos (postgres: the last truncate below the
// truncating transaction's commit LSN).
func (r *run) truncatedTo(ts *tableSim, pos position, props iceberg.Properties) position {
	v, set := props[postgres.PropTruncated]
	if r.cfg.Input != "postgres" || !set {
		return pos
	}
	// LSN:N: the N-th truncate of the transaction that committed at LSN.
	lsnText, nText, _ := strings.Cut(v, ":")
	at, _ := strconv.ParseUint(lsnText, 10, 64)
	n, _ := strconv.Atoi(cmp.Or(nText, "1"))
	var txnLSN uint64 // the truncating transaction's changes' position
	for _, ch := range ts.changes {
		if ch != nil && ch.truncate && ch.lsn > 0 && ch.lsn < at {
			txnLSN = max(txnLSN, ch.lsn)
		}
	}
	for i, ch := range ts.changes {
		if ch == nil || !ch.truncate || ch.lsn != txnLSN || txnLSN == 0 {
			continue
		}
		if n--; n == 0 {
			if int64(i)+1 > pos[0] {
				pos = position{0: int64(i) + 1}
			}
			break
		}
	}
	return pos
}

// check reads the table back and compares it with the model at the
// sink's committed line, which must not be behind what it was (but
// after a rollback).
func (r *run) check(step string) {
	r.t.Helper()
	wh := r.open()
	defer wh.Close()
	for _, ts := range r.tables {
		r.checkTable(wh, ts, step)
	}
}

func (r *run) checkTable(wh *warehouse.Warehouse, ts *tableSim, step string) {
	r.t.Helper()
	step = ts.name() + ": " + step
	tbl, err := wh.Catalog.LoadTable(r.ctx, ts.ident)
	if err != nil {
		if len(ts.pos) == 0 && len(ts.events) == 0 {
			return // a run killed before it created the table
		}
		r.fail("%s: loading the table: %v", step, err)
	}
	line := r.committed(wh, ts)
	if line.behind(ts.pos) {
		r.fail("%s: the sink's committed position went back from %v to %v", step, ts.pos, line)
	}
	ts.pos = line
	if rep, err := tablelint.Lint(r.ctx, tbl); err != nil || rep.Err() != nil {
		r.fail("%s: tablelint: %v %v", step, err, rep.Err())
	}
	got := map[string][]any{}
	for row, err := range warehouse.Rows(r.ctx, tbl) {
		if err != nil {
			r.fail("%s: scanning: %v", step, err)
		}
		k := r.cfg.key(row)
		if prev, dup := got[k]; dup {
			r.fail("%s: key %s read twice: %v and %v", step, k, prev, row)
		}
		row = slices.Clone(row)
		for i, v := range row {
			if v, ok := v.(int32); ok {
				row[i] = int64(v) // w before the source widened it
			}
		}
		got[k] = trimNulls(row)
	}
	want := r.expected(ts, line)
	for k, row := range want {
		want[k] = trimNulls(row)
	}
	if !reflect.DeepEqual(got, want) {
		var diffs []string
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if g, ok := got[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("key %s missing (model %v)", k, want[k]))
			} else if !reflect.DeepEqual(g, want[k]) {
				diffs = append(diffs, fmt.Sprintf("key %s: table %v, model %v", k, g, want[k]))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if _, ok := want[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("key %s in the table (%v), not in the model", k, got[k]))
			}
		}
		r.fail("%s: at %v the table has %d live rows, the model %d: %s", step, line, len(got), len(want), strings.Join(diffs[:min(len(diffs), 5)], "; "))
	}
	// Every epoch of the sink at most once in the history.
	seen := map[string]bool{}
	if cur := tbl.CurrentSnapshot(); cur != nil {
		for _, s := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
			if s.Summary == nil || s.Summary.Properties[commit.PropSinkID] != "sim" {
				continue
			}
			e := s.Summary.Properties[commit.PropEpoch]
			if e != "" && seen[e] {
				r.fail("%s: epoch %s committed twice", step, e)
			}
			seen[e] = true
		}
	}
	// Tags still read what they held.
	for tag, rows := range ts.tags {
		snap := tbl.Metadata().SnapshotByName(tag)
		if snap == nil {
			r.fail("%s: tag %s is gone", step, tag)
		}
		id := snap.SnapshotID
		n := 0
		_, it, err := tbl.Scan(table.WithSnapshotID(id)).ToArrowRecords(r.ctx)
		if err != nil {
			r.fail("%s: reading tag %s: %v", step, tag, err)
		}
		for rec, err := range it {
			if err != nil {
				r.fail("%s: reading tag %s: %v", step, tag, err)
			}
			n += int(rec.NumRows())
			rec.Release()
		}
		if n != rows {
			r.fail("%s: tag %s reads %d rows, it held %d", step, tag, n, rows)
		}
	}
	r.logf("%s: checked at %v (%d live rows)", step, line, len(got))
}

// killPoints are the named crash points a run may be killed at.
var killPoints = []string{"keyindex-rebuild", "keyindex-load", "keyindex-resolve", "keyindex-ingest", "keyindex-save", "epoch-committed", "compaction-committed"}

// sink runs the icesink command over each table's input up to the share
// frac of its lines (at least what it was given before): with kill, once
// killed (at a crash point or a random moment) and checked, then again to
// the end.
func (r *run) sink(frac float64, kill bool) {
	r.t.Helper()
	var in string
	r.runs++
	for _, ts := range r.tables {
		if ts.late {
			if r.runs == 1 {
				continue // the topic does not exist yet
			}
			if _, err := kadm.NewClient(r.kafka).CreateTopic(r.ctx, int32(r.cfg.Partitions), 1, nil, ts.topic); err != nil {
				r.t.Fatal(err)
			}
			ts.late = false
			r.logf("topic %s created", ts.topic)
		}
		upto := max(int(frac*float64(len(ts.lines))), ts.given)
		if r.cfg.Input == "kafka" {
			var recs []*kgo.Record
			for i := ts.given; i < upto; i++ {
				if ch := ts.changes[i]; ch != nil {
					rec := &kgo.Record{Topic: ts.topic, Partition: ch.part, Value: []byte(ts.lines[i])}
					if ts.keys[i] != "" {
						rec.Key = []byte(ts.keys[i])
					}
					if r.avro != nil {
						rec.Key, rec.Value = r.avroEvent(ch)
					}
					recs = append(recs, rec)
				}
			}
			if err := r.kafka.ProduceSync(r.ctx, recs...).FirstErr(); err != nil {
				r.t.Fatal(err)
			}
		}
		if r.cfg.Input == "postgres" {
			r.applyTxns(ts, upto)
		}
		ts.given = upto
		in = filepath.Join(r.t.TempDir(), "in.jsonl")
		if err := os.WriteFile(in, []byte(strings.Join(ts.lines[:upto], "\n")+"\n"), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	upto := r.tables[0].given
	c := r.cfg
	args := []string{"run", "--warehouse", r.dir, "--sink-id", "sim",
		"--format-version", strconv.Itoa(c.Version), "--delete-mode", c.DeleteMode,
		"--memory-limit", c.Memory, "--checkpoint-rows", strconv.Itoa(c.CheckpointRows), "--quiet", "--max-record-size", c.MaxRecord}
	// What a group's coordinator decides, a single process does itself.
	decided := []string{"--commit-interval", strconv.Itoa(c.CommitInterval)}
	if c.Retain > 0 {
		decided = append(decided, "--retain-snapshots", strconv.Itoa(c.Retain))
	}
	coordArgs := append([]string{"coordinator", "--warehouse", r.dir, "--sink-id", "sim", "--checkpoint-interval", "200ms", "--align-timeout", "30s"}, decided...)
	if !c.Group {
		args = append(args, "--writers", strconv.Itoa(c.Writers),
			"--maintain="+strconv.FormatBool(c.Maintain), "--compact-every", strconv.Itoa(c.CompactEvery), "--compact-min-files", "2")
		args = append(args, decided...)
	}
	if c.Input == "postgres" {
		args = append(args, "--postgres", r.pgURL, "--pg-tables", "app.*", "--table-template", "sim.{table}", "--checkpoint-interval", "200ms")
		args = append(args, "--pg-publication-refresh", "300ms") // no table joins: the watch must change nothing
		if c.PgChunk != "" {
			args = append(args, "--pg-snapshot-chunk", c.PgChunk)
		}
	} else if c.Tables > 1 {
		args = append(args, "--table-template", "sim.{topic}", "--format", "debezium-json")
		coordArgs = append(coordArgs, "--table-template", "sim.{topic}")
	} else {
		args = append(args, "--table", r.tables[0].name(), "--schema", r.schema)
		coordArgs = append(coordArgs, "--table", r.tables[0].name(), "--schema", r.schema, "--format-version", strconv.Itoa(c.Version),
			"--vnode-count", strconv.Itoa(c.Partitions))
		if r.spec != "" {
			coordArgs = append(coordArgs, "--partition-spec", r.spec)
		}
	}
	if r.spec != "" {
		args = append(args, "--partition-spec", r.spec)
	}
	if c.KeyIndex {
		args = append(args, "--key-index-dir", r.keyDir)
	} else {
		args = append(args, "--key-index-dir", "-")
	}
	switch c.Input {
	case "postgres":
	case "pipe":
		args = append(args, "--input", "-")
	case "kafka":
		var topics []string
		for _, ts := range r.tables {
			topics = append(topics, ts.topic)
		}
		if c.Avro {
			args = append(args, "--format", "debezium-avro", "--schema-registry", r.registryURL)
		}
		if c.NewTopic {
			// A topic created later is found by the next run's start.
			args = append(args, "--kafka-brokers", r.broker, "--topic-regex", "t[0-9]+", "--stop-at-end")
		} else {
			args = append(args, "--kafka-brokers", r.broker, "--topic", strings.Join(topics, ","), "--stop-at-end")
		}
		if c.Group {
			args = append(args, "--group", "sim", "--kafka-session-timeout", "6s")
		} else {
			args = append(args, "--checkpoint-interval", "200ms")
		}
	default:
		args = append(args, "--input", in)
	}
	var exec1 func(env string, after time.Duration) (killed bool)
	exec1 = func(env string, after time.Duration) (killed bool) {
		r.t.Helper()
		if r.registry != nil && r.rng.IntN(2) == 0 {
			d := time.Duration(200+r.rng.IntN(1300)) * time.Millisecond
			r.outageUntil.Store(time.Now().Add(d).UnixNano())
			r.logf("the schema registry is down for %v", d)
		}
		cmd := exec.Command(binary, args...)
		if env != "" {
			cmd.Env = append(os.Environ(), "ICESINK_FAILPOINT="+env)
		}
		if c.Input == "pipe" {
			f, err := os.Open(in)
			if err != nil {
				r.t.Fatal(err)
			}
			defer f.Close()
			cmd.Stdin = f
		}
		var stderr bytes.Buffer
		cmd.Stderr, cmd.Stdout = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			r.t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		var timer <-chan time.Time
		if after > 0 {
			timer = time.After(after)
		}
		var stopped <-chan struct{}
		if c.Input == "postgres" {
			// A replication does not end by itself: SIGTERM once every
			// table holds every change.
			quit := make(chan struct{})
			defer close(quit)
			stopped = r.whenCaughtUp(quit)
		}
		select {
		case err = <-done:
		case <-stopped:
			cmd.Process.Signal(syscall.SIGTERM)
			err = <-done
		case <-timer:
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			return true
		case <-time.After(2 * time.Minute):
			// Its goroutines' stacks (Go prints them on SIGQUIT) say
			// where it waits.
			cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Signal(syscall.SIGKILL)
				<-done
			}
			r.fail("a run over lines 1-%d still ran after 2 minutes:\n%s", upto, stderr.String())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && env != "" {
				return true
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM && stopped != nil {
				// Our SIGTERM came before the process handled signals (a
				// loaded machine starts it slowly): as a kill; again.
				r.logf("a run stopped by SIGTERM before it handled signals: again")
				return exec1(env, after)
			}
			if r.cfg.refused() && ee.ExitCode() == 2 && strings.Contains(stderr.String(), "--memory-limit") && strings.Contains(stderr.String(), "a writer needs") {
				r.logf("refused as the draw expects: %s", strings.TrimSpace(stderr.String()))
				r.refused = true
				return false
			}
			r.fail("a run over lines 1-%d exited %d:\n%s", upto, ee.ExitCode(), stderr.String())
		} else if err != nil {
			r.t.Fatal(err)
		}
		return false
	}
	if c.Group {
		r.groupRun(args, coordArgs, kill, upto)
		r.logf("group run to line %d", upto)
		r.finished()
		return
	}
	if kill {
		var env string
		var after time.Duration
		how := ""
		if r.rng.IntN(2) == 0 {
			env = killPoints[r.rng.IntN(len(killPoints))] + ":" + strconv.Itoa(1+r.rng.IntN(3))
			how = "at " + env
		} else {
			after = time.Duration(50+r.rng.IntN(700)) * time.Millisecond
			how = "after " + after.String()
		}
		killed := exec1(env, after)
		if r.refused {
			return
		}
		if killed {
			r.logf("run to line %d killed %s", upto, how)
			r.check("after the kill")
		} else {
			r.logf("run to line %d ended before its kill %s", upto, how)
		}
	}
	// Another engine may append while the last run commits.
	var raced <-chan []event
	stopRace := make(chan struct{})
	endRace := sync.OnceFunc(func() { close(stopRace) })
	defer endRace() // also when the run fails the seed
	if c.Tables == 1 && c.Input != "kafka" && r.rng.IntN(3) == 0 {
		raced = r.raceAppends(r.tables[0], stopRace)
	}
	// PostgreSQL may restart (a crash) while the last run reads it: the
	// run reconnects and goes on from what the tables hold.
	var restarted chan struct{}
	if c.Input == "postgres" && r.rng.IntN(3) == 0 {
		d := time.Duration(100+r.rng.IntN(1500)) * time.Millisecond
		restarted = make(chan struct{})
		go func() {
			defer close(restarted)
			time.Sleep(d)
			r.pgSrv.Restart()
		}()
		r.logf("the PostgreSQL server restarts %v into the run", d)
	}
	exec1("", 0)
	if restarted != nil {
		<-restarted
		r.reconnectPostgres()
	}
	endRace()
	if raced != nil {
		evs := <-raced
		r.tables[0].events = append(r.tables[0].events, evs...)
		r.logf("%d foreign appends raced the run", len(evs))
	}
	if r.refused {
		return
	}
	if r.cfg.refused() {
		r.fail("a configuration below the database's least budget was not refused")
	}
	r.logf("run to line %d", upto)
	r.finished()
}

// finished checks the tables after a run that ended by itself: every
// change given is committed.
func (r *run) finished() {
	r.t.Helper()
	r.check("after the run")
	for _, ts := range r.tables {
		// Every change is committed; trailing lines that change nothing
		// (barriers, deletes of keys not live: an epoch that writes no
		// file records no line) may stay uncounted.
		want := r.end(ts)
		uncounted := ts.pos.behind(r.covering(ts))
		if uncounted && reflect.DeepEqual(r.expected(ts, ts.pos), r.expected(ts, want)) {
			uncounted = false
		}
		if uncounted || want.behind(ts.pos) {
			r.fail("a finished run left table %s at %v, want %v (its last lines: %q)", ts.name(), ts.pos, want, ts.lines[max(ts.given-3, 0):ts.given])
		}
	}
}

// avroEvent is change ch as Debezium's AvroConverter writes it: the
// record's key and value in the registry's wire format.
func (r *run) avroEvent(ch *change) (key, value []byte) {
	r.t.Helper()
	var before, after []any
	if ch.del {
		before = ch.row
	} else {
		after = ch.row
	}
	value, err := r.avro.AppendDebeziumAvro(nil, r.valueID, before, after)
	if err != nil {
		r.t.Fatal(err)
	}
	if key, err = r.avro.AppendKeyAvro(nil, r.keyID, ch.row); err != nil {
		r.t.Fatal(err)
	}
	return key, value
}

// trimNulls drops a row's trailing nulls: a column the source added (w)
// reads back null in rows written before it, and the model's rows lack it.
func trimNulls(row []any) []any {
	for len(row) > 0 && row[len(row)-1] == nil {
		row = row[:len(row)-1]
	}
	return row
}

// arrowSchema is the table's schema as iceberg-go writes it.
func (r *run) arrowSchema(tbl *table.Table) *arrow.Schema {
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		r.t.Fatal(err)
	}
	return sc
}

// appendForeign appends n rows of keys the input never has to tbl, as
// another engine does.
func (r *run) appendForeign(tbl *table.Table, n int) ([][]any, *table.Table, error) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, r.arrowSchema(tbl))
	defer b.Release()
	var rows [][]any
	for range n {
		r.foreign++
		id := 1_000_000 + r.foreign
		row := r.cfg.row(id, "f", "foreign", -id)
		rows = append(rows, row)
		for i, v := range row {
			switch v := v.(type) {
			case int64:
				b.Field(i).(*array.Int64Builder).Append(v)
			case string:
				b.Field(i).(*array.StringBuilder).Append(v)
			}
		}
	}
	for i := len(r.cfg.row(0, "", nil, 0)); i < b.Schema().NumFields(); i++ {
		for range n {
			b.Field(i).AppendNull() // a column the source added since
		}
	}
	rec := b.NewRecordBatch()
	at := array.NewTableFromRecords(r.arrowSchema(tbl), []arrow.RecordBatch{rec})
	rec.Release()
	defer at.Release()
	nt, err := tbl.AppendTable(r.ctx, at, 1024, nil)
	return rows, nt, err
}

// appendEvent is a foreign append of rows in the snapshot of sequence
// number seq, landed with the input committed up to at.
func (r *run) appendEvent(at position, seq int64, rows [][]any) event {
	c := r.cfg
	return event{at: at, seq: seq, what: "append", apply: func(m map[string][]any) {
		for _, row := range rows {
			m[c.key(row)] = row
		}
	}}
}

// raceAppends appends a foreign row after each commit of the sink to
// ts's table until stop is closed: between two commits, or racing the
// next one (the sink then starts again from the table: a file read
// again, a pipe from its journal). It returns the appends made.
func (r *run) raceAppends(ts *tableSim, stop <-chan struct{}) <-chan []event {
	out := make(chan []event, 1)
	wh := r.open()
	at := maps.Clone(ts.pos)
	go func() {
		defer wh.Close()
		var evs []event
		defer func() { out <- evs }()
		var seen int64
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			tbl, err := wh.Catalog.LoadTable(r.ctx, ts.ident)
			if err != nil {
				continue
			}
			cur := tbl.CurrentSnapshot()
			if cur == nil || cur.SnapshotID == seen || cur.Summary == nil || cur.Summary.Properties[commit.PropSinkID] != "sim" {
				continue
			}
			seen = cur.SnapshotID
			rows, nt, err := r.appendForeign(tbl, 1)
			if err != nil {
				continue // lost a race to the sink: the next commit
			}
			// Keys the input never has: where it lands among the
			// input's changes makes no difference, but for a TRUNCATE
			// (postgres), which the commit it follows orders it after.
			if r.cfg.Input == "postgres" {
				at = r.truncatedTo(ts, r.positionOf(ts, cur.Summary.Properties), tbl.Properties())
			}
			evs = append(evs, r.appendEvent(at, nt.CurrentSnapshot().SequenceNumber, rows))
		}
	}()
	return out
}

// foreignStep lets another engine change the table between two runs.
func (r *run) foreignStep() {
	r.t.Helper()
	wh := r.open()
	defer wh.Close()
	ts := r.tables[r.rng.IntN(len(r.tables))]
	if _, err := wh.Catalog.LoadTable(r.ctx, ts.ident); err != nil {
		return // not created yet
	}
	tbl := r.load(wh, ts)
	c := r.cfg
	at := maps.Clone(ts.pos)
	var snapshotOf = func(t *table.Table) int64 {
		if s := t.CurrentSnapshot(); s != nil {
			return s.SequenceNumber
		}
		return 0
	}
	switch k := r.rng.IntN(8); k {
	case 0, 1: // an append of keys the input never has
		n := 1 + r.rng.IntN(5)
		rows, nt, err := r.appendForeign(tbl, n)
		if err != nil {
			r.fail("a foreign append: %v", err)
		}
		ts.events = append(ts.events, r.appendEvent(at, snapshotOf(nt), rows))
		r.logf("foreign append of %d rows at %v", n, at)
	case 2, 3: // equality deletes of live keys, on the key or (composite) on id alone
		live := slices.Sorted(maps.Keys(r.expected(ts, at)))
		if len(live) == 0 {
			return
		}
		byID := c.Composite && r.rng.IntN(2) == 0
		fieldID := func(name string) int {
			f, ok := tbl.Schema().FindFieldByName(name)
			if !ok {
				r.fail("table %s has no column %s", ts.name(), name)
			}
			return f.ID
		}
		ids := []int{fieldID("id")}
		fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{strconv.Itoa(ids[0])})}}
		if c.Composite && !byID {
			ids = append(ids, fieldID("tenant"))
			fields = append(fields, arrow.Field{Name: "tenant", Type: arrow.BinaryTypes.String, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{strconv.Itoa(ids[1])})})
		}
		b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
		m := r.expected(ts, at)
		var gone []string
		delIDs := map[int64]bool{}
		for range 1 + r.rng.IntN(5) {
			k := live[r.rng.IntN(len(live))]
			row := m[k]
			b.Field(0).(*array.Int64Builder).Append(row[0].(int64))
			if len(ids) == 2 {
				b.Field(1).(*array.StringBuilder).Append(row[1].(string))
			}
			gone = append(gone, k)
			delIDs[row[0].(int64)] = true
		}
		rec := b.NewRecordBatch()
		b.Release()
		tx := tbl.NewTransaction()
		if err := tx.CommitEqualityDeletes(r.ctx, ids, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) }, nil); err != nil {
			r.fail("foreign equality deletes: %v", err)
		}
		nt, err := tx.Commit(r.ctx)
		rec.Release()
		if err != nil {
			r.fail("foreign equality deletes: %v", err)
		}
		ts.events = append(ts.events, event{at: at, seq: snapshotOf(nt), what: "equality delete", apply: func(m map[string][]any) {
			if byID {
				for k, row := range m {
					if delIDs[row[0].(int64)] {
						delete(m, k)
					}
				}
				return
			}
			for _, k := range gone {
				delete(m, k)
			}
		}})
		r.logf("foreign equality delete of %d keys (by id alone: %v) at %v", len(gone), byID, at)
	case 4: // a compaction by another engine
		spark, err := commit.NewCommitter(r.ctx, wh.Catalog, ts.ident, "spark")
		if err != nil {
			r.fail("%v", err)
		}
		res, err := spark.Compact(r.ctx, commit.Compaction{MinInputFiles: 2})
		if err != nil {
			r.fail("a foreign compaction: %v", err)
		}
		r.logf("foreign compaction at %v: %d data files into %d", at, res.RemovedDataFiles, res.AddedDataFiles)
	case 5: // a rollback to one of the sink's epochs
		if c.Input == "postgres" {
			// The slot has freed the WAL of what the table held: the
			// run refuses the table (a re-snapshot is not built yet).
			return
		}
		var targets []table.Snapshot
		cur := tbl.CurrentSnapshot()
		if cur == nil {
			return
		}
		for _, s := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
			if s.Summary != nil && s.Summary.Properties[commit.PropSinkID] == "sim" && s.Summary.Properties[commit.PropEpoch] != "" && s.SnapshotID != cur.SnapshotID {
				targets = append(targets, s)
			}
		}
		if len(targets) == 0 {
			return
		}
		target := targets[r.rng.IntN(len(targets))]
		line := r.positionOf(ts, target.Summary.Properties)
		tx := tbl.NewTransaction()
		if err := tx.RollbackToSnapshot(target.SnapshotID); err != nil {
			r.fail("a rollback: %v", err)
		}
		if _, err := tx.Commit(r.ctx); err != nil {
			r.fail("a rollback: %v", err)
		}
		// What the rolled-back history held of the other engine stays;
		// the input after the target's line is written again.
		kept := ts.events[:0]
		for _, e := range ts.events {
			if e.seq <= target.SequenceNumber {
				kept = append(kept, e)
			}
		}
		ts.events = kept
		ts.pos = line
		for tag := range ts.tags {
			delete(ts.tags, tag) // a tag may name a snapshot the rollback left
		}
		r.logf("rollback to epoch %s (%v) from %v", target.Summary.Properties[commit.PropEpoch], line, at)
		r.check("after the rollback")
	case 6: // a tag, and the table's commits retried
		cur := tbl.CurrentSnapshot()
		if cur == nil {
			return
		}
		tag := fmt.Sprintf("audit-%d", len(ts.tags))
		tx := tbl.NewTransaction()
		if err := tx.SetProperties(iceberg.Properties{"commit.retry.num-retries": "3"}); err != nil {
			r.fail("%v", err)
		}
		if _, err := tx.Commit(r.ctx); err != nil {
			r.fail("setting properties: %v", err)
		}
		if _, _, err := wh.Catalog.CommitTable(r.ctx, ts.ident, nil, []table.Update{table.NewSetSnapshotRefUpdate(tag, cur.SnapshotID, table.TagRef, -1, -1, -1)}); err != nil {
			r.fail("tagging: %v", err)
		}
		if ts.tags == nil {
			ts.tags = map[string]int{}
		}
		ts.tags[tag] = len(r.expected(ts, at))
		r.logf("tag %s and retry properties at %v", tag, at)
	case 7: // snapshot expiry by another engine
		tx := tbl.NewTransaction()
		if err := tx.ExpireSnapshots(table.WithRetainLast(3 + r.rng.IntN(5))); err != nil {
			r.fail("expiring snapshots: %v", err)
		}
		if _, err := tx.Commit(r.ctx); err != nil {
			r.fail("expiring snapshots: %v", err)
		}
		r.logf("foreign snapshot expiry at %v", at)
	}
	r.logf("  (table %s)", ts.name())
	r.check("after the foreign change")
}

// simulate runs one seed.
func simulate(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x51e5))
	cfg := draw(rng, rand.New(rand.NewPCG(seed, 0x1a7e)))
	if *onlyFlag != "" {
		if ok, err := regexp.MatchString(*onlyFlag, cfg.String()); err != nil {
			t.Fatalf("-sim.only: %v", err)
		} else if !ok {
			t.Skip("configuration not drawn by -sim.only")
		}
	}
	r := &run{t: t, ctx: context.Background(), seed: seed, rng: rng, cfg: cfg, dir: t.TempDir(), keyDir: filepath.Join(t.TempDir(), "keyindex")}
	for i := range cfg.Tables {
		ts := &tableSim{ident: table.Identifier{"sim", "t"}, topic: "cdc"}
		if cfg.Tables > 1 {
			ts.topic = "t" + strconv.Itoa(i)
			ts.ident = table.Identifier{"sim", ts.topic}
		}
		ts.lines, ts.keys, ts.changes = stream(rng, cfg)
		r.tables = append(r.tables, ts)
	}
	b, err := cfg.schema().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r.schema = filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(r.schema, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg.Partitioned {
		r.spec = filepath.Join(t.TempDir(), "spec.json")
		if err := os.WriteFile(r.spec, []byte(`{"spec-id":0,"fields":[{"source-id":1,"field-id":1000,"name":"id_bucket","transform":"bucket[4]"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Input == "kafka" {
		var topics []string
		for _, ts := range r.tables {
			topics = append(topics, ts.topic)
		}
		if cfg.NewTopic {
			topics = topics[:len(topics)-1]
			r.tables[len(r.tables)-1].late = true
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(cfg.Partitions), topics...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		r.kafka, r.broker = cl, c.ListenAddrs()[0]
	}
	if cfg.Input == "postgres" {
		r.startPostgres()
	}
	if cfg.Avro {
		r.registry = srfake.New()
		t.Cleanup(r.registry.Close)
		// A registry outage: the proxy fails every request for a while
		// at the start of a run; the records wait, and none is
		// dead-lettered or dropped.
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if time.Now().UnixNano() < r.outageUntil.Load() {
				http.Error(w, "registry down", http.StatusServiceUnavailable)
				return
			}
			r.registry.Handler().ServeHTTP(w, req)
		}))
		t.Cleanup(proxy.Close)
		r.registryURL = proxy.URL
		src := changelog.DebeziumSource{Server: "srv", DB: "db", Schema: "public", Table: "t"}
		v, k, err := changelog.DebeziumAvroSchema(cfg.schema(), src)
		if err != nil {
			t.Fatal(err)
		}
		if r.valueID, _, err = r.registry.RegisterSchema("cdc-value", sr.Schema{Schema: v, Type: sr.TypeAvro}); err != nil {
			t.Fatal(err)
		}
		if r.keyID, _, err = r.registry.RegisterSchema("cdc-key", sr.Schema{Schema: k, Type: sr.TypeAvro}); err != nil {
			t.Fatal(err)
		}
		if r.avro, err = changelog.NewAvroEncoder(cfg.schema(), src); err != nil {
			t.Fatal(err)
		}
	}
	r.logf("config %s", cfg)
	phases := 2 + rng.IntN(3)
	for p := 1; p <= phases; p++ {
		// After a rollback the input grows again from the table's
		// position: a file's lines are read from the start and skipped,
		// a topic's records sought.
		if r.sink(float64(p)/float64(phases), rng.IntN(2) == 0); r.refused {
			return
		}
		if p < phases {
			for range rng.IntN(3) {
				r.foreignStep()
			}
		}
	}
	// A last run over the whole input after what came last.
	for _, ts := range r.tables {
		if ts.pos.behind(r.covering(ts)) || ts.given < len(ts.lines) {
			r.sink(1, false)
			break
		}
	}
}

// TestSimulation runs the seeds: the fixed CI set, or -sim.seeds from
// -sim.from.
func TestSimulation(t *testing.T) {
	var seeds []uint64
	from, n := uint64(1), ciSeeds
	if testing.Short() {
		n = shortSeeds
	}
	if *seedsFlag > 0 {
		from, n = *fromFlag, *seedsFlag
	}
	for s := from; s < from+uint64(n); s++ {
		seeds = append(seeds, s)
	}
	if *seedsFlag == 0 && !testing.Short() {
		seeds = append(seeds, foundSeeds...)
	}
	for _, s := range seeds {
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			t.Parallel()
			simulate(t, s)
		})
	}
}

// proc is an icesink process of a group run.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	mu   sync.Mutex
	out  bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start starts an icesink process.
func (r *run) start(name string, args ...string) *proc {
	r.t.Helper()
	p := &proc{name: name, cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// groupRun runs a coordinator and two processes of a consumer group until
// both have read their input to its end; with kill, one of the three is
// killed at a random moment and started again after a pause.
func (r *run) groupRun(args, coordArgs []string, kill bool, upto int) {
	r.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	coordArgs = append(coordArgs, "--listen", addr)
	args = append(args, "--coordinator", addr)
	var logs strings.Builder // the output of the processes killed
	var coord *proc
	members := make([]*proc, 2)
	all := func() []*proc { return append([]*proc{coord}, members...) }
	outputs := func() string {
		var b strings.Builder
		b.WriteString(logs.String())
		for _, p := range all() {
			fmt.Fprintf(&b, "--- %s\n%s\n", p.name, p.output())
		}
		return b.String()
	}
	deadline := time.After(3 * time.Minute)
	startCoord := func() {
		coord = r.start("coordinator", coordArgs...)
		for !strings.Contains(coord.output(), "serving writers on") {
			select {
			case <-coord.done:
				r.fail("the coordinator exited: %v\n%s", coord.err, coord.output())
			case <-deadline:
				r.fail("the coordinator did not listen\n%s", coord.output())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	defer func() {
		for _, p := range all() {
			if p != nil && !p.exited() {
				p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.done
			}
		}
	}()
	if r.registry != nil && r.rng.IntN(2) == 0 {
		d := time.Duration(200+r.rng.IntN(1300)) * time.Millisecond
		r.outageUntil.Store(time.Now().Add(d).UnixNano())
		r.logf("the schema registry is down for %v", d)
	}
	startCoord()
	// memberArgs are process i's: a static member has its own identity,
	// which a restart under the same name takes back.
	memberArgs := func(i int) []string {
		if !r.cfg.Static {
			return args
		}
		return append(slices.Clip(args), "--kafka-instance-id", fmt.Sprintf("p%d", i))
	}
	for i := range members {
		members[i] = r.start(fmt.Sprintf("process %d", i), memberArgs(i)...)
	}
	if kill {
		after := time.Duration(50+r.rng.IntN(1500)) * time.Millisecond
		i := r.rng.IntN(3)
		pause := time.Duration(100+r.rng.IntN(1000)) * time.Millisecond
		time.Sleep(after)
		victim := all()[i]
		if victim.exited() {
			r.logf("%s of the group run to line %d ended before its kill after %v", victim.name, upto, after)
		} else {
			victim.cmd.Process.Signal(syscall.SIGKILL)
			<-victim.done
			fmt.Fprintf(&logs, "--- %s, killed\n%s\n", victim.name, victim.output())
			r.logf("%s of the group run to line %d killed after %v, started again after %v", victim.name, upto, after, pause)
			time.Sleep(pause)
			if i == 0 {
				startCoord()
			} else {
				members[i-1] = r.start(victim.name, memberArgs(i-1)...)
			}
		}
	}
	for _, p := range members {
		select {
		case <-p.done:
		case <-coord.done:
			r.fail("the coordinator exited during the group run: %v\n%s", coord.err, outputs())
		case <-deadline:
			for _, p := range all() {
				p.cmd.Process.Signal(syscall.SIGQUIT)
			}
			time.Sleep(2 * time.Second)
			r.fail("a group run over lines 1-%d still ran after 3 minutes:\n%s", upto, outputs())
		}
		if p.err != nil {
			r.fail("%s of a group run over lines 1-%d: %v\n%s", p.name, upto, p.err, outputs())
		}
	}
	coord.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-coord.done:
	case <-time.After(10 * time.Second):
		r.fail("the coordinator did not stop on SIGTERM\n%s", outputs())
	}
}

// startPostgres starts the source database with the tables' source
// tables, app.t (one table) or app.t0, app.t1.
func (r *run) startPostgres() {
	r.t.Helper()
	// Keepalives every second move idle tables on.
	r.pgSrv = pgtest.StartServer(r.t, "wal_sender_timeout=2s")
	r.pgURL = r.pgSrv.URL
	r.reconnectPostgres()
	ctx := context.Background()
	conn := r.pg
	cols, key := "id bigint, name text, v bigint NOT NULL", "id"
	if r.cfg.Composite {
		cols, key = "id bigint, tenant text, name text, v bigint NOT NULL", "id, tenant"
	}
	stmts := []string{"CREATE SCHEMA app"}
	for _, ts := range r.tables {
		n := "app." + ts.ident[1]
		stmts = append(stmts, fmt.Sprintf("CREATE TABLE %s (%s, PRIMARY KEY (%s))", n, cols, key), "ALTER TABLE "+n+" REPLICA IDENTITY FULL")
	}
	for _, st := range stmts {
		if _, err := conn.Exec(ctx, st); err != nil {
			r.t.Fatalf("%s: %v", st, err)
		}
	}
}

// applyTxns runs ts's changes up to upto on its source table, in
// transactions of 1-5 changes, one in eight rolled back (its changes
// leave the model); each change records the WAL position inside its
// transaction.
func (r *run) applyTxns(ts *tableSim, upto int) {
	r.t.Helper()
	ctx := context.Background()
	n := "app." + ts.ident[1]
	key := "id"
	if r.cfg.Composite {
		key = "id, tenant"
	}
	for i := ts.given; i < upto; {
		end := min(i+1+r.rng.IntN(5), upto)
		tx, err := r.pg.Begin(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		var lsn string
		for j := i; j < end; j++ {
			ch := ts.changes[j]
			if ch == nil {
				continue
			}
			var sql string
			var args []any
			if !ch.truncate && r.rng.IntN(60) == 0 {
				// The change becomes a TRUNCATE of the source table.
				ch.truncate = true
				r.logf("%s: line %d is a TRUNCATE", ts.name(), j+1)
			}
			switch {
			case ch.truncate:
				sql = "TRUNCATE " + n
			case ch.del && r.cfg.Composite:
				sql, args = "DELETE FROM "+n+" WHERE id = $1 AND tenant = $2", []any{ch.row[0], ch.row[1]}
			case ch.del:
				sql, args = "DELETE FROM "+n+" WHERE id = $1", []any{ch.row[0]}
			default:
				ph := make([]string, len(ch.row))
				for k := range ph {
					ph[k] = fmt.Sprintf("$%d", k+1)
				}
				sql = fmt.Sprintf("INSERT INTO %s VALUES (%s) ON CONFLICT (%s) DO UPDATE SET name = excluded.name, v = excluded.v", n, strings.Join(ph, ", "), key)
				args = ch.row
			}
			if _, err := tx.Exec(ctx, sql, args...); err != nil {
				r.t.Fatalf("%s %v: %v", sql, args, err)
			}
			if lsn == "" {
				if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
					r.t.Fatal(err)
				}
			}
		}
		if r.rng.IntN(8) == 0 {
			if err := tx.Rollback(ctx); err != nil {
				r.t.Fatal(err)
			}
			for j := i; j < end; j++ {
				ts.changes[j] = nil // never happened
			}
			r.logf("%s: lines %d-%d rolled back", ts.name(), i+1, end)
		} else {
			if err := tx.Commit(ctx); err != nil {
				r.t.Fatal(err)
			}
			l, err := pglogrepl.ParseLSN(cmp.Or(lsn, "0/0"))
			if err != nil {
				r.t.Fatal(err)
			}
			for j := i; j < end; j++ {
				if ch := ts.changes[j]; ch != nil {
					ch.lsn = uint64(l)
				}
			}
		}
		i = end
	}
}

// whenCaughtUp is closed once every table holds every change given,
// polling until quit.
func (r *run) whenCaughtUp(quit <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		// Not before the process handles signals (a loaded machine
		// starts it slowly; exec1 runs again one it stopped too soon).
		select {
		case <-quit:
			return
		case <-time.After(2 * time.Second):
		}
		for {
			select {
			case <-quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
			wh, err := warehouse.Open(r.ctx, r.dir, warehouse.Options{})
			if err != nil {
				continue
			}
			behind := false
			for _, ts := range r.tables {
				cm, err := commit.NewCommitter(r.ctx, wh.Catalog, ts.ident, "sim")
				if err != nil {
					behind = true
					break
				}
				last, ok := cm.Last()
				lsn, _ := strconv.ParseUint(last.Properties[postgres.PropLSN], 10, 64)
				need := r.covering(ts)[0]
				for _, ch := range ts.changes[:need] {
					if ch != nil && (!ok || ch.lsn >= lsn) {
						behind = true
						break
					}
				}
			}
			wh.Close()
			if !behind {
				close(out)
				return
			}
		}
	}()
	return out
}

// reconnectPostgres opens the connection the changes are made on (again,
// after a restart of the server).
func (r *run) reconnectPostgres() {
	r.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.pgURL)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conn.Close(ctx) })
	r.pg = conn
}
