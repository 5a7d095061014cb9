package deltawriter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/deltawriter"
)

var partSchema = iceberg.NewSchemaWithIdentifiers(0, []int{1, 2, 3},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "region", Type: iceberg.PrimitiveTypes.String, Required: true},
	iceberg.NestedField{ID: 3, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
	iceberg.NestedField{ID: 4, Name: "v", Type: iceberg.PrimitiveTypes.String},
)

func TestPartitionedAgainstModel(t *testing.T) {
	specs := map[string]iceberg.PartitionSpec{
		"identity+bucket": iceberg.NewPartitionSpec(
			iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "region", Transform: iceberg.IdentityTransform{}},
			iceberg.PartitionField{SourceIDs: []int{1}, FieldID: 1001, Name: "id_bucket", Transform: iceberg.BucketTransform{NumBuckets: 4}},
		),
		"truncate+day": iceberg.NewPartitionSpec(
			iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "region_trunc", Transform: iceberg.TruncateTransform{Width: 2}},
			iceberg.PartitionField{SourceIDs: []int{3}, FieldID: 1001, Name: "ts_day", Transform: iceberg.DayTransform{}},
		),
		"hour": iceberg.NewPartitionSpec(
			iceberg.PartitionField{SourceIDs: []int{3}, FieldID: 1000, Name: "ts_hour", Transform: iceberg.HourTransform{}},
		),
		"month": iceberg.NewPartitionSpec(
			iceberg.PartitionField{SourceIDs: []int{3}, FieldID: 1000, Name: "ts_month", Transform: iceberg.MonthTransform{}},
		),
		"year+bucket": iceberg.NewPartitionSpec(
			iceberg.PartitionField{SourceIDs: []int{3}, FieldID: 1000, Name: "ts_year", Transform: iceberg.YearTransform{}},
			iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1001, Name: "region_bucket", Transform: iceberg.BucketTransform{NumBuckets: 3}},
		),
	}
	regions := []string{"eu-west", "eu-north", "us-east", "ap-south"}
	for _, b := range budgets {
		for name, spec := range specs {
			t.Run(b.name+"/"+name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, 3))
				e := newEnv(t, partSchema, &spec)
				m := newModel(t, partSchema)
				ctx := context.Background()
				w, err := deltawriter.New(ctx, e.tbl, deltawriter.Options{SinkID: "test", BatchRows: 50, MemoryLimit: b.limit, SpillDir: t.TempDir(), RewriteDeleted: b.rewrite, DeleteMode: deleteMode(b.rewrite)})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close(ctx)
				epoch := uint64(0)
				for i := 0; i < 6000; i++ {
					k := rng.IntN(3000)
					row := []any{int64(k), regions[k%4], int64(k%9) * 5_000_000_000_000, fmt.Sprint("v", rng.IntN(1000))}
					op := deltawriter.UpdateAfter
					if rng.IntN(4) == 0 {
						op = deltawriter.Delete
					}
					ch := deltawriter.Change{Op: op, Row: row}
					if err := w.Write(ctx, ch); err != nil {
						t.Fatal(err)
					}
					m.apply(ch)
					if rng.IntN(3000) == 0 {
						epoch++
						e.commitWindow(w, epoch)
					}
				}
				checkSpilled(t, w, b.spills)
				epoch++
				e.commitWindow(w, epoch)
				checkRewritten(t, w, b.rewrite)
				m.check(t, e.tbl)
				checkNoEqualityDeletes(t, w)
			})
		}
	}
}

func TestPartitionOnNonKeyColumnRefused(t *testing.T) {
	spec := iceberg.NewPartitionSpec(
		iceberg.PartitionField{SourceIDs: []int{4}, FieldID: 1000, Name: "v", Transform: iceberg.IdentityTransform{}},
	)
	e := newEnv(t, partSchema, &spec)
	_, err := deltawriter.New(context.Background(), e.tbl, deltawriter.Options{})
	if err == nil || !strings.Contains(err.Error(), `source column "v" is not a key column`) {
		t.Fatalf("New = %v, want a refusal naming the non-key partition source", err)
	}
}
