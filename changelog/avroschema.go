package changelog

import (
	"errors"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/hamba/avro/v2"
)

// SchemaFromDebeziumAvro derives the Iceberg schema of a table from the
// Avro schemas of its Debezium events: value (the envelope; its after
// record gives the columns, in order, required unless a nullable union)
// and key (a record whose fields are the identifier fields). Types map as
// the AvroDecoder reads them: Kafka Connect and Debezium names
// (org.apache.kafka.connect.data.Decimal, io.debezium.time.*,
// io.debezium.data.Uuid) and Avro logical types pick decimal(P,S), date,
// time, timestamp, timestamptz and uuid; enums become strings. Nested
// records, arrays and maps are refused.
//
// keyColumns, when given, name the identifier fields instead of key (a
// source table without a primary key); they become required.
func SchemaFromDebeziumAvro(value, key string, keyColumns ...string) (*iceberg.Schema, error) {
	env, err := avro.ParseWithCache(value, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("changelog: the value schema: %w", err)
	}
	rec, ok := env.(*avro.RecordSchema)
	if !ok {
		return nil, errors.New("changelog: the value schema is not a record (a Debezium envelope)")
	}
	var row *avro.RecordSchema
	for _, f := range rec.Fields() {
		if f.Name() != "after" && f.Name() != "before" {
			continue
		}
		t := deref(f.Type())
		if u, ok := t.(*avro.UnionSchema); ok {
			for _, b := range u.Types() {
				if r, ok := deref(b).(*avro.RecordSchema); ok {
					t = r
				}
			}
		}
		if r, ok := t.(*avro.RecordSchema); ok {
			row = r
			break
		}
	}
	if row == nil || !hasField(rec, "op") {
		return nil, fmt.Errorf("changelog: the value schema %s is not a Debezium envelope (no op, or no before/after record)", rec.FullName())
	}
	strict := len(keyColumns) == 0
	if strict {
		ks, err := avro.ParseWithCache(key, "", &avro.SchemaCache{})
		if err != nil {
			return nil, fmt.Errorf("changelog: the key schema: %w", err)
		}
		krec, ok := ks.(*avro.RecordSchema)
		if !ok || len(krec.Fields()) == 0 {
			return nil, errors.New("changelog: the key schema is not a record of the key columns (for a table without a primary key, name its key columns)")
		}
		for _, f := range krec.Fields() {
			keyColumns = append(keyColumns, f.Name())
		}
	}
	fields := make([]iceberg.NestedField, 0, len(row.Fields()))
	for i, f := range row.Fields() {
		typ, nullable, err := fieldType(f)
		if err != nil {
			return nil, fmt.Errorf("changelog: column %q: %w", f.Name(), err)
		}
		fields = append(fields, iceberg.NestedField{ID: i + 1, Name: f.Name(), Type: typ, Required: !nullable})
	}
	return withKey(fields, keyColumns, strict)
}

// fieldType is the Iceberg type of record field f: of its type, or of the
// other branch of a union with null (nullable).
func fieldType(f *avro.Field) (typ iceberg.Type, nullable bool, err error) {
	t := deref(f.Type())
	if u, ok := t.(*avro.UnionSchema); ok {
		if !u.Nullable() {
			return nil, false, fmt.Errorf("a union of %d types has no Iceberg type", len(u.Types()))
		}
		_, at := u.Indices()
		t, nullable = deref(u.Types()[at]), true
	}
	typ, err = icebergType(t)
	return typ, nullable, err
}

// icebergType maps one Avro type, as Debezium spells it, to Iceberg.
func icebergType(s avro.Schema) (iceberg.Type, error) {
	name := ""
	if p, ok := s.(avro.PropertySchema); ok {
		name, _ = p.Prop("connect.name").(string)
	}
	logical := avro.LogicalType("")
	if lt, ok := s.(avro.LogicalTypeSchema); ok && lt.Logical() != nil {
		logical = lt.Logical().Type()
	}
	if logical == avro.Decimal {
		ls, _ := logicalDecimal(s)
		prec, scale := ls.Precision(), ls.Scale()
		if prec < 1 || prec > 38 || scale < 0 || scale > prec {
			return nil, fmt.Errorf("decimal(%d, %d) does not fit Iceberg's decimal (precision 1-38)", prec, scale)
		}
		return iceberg.DecimalTypeOf(prec, scale), nil
	}
	params := map[string]string{}
	if p, ok := s.(avro.PropertySchema); ok {
		raw, _ := p.Prop("connect.parameters").(map[string]any)
		for k, v := range raw {
			if sv, ok := v.(string); ok {
				params[k] = sv
			}
		}
	}
	if t, ok, err := namedType(name, params); ok || err != nil {
		return t, err
	}
	switch logical {
	case avro.Date:
		return iceberg.DateType{}, nil
	case avro.TimeMillis, avro.TimeMicros:
		return iceberg.TimeType{}, nil
	case avro.TimestampMillis, avro.TimestampMicros:
		return iceberg.TimestampTzType{}, nil
	case avro.LocalTimestampMillis, avro.LocalTimestampMicros:
		return iceberg.TimestampType{}, nil
	case avro.UUID:
		return iceberg.UUIDType{}, nil
	}
	switch s := s.(type) {
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Boolean:
			return iceberg.BooleanType{}, nil
		case avro.Int:
			return iceberg.Int32Type{}, nil
		case avro.Long:
			return iceberg.Int64Type{}, nil
		case avro.Float:
			return iceberg.Float32Type{}, nil
		case avro.Double:
			return iceberg.Float64Type{}, nil
		case avro.String:
			return iceberg.StringType{}, nil
		case avro.Bytes:
			return iceberg.BinaryType{}, nil
		}
	case *avro.FixedSchema:
		return iceberg.FixedTypeOf(s.Size()), nil
	case *avro.EnumSchema:
		return iceberg.StringType{}, nil
	}
	return nil, fmt.Errorf("an Avro %s has no column type here (nested values are not supported yet)", s.Type())
}
