package changelog

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hamba/avro/v2"
)

// errNoSource is the answer for an event without a Debezium source block.
var errNoSource = errors.New("the event has no Debezium source block (payload.source)")

// sourceJSON is the part of a source block that names the table.
type sourceJSON struct {
	Name   *string `json:"name"`
	DB     *string `json:"db"`
	Schema *string `json:"schema"`
	Table  *string `json:"table"`
}

func (s *sourceJSON) source() DebeziumSource {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return DebeziumSource{Server: str(s.Name), DB: str(s.DB), Schema: str(s.Schema), Table: str(s.Table)}
}

// SourceOfJSON returns the source block of a Debezium JSON event's value,
// with its Connect schema envelope ({"schema":..., "payload":...}) or
// without: the server (source.name), database, schema and table it comes
// from. A field the connector does not send (MySQL's schema) is "".
func SourceOfJSON(value []byte) (DebeziumSource, error) {
	var ev struct {
		Payload *struct {
			Source *sourceJSON `json:"source"`
		} `json:"payload"`
		Source *sourceJSON `json:"source"`
	}
	if err := json.Unmarshal(value, &ev); err != nil {
		return DebeziumSource{}, fmt.Errorf("reading the event's source block: %w", err)
	}
	src := ev.Source
	if ev.Payload != nil && ev.Payload.Source != nil {
		src = ev.Payload.Source
	}
	if src == nil {
		return DebeziumSource{}, errNoSource
	}
	return src.source(), nil
}

// SourceOfAvro returns the source block of a Debezium Avro event's value
// (its body, after the registry's five-byte header), written with the
// envelope schema (the registry's JSON text).
func SourceOfAvro(schema string, body []byte) (DebeziumSource, error) {
	s, err := avro.ParseWithCache(schema, "", &avro.SchemaCache{})
	if err != nil {
		return DebeziumSource{}, fmt.Errorf("the event's schema: %w", err)
	}
	var ev map[string]any
	if err := avro.Unmarshal(s, body, &ev); err != nil {
		return DebeziumSource{}, fmt.Errorf("reading the event's source block: %w", err)
	}
	src, ok := ev["source"].(map[string]any)
	if !ok {
		return DebeziumSource{}, errNoSource
	}
	str := func(k string) string {
		switch v := src[k].(type) {
		case string:
			return v
		case map[string]any: // a union, as {"string": v}
			s, _ := v["string"].(string)
			return s
		}
		return ""
	}
	return DebeziumSource{Server: str("name"), DB: str("db"), Schema: str("schema"), Table: str("table")}, nil
}
