package warehouse

import (
	"context"
	"fmt"
	"iter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/internal/arrowval"
)

// Rows reads the table's live rows through iceberg-go's scanner (deletes
// applied) and yields each as one value per schema field, typed as
// deltawriter.Change documents. A row is only valid during its iteration.
func Rows(ctx context.Context, tbl *table.Table) iter.Seq2[[]any, error] {
	return func(yield func([]any, error) bool) {
		if tbl.CurrentSnapshot() == nil {
			return
		}
		fields := tbl.Schema().Fields()
		_, recs, err := tbl.Scan().ToArrowRecords(ctx)
		if err != nil {
			yield(nil, fmt.Errorf("scanning %v: %w", tbl.Identifier(), err))
			return
		}
		row := make([]any, len(fields))
		for rec, err := range recs {
			if err != nil {
				yield(nil, fmt.Errorf("scanning %v: %w", tbl.Identifier(), err))
				return
			}
			cols := make([]arrow.Array, len(fields))
			for i, f := range fields {
				idx := rec.Schema().FieldIndices(f.Name)
				if len(idx) != 1 {
					rec.Release()
					yield(nil, fmt.Errorf("scanning %v: column %q missing from the scan", tbl.Identifier(), f.Name))
					return
				}
				cols[i] = rec.Column(idx[0])
			}
			for r := 0; r < int(rec.NumRows()); r++ {
				for i, c := range cols {
					v, err := arrowval.At(c, r)
					if err != nil {
						rec.Release()
						yield(nil, fmt.Errorf("scanning %v: column %q: %w", tbl.Identifier(), fields[i].Name, err))
						return
					}
					row[i] = v
				}
				if !yield(row, nil) {
					rec.Release()
					return
				}
			}
			rec.Release()
		}
	}
}
