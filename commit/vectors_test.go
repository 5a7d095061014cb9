package commit_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// vectorSide is one format v3 table, its committer and its writer.
type vectorSide struct {
	wh *warehouse.Warehouse
	cm *commit.Committer
	w  *deltawriter.Writer
}

func newVectorSide(t *testing.T, rowDelta bool, part *iceberg.PartitionSpec) *vectorSide {
	return newVectorSideWith(t, rowDelta, part, nil)
}

// newVectorSideWith is newVectorSide, committing through the loader
// wrap makes of the warehouse's catalog (nil: the catalog).
func newVectorSideWith(t *testing.T, rowDelta bool, part *iceberg.PartitionSpec, wrap func(catalog.Catalog) commit.TableLoader) *vectorSide {
	t.Helper()
	ctx := context.Background()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	wh, tbl := newTableOf(t, warehouse.TableSpec{Schema: schema, Partition: part, Properties: iceberg.Properties{
		"format-version": "3",
		table.MetadataDeleteAfterCommitEnabledKey: "true",
		table.MetadataPreviousVersionsMaxKey:      "4",
	}})
	var loader commit.TableLoader = wh.Catalog
	if wrap != nil {
		loader = wrap(wh.Catalog)
	}
	cm, err := commit.NewCommitter(ctx, loader, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	if rowDelta {
		commit.CommitThroughRowDelta(cm)
	}
	w, err := deltawriter.New(ctx, tbl, deltawriter.Options{SinkID: "s", DeleteMode: deltawriter.DeleteByPosition, BatchRows: 64, SpillDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(ctx) })
	return &vectorSide{wh: wh, cm: cm, w: w}
}

func (s *vectorSide) window(t *testing.T, epoch uint64, changes []deltawriter.Change) {
	t.Helper()
	if err := s.try(epoch, changes); err != nil {
		t.Fatalf("epoch %d: %v", epoch, err)
	}
	if err := s.w.Committed(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// try writes changes and commits them as epoch.
func (s *vectorSide) try(epoch uint64, changes []deltawriter.Change) error {
	ctx := context.Background()
	for _, ch := range changes {
		if err := s.w.Write(ctx, ch); err != nil {
			return err
		}
	}
	p, err := s.w.PrepareCommit(ctx)
	if err != nil {
		return err
	}
	_, err = s.cm.Commit(ctx, epoch, []commit.Payload{p}, nil)
	return err
}

// vectorsPerFile returns the table's live data files and deletion vectors,
// failing on a data file with two live vectors or a position-delete file.
func vectorsPerFile(t *testing.T, tbl *table.Table) (files, vectors int) {
	t.Helper()
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if len(task.DeleteFiles) > 0 || len(task.DeletionVectorFiles) > 1 {
			t.Fatalf("data file %s has %d position-delete files and %d live deletion vectors", task.File.FilePath(), len(task.DeleteFiles), len(task.DeletionVectorFiles))
		}
		vectors += len(task.DeletionVectorFiles)
	}
	return len(tasks), vectors
}

// TestVectorCommitsMatchRowDelta: commits that replace deletion vectors
// (commitVectors, manifests written by the committer) leave the table
// iceberg-go's RowDelta leaves, the same stream written into a second
// table: each commit's summary counts and totals, its row ids (v3 row
// lineage: first-row-id, added-rows, the table's next-row-id), the live
// data files and vectors (one per data file at most), the rows the
// scanner reads, which are the stream's final state, and the metadata
// files left (write.metadata.delete-after-commit.enabled). The vector commits
// keep one delete manifest (per spec) where RowDelta adds one per
// commit. Unpartitioned and partitioned (bucket[4] of the key: a window
// writes a data file and vectors per bucket).
func TestVectorCommitsMatchRowDelta(t *testing.T) {
	bucket := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{1}, FieldID: 1000, Name: "id_bucket", Transform: iceberg.BucketTransform{NumBuckets: 4}})
	for _, part := range []*iceberg.PartitionSpec{nil, &bucket} {
		t.Run(map[bool]string{true: "unpartitioned", false: "bucketed"}[part == nil], func(t *testing.T) {
			testVectorCommitsMatchRowDelta(t, part)
		})
	}
}

