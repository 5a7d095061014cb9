package changelog

import "fmt"

// Format is an input format of the changelog stream.
type Format uint8

// The input formats.
const (
	// ChangelogJSON is one object a line: {"op":"+I"|"-U"|"+U"|"-D","data":{...}}.
	ChangelogJSON Format = iota + 1
	// DebeziumJSON is one Debezium change event envelope a line
	// ({"before":...,"after":...,"op":"c"|"r"|"u"|"d"}), bare or wrapped in
	// {"schema":...,"payload":{...}}.
	DebeziumJSON
	// DebeziumAvro is Debezium change events in Avro, in the schema
	// registry's wire format; read from Kafka (NewAvroDecoder), not from
	// lines.
	DebeziumAvro
)

// String returns the flag spelling of f: "changelog-json", "debezium-json"
// or "debezium-avro".
func (f Format) String() string {
	switch f {
	case ChangelogJSON:
		return "changelog-json"
	case DebeziumJSON:
		return "debezium-json"
	case DebeziumAvro:
		return "debezium-avro"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat parses the flag spelling of a format.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "changelog-json":
		return ChangelogJSON, nil
	case "debezium-json":
		return DebeziumJSON, nil
	case "debezium-avro":
		return DebeziumAvro, nil
	}
	return 0, fmt.Errorf("changelog: unknown input format %q (want changelog-json, debezium-json or debezium-avro)", s)
}

// Set parses s into f, so that *Format is a flag.Value.
func (f *Format) Set(s string) error {
	v, err := ParseFormat(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}
