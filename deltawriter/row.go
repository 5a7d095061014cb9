package deltawriter

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
)

// rowChecker checks that a row fits the schema before anything of it is
// written: one value per field, each of the Go type its Iceberg type maps
// to, and no null in a required field (iceberg-go enforces none of this).
type rowChecker struct {
	fields []iceberg.NestedField
}

func (rc *rowChecker) check(row []any) error {
	if len(row) != len(rc.fields) {
		return fmt.Errorf("row has %d values, the schema has %d fields", len(row), len(rc.fields))
	}
	for i, f := range rc.fields {
		v := row[i]
		if v == nil {
			if f.Required {
				return fmt.Errorf("field %q: null in a required column", f.Name)
			}
			continue
		}
		if !valueFits(f.Type, v) {
			return fmt.Errorf("field %q: value %v (%T) does not fit type %s", f.Name, v, v, f.Type)
		}
	}
	return nil
}

func valueFits(t iceberg.Type, v any) bool {
	switch t := t.(type) {
	case iceberg.BooleanType:
		_, ok := v.(bool)
		return ok
	case iceberg.Int32Type, iceberg.DateType:
		_, ok := v.(int32)
		return ok
	case iceberg.Int64Type, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
		_, ok := v.(int64)
		return ok
	case iceberg.Float32Type:
		_, ok := v.(float32)
		return ok
	case iceberg.Float64Type:
		_, ok := v.(float64)
		return ok
	case iceberg.DecimalType:
		n, ok := v.(decimal128.Num)
		return ok && n.FitsInPrecision(int32(t.Precision()))
	case iceberg.StringType:
		_, ok := v.(string)
		return ok
	case iceberg.UUIDType:
		_, ok := v.(uuid.UUID)
		return ok
	case iceberg.BinaryType:
		_, ok := v.([]byte)
		return ok
	case iceberg.FixedType:
		b, ok := v.([]byte)
		return ok && len(b) == t.Len()
	}
	return false
}

// literalOf returns the Iceberg literal of a checked value of type t.
func literalOf(t iceberg.Type, v any) (iceberg.Literal, error) {
	switch t := t.(type) {
	case iceberg.BooleanType:
		return iceberg.NewLiteral(v.(bool)), nil
	case iceberg.Int32Type:
		return iceberg.NewLiteral(v.(int32)), nil
	case iceberg.Int64Type:
		return iceberg.NewLiteral(v.(int64)), nil
	case iceberg.DateType:
		return iceberg.NewLiteral(iceberg.Date(v.(int32))), nil
	case iceberg.TimeType:
		return iceberg.NewLiteral(iceberg.Time(v.(int64))), nil
	case iceberg.TimestampType, iceberg.TimestampTzType:
		return iceberg.NewLiteral(iceberg.Timestamp(v.(int64))), nil
	case iceberg.DecimalType:
		return iceberg.NewLiteral(iceberg.Decimal{Val: v.(decimal128.Num), Scale: t.Scale()}), nil
	case iceberg.StringType:
		return iceberg.NewLiteral(v.(string)), nil
	case iceberg.UUIDType:
		return iceberg.NewLiteral(v.(uuid.UUID)), nil
	case iceberg.BinaryType:
		return iceberg.NewLiteral(v.([]byte)), nil
	case iceberg.FixedType:
		return iceberg.FixedLiteral(v.([]byte)), nil
	}
	return nil, fmt.Errorf("type %s cannot be a partition source", t)
}
