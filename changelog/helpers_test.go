package changelog

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/deltawriter"
)

// allTypesSchema has a composite key (k long, k2 string) and one optional
// column of every supported type, plus a required non-key column.
func allTypesSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1, 2},
		iceberg.NestedField{ID: 1, Name: "k", Type: iceberg.Int64Type{}, Required: true},
		iceberg.NestedField{ID: 2, Name: "k2", Type: iceberg.StringType{}, Required: true},
		iceberg.NestedField{ID: 3, Name: "b", Type: iceberg.BooleanType{}},
		iceberg.NestedField{ID: 4, Name: "i", Type: iceberg.Int32Type{}},
		iceberg.NestedField{ID: 5, Name: "l", Type: iceberg.Int64Type{}},
		iceberg.NestedField{ID: 6, Name: "f", Type: iceberg.Float32Type{}},
		iceberg.NestedField{ID: 7, Name: "d", Type: iceberg.Float64Type{}},
		iceberg.NestedField{ID: 8, Name: "dec", Type: iceberg.DecimalTypeOf(5, 1)},
		iceberg.NestedField{ID: 9, Name: "dec38", Type: iceberg.DecimalTypeOf(38, 10)},
		iceberg.NestedField{ID: 10, Name: "dt", Type: iceberg.DateType{}},
		iceberg.NestedField{ID: 11, Name: "t", Type: iceberg.TimeType{}},
		iceberg.NestedField{ID: 12, Name: "ts", Type: iceberg.TimestampType{}},
		iceberg.NestedField{ID: 13, Name: "tz", Type: iceberg.TimestampTzType{}},
		iceberg.NestedField{ID: 14, Name: "s", Type: iceberg.StringType{}},
		iceberg.NestedField{ID: 15, Name: "u", Type: iceberg.UUIDType{}},
		iceberg.NestedField{ID: 16, Name: "bin", Type: iceberg.BinaryType{}},
		iceberg.NestedField{ID: 17, Name: "fx", Type: iceberg.FixedTypeOf(4)},
		iceberg.NestedField{ID: 18, Name: "req", Type: iceberg.Int32Type{}, Required: true},
	)
}

// colIndex returns the position of the named column in schema.
func colIndex(t testing.TB, schema *iceberg.Schema, name string) int {
	t.Helper()
	for i, f := range schema.Fields() {
		if f.Name == name {
			return i
		}
	}
	t.Fatalf("no column %q", name)
	return -1
}

// decodeAll decodes input to the end, returning the records (with their
// Changes copied) and the first error other than io.EOF.
func decodeAll(t testing.TB, format Format, schema *iceberg.Schema, input string) ([]Record, error) {
	t.Helper()
	d, err := NewDecoder(strings.NewReader(input), format, schema)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for {
		rec, err := d.Next()
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return recs, err
		}
		rec.Changes = append([]deltawriter.Change(nil), rec.Changes...)
		recs = append(recs, rec)
	}
}

// sameValue compares decoded values: NaN equals NaN, -0 differs from +0,
// byte slices by content.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float32:
		y, ok := b.(float32)
		if !ok {
			return false
		}
		if x != x && y != y {
			return true
		}
		return math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		if !ok {
			return false
		}
		if math.IsNaN(x) && math.IsNaN(y) {
			return true
		}
		return math.Float64bits(x) == math.Float64bits(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case decimal128.Num:
		y, ok := b.(decimal128.Num)
		return ok && x == y
	}
	return a == b
}

func sameRow(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameValue(a[i], b[i]) {
			return false
		}
	}
	return true
}

// lineErr asserts err is a *LineError and returns it.
func lineErr(t testing.TB, err error) *LineError {
	t.Helper()
	var le *LineError
	if !errors.As(err, &le) {
		t.Fatalf("error %v (%T) is not a *LineError", err, err)
	}
	return le
}
