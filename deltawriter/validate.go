package deltawriter

import (
	"fmt"

	"github.com/apache/iceberg-go"
)

// Validator checks changes as Writer.Write does before it writes anything
// (the key, the row against the schema, the partition), so that a source
// can refuse a change the writers would refuse while it still knows where
// the change came from: a Kafka record then goes to the dead-letter topic
// instead of stopping every run at the same offset. It is not safe for
// concurrent use.
type Validator struct {
	keys  *KeyCodec
	check rowChecker
	part  *partitioner
	key   []byte
}

// NewValidator returns a Validator for tables of schema and spec.
func NewValidator(schema *iceberg.Schema, spec iceberg.PartitionSpec) (*Validator, error) {
	keys, err := NewKeyCodec(schema)
	if err != nil {
		return nil, err
	}
	part, err := newPartitioner(schema, spec)
	if err != nil {
		return nil, err
	}
	return &Validator{keys: keys, check: rowChecker{fields: schema.Fields()}, part: part}, nil
}

// Check returns an error wrapping ErrBadChange when Write would refuse ch.
func (v *Validator) Check(ch Change) error {
	key, err := v.keys.Append(v.key[:0], ch.Row)
	v.key = key
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadChange, err)
	}
	switch ch.Op {
	case Insert, UpdateAfter:
		if err := v.check.check(ch.Row); err != nil {
			return fmt.Errorf("%w: %w", ErrBadChange, err)
		}
	case Delete, UpdateBefore:
	default:
		return fmt.Errorf("%w: unknown op %v", ErrBadChange, ch.Op)
	}
	if v.part != nil {
		if _, _, _, err := v.part.partitionOf(ch.Row, nil); err != nil {
			return fmt.Errorf("%w: %w", ErrBadChange, err)
		}
	}
	return nil
}
