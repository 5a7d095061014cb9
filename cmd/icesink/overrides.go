package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/icesink/icesink/warehouse"
)

// tableOverride is what a database run does differently for one table it
// creates.
type tableOverride struct {
	// Key names the identifier fields (a source table without a primary
	// key sends no key schema).
	Key []string `yaml:"key"`
	// PartitionSpec is a partition spec FILE (JSON), as --partition-spec.
	PartitionSpec string `yaml:"partition-spec"`
	// Properties are table properties, as --property.
	Properties map[string]string `yaml:"properties"`
}

// tableOverrides are the per-table overrides of a database run, by table
// NS.NAME: the --tables FILE flag, or a tables: mapping in the --config
// file.
//
//	tables:
//	  inventory.orders:
//	    key: [order_id]
//	    partition-spec: orders.spec.json
//	    properties: {write.target-file-size-bytes: "268435456"}
type tableOverrides map[string]tableOverride

func (t tableOverrides) String() string { return "" }

// Set reads the overrides from a YAML file.
func (t tableOverrides) Set(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var m map[string]tableOverride
	if err := yaml.UnmarshalWithOptions(b, &m, yaml.DisallowUnknownField()); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return t.add(m)
}

// setNode takes the overrides from the config file's tables: mapping.
func (t tableOverrides) setNode(n ast.Node) error {
	var m map[string]tableOverride
	if err := yaml.NodeToValue(n, &m, yaml.DisallowUnknownField()); err != nil {
		return err
	}
	return t.add(m)
}

func (t tableOverrides) add(m map[string]tableOverride) error {
	for name, o := range m {
		if _, err := warehouse.ParseIdent(name); err != nil {
			return fmt.Errorf("table %q: %v", name, err)
		}
		t[name] = o
	}
	return nil
}

// apply makes spec the spec of a new table name, with its override.
func (t tableOverrides) apply(name string, spec *warehouse.TableSpec) (key []string, err error) {
	o, ok := t[name]
	if !ok {
		return nil, nil
	}
	if len(o.Properties) > 0 {
		props := iceberg.Properties{}
		for k, v := range spec.Properties {
			props[k] = v
		}
		for k, v := range o.Properties {
			if k == "format-version" {
				return nil, fmt.Errorf("table %s: property format-version: give --format-version", name)
			}
			props[k] = v
		}
		spec.Properties = props
	}
	if o.PartitionSpec != "" {
		b, err := os.ReadFile(o.PartitionSpec)
		if err != nil {
			return nil, fmt.Errorf("table %s: reading its partition spec: %w", name, err)
		}
		var ps iceberg.PartitionSpec
		if err := json.Unmarshal(b, &ps); err != nil {
			return nil, fmt.Errorf("table %s: partition spec %s: %w", name, o.PartitionSpec, err)
		}
		spec.Partition = &ps
	}
	return o.Key, nil
}

// unknownTables names overrides of tables the run does not write.
func (t tableOverrides) unknownTables(written map[string]string) string {
	var out []string
	for name := range t {
		if _, ok := written[name]; !ok {
			out = append(out, name)
		}
	}
	return strings.Join(out, ", ")
}
