package commit_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/warehouse"
)

// foreignAppend commits, through iceberg-go and not through a committer,
// an append of a data file named name, and returns its snapshot.
func foreignAppend(t *testing.T, wh *warehouse.Warehouse, name string) int64 {
	t.Helper()
	ctx := context.Background()
	tbl, err := wh.Catalog.LoadTable(ctx, testIdent)
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	rd := tx.NewRowDelta(nil)
	rd.AddRows(dataFile(t, tbl.Location()+"/data/"+name+".parquet"))
	if err := rd.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out.CurrentSnapshot().SnapshotID
}

// retryProps make iceberg-go retry a conflicting commit itself.
var retryProps = iceberg.Properties{"commit.retry.num-retries": "4", "commit.retry.min-wait-ms": "1"}

// setProperties sets table properties as another application would.
func setProperties(t *testing.T, tbl *table.Table, props iceberg.Properties) {
	t.Helper()
	tx := tbl.NewTransaction()
	if err := tx.SetProperties(props); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// keyIndexed marks p as resolved by writer w's key index built at base.
func keyIndexed(p commit.Payload, w int, base int64) commit.Payload {
	p.Writer, p.KeyIndexed, p.BaseSnapshot = w, true, base
	return p
}

// conflictCatalog is the warehouse's SQL catalog answering a moved branch
// as a REST catalog does (409: table.ErrCommitFailed, which iceberg-go's
// own retry loop acts on) instead of with the SQL catalog's plain error.
type conflictCatalog struct {
	wh *warehouse.Warehouse
}

func (c *conflictCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := c.wh.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	fsF := func(ctx context.Context) (icebergio.IO, error) { return tbl.FS(ctx) }
	return table.New(ident, tbl.Metadata(), tbl.MetadataLocation(), fsF, c), nil
}

func (c *conflictCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	m, loc, err := c.wh.Catalog.CommitTable(ctx, ident, reqs, ups)
	if err != nil && strings.Contains(err.Error(), "requirement failed") {
		err = fmt.Errorf("%w: %w", table.ErrCommitFailed, err)
	}
	return m, loc, err
}

// conflictLoader loads tables that commit through a conflictCatalog.
type conflictLoader struct{ wh *warehouse.Warehouse }

func (l *conflictLoader) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	return (&conflictCatalog{wh: l.wh}).LoadTable(ctx, ident)
}

