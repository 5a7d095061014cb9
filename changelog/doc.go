// Package changelog owns the input formats: it decodes changelog-json and
// debezium-json lines into deltawriter changes typed by an Iceberg schema,
// and reports bad input by line and field.
package changelog
