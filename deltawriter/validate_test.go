package deltawriter

import (
	"errors"
	"testing"

	"github.com/apache/iceberg-go"
)

// TestValidatorRefusesBadChanges: the Validator refuses, with
// ErrBadChange, the changes Write refuses (changes a decoder would not
// produce: the checks are the writer's own), and passes good ones.
func TestValidatorRefusesBadChanges(t *testing.T) {
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.Int32, Required: true})
	v, err := NewValidator(schema, *iceberg.UnpartitionedSpec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ch  Change
		bad bool
	}{
		{Change{Op: Insert, Row: []any{int64(1), int32(2)}}, false},
		{Change{Op: Delete, Row: []any{int64(1), nil}}, false},
		{Change{Op: Insert, Row: []any{nil, int32(2)}}, true},      // no key
		{Change{Op: Insert, Row: []any{int64(1), nil}}, true},      // null in a required column
		{Change{Op: UpdateAfter, Row: []any{int64(1), "x"}}, true}, // a value of another type
		{Change{Op: Insert, Row: []any{int64(1)}}, true},           // too few values
		{Change{Op: Op(99), Row: []any{int64(1), int32(2)}}, true}, // no such op
	} {
		err := v.Check(tc.ch)
		if got := err != nil; got != tc.bad || got && !errors.Is(err, ErrBadChange) {
			t.Errorf("%+v: %v, want refused %v (ErrBadChange)", tc.ch, err, tc.bad)
		}
	}
}
