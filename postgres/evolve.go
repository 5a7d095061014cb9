package postgres

import (
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pglogrepl"

	"github.com/icesink/icesink/commit"
)

// relationColumns are the columns a relation message sends, in the
// stream's order: a column t knows keeps what t knows of it (its type's
// name); a new one is typed from its OID and modifier. Keys stay the
// table's key columns by name.
func (t *sourceTable) relationColumns(m *pglogrepl.RelationMessage) []column {
	out := make([]column, len(m.Columns))
	for i, rc := range m.Columns {
		if j := t.index(rc.Name); j >= 0 && t.cols[j].oid == rc.DataType && t.cols[j].typmod == rc.TypeModifier {
			out[i] = t.cols[j]
			continue
		}
		c := column{name: rc.Name, oid: rc.DataType, typmod: rc.TypeModifier, typname: fmt.Sprintf("type %d", rc.DataType), key: t.keys[rc.Name]}
		c.mapType()
		out[i] = c
	}
	return out
}

// sameColumns reports whether a and b are the same columns.
func sameColumns(a, b []column) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].name != b[i].name || a[i].oid != b[i].oid || a[i].typmod != b[i].typmod {
			return false
		}
	}
	return true
}

// schemaChanges are the changes the Iceberg schema needs to hold rows of
// cols (for commit.EvolveSchema): a column it lacks (optional), a wider
// type, a required column the source no longer has (optional). A
// narrower type is no change (its values are widened as they are read);
// any other change of type is passed on for EvolveSchema to refuse,
// naming both types.
func schemaChanges(cols []column, schema *iceberg.Schema) []iceberg.NestedField {
	var out []iceberg.NestedField
	for _, c := range cols {
		f, ok := schema.FindFieldByName(c.name)
		switch {
		case !ok:
			out = append(out, iceberg.NestedField{Name: c.name, Type: c.typ})
		case f.Type.Equals(c.typ) || widens(c.typ, f.Type):
		default:
			out = append(out, iceberg.NestedField{Name: c.name, Type: c.typ, Required: f.Required})
		}
	}
	for _, f := range schema.Fields() {
		if !f.Required {
			continue
		}
		found := false
		for _, c := range cols {
			found = found || c.name == f.Name
		}
		if !found {
			out = append(out, iceberg.NestedField{Name: f.Name, Type: f.Type})
		}
	}
	return out
}

// widens reports whether values of type from are read into a column of
// type to by widening: Iceberg's own promotions (commit.Promotes).
func widens(from, to iceberg.Type) bool { return commit.Promotes(from, to) }

// layout maps rows of a source layout (its columns) onto a table schema.
type layout struct {
	cols   []column
	target []int           // the schema field of each column
	conv   []func(any) any // widening, or nil
	width  int
}

// newLayout maps cols onto schema, which holds every column (after
// schemaChanges were applied).
func newLayout(cols []column, schema *iceberg.Schema) (*layout, error) {
	fields := schema.Fields()
	l := &layout{cols: cols, target: make([]int, len(cols)), conv: make([]func(any) any, len(cols)), width: len(fields)}
	for i, c := range cols {
		l.target[i] = -1
		for j, f := range fields {
			if f.Name != c.name {
				continue
			}
			l.target[i] = j
			switch {
			case f.Type.Equals(c.typ):
			case widens(c.typ, f.Type):
				switch f.Type.(type) {
				case iceberg.Int64Type:
					l.conv[i] = func(v any) any { return int64(v.(int32)) }
				case iceberg.Float64Type:
					l.conv[i] = func(v any) any { return float64(v.(float32)) }
				}
			default:
				return nil, fmt.Errorf("column %s is %s at the source and %s in the table", c.name, c.typ, f.Type)
			}
		}
		if l.target[i] < 0 {
			return nil, fmt.Errorf("column %s is not in the table's schema", c.name)
		}
	}
	return l, nil
}

// row maps a row of the layout's columns onto the schema.
func (l *layout) row(src []any) []any {
	out := make([]any, l.width)
	for i, v := range src {
		if v == nil {
			continue
		}
		if l.conv[i] != nil {
			v = l.conv[i](v)
		}
		out[l.target[i]] = v
	}
	return out
}
