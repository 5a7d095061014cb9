// Package arrowval converts Arrow values read from a table's Parquet files
// into the Go values deltawriter.Change documents, for the packages that
// read tables back (warehouse, deltawriter's key index).
package arrowval

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
)

// At returns the value at row i of an Arrow column read from a
// table's Parquet files as the Go type Change documents for the column's
// Iceberg type (nil for null); binary values are copied.
func At(c arrow.Array, i int) (any, error) {
	if c.IsNull(i) {
		return nil, nil
	}
	switch c := c.(type) {
	case *array.Boolean:
		return c.Value(i), nil
	case *array.Int32:
		return c.Value(i), nil
	case *array.Int64:
		return c.Value(i), nil
	case *array.Float32:
		return c.Value(i), nil
	case *array.Float64:
		return c.Value(i), nil
	case *array.Decimal128:
		return c.Value(i), nil
	case *array.Date32:
		return int32(c.Value(i)), nil
	case *array.Time64:
		return int64(c.Value(i)), nil
	case *array.Timestamp:
		return int64(c.Value(i)), nil
	case *array.String:
		return c.Value(i), nil
	case *array.LargeString:
		return c.Value(i), nil
	case *extensions.UUIDArray:
		return c.Value(i), nil
	case *array.FixedSizeBinary:
		return append([]byte(nil), c.Value(i)...), nil
	case *array.Binary:
		return append([]byte(nil), c.Value(i)...), nil
	case *array.LargeBinary:
		return append([]byte(nil), c.Value(i)...), nil
	}
	return nil, fmt.Errorf("arrow type %s is not supported", c.DataType())
}
