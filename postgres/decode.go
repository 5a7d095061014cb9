package postgres

import (
	"bytes"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/icesink/icesink/deltawriter"
)

// values decodes a tuple into a row of the table's columns; old fills
// the unchanged large (TOASTed) values the tuple does not carry.
func (t *sourceTable) values(tup *pglogrepl.TupleData, old []any) ([]any, error) {
	if tup == nil || len(tup.Columns) != len(t.cols) {
		return nil, fmt.Errorf("a row of %d columns, the table has %d", columnCount(tup), len(t.cols))
	}
	row := make([]any, len(t.cols))
	for i, col := range tup.Columns {
		c := &t.cols[i]
		switch col.DataType {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeToast:
			if old == nil {
				return nil, fmt.Errorf("column %s: an unchanged large value and no old row to take it from (the table's replica identity must be FULL)", c.name)
			}
			row[i] = old[i]
		case pglogrepl.TupleDataTypeText:
			v, err := c.decode(string(col.Data))
			if err != nil {
				return nil, fmt.Errorf("column %s (%s): %w", c.name, c.typname, err)
			}
			row[i] = v
		default:
			return nil, fmt.Errorf("column %s: a value in format %q (text expected)", c.name, col.DataType)
		}
	}
	return row, nil
}

func columnCount(tup *pglogrepl.TupleData) int {
	if tup == nil {
		return 0
	}
	return len(tup.Columns)
}

func (t *sourceTable) insert(m *pglogrepl.InsertMessage) ([]*change, error) {
	row, err := t.values(m.Tuple, nil)
	if err != nil {
		return nil, err
	}
	return []*change{{Op: deltawriter.Insert, Row: row}}, nil
}

// update is the new row; when the key changed (the old key comes with
// it), a delete of the old key first.
func (t *sourceTable) update(m *pglogrepl.UpdateMessage) ([]*change, error) {
	var old []any
	if m.OldTuple != nil {
		// Of the old row only what is used: the key, and the large values
		// the new row leaves unchanged.
		unchanged := func(i int) bool {
			return m.NewTuple != nil && i < len(m.NewTuple.Columns) && m.NewTuple.Columns[i].DataType == pglogrepl.TupleDataTypeToast
		}
		var err error
		if old, err = t.keyOrRow(m.OldTuple, unchanged); err != nil {
			return nil, err
		}
	}
	fill := old
	if m.OldTupleType != 'O' {
		fill = nil // the old key only: no unchanged value to take
	}
	row, err := t.values(m.NewTuple, fill)
	if err != nil {
		return nil, err
	}
	if old != nil && !t.sameKey(m.OldTuple, m.NewTuple) {
		return []*change{{Op: deltawriter.Delete, Row: t.keyOnly(old)}, {Op: deltawriter.UpdateAfter, Row: row}}, nil
	}
	return []*change{{Op: deltawriter.UpdateAfter, Row: row}}, nil
}

func (t *sourceTable) delete(m *pglogrepl.DeleteMessage) ([]*change, error) {
	old, err := t.keyOrRow(m.OldTuple, nil)
	if err != nil {
		return nil, err
	}
	return []*change{{Op: deltawriter.Delete, Row: t.keyOnly(old)}}, nil
}

// keyOrRow decodes an old tuple's key columns and those need asks for
// (nil: none); the others are null.
func (t *sourceTable) keyOrRow(tup *pglogrepl.TupleData, need func(int) bool) ([]any, error) {
	if tup == nil {
		return nil, fmt.Errorf("a delete without its old key")
	}
	row := make([]any, len(t.cols))
	if len(tup.Columns) != len(t.cols) {
		return nil, fmt.Errorf("an old row of %d columns, the table has %d", len(tup.Columns), len(t.cols))
	}
	for i, col := range tup.Columns {
		if col.DataType != pglogrepl.TupleDataTypeText || !t.cols[i].key && (need == nil || !need(i)) {
			continue
		}
		v, err := t.cols[i].decode(string(col.Data))
		if err != nil {
			return nil, fmt.Errorf("column %s (%s) of the old row: %w", t.cols[i].name, t.cols[i].typname, err)
		}
		row[i] = v
	}
	for i, c := range t.cols {
		if c.key && row[i] == nil {
			return nil, fmt.Errorf("the old row lacks key column %s: the table's replica identity must hold its key (the primary key, or FULL)", c.name)
		}
	}
	return row, nil
}

// sameKey reports whether an update's old and new tuples have the same
// key: the same text form of each key column (a value the new tuple
// leaves unchanged is the same).
func (t *sourceTable) sameKey(old, new *pglogrepl.TupleData) bool {
	for i, c := range t.cols {
		if !c.key || new.Columns[i].DataType == pglogrepl.TupleDataTypeToast {
			continue
		}
		if old.Columns[i].DataType != new.Columns[i].DataType || !bytes.Equal(old.Columns[i].Data, new.Columns[i].Data) {
			return false
		}
	}
	return true
}

// keyOnly is row with only its key columns set.
func (t *sourceTable) keyOnly(row []any) []any {
	out := make([]any, len(row))
	for i, c := range t.cols {
		if c.key {
			out[i] = row[i]
		}
	}
	return out
}
