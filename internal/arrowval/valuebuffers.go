package arrowval

import (
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// WithValueBuffers returns rec with an empty, non-nil value buffer in
// every string or binary column (nested ones too) whose value buffer
// has no bytes (nil), and rec itself (retained) when there is none. Such
// a column holds only empty values and nulls: arrow-go v18.9.0's Parquet
// statistics take the empty values of a buffer whose bytes are nil for
// no values (nil is their "unset"), so a
// file whose other batches hold "c" records a lower bound of "c" over a
// row holding "" — a bound that lets a reader skip the row. Kernels that
// filter, take or concatenate (iceberg-go's scanner applying deletes
// among them) leave such buffers nil. The caller releases the result.
func WithValueBuffers(rec arrow.RecordBatch) arrow.RecordBatch {
	cols := rec.Columns()
	var fixed []arrow.Array
	for i, c := range cols {
		d, changed := valueBuffers(c.Data())
		if !changed {
			continue
		}
		if fixed == nil {
			fixed = slices.Clone(cols)
		}
		fixed[i] = array.MakeFromData(d)
		defer fixed[i].Release()
		d.Release()
	}
	if fixed == nil {
		rec.Retain()
		return rec
	}
	return array.NewRecordBatch(rec.Schema(), fixed, rec.NumRows())
}

// valueBuffers returns d with empty value buffers given one, and whether
// anything changed (the result is then a new reference).
func valueBuffers(d arrow.ArrayData) (arrow.ArrayData, bool) {
	bufs := d.Buffers()
	var newBufs []*memory.Buffer
	switch d.DataType().ID() {
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		if d.Len() > 0 && len(bufs) > 2 && (bufs[2] == nil || bufs[2].Bytes() == nil) {
			newBufs = slices.Clone(bufs)
			newBufs[2] = memory.NewBufferBytes([]byte{})
		}
	}
	children := d.Children()
	var newChildren []arrow.ArrayData
	for i, ch := range children {
		nd, changed := valueBuffers(ch)
		if !changed {
			continue
		}
		if newChildren == nil {
			newChildren = slices.Clone(children)
		}
		newChildren[i] = nd
		defer nd.Release()
	}
	if newBufs == nil && newChildren == nil {
		return d, false
	}
	if newBufs == nil {
		newBufs = bufs
	}
	if newChildren == nil {
		newChildren = children
	}
	return array.NewData(d.DataType(), d.Len(), newBufs, newChildren, d.NullN(), d.Offset()), true
}
