package changelog

import (
	"errors"
	"fmt"

	"github.com/apache/iceberg-go"
)

// kind is a column's Iceberg primitive type, as far as decoding cares.
type kind uint8

const (
	kBool kind = iota + 1
	kInt
	kLong
	kFloat
	kDouble
	kDecimal
	kDate
	kTime
	kTimestamp
	kTimestampTz
	kString
	kUUID
	kBinary
	kFixed
)

// column is one top-level field of the table schema.
type column struct {
	name     string
	typ      iceberg.Type
	kind     kind
	required bool
	key      bool
	prec     int      // decimal precision
	scale    int      // decimal scale
	size     int      // fixed length
	enc      encoding // a Debezium spelling (see debezium.go); 0: the default
	encScale int      // the scale of an encDecimalBytes value
}

// plan is the decoding plan for a schema: its columns in schema order, the
// key columns, and a name index.
type plan struct {
	cols   []column
	keys   []int // indexes into cols of the identifier fields
	byName map[string]int
}

func newPlan(schema *iceberg.Schema) (*plan, error) {
	if schema == nil {
		return nil, errors.New("changelog: nil schema")
	}
	fields := schema.Fields()
	p := &plan{cols: make([]column, len(fields)), byName: make(map[string]int, len(fields))}
	byID := make(map[int]int, len(fields))
	for i, f := range fields {
		c := column{name: f.Name, typ: f.Type, required: f.Required}
		switch t := f.Type.(type) {
		case iceberg.BooleanType:
			c.kind = kBool
		case iceberg.Int32Type:
			c.kind = kInt
		case iceberg.Int64Type:
			c.kind = kLong
		case iceberg.Float32Type:
			c.kind = kFloat
		case iceberg.Float64Type:
			c.kind = kDouble
		case iceberg.DecimalType:
			c.kind, c.prec, c.scale = kDecimal, t.Precision(), t.Scale()
		case iceberg.DateType:
			c.kind = kDate
		case iceberg.TimeType:
			c.kind = kTime
		case iceberg.TimestampType:
			c.kind = kTimestamp
		case iceberg.TimestampTzType:
			c.kind = kTimestampTz
		case iceberg.StringType:
			c.kind = kString
		case iceberg.UUIDType:
			c.kind = kUUID
		case iceberg.BinaryType:
			c.kind = kBinary
		case iceberg.FixedType:
			c.kind, c.size = kFixed, t.Len()
		case *iceberg.StructType, *iceberg.ListType, *iceberg.MapType:
			return nil, fmt.Errorf("changelog: column %q: nested types are not supported yet (%s)", f.Name, f.Type)
		default:
			return nil, fmt.Errorf("changelog: column %q: type %v is not supported", f.Name, f.Type)
		}
		if _, dup := p.byName[f.Name]; dup {
			return nil, fmt.Errorf("changelog: column %q appears twice in the schema", f.Name)
		}
		p.byName[f.Name] = i
		byID[f.ID] = i
		p.cols[i] = c
	}
	if len(schema.IdentifierFieldIDs) == 0 {
		return nil, errors.New("changelog: the schema has no identifier fields (identifier-field-ids); an upsert stream needs a key")
	}
	for _, id := range schema.IdentifierFieldIDs {
		i, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("changelog: identifier field id %d is not a top-level column of the schema", id)
		}
		c := &p.cols[i]
		if c.key {
			return nil, fmt.Errorf("changelog: identifier field id %d is listed twice", id)
		}
		switch {
		case c.kind == kFloat || c.kind == kDouble:
			return nil, fmt.Errorf("changelog: key column %q: Iceberg does not allow %s identifier fields", c.name, c.typ)
		case !c.required:
			return nil, fmt.Errorf("changelog: key column %q must be required (Iceberg identifier fields are required)", c.name)
		}
		c.key = true
		p.keys = append(p.keys, i)
	}
	return p, nil
}
