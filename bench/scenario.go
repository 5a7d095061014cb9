package bench

import (
	"fmt"
	"strings"

	"github.com/dustin/go-humanize"
)

// Kind is what a scenario runs.
type Kind uint8

// The scenario kinds.
const (
	// Unbounded runs the upsert writer with MemoryLimit 0: the inserted-row
	// index stays wholly in memory until the commit, as in today's Java
	// and Rust writers.
	Unbounded Kind = iota + 1
	// Bounded runs the upsert writer with a positive MemoryLimit: the
	// index spills to local disk to stay under the budget.
	Bounded
	// AppendBaseline writes the stream's final live rows with iceberg-go's
	// own write path (Table.Append: table.WriteRecords and one commit),
	// with no upsert work: the throughput peer.
	AppendBaseline
	// ParquetFloor encodes the final live rows to one local Parquet file
	// with arrow-go's pqarrow and the writer's own properties: the
	// encoding floor no writer beats on one core.
	ParquetFloor
)

// String returns the kind's name as --scenarios spells it.
func (k Kind) String() string {
	switch k {
	case Unbounded:
		return "unbounded"
	case Bounded:
		return "bounded"
	case AppendBaseline:
		return "append-baseline"
	case ParquetFloor:
		return "parquet-floor"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MarshalText returns the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses a name MarshalText returned.
func (k *Kind) UnmarshalText(b []byte) error {
	for _, c := range []Kind{Unbounded, Bounded, AppendBaseline, ParquetFloor} {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("unknown scenario kind %q", b)
}

// Writes reports whether the kind runs the upsert writer.
func (k Kind) Writes() bool { return k == Unbounded || k == Bounded }

// Scenario is one named way of writing the stream.
type Scenario struct {
	// Name identifies the scenario in tables, plots and results.json:
	// the kind's name, and for Bounded the limit ("bounded-64MiB").
	Name string `json:"name"`
	// Kind is what the scenario runs.
	Kind Kind `json:"kind"`
	// MemoryLimit is the writer's budget in bytes (Bounded only).
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// Equality runs the writer with deltawriter.DeleteByEquality (the
	// name ends in "-equality"); otherwise DeleteByPosition, the default.
	Equality bool `json:"equality,omitempty"`
}

// withEquality returns s in DeleteByEquality mode.
func (s Scenario) withEquality() Scenario {
	s.Equality = true
	s.Name += "-equality"
	return s
}

// NewScenario returns the scenario of kind k; limit is used by Bounded only.
func NewScenario(k Kind, limit int64) Scenario {
	if k != Bounded {
		return Scenario{Name: k.String(), Kind: k}
	}
	return Scenario{Name: "bounded-" + FormatSize(limit), Kind: Bounded, MemoryLimit: limit}
}

// ParseScenarios parses a comma-separated list of kinds ("unbounded",
// "bounded", "append-baseline", "parquet-floor", or "all"); "bounded"
// expands to one scenario per limit in limits.
func ParseScenarios(list string, limits []int64) ([]Scenario, error) {
	if strings.TrimSpace(list) == "" || list == "all" {
		list = "unbounded,bounded,append-baseline,parquet-floor"
	}
	if list == "deletes" {
		// The delete modes side by side, against the append table's scan.
		list = "unbounded,unbounded-equality,append-baseline"
	}
	var out []Scenario
	seen := map[string]bool{}
	add := func(s Scenario) {
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	for _, name := range strings.Split(list, ",") {
		switch strings.TrimSpace(name) {
		case "unbounded":
			add(NewScenario(Unbounded, 0))
		case "bounded":
			if len(limits) == 0 {
				return nil, fmt.Errorf("bench: scenario bounded needs a memory limit")
			}
			for _, l := range limits {
				if l <= 0 {
					return nil, fmt.Errorf("bench: scenario bounded needs a positive memory limit, not %d", l)
				}
				add(NewScenario(Bounded, l))
			}
		case "unbounded-equality":
			add(NewScenario(Unbounded, 0).withEquality())
		case "bounded-equality":
			if len(limits) == 0 {
				return nil, fmt.Errorf("bench: scenario bounded-equality needs a memory limit")
			}
			for _, l := range limits {
				if l <= 0 {
					return nil, fmt.Errorf("bench: scenario bounded-equality needs a positive memory limit, not %d", l)
				}
				add(NewScenario(Bounded, l).withEquality())
			}
		case "append-baseline":
			add(NewScenario(AppendBaseline, 0))
		case "parquet-floor":
			add(NewScenario(ParquetFloor, 0))
		default:
			return nil, fmt.Errorf("bench: unknown scenario %q (want unbounded, bounded, unbounded-equality, bounded-equality, append-baseline, parquet-floor, all or deletes)", name)
		}
	}
	return out, nil
}

// FormatSize formats n bytes the way --memory-limit accepts them, in whole
// IEC units where exact ("64MiB", "1GiB"), else in bytes.
func FormatSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// ParseSize parses a byte size as --memory-limit takes it: "64MiB", "1GiB",
// "500MB" or a plain number of bytes.
func ParseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	if n > 1<<62 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(n), nil
}