func testVectorCommitsMatchRowDelta(t *testing.T, part *iceberg.PartitionSpec) {
	own, ref := newVectorSide(t, false, part), newVectorSide(t, true, part)
	rng := rand.New(rand.NewPCG(5, 7))
	model := map[int64]int64{}
	const commits, per, keys = 24, 150, 300
	for epoch := uint64(1); epoch <= commits; epoch++ {
		var changes []deltawriter.Change
		for range per {
			k := rng.Int64N(keys)
			if _, live := model[k]; live && rng.IntN(5) == 0 {
				changes = append(changes, deltawriter.Change{Op: deltawriter.Delete, Row: []any{k, int64(0)}})
				delete(model, k)
				continue
			}
			v := rng.Int64()
			changes = append(changes, deltawriter.Change{Op: deltawriter.Insert, Row: []any{k, v}})
			model[k] = v
		}
		own.window(t, epoch, changes)
		ref.window(t, epoch, changes)

		a, b := own.cm.Table(), ref.cm.Table()
		sa, sb := a.CurrentSnapshot(), b.CurrentSnapshot()
		if sa.Summary.Operation != sb.Summary.Operation {
			t.Errorf("epoch %d: operation %s, RowDelta's %s", epoch, sa.Summary.Operation, sb.Summary.Operation)
		}
		for k, v := range sb.Summary.Properties {
			// Sizes differ with the files' names; partition summaries
			// and the version are iceberg-go's alone.
			if strings.HasSuffix(k, "files-size") || strings.HasPrefix(k, "changed-partition") || strings.HasPrefix(k, "partitions.") || k == "iceberg-version" {
				continue
			}
			if got := sa.Summary.Properties[k]; got != v {
				t.Errorf("epoch %d: summary %s = %q, RowDelta's %q", epoch, k, got, v)
			}
		}
		for k := range sa.Summary.Properties {
			if _, ok := sb.Summary.Properties[k]; !ok && !strings.HasSuffix(k, "files-size") {
				t.Errorf("epoch %d: summary %s = %q, which RowDelta's lacks", epoch, k, sa.Summary.Properties[k])
			}
		}
		if *sa.FirstRowID != *sb.FirstRowID || *sa.AddedRows != *sb.AddedRows || a.Metadata().NextRowID() != b.Metadata().NextRowID() {
			t.Errorf("epoch %d: first row id %d, added rows %d, next row id %d; RowDelta's %d, %d, %d", epoch,
				*sa.FirstRowID, *sa.AddedRows, a.Metadata().NextRowID(), *sb.FirstRowID, *sb.AddedRows, b.Metadata().NextRowID())
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	fa, va := vectorsPerFile(t, own.cm.Table())
	fb, vb := vectorsPerFile(t, ref.cm.Table())
	if fa != fb || va != vb || va == 0 {
		t.Fatalf("%d data files, %d vectors; RowDelta's %d, %d (want equal, some vectors)", fa, va, fb, vb)
	}
	for _, side := range []*vectorSide{own, ref} {
		got := map[int64]int64{}
		for row, err := range warehouse.Rows(context.Background(), side.cm.Table()) {
			if err != nil {
				t.Fatal(err)
			}
			got[row[0].(int64)] = row[1].(int64)
		}
		if len(got) != len(model) {
			t.Fatalf("%d live rows, want %d", len(got), len(model))
		}
		for k, v := range model {
			if got[k] != v {
				t.Fatalf("key %d reads %d, want %d", k, got[k], v)
			}
		}
	}
	if a, b := metadataFiles(t, own.cm.Table()), metadataFiles(t, ref.cm.Table()); a != b {
		t.Errorf("%d metadata files left, RowDelta's %d", a, b)
	}
	// A filtered scan prunes manifests by their partition summaries.
	for k := range int64(20) {
		_, live := model[k]
		for _, side := range []*vectorSide{own, ref} {
			if n := rowsWhere(t, side.cm.Table(), k); n != map[bool]int64{true: 1, false: 0}[live] {
				t.Fatalf("a scan for key %d reads %d rows (live: %v)", k, n, live)
			}
		}
	}
	_, dela := countManifests(t, own.cm.Table())
	_, delb := countManifests(t, ref.cm.Table())
	if dela != 1 || delb < commits/2 {
		t.Errorf("%d delete manifests, RowDelta's %d; want 1 and one per commit", dela, delb)
	}
}

// rowsWhere counts the rows a scan of tbl filtered on id = k reads.
func rowsWhere(t *testing.T, tbl *table.Table, k int64) int64 {
	t.Helper()
	_, recs, err := tbl.Scan(table.WithRowFilter(iceberg.EqualTo(iceberg.Reference("id"), k))).ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		n += rec.NumRows()
		rec.Release()
	}
	return n
}

// metadataFiles counts the table's metadata JSON files.
func metadataFiles(t *testing.T, tbl *table.Table) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(strings.TrimPrefix(tbl.Location(), "file://"), "metadata", "*.metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// racingCatalog lets a foreign snapshot land just before the first commit
// it is asked for once armed: that commit finds the branch moved.
type racingCatalog struct {
	catalog.Catalog
	race  func()
	armed atomic.Bool
}

func (r *racingCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	if r.armed.CompareAndSwap(true, false) {
		r.race()
	}
	return r.Catalog.CommitTable(ctx, ident, reqs, ups)
}

// vectorFiles lists the manifests and manifest lists commitVectors wrote
// in the table's metadata folder.
func vectorFiles(t *testing.T, tbl *table.Table) map[string]bool {
	t.Helper()
	dir := strings.TrimPrefix(tbl.Location(), "file://") + "/metadata"
	names, err := filepath.Glob(filepath.Join(dir, "*-vectors.avro"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[filepath.Base(n)] = true
	}
	return out
}

// TestVectorCommitRefusedLeavesNoFiles: a vector commit the catalog
// refuses because another commit moved the branch under it removes the
// manifests and the manifest list it wrote, and commits nothing (the
// retry finds the writer's key index behind the foreign commit).
func TestVectorCommitRefusedLeavesNoFiles(t *testing.T) {
	ctx := context.Background()
	var rc *racingCatalog
	s := newVectorSideWith(t, false, nil, func(cat catalog.Catalog) commit.TableLoader {
		rc = &racingCatalog{Catalog: cat}
		return rc
	})
	rc.race = func() {
		other, err := commit.NewCommitter(ctx, s.wh.Catalog, testIdent, "other")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := other.Commit(ctx, 1, []commit.Payload{payload3(t, other.Table(), "other")}, nil); err != nil {
			t.Error(err)
		}
	}
	var inserts, updates []deltawriter.Change
	for k := range int64(50) {
		inserts = append(inserts, deltawriter.Change{Op: deltawriter.Insert, Row: []any{k, int64(1)}})
		updates = append(updates, deltawriter.Change{Op: deltawriter.Insert, Row: []any{k, int64(2)}})
	}
	s.window(t, 1, inserts)
	s.window(t, 2, updates[:10])   // the data file's first vector
	s.window(t, 3, updates[10:20]) // replaced: a vector commit
	before := vectorFiles(t, s.cm.Table())
	if len(before) == 0 {
		t.Fatal("no vector commit so far")
	}
	snaps := len(s.cm.Table().Metadata().Snapshots())
	rc.armed.Store(true)
	err := s.try(4, updates[20:]) // replaces the vector again
	if err == nil {
		t.Fatal("the commit over a foreign one went through")
	}
	if err := s.cm.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	after := vectorFiles(t, s.cm.Table())
	if len(after) != len(before) {
		t.Fatalf("%d vector commit files before the refused commit, %d after: %v", len(before), len(after), after)
	}
	if n := len(s.cm.Table().Metadata().Snapshots()); n != snaps+1 {
		t.Fatalf("%d snapshots, want %d (the foreign one added)", n, snaps+1)
	}
}

// payload3 is a format v3 window of sink that wrote one data file.
func payload3(t *testing.T, tbl *table.Table, sink string) commit.Payload {
	t.Helper()
	df := dataFile(t, tbl.Location()+"/data/"+sink+".parquet")
	ent, err := commit.EncodeEntry(df, *iceberg.UnpartitionedSpec, tbl.Schema(), 3)
	if err != nil {
		t.Fatal(err)
	}
	return commit.Payload{Version: commit.PayloadVersion, SinkID: sink, FormatVersion: 3, SchemaID: tbl.Schema().ID,
		Files: []commit.File{{Kind: commit.DataFile, Path: df.FilePath(), Rows: 10, Bytes: 100, Entry: ent}}}
}
