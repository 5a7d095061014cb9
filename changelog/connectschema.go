package changelog

import (
	"encoding/json"
	"errors"
	"fmt"

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
func SchemaFromConnect(value, key []byte) (*iceberg.Schema, error) {
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
	var kenv struct {
		Schema *connectField `json:"schema"`
	}
	if err := json.Unmarshal(key, &kenv); err != nil || kenv.Schema == nil || kenv.Schema.Type != "struct" {
		return nil, errors.New("changelog: the record key carries no Kafka Connect schema of the key columns (key.converter.schemas.enable=true gives one; a table without a primary key has no upsert key)")
	}
	fields := make([]iceberg.NestedField, 0, len(row.Fields))
	ids := map[string]int{}
	for i, f := range row.Fields {
		typ, err := connectType(f)
		if err != nil {
			return nil, fmt.Errorf("changelog: column %q: %w", f.Field, err)
		}
		fields = append(fields, iceberg.NestedField{ID: i + 1, Name: f.Field, Type: typ, Required: !f.Optional})
		ids[f.Field] = i + 1
	}
	var keys []int
	for _, f := range kenv.Schema.Fields {
		id, ok := ids[f.Field]
		if !ok {
			return nil, fmt.Errorf("changelog: key field %q is not a column of the event", f.Field)
		}
		if !fields[id-1].Required {
			return nil, fmt.Errorf("changelog: key column %q is optional in the event; Iceberg identifier fields are required", f.Field)
		}
		keys = append(keys, id)
	}
	s := iceberg.NewSchemaWithIdentifiers(0, keys, fields...)
	if _, err := newPlan(s); err != nil {
		return nil, err
	}
	return s, nil
}
