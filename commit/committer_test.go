package commit_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/warehouse"
)

var testIdent = table.Identifier{"db", "t"}

func testSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
}

// newTable opens a fresh embedded warehouse with one table.
func newTable(t *testing.T) (*warehouse.Warehouse, *table.Table) {
	t.Helper()
	return newTableWith(t, nil)
}

// newTableWith is newTable, the table created with props.
func newTableWith(t *testing.T, props iceberg.Properties) (*warehouse.Warehouse, *table.Table) {
	t.Helper()
	return newTableOf(t, warehouse.TableSpec{Schema: testSchema(), Properties: props})
}

// newTableOf is newTable, the table created from spec.
func newTableOf(t *testing.T, spec warehouse.TableSpec) (*warehouse.Warehouse, *table.Table) {
	t.Helper()
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wh.Close() })
	tbl, _, err := wh.LoadOrCreate(ctx, testIdent, spec)
	if err != nil {
		t.Fatal(err)
	}
	return wh, tbl
}

// dataFile is the manifest entry of a data file at path (the committer
// never reads the file itself).
func dataFile(t *testing.T, path string) iceberg.DataFile {
	t.Helper()
	b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, path, iceberg.ParquetFile, nil, nil, nil, 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// payload is a window that wrote one data file named after sink and epoch.
func payload(t *testing.T, tbl *table.Table, sink string, epoch uint64) commit.Payload {
	t.Helper()
	df := dataFile(t, fmt.Sprintf("%s/data/%s-%d.parquet", tbl.Location(), sink, epoch))
	ent, err := commit.EncodeEntry(df, *iceberg.UnpartitionedSpec, testSchema(), 2)
	if err != nil {
		t.Fatal(err)
	}
	return commit.Payload{Version: commit.PayloadVersion, SinkID: sink, FormatVersion: 2,
		Files: []commit.File{{Kind: commit.DataFile, Path: df.FilePath(), Rows: 10, Bytes: 100, Entry: ent}}}
}

func commitEpoch(t *testing.T, cm *commit.Committer, tbl *table.Table, sink string, epoch uint64) commit.Result {
	t.Helper()
	res, err := cm.Commit(context.Background(), epoch, []commit.Payload{payload(t, tbl, sink, epoch)},
		map[string]string{commit.PropInputPosition: strconv.FormatUint(epoch*100, 10)})
	if err != nil {
		t.Fatalf("epoch %d: %v", epoch, err)
	}
	return res
}

// dataFiles lists the data files of the table's current snapshot.
func dataFiles(t *testing.T, tbl *table.Table) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for f := range plan(t, tbl) {
		out[f] = true
	}
	return out
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLiveHeapFlatOverCommits: the committer's memory does not grow with
// the number of commits beyond the metadata's own size. Before, every table
// version stayed reachable from the next one's snapshot (through
// iceberg-go's transaction): 200 commits held ~55 MB live, growing as
// O(n^2). With retention, the metadata itself stays bounded too.
func TestLiveHeapFlatOverCommits(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	// All history kept: the live heap grows by the metadata only (~3 KB a
	// snapshot), not by a copy of it per commit.
	var after20 uint64
	for e := uint64(1); e <= 200; e++ {
		commitEpoch(t, cm, tbl, "s", e)
		if e == 20 {
			after20 = liveHeap()
		}
	}
	end := liveHeap()
	t.Logf("live heap after 20 commits %d KiB, after 200 %d KiB", after20>>10, end>>10)
	if end > after20+8<<20 {
		t.Fatalf("live heap grew with commits: %d KiB after 20, %d KiB after 200", after20>>10, end>>10)
	}
	// With retention: bounded history, nothing of the table lost.
	r := commit.Retention{RetainSnapshots: 20, MaxDataManifests: 20}
	for e := uint64(201); e <= 260; e++ {
		commitEpoch(t, cm, tbl, "s", e)
		if _, err := cm.Tidy(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if s := len(cm.Table().Metadata().Snapshots()); s > 20+5+1 {
		t.Fatalf("%d snapshots kept, want at most 26", s)
	}
	if got := dataFiles(t, cm.Table()); len(got) != 260 {
		t.Fatalf("%d data files after expiry and manifest merges, want 260", len(got))
	}
	last, ok := cm.Last()
	if !ok || last.Epoch != 260 || last.Properties[commit.PropInputPosition] != "26000" {
		t.Fatalf("Last() = %+v, %v", last, ok)
	}
}

// TestCommitRetriesMovedBranch: another committer (a second sink id, a
// foreign iceberg-go append) moves the branch under a committer with a
// stale table; the commit is retried on the refreshed table and neither
// commit's files are lost.
func TestCommitRetriesMovedBranch(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	a, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "b")
	if err != nil {
		t.Fatal(err)
	}
	commitEpoch(t, a, tbl, "a", 1)
	commitEpoch(t, b, tbl, "b", 1)  // b's table was stale: a had committed
	foreignAppend(t, wh, "foreign") // through iceberg-go itself
	res := commitEpoch(t, a, tbl, "a", 2)
	if res.Retries == 0 {
		t.Fatalf("epoch 2 of a committed on a stale table without a retry: %+v", res)
	}
	got := dataFiles(t, a.Table())
	for _, name := range []string{"a-1", "b-1", "foreign", "a-2"} {
		if !got[tbl.Location()+"/data/"+name+".parquet"] {
			t.Fatalf("%s missing from the table: %v", name, got)
		}
	}
	for sink, cm := range map[string]*commit.Committer{"a": a, "b": b} {
		if err := cm.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		last, _ := cm.Last()
		want := map[string]uint64{"a": 2, "b": 1}[sink]
		if last.Epoch != want {
			t.Fatalf("sink %s: last epoch %d, want %d", sink, last.Epoch, want)
		}
	}
}

// flakyCatalog commits through the real catalog, then reports a failure
// once: the outcome of that commit is unknown to the caller.
type flakyCatalog struct {
	table.CatalogIO
	fail atomic.Bool
}

func (f *flakyCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	m, loc, err := f.CatalogIO.CommitTable(ctx, ident, reqs, ups)
	if err == nil && f.fail.CompareAndSwap(true, false) {
		return nil, "", errors.New("connection reset by peer")
	}
	return m, loc, err
}

// flakyLoader loads tables that commit through a flakyCatalog.
type flakyLoader struct {
	wh  *warehouse.Warehouse
	cat *flakyCatalog
}

func (l *flakyLoader) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := l.wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	fsF := func(ctx context.Context) (icebergio.IO, error) { return tbl.FS(ctx) }
	return table.New(ident, tbl.Metadata(), tbl.MetadataLocation(), fsF, l.cat), nil
}

// TestCommitAfterUnknownOutcome: the catalog commits an epoch and then
// fails; the retry of the same epoch finds it in the refreshed table and
// commits nothing again (before, it checked its stale copy and committed
// the files twice).
func TestCommitAfterUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	loader := &flakyLoader{wh: wh, cat: &flakyCatalog{CatalogIO: wh.Catalog}}
	cm, err := commit.NewCommitter(ctx, loader, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	commitEpoch(t, cm, tbl, "s", 1)
	loader.cat.fail.Store(true)
	p := payload(t, tbl, "s", 2)
	if _, err := cm.Commit(ctx, 2, []commit.Payload{p}, nil); err == nil {
		t.Fatal("the failed commit reported success")
	}
	res, err := cm.Commit(ctx, 2, []commit.Payload{p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.AlreadyCommitted {
		t.Fatalf("retry of epoch 2 committed again: %+v", res)
	}
	if n := len(cm.Table().Metadata().Snapshots()); n != 2 {
		t.Fatalf("%d snapshots, want 2 (epochs 1 and 2 once each)", n)
	}
}

// TestLastSurvivesExpiry: foreign commits push the sink's snapshots out of
// the retained history; its epoch and input position are still known (from
// the table properties updated with each commit).
func TestLastSurvivesExpiry(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	a, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "b")
	if err != nil {
		t.Fatal(err)
	}
	for e := uint64(1); e <= 3; e++ {
		commitEpoch(t, a, tbl, "a", e)
	}
	for e := uint64(1); e <= 12; e++ {
		commitEpoch(t, b, tbl, "b", e)
	}
	if _, err := b.Tidy(ctx, commit.Retention{RetainSnapshots: 5}); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(a.Table().Metadata().Snapshots()); n != 5 {
		t.Fatalf("%d snapshots after expiry, want 5", n)
	}
	last, ok := a.Last()
	if !ok || last.Epoch != 3 || last.SnapshotID != 0 || last.Properties[commit.PropInputPosition] != "300" {
		t.Fatalf("Last() after expiry = %+v, %v; want epoch 3 at input line 300 from the table properties", last, ok)
	}
	// The expired epoch is still recognised as committed.
	res, err := a.Commit(ctx, 3, []commit.Payload{payload(t, tbl, "a", 3)}, nil)
	if err != nil || !res.AlreadyCommitted {
		t.Fatalf("recommitting expired epoch 3: %+v, %v", res, err)
	}
}

// deletePayload is a window that wrote a data file, an equality-delete
// file and a position-delete file.
func deletePayload(t *testing.T, tbl *table.Table, epoch uint64) commit.Payload {
	t.Helper()
	p := payload(t, tbl, "s", epoch)
	for _, kind := range []commit.FileKind{commit.EqualityDeleteFile, commit.PositionDeleteFile} {
		content := iceberg.EntryContentEqDeletes
		if kind == commit.PositionDeleteFile {
			content = iceberg.EntryContentPosDeletes
		}
		path := fmt.Sprintf("%s/data/s-%d-%s.parquet", tbl.Location(), epoch, kind)
		b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, content, path, iceberg.ParquetFile, nil, nil, nil, 3, 100)
		if err != nil {
			t.Fatal(err)
		}
		if kind == commit.EqualityDeleteFile {
			b.EqualityFieldIDs([]int{1})
		}
		ent, err := commit.EncodeEntry(b.Build(), *iceberg.UnpartitionedSpec, testSchema(), 2)
		if err != nil {
			t.Fatal(err)
		}
		p.Files = append(p.Files, commit.File{Kind: kind, Path: path, Rows: 3, Bytes: 100, Entry: ent})
	}
	return p
}

// plan maps every data file of the current snapshot to the delete files a
// scan applies to it.
func plan(t *testing.T, tbl *table.Table) map[string]string {
	t.Helper()
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, task := range tasks {
		var dels []string
		for _, d := range task.DeleteFiles {
			dels = append(dels, d.FilePath())
		}
		for _, d := range task.EqualityDeleteFiles {
			dels = append(dels, d.FilePath())
		}
		slices.Sort(dels)
		out[task.File.FilePath()] = strings.Join(dels, ",")
	}
	return out
}

func countManifests(t *testing.T, tbl *table.Table) (data, deletes int) {
	t.Helper()
	fs, err := tbl.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mans, err := tbl.CurrentSnapshot().Manifests(fs)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mans {
		if m.ManifestContent() == iceberg.ManifestContentData {
			data++
		} else {
			deletes++
		}
	}
	return data, deletes
}

// TestMergeDeleteManifests: the delete manifests a sink adds with almost
// every commit are merged into one, and a scan applies exactly the same
// delete files to exactly the same data files as before (equality deletes
// only to older data: the sequence numbers survive the rewrite).
func TestMergeDeleteManifests(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	for e := uint64(1); e <= 12; e++ {
		if _, err := cm.Commit(ctx, e, []commit.Payload{deletePayload(t, tbl, e)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := plan(t, cm.Table())
	if _, deletes := countManifests(t, cm.Table()); deletes != 12 {
		t.Fatalf("%d delete manifests before the merge, want 12", deletes)
	}
	tidied, err := cm.Tidy(ctx, commit.Retention{MaxDeleteManifests: 10})
	if err != nil {
		t.Fatal(err)
	}
	if tidied.MergedDeletes != 12 {
		t.Fatalf("merged %d delete manifests, want 12", tidied.MergedDeletes)
	}
	data, deletes := countManifests(t, cm.Table())
	if data != 12 || deletes != 1 {
		t.Fatalf("after the merge: %d data and %d delete manifests, want 12 and 1", data, deletes)
	}
	after := plan(t, cm.Table())
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the merge changed which deletes apply:\nbefore %v\nafter  %v", before, after)
	}
	// The newest data file has only its own window's position delete; the
	// oldest has every later window's equality delete.
	first := tbl.Location() + "/data/s-1.parquet"
	if n := strings.Count(after[first], "equality-delete"); n != 11 {
		t.Fatalf("%d equality deletes apply to the first data file, want 11: %s", n, after[first])
	}
	// Commits go on on top of the merged manifests.
	if _, err := cm.Commit(ctx, 13, []commit.Payload{deletePayload(t, tbl, 13)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, deletes := countManifests(t, cm.Table()); deletes != 2 {
		t.Fatalf("%d delete manifests after one more commit, want 2", deletes)
	}
}
