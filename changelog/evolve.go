package changelog

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
)

// SchemaChangeError reports events whose schema differs from the table's
// in a way the table's schema must follow before they can be decoded: a
// column the table lacks, a numeric type wider than the column's, or a
// column the events make optional where the table requires it. It is not
// a bad record: a sink evolves the table (or refuses the change, naming
// it), calls SetSchema, and decodes the same input again. Decoders return
// it only with evolution on (WithEvolution, AvroDecoder.Evolve).
type SchemaChangeError struct {
	// Columns are the events' columns that differ, with the events' type
	// and nullability (ID 0), in the events' order.
	Columns []iceberg.NestedField
}

// Error names every column that differs.
func (e *SchemaChangeError) Error() string {
	var b strings.Builder
	b.WriteString("the events' schema changed:")
	for i, c := range e.Columns {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " column %q %s", c.Name, c.Type)
		if !c.Required {
			b.WriteString(" optional")
		}
	}
	return b.String()
}

// WithEvolution makes a debezium-json decoder report events whose Kafka
// Connect schema differs from the table's (a new column, a wider type, a
// column made optional) as a *SchemaChangeError, instead of decoding them
// against the table's schema (an unknown column is then a bad line).
func WithEvolution() Option {
	return func(d *Decoder) error {
		d.evolve = true
		return nil
	}
}

// schemaDiff is the event column ev of type typ (nullable: optional) if
// it needs the table's schema to change: absent from the plan, numeric
// and wider than the column, or optional where the column is a required
// non-key one. Types that merely differ otherwise are left to the values'
// decoding, as without evolution.
func (p *plan) schemaDiff(name string, typ iceberg.Type, nullable bool) (iceberg.NestedField, bool) {
	ev := iceberg.NestedField{Name: name, Type: typ, Required: !nullable}
	i, ok := p.byName[name]
	if !ok {
		ev.Required = false // a column added to a table with rows is optional
		return ev, true
	}
	c := &p.cols[i]
	// A type whose values the column does not hold: the table's type must
	// widen (or the change is refused).
	widen := numeric(typ) && numeric(c.typ) && !typ.Equals(c.typ)
	if widen {
		_, err := iceberg.PromoteType(typ, c.typ)
		widen = err != nil
	}
	switch c.typ.(type) {
	case iceberg.StringType, iceberg.BooleanType, iceberg.BinaryType, iceberg.UUIDType:
		// Numbers do not fill these: a changed type, refused by name.
		widen = widen || numeric(typ)
	}
	relax := nullable && c.required && !c.key
	if !widen && !relax {
		return ev, false
	}
	if !widen {
		ev.Type = c.typ
	}
	ev.Required = c.required && !relax
	return ev, true
}

// dropped returns the table's required non-key columns that events whose
// rows carry only the columns has names lack (a column dropped at the
// source): each made optional, so that later rows load with a null
// instead of stopping the table. A key column cannot go; its rows fail
// naming it.
func (p *plan) dropped(has func(name string) bool) []iceberg.NestedField {
	var out []iceberg.NestedField
	for _, c := range p.cols {
		if c.required && !c.key && !has(c.name) {
			out = append(out, iceberg.NestedField{Name: c.name, Type: c.typ, Required: false})
		}
	}
	return out
}

func numeric(t iceberg.Type) bool {
	switch t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type, iceberg.Float32Type, iceberg.Float64Type, iceberg.DecimalType:
		return true
	}
	return false
}

// connectType maps a Kafka Connect schema field (JsonConverter's spelling)
// to an Iceberg type, as SchemaFromDebeziumAvro maps Avro.
func connectType(f connectField) (iceberg.Type, error) {
	if t, ok, err := namedType(f.Name, f.Parameters); ok || err != nil {
		return t, err
	}
	switch f.Type {
	case "boolean":
		return iceberg.BooleanType{}, nil
	case "int8", "int16", "int32":
		return iceberg.Int32Type{}, nil
	case "int64":
		return iceberg.Int64Type{}, nil
	case "float", "float32":
		return iceberg.Float32Type{}, nil
	case "double", "float64":
		return iceberg.Float64Type{}, nil
	case "string":
		return iceberg.StringType{}, nil
	case "bytes":
		return iceberg.BinaryType{}, nil
	}
	return nil, fmt.Errorf("a Kafka Connect %s has no column type here (nested values are not supported yet)", f.Type)
}

// namedType maps the Kafka Connect and Debezium logical type name (with
// its parameters) to an Iceberg type; ok is false for a name it does not
// map.
func namedType(name string, params map[string]string) (t iceberg.Type, ok bool, err error) {
	switch name {
	case "org.apache.kafka.connect.data.Decimal":
		scale, err1 := strconv.Atoi(params["scale"])
		prec, err2 := strconv.Atoi(params["connect.decimal.precision"])
		if err2 != nil {
			prec = 38
		}
		if err1 != nil || prec < 1 || prec > 38 || scale < 0 || scale > prec {
			return nil, true, fmt.Errorf("decimal(%s, %s) does not fit Iceberg's decimal (precision 1-38)", params["connect.decimal.precision"], params["scale"])
		}
		return iceberg.DecimalTypeOf(prec, scale), true, nil
	case "io.debezium.time.Date", "org.apache.kafka.connect.data.Date":
		return iceberg.DateType{}, true, nil
	case "io.debezium.time.Time", "io.debezium.time.MicroTime", "io.debezium.time.NanoTime", "org.apache.kafka.connect.data.Time":
		return iceberg.TimeType{}, true, nil
	case "io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp", "org.apache.kafka.connect.data.Timestamp":
		return iceberg.TimestampType{}, true, nil
	case "io.debezium.time.ZonedTimestamp":
		return iceberg.TimestampTzType{}, true, nil
	case "io.debezium.data.Uuid":
		return iceberg.UUIDType{}, true, nil
	case "io.debezium.data.VariableScaleDecimal":
		return nil, true, fmt.Errorf("io.debezium.data.VariableScaleDecimal (a scale per value) has no Iceberg type; set the connector's decimal.handling.mode=precise or string")
	}
	return nil, false, nil
}

// connectDiff is how the rows of the Connect envelope schema env differ
// from the plan's (nil: not at all).
func (p *plan) connectDiff(env connectField) *SchemaChangeError {
	var diff []iceberg.NestedField
	seen := map[string]bool{}
	images := false
	for _, img := range env.Fields {
		if img.Field != "before" && img.Field != "after" {
			continue
		}
		images = images || len(img.Fields) > 0
		for _, f := range img.Fields {
			if seen[f.Field] {
				continue
			}
			seen[f.Field] = true
			typ, err := connectType(f)
			if err != nil {
				continue // an unknown column the row decoder names
			}
			if ev, ok := p.schemaDiff(f.Field, typ, f.Optional); ok {
				diff = append(diff, ev)
			}
		}
	}
	if images {
		diff = append(diff, p.dropped(func(name string) bool { return seen[name] })...)
	}
	if diff == nil {
		return nil
	}
	return &SchemaChangeError{Columns: diff}
}