// TestCatalogRetryDoesNotReplayPastForeignChange: with the table's
// commit.retry.num-retries set, iceberg-go reloads and replays a commit
// whose branch moved. A key-indexed commit must not be replayed past a
// foreign append (its position deletes never saw that row): the commit
// asserts the branch's snapshot, fails into the committer's own retry,
// and the check refuses it. Before, iceberg-go's replay committed it.
func TestCatalogRetryDoesNotReplayPastForeignChange(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	setProperties(t, tbl, retryProps)
	cm, err := commit.NewCommitter(ctx, &conflictLoader{wh: wh}, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	base := commitEpoch(t, cm, tbl, "s", 1).SnapshotID
	foreign := foreignAppend(t, wh, "foreign") // cm's table is stale now
	p := keyIndexed(payload(t, tbl, "s", 2), 0, base)
	_, err = cm.Commit(ctx, 2, []commit.Payload{p}, nil)
	if !errors.Is(err, commit.ErrForeignChange) {
		t.Fatalf("commit of a window resolved before a foreign append: %v, want ErrForeignChange", err)
	}
	after, err := wh.Catalog.LoadTable(ctx, testIdent)
	if err != nil {
		t.Fatal(err)
	}
	if id := after.CurrentSnapshot().SnapshotID; id != foreign {
		t.Fatalf("current snapshot %d, want the foreign append %d (nothing of epoch 2 committed)", id, foreign)
	}
}

// TestCheckKeyIndexedPerWriter: a writer whose index predates a foreign
// append is refused even when a commit of the other writers (whose
// indexes were rebuilt after it) came in between; an idle writer's stale
// index does not block the others' commit. Before, the check stopped at
// the committer's last commit and passed.
func TestCheckKeyIndexedPerWriter(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	s1 := commitEpoch(t, cm, tbl, "s", 1).SnapshotID
	foreign := foreignAppend(t, wh, "foreign")
	if err := cm.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// Epoch 2: writer 0 (index at s1) idle, writer 1 rebuilt after the
	// foreign append.
	idle := keyIndexed(commit.Payload{Version: commit.PayloadVersion, SinkID: "s", FormatVersion: 2}, 0, s1)
	if _, err := cm.Commit(ctx, 2, []commit.Payload{idle, keyIndexed(payload(t, tbl, "s", 2), 1, foreign)}, nil); err != nil {
		t.Fatalf("epoch 2 (an idle stale writer, a fresh one): %v", err)
	}
	// Epoch 3: writer 0 writes with its stale index.
	_, err = cm.Commit(ctx, 3, []commit.Payload{keyIndexed(payload(t, tbl, "s", 3), 0, s1)}, nil)
	if !errors.Is(err, commit.ErrForeignChange) {
		t.Fatalf("epoch 3 by a writer whose index predates a foreign append: %v, want ErrForeignChange", err)
	}
	// Writer 1, checked at epoch 2, goes on.
	if _, err := cm.Commit(ctx, 3, []commit.Payload{keyIndexed(payload(t, tbl, "s", 3), 1, foreign)}, nil); err != nil {
		t.Fatalf("epoch 3 by the writer rebuilt after the append: %v", err)
	}
}

// TestCheckKeyIndexedExpiredBase: a base that expiry removed from the
// history cannot be vouched for (before, the walk ended at the missing
// parent and passed); a base the committer checked before is still
// vouched for past expiry.
func TestCheckKeyIndexedExpiredBase(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	s1 := commitEpoch(t, cm, tbl, "s", 1).SnapshotID
	var e uint64
	for e = 2; e <= 12; e++ {
		if _, err := cm.Commit(ctx, e, []commit.Payload{keyIndexed(payload(t, tbl, "s", e), 1, s1)}, nil); err != nil {
			t.Fatalf("epoch %d: %v", e, err)
		}
	}
	if _, err := cm.Tidy(ctx, commit.Retention{RetainSnapshots: 4}); err != nil {
		t.Fatal(err)
	}
	if cm.Table().Metadata().SnapshotByID(s1) != nil {
		t.Fatal("expiry kept the base")
	}
	// Writer 1 was checked with every commit: vouched for.
	if _, err := cm.Commit(ctx, e, []commit.Payload{keyIndexed(payload(t, tbl, "s", e), 1, s1)}, nil); err != nil {
		t.Fatalf("epoch %d by a writer checked at every commit: %v", e, err)
	}
	// A fresh committer knows nothing: the base is unreachable.
	fresh, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	_, err = fresh.Commit(ctx, e+1, []commit.Payload{keyIndexed(payload(t, tbl, "s", e+1), 1, s1)}, nil)
	if !errors.Is(err, commit.ErrForeignChange) || !errors.Is(err, commit.ErrBaseUnreachable) {
		t.Fatalf("a base expiry removed: %v, want ErrForeignChange and ErrBaseUnreachable", err)
	}
}

// TestClassify: a replace is harmless only when it says it rewrote
// manifests and added or removed nothing; one without counters (the spec
// makes them optional) may be a compaction.
func TestClassify(t *testing.T) {
	snap := func(op table.Operation, props iceberg.Properties) *table.Snapshot {
		return &table.Snapshot{Summary: &table.Summary{Operation: op, Properties: props}}
	}
	for _, tc := range []struct {
		name string
		s    *table.Snapshot
		want commit.SnapshotKind
	}{
		{"own epoch", snap(table.OpAppend, iceberg.Properties{commit.PropSinkID: "s", commit.PropEpoch: "3"}), commit.OwnEpoch},
		{"another sink's epoch", snap(table.OpAppend, iceberg.Properties{commit.PropSinkID: "t"}), commit.ForeignRows},
		{"own compaction", snap(table.OpReplace, iceberg.Properties{commit.PropMaintainedBy: "s", "added-data-files": "1"}), commit.OwnMaintenance},
		{"rewrite of manifests", snap(table.OpReplace, iceberg.Properties{"manifests-created": "1", "manifests-replaced": "4", "manifests-kept": "0", "entries-processed": "9"}), commit.MetadataOnly},
		{"foreign compaction", snap(table.OpReplace, iceberg.Properties{"added-data-files": "1", "deleted-data-files": "4"}), commit.ForeignRows},
		{"replace without counters", snap(table.OpReplace, iceberg.Properties{}), commit.ForeignRows},
		{"replace that rewrote manifests and deletes", snap(table.OpReplace, iceberg.Properties{"manifests-created": "1", "removed-position-deletes": "3"}), commit.ForeignRows},
		{"no summary", &table.Snapshot{}, commit.ForeignRows},
		{"delete", snap(table.OpDelete, iceberg.Properties{}), commit.ForeignRows},
	} {
		if got := commit.Classify(tc.s, "s"); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestEmptyEpochKeepsOffsets: an epoch that wrote no file but read records
// (tombstones, skipped events) keeps its offsets in the table properties,
// without a snapshot; a later rollback past the snapshot they were kept
// on is still recognised. Before, the offsets stayed at the last epoch
// with files, and retention of the records after them made the next start
// refuse them as never read.
func TestEmptyEpochKeepsOffsets(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	off := func(n string) map[string]string {
		return map[string]string{commit.PropOffsetPrefix + "t.0": n, commit.PropInputPosition: n}
	}
	commitAt := func(epoch uint64, ps []commit.Payload, n string) commit.Result {
		t.Helper()
		res, err := cm.Commit(ctx, epoch, ps, off(n))
		if err != nil {
			t.Fatalf("epoch %d: %v", epoch, err)
		}
		return res
	}
	s1 := commitAt(1, []commit.Payload{payload(t, tbl, "s", 1)}, "10").SnapshotID
	commitAt(2, []commit.Payload{payload(t, tbl, "s", 2)}, "20")
	if res := commitAt(3, nil, "35"); !res.Empty || !res.Recorded {
		t.Fatalf("an empty epoch that moved the offsets: %+v, want Empty and Recorded", res)
	}
	if res := commitAt(4, nil, "35"); res.Recorded {
		t.Fatalf("an empty epoch that moved nothing was recorded: %+v", res)
	}
	if n := len(cm.Table().Metadata().Snapshots()); n != 2 {
		t.Fatalf("%d snapshots, want 2 (empty epochs make none)", n)
	}
	fresh, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	last, ok := fresh.Last()
	if !ok || last.Epoch != 3 || last.Properties[commit.PropOffsetPrefix+"t.0"] != "35" || last.RolledBack != 0 {
		t.Fatalf("Last() = %+v, %v; want epoch 3 at offset 35", last, ok)
	}

	// Rolled back to epoch 1: epochs 2 and 3 are gone.
	cur, err := wh.Catalog.LoadTable(ctx, testIdent)
	if err != nil {
		t.Fatal(err)
	}
	tx := cur.NewTransaction()
	if err := tx.RollbackToSnapshot(s1); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	last, ok = fresh.Last()
	if !ok || last.Epoch != 1 || last.Properties[commit.PropOffsetPrefix+"t.0"] != "10" || last.RolledBack != 3 {
		t.Fatalf("Last() after the rollback = %+v, %v; want epoch 1 at offset 10, rolled back past 3", last, ok)
	}
}

// TestClaimFencesOlderRun: a second run of a sink claims the table; the
// first run's next commit fails (also through a catalog that retries
// conflicts itself) and is refused with ErrFenced, while the second run
// commits. The claim changes no row: a key-indexed payload of the new run
// passes the foreign-change check across it.
func TestClaimFencesOlderRun(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	setProperties(t, tbl, retryProps)
	a, err := commit.NewCommitter(ctx, &conflictLoader{wh: wh}, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(ctx, "run-a"); err != nil {
		t.Fatal(err)
	}
	commitEpoch(t, a, tbl, "s", 1)
	b, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Claim(ctx, "run-b"); err != nil {
		t.Fatal(err)
	}
	// The committer holds the table as its claim left it (the catalog's
	// answer, not a reload).
	loaded, err := wh.Catalog.LoadTable(ctx, testIdent)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.Table().MetadataLocation(), loaded.MetadataLocation(); got != want {
		t.Fatalf("after the claim the committer holds metadata %s, the catalog %s", got, want)
	}
	base := b.Table().CurrentSnapshot().SnapshotID
	if _, err := a.Commit(ctx, 2, []commit.Payload{payload(t, tbl, "s", 2)}, nil); !errors.Is(err, commit.ErrFenced) {
		t.Fatalf("the older run's commit after a newer run's claim: %v, want ErrFenced", err)
	}
	if _, err := b.Commit(ctx, 2, []commit.Payload{keyIndexed(payload(t, tbl, "s", 2), 0, base)}, nil); err != nil {
		t.Fatalf("the newer run's commit: %v", err)
	}
	got := dataFiles(t, b.Table())
	if len(got) != 2 || !got[tbl.Location()+"/data/s-2.parquet"] {
		t.Fatalf("data files %v, want epoch 1's and the newer run's epoch 2", got)
	}
	for _, s := range b.Table().Metadata().Snapshots() {
		if s.Summary != nil && s.Summary.Properties[commit.PropClaim] != "" {
			if k := commit.Classify(&s, "s"); k != commit.MetadataOnly {
				t.Fatalf("a claim snapshot is %s, want metadata only", k)
			}
		}
	}
}

// TestClaimFencesEveryFormatVersion: the claim is a snapshot on format v1
// and v3 tables too, so the older run's next commit, from the table it
// holds (which predates the claim), fails its assertion, reloads and is
// refused with ErrFenced. Before, on v1 and v3 the claim was a property
// only and the older run's commit landed after it (issue 46 item 3).
func TestClaimFencesEveryFormatVersion(t *testing.T) {
	ctx := context.Background()
	for _, version := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("v", version), func(t *testing.T) {
			wh, tbl := newTableWith(t, iceberg.Properties{"format-version": strconv.Itoa(version)})
			pay := func(epoch uint64) commit.Payload {
				p := payload(t, tbl, "s", epoch)
				df := dataFile(t, p.Files[0].Path)
				ent, err := commit.EncodeEntry(df, *iceberg.UnpartitionedSpec, testSchema(), version)
				if err != nil {
					t.Fatal(err)
				}
				p.FormatVersion, p.Files[0].Entry = version, ent
				return p
			}
			a, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Claim(ctx, "run-a"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Commit(ctx, 1, []commit.Payload{pay(1)}, nil); err != nil {
				t.Fatal(err)
			}
			b, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Claim(ctx, "run-b"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Commit(ctx, 2, []commit.Payload{pay(2)}, nil); !errors.Is(err, commit.ErrFenced) {
				t.Fatalf("the older run's commit after a newer run's claim: %v, want ErrFenced", err)
			}
			if _, err := b.Commit(ctx, 2, []commit.Payload{pay(2)}, nil); err != nil {
				t.Fatalf("the newer run's commit: %v", err)
			}
			if got := dataFiles(t, b.Table()); len(got) != 2 {
				t.Fatalf("data files %v, want epoch 1's and the newer run's epoch 2", got)
			}
			for _, s := range b.Table().Metadata().Snapshots() {
				if s.Summary != nil && s.Summary.Properties[commit.PropClaim] != "" {
					if k := commit.Classify(&s, "s"); k != commit.MetadataOnly {
						t.Fatalf("a claim snapshot is %s, want metadata only", k)
					}
				}
			}
			// The table reads back through iceberg-go's scanner (v3: the
			// claim's manifest list keeps the row lineage).
			if _, err := b.Table().Scan().PlanFiles(ctx); err != nil {
				t.Fatalf("planning a scan after the claims: %v", err)
			}
		})
	}
}

// TestRollbackPastExpiredEpochs: the branch is rolled back to another
// writer's snapshot older than the sink's epochs, and the sink's
// snapshots are then expired: the properties still name the sink's last
// epoch, but the branch holds a snapshot older than that epoch's
// (sequence numbers), so Last reports the rollback instead of trusting
// the properties (issue 46 item 15: the rerun resumed past epochs the
// table no longer held).
func TestRollbackPastExpiredEpochs(t *testing.T) {
	ctx := context.Background()
	wh, tbl := newTable(t)
	other, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "other")
	if err != nil {
		t.Fatal(err)
	}
	foreign := commitEpoch(t, other, tbl, "other", 1).SnapshotID
	cm, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	var ours []int64
	for e := uint64(1); e <= 2; e++ {
		ours = append(ours, commitEpoch(t, cm, tbl, "s", e).SnapshotID)
	}
	cur, err := wh.Catalog.LoadTable(ctx, testIdent)
	if err != nil {
		t.Fatal(err)
	}
	tx := cur.NewTransaction()
	if err := tx.RollbackToSnapshot(foreign); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The sink's snapshots expire (no branch holds them any more).
	if _, _, err := wh.Catalog.CommitTable(ctx, testIdent, nil, []table.Update{table.NewRemoveSnapshotsUpdate(ours, false)}); err != nil {
		t.Fatal(err)
	}
	fresh, err := commit.NewCommitter(ctx, wh.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	if last, ok := fresh.Last(); ok || last.RolledBack != 2 {
		t.Fatalf("Last() = %+v, %v; want not ok, rolled back past epoch 2", last, ok)
	}
	// Expired without a rollback, the properties are trusted.
	wh2, tbl2 := newTable(t)
	cm2, err := commit.NewCommitter(ctx, wh2.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	first := commitEpoch(t, cm2, tbl2, "s", 1).SnapshotID
	commitEpoch(t, cm2, tbl2, "s", 2)
	other2, err := commit.NewCommitter(ctx, wh2.Catalog, testIdent, "other")
	if err != nil {
		t.Fatal(err)
	}
	if err := other2.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	commitEpoch(t, other2, tbl2, "other", 1)
	if _, _, err := wh2.Catalog.CommitTable(ctx, testIdent, nil, []table.Update{table.NewRemoveSnapshotsUpdate([]int64{first}, false)}); err != nil {
		t.Fatal(err)
	}
	fresh2, err := commit.NewCommitter(ctx, wh2.Catalog, testIdent, "s")
	if err != nil {
		t.Fatal(err)
	}
	if last, ok := fresh2.Last(); !ok || last.Epoch != 2 || last.RolledBack != 0 {
		t.Fatalf("after expiry alone: Last() = %+v, %v; want epoch 2", last, ok)
	}
}
