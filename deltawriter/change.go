package deltawriter

import "fmt"

// Op is the kind of one change in a changelog stream.
type Op uint8

// The four changelog operations, as Flink and RisingWave name them.
const (
	Insert       Op = iota + 1 // +I: a row for a key (in upsert mode it replaces any row of that key)
	UpdateBefore               // -U: the old image of an update; removes the key's row
	UpdateAfter                // +U: the new image of an update; same as Insert
	Delete                     // -D: removes the key's row
)

// String returns the changelog spelling of op: "+I", "-U", "+U" or "-D".
func (op Op) String() string {
	switch op {
	case Insert:
		return "+I"
	case UpdateBefore:
		return "-U"
	case UpdateAfter:
		return "+U"
	case Delete:
		return "-D"
	}
	return fmt.Sprintf("Op(%d)", uint8(op))
}

// ParseOp parses the changelog spelling of an op ("+I", "-U", "+U", "-D").
func ParseOp(s string) (Op, bool) {
	switch s {
	case "+I":
		return Insert, true
	case "-U":
		return UpdateBefore, true
	case "+U":
		return UpdateAfter, true
	case "-D":
		return Delete, true
	}
	return 0, false
}

// IsDelete reports whether op removes the key's row (-U, -D).
func (op Op) IsDelete() bool { return op == UpdateBefore || op == Delete }

// Change is one row-level change. Row holds one value per top-level field
// of the table schema, in schema order; a nil value is SQL NULL. For deletes
// only the key columns need to be set.
//
// The Go type of a value is fixed by the column's Iceberg type:
//
//	boolean            bool
//	int                int32
//	long               int64
//	float              float32
//	double             float64
//	decimal(P,S)       decimal128.Num (the unscaled value, arrow-go)
//	date               int32 (days since 1970-01-01)
//	time               int64 (microseconds since midnight)
//	timestamp[tz]      int64 (microseconds since 1970-01-01 UTC)
//	string             string
//	uuid               uuid.UUID (github.com/google/uuid)
//	fixed(L), binary   []byte
type Change struct {
	Op  Op
	Row []any
}
