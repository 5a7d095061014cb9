package commit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// ErrSchemaChange marks a change of the events' schema that Iceberg
// cannot follow: a narrowed or otherwise changed type, a changed key
// column.
var ErrSchemaChange = errors.New("incompatible schema change")

// EvolveSchema makes the table's schema hold the events' columns cols
// (name, type, required; ids unused): a column the table lacks is added at
// the end, optional (rows written before read null); a numeric column
// widens where Iceberg allows it (int to long, float to double, a decimal's
// precision up at the same scale); a required column the events make
// optional becomes optional. A narrower type in the events is not a change
// (its values fit). Anything else, and any change of a key column, is
// refused with an error matching ErrSchemaChange that names the table,
// the column and both types. The change is committed alone, without a
// snapshot (data that needs it is committed after it); when the table
// already holds every column (another process evolved it), it is
// returned as loaded. Conflicting commits are retried on a fresh table.
func EvolveSchema(ctx context.Context, loader TableLoader, ident table.Identifier, cols []iceberg.NestedField) (*table.Table, error) {
	name := strings.Join(ident, ".")
	for attempt := 0; ; attempt++ {
		tbl, err := loader.LoadTable(ctx, ident)
		if err != nil {
			return nil, fmt.Errorf("commit: loading table %s: %w", name, err)
		}
		schema := tbl.Schema()
		keys := map[int]bool{}
		for _, id := range schema.IdentifierFieldIDs {
			keys[id] = true
		}
		tx := tbl.NewTransaction()
		us := tx.UpdateSchema(true, false)
		changes := 0
		for _, c := range cols {
			cur, ok := schema.FindFieldByName(c.Name)
			if !ok {
				us.AddColumn([]string{c.Name}, c.Type, "", false, nil)
				changes++
				continue
			}
			var upd table.ColumnUpdate
			switch {
			case cur.Type.Equals(c.Type), Promotes(c.Type, cur.Type):
				// The same type, or a narrower one whose values fit.
			case keys[cur.ID] || !Promotes(cur.Type, c.Type):
				what := "column"
				if keys[cur.ID] {
					what = "key column"
				}
				return nil, fmt.Errorf("table %s: %s %q is %s, the events now carry %s: %w (Iceberg widens only int to long, float to double and a decimal's precision)", name, what, c.Name, cur.Type, c.Type, ErrSchemaChange)
			default:
				upd.FieldType = iceberg.Optional[iceberg.Type]{Valid: true, Val: c.Type}
			}
			if !c.Required && cur.Required && !keys[cur.ID] {
				upd.Required = iceberg.Optional[bool]{Valid: true, Val: false}
			}
			if upd.FieldType.Valid || upd.Required.Valid {
				us.UpdateColumn([]string{c.Name}, upd)
				changes++
			}
		}
		if changes == 0 {
			return tbl, nil
		}
		err = us.Commit()
		if err == nil {
			var next *table.Table
			if next, err = tx.Commit(ctx); err == nil {
				return next, nil
			}
		}
		if !Retryable(err) || attempt >= 5 {
			return nil, fmt.Errorf("commit: evolving the schema of table %s: %w", name, err)
		}
		if err := sleepBackoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// Promotes reports whether Iceberg's schema evolution may change a
// column of type from to type to.
func Promotes(from, to iceberg.Type) bool {
	switch f := from.(type) {
	case iceberg.Int32Type:
		_, ok := to.(iceberg.Int64Type)
		return ok
	case iceberg.Float32Type:
		_, ok := to.(iceberg.Float64Type)
		return ok
	case iceberg.DecimalType:
		t, ok := to.(iceberg.DecimalType)
		return ok && t.Scale() == f.Scale() && t.Precision() > f.Precision()
	}
	return false
}
