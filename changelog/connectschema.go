package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
)

// SchemaFromConnect derives the Iceberg schema of a table from one of its
// debezium-json events as Kafka Connect's JsonConverter writes them with
// schemas enabled: value is the event ({"schema":...,"payload":...}; the
// after struct gives the columns, in order, required unless optional)
// and key its record key ({"schema":...,"payload":...}; its fields are
// the identifier fields). Types map as the decoder reads them (Connect
// and Debezium logical names pick decimal, date, time, timestamp,
// timestamptz, uuid); nested structs, arrays and maps are refused.
//
// keyColumns, when given, name the identifier fields instead (a source
// table without a primary key sends no key schema); they become required.
func SchemaFromConnect(value, key []byte, keyColumns ...string) (*iceberg.Schema, error) {
	var env struct {
		Schema *connectField `json:"schema"`
	}
	if err := json.Unmarshal(value, &env); err != nil || env.Schema == nil {
		return nil, errors.New("changelog: the event carries no Kafka Connect schema (value.converter.schemas.enable=true gives one)")
	}
	var row *connectField
	for i := range env.Schema.Fields {
		if f := &env.Schema.Fields[i]; f.Field == "after" || f.Field == "before" && row == nil {
			row = f
		}
	}
	if row == nil || row.Type != "struct" {
		return nil, errors.New("changelog: the event's schema is not a Debezium envelope (no before/after struct)")
	}
	strict := len(keyColumns) == 0
	if strict {
		var kenv struct {
			Schema *connectField `json:"schema"`
		}
		if err := json.Unmarshal(key, &kenv); err != nil || kenv.Schema == nil || kenv.Schema.Type != "struct" {
			return nil, errors.New("changelog: the record key carries no Kafka Connect schema of the key columns (key.converter.schemas.enable=true gives one; for a table without a primary key, name its key columns)")
		}
		for _, f := range kenv.Schema.Fields {
			keyColumns = append(keyColumns, f.Field)
		}
	}
	fields := make([]iceberg.NestedField, 0, len(row.Fields))
	for i, f := range row.Fields {
		typ, err := connectType(f)
		if err != nil {
			return nil, fmt.Errorf("changelog: column %q: %w", f.Field, err)
		}
		fields = append(fields, iceberg.NestedField{ID: i + 1, Name: f.Field, Type: typ, Required: !f.Optional})
	}
	return withKey(fields, keyColumns, strict)
}

// withKey is the schema of fields with keyColumns as identifier fields.
// Key columns the source declares optional are refused when strict (the
// source's own key), else made required.
func withKey(fields []iceberg.NestedField, keyColumns []string, strict bool) (*iceberg.Schema, error) {
	var keys []int
	for _, name := range keyColumns {
		i := slices.IndexFunc(fields, func(f iceberg.NestedField) bool { return f.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("changelog: key column %q is not a column of the events", name)
		}
		if !fields[i].Required && strict {
			return nil, fmt.Errorf("changelog: key column %q is optional in the events; Iceberg identifier fields are required", name)
		}
		fields[i].Required = true
		keys = append(keys, fields[i].ID)
	}
	s := iceberg.NewSchemaWithIdentifiers(0, keys, fields...)
	if _, err := newPlan(s); err != nil {
		return nil, err
	}
	return s, nil
}
