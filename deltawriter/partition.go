package deltawriter

import (
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
)

// partitioner maps a row to its partition. Every partition source column
// must be a key column: equality deletes are partition-scoped, so a key
// whose rows could land in two partitions could not be deleted exactly.
type partitioner struct {
	spec   iceberg.PartitionSpec
	schema *iceberg.Schema
	fields []partField
}

type partField struct {
	id        int // partition field id
	srcPos    int // position of the source column in the row
	srcType   iceberg.Type
	transform iceberg.Transform
}

// newPartitioner returns nil for an unpartitioned spec.
func newPartitioner(schema *iceberg.Schema, spec iceberg.PartitionSpec) (*partitioner, error) {
	if spec.IsUnpartitioned() {
		return nil, nil
	}
	p := &partitioner{spec: spec, schema: schema}
	fields := schema.Fields()
	for _, pf := range spec.Fields() {
		if _, ok := pf.Transform.(iceberg.VoidTransform); ok {
			continue
		}
		src, ok := schema.FindFieldByID(pf.SourceID())
		if !ok {
			return nil, fmt.Errorf("partition field %q: source column %d is not in the schema", pf.Name, pf.SourceID())
		}
		if !slices.Contains(schema.IdentifierFieldIDs, pf.SourceID()) {
			return nil, fmt.Errorf("partition field %q: its source column %q is not a key column; equality deletes are partition-scoped, so an upsert that moved a key to another partition could not delete its old row", pf.Name, src.Name)
		}
		pos := slices.IndexFunc(fields, func(f iceberg.NestedField) bool { return f.ID == src.ID })
		if pos < 0 {
			return nil, fmt.Errorf("partition field %q: source column %q is not a top-level column", pf.Name, src.Name)
		}
		if !pf.Transform.CanTransform(src.Type) {
			return nil, fmt.Errorf("partition field %q: transform %s cannot apply to %s", pf.Name, pf.Transform, src.Type)
		}
		p.fields = append(p.fields, partField{id: pf.FieldID, srcPos: pos, srcType: src.Type, transform: pf.Transform})
	}
	return p, nil
}

// partitionOf returns the lane key, partition values and path of a row
// whose key columns are set and checked.
func (p *partitioner) partitionOf(row []any, buf []byte) (string, map[int]any, string, error) {
	vals := make(map[int]any, len(p.fields))
	rec := make(structRow, 0, p.spec.NumFields())
	buf = buf[:0]
	i := 0
	for _, pf := range p.spec.Fields() {
		var v any
		if i < len(p.fields) && p.fields[i].id == pf.FieldID {
			f := p.fields[i]
			i++
			lit, err := literalOf(f.srcType, row[f.srcPos])
			if err != nil {
				return "", nil, "", err
			}
			out := f.transform.Apply(iceberg.Optional[iceberg.Literal]{Valid: true, Val: lit})
			if out.Valid {
				v = out.Val.Any()
				b, err := out.Val.MarshalBinary()
				if err != nil {
					return "", nil, "", fmt.Errorf("partition field %q: %w", pf.Name, err)
				}
				buf = append(buf, byte(len(b)>>8), byte(len(b)))
				buf = append(buf, b...)
			}
			vals[pf.FieldID] = v
		}
		buf = append(buf, 0xff)
		rec = append(rec, v)
	}
	return string(buf), vals, p.spec.PartitionToPath(rec, p.schema), nil
}

// structRow is a partition tuple as iceberg.StructLike.
type structRow []any

func (r structRow) Size() int        { return len(r) }
func (r structRow) Get(i int) any    { return r[i] }
func (r structRow) Set(i int, v any) { r[i] = v }
