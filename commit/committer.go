package commit

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/codec"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// Snapshot summary properties a commit carries.
const (
	PropSinkID        = "icesink.sink-id"
	PropEpoch         = "icesink.epoch"
	PropInputPosition = "icesink.input-position"
	// PropInputID identifies the input the committed lines came from (a
	// fingerprint of its head, or the identity the user gave).
	PropInputID = "icesink.input-id"
	// PropOffsetPrefix prefixes the offsets of a partitioned input: a Kafka
	// source's icesink.kafka.TOPIC.PARTITION = the next offset to read.
	PropOffsetPrefix = "icesink.kafka."
	// PropSinkPrefix prefixes the table properties a sink keeps its last
	// commit in: icesink.sink.SINK-ID.epoch and .input-position.
	PropSinkPrefix = "icesink.sink."
)

// TableLoader loads a table's current metadata from its catalog; every
// iceberg-go catalog is one.
type TableLoader interface {
	LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error)
}

// Committer commits window payloads to one table, one RowDelta snapshot per
// epoch, at most once per (sink id, epoch). It is not safe for concurrent
// use.
//
// Besides the snapshot summary, every commit records the sink's epoch and
// its summary properties in table properties (PropSinkPrefix), updated in
// the same commit, so that the sink's position survives snapshot expiry and
// foreign commits that push its snapshots out of the retained history.
type Committer struct {
	loader     TableLoader
	ident      table.Identifier
	sinkID     string
	tbl        *table.Table
	maxRetries int
	// stale: the last commit attempt failed, so the catalog may hold a
	// newer table (another committer's, or this commit's own if the
	// outcome was unknown) than tbl; the next Commit reloads first.
	stale bool
	// tidies counts Tidy calls: the manifest list is read every few.
	tidies int
	// replaced are the files this committer's compactions replaced: they
	// are removed once the snapshots that still list them expire.
	replaced []replacedFiles
	// cat and fsF rebuild a committed table without reloading it (adopt);
	// cat is nil when the loader is not also the table's catalog.
	cat table.CatalogIO
	fsF table.FSysF
	// checked holds, per writer, the key index its last payload committed
	// here was checked with (CheckKeyIndexed).
	checked map[int]checkedIndex
	// runID is this run's claim on the sink (Claim); "" until it claims.
	runID string
	// head is the snapshot of this committer's last epoch (0: none yet):
	// a commit whose branch no longer descends from it was rolled back
	// under the run (ErrRolledBack).
	head int64
	// rowDeltaOnly makes deletion vector replacements go through
	// iceberg-go's RowDelta too (tests compare the two).
	rowDeltaOnly bool
}

// Committed describes the newest epoch a sink committed.
type Committed struct {
	Epoch uint64
	// SnapshotID is the snapshot holding the epoch; 0 when snapshot expiry
	// removed it and only the table properties tell the epoch.
	SnapshotID int64
	// Properties are the icesink.* properties the epoch was committed with
	// (the snapshot summary, or the table properties kept for the sink).
	Properties iceberg.Properties
	// RolledBack is the newest epoch the sink committed that the table no
	// longer holds because its branch was rolled back past it (0: none).
	// With ok false from Last, the rollback went past every epoch of the
	// sink left in the metadata, and what the table holds of the sink is
	// unknown.
	RolledBack uint64
}

// NewCommitter returns a committer for sink sinkID on the table ident.
func NewCommitter(ctx context.Context, loader TableLoader, ident table.Identifier, sinkID string) (*Committer, error) {
	if sinkID == "" {
		return nil, errors.New("commit: empty sink id")
	}
	tbl, err := loader.LoadTable(ctx, ident)
	if err != nil {
		return nil, fmt.Errorf("commit: loading table %v: %w", ident, err)
	}
	c := &Committer{loader: loader, ident: ident, sinkID: sinkID, tbl: tbl, maxRetries: 8}
	if cat, ok := loader.(table.CatalogIO); ok {
		first := *tbl // the loaded table's file IO, without its later versions
		c.cat, c.fsF = cat, first.FS
	}
	return c, nil
}

// SinkID returns the sink the committer commits for.
func (c *Committer) SinkID() string { return c.sinkID }

// Table returns the committer's latest view of the table.
func (c *Committer) Table() *table.Table { return c.tbl }

// Refresh reloads the table from the catalog.
func (c *Committer) Refresh(ctx context.Context) error {
	tbl, err := c.loader.LoadTable(ctx, c.ident)
	if err != nil {
		return fmt.Errorf("commit: reloading table %v: %w", c.ident, err)
	}
	c.tbl = tbl
	c.stale = false
	return nil
}

// Last returns the newest epoch this sink committed to the table; ok is
// false when it committed none.
func (c *Committer) Last() (Committed, bool) {
	return lastCommitted(c.tbl, c.sinkID)
}

// sinkProp is the table property under which sinkID keeps the summary
// property key (an "icesink." key) of its last commit.
func sinkProp(sinkID, key string) string {
	return PropSinkPrefix + sinkID + "." + strings.TrimPrefix(key, "icesink.")
}

// propSnapshotID is the summary-style key under which a commit records,
// in the table properties, the snapshot it made (the properties are not
// rolled back with the branch, so they must name what they belong to).
const propSnapshotID = "icesink.snapshot-id"

// propSequence is the key under which a commit records, beside
// propSnapshotID, that snapshot's sequence number: once the snapshot has
// expired, an older snapshot on the branch (a smaller sequence number)
// still tells that the branch was rolled back past it.
const propSequence = "icesink.sequence-number"

// propRunID is the key under which the table properties name the run of
// the sink that may commit (Claim): a run that finds another's id there
// was fenced off.
const propRunID = "icesink.run-id"

func lastCommitted(tbl *table.Table, sinkID string) (Committed, bool) {
	meta := tbl.Metadata()
	props := meta.Properties()
	kept, err := strconv.ParseUint(props[sinkProp(sinkID, PropEpoch)], 10, 64)
	hasKept := err == nil
	keptSnap, err := strconv.ParseInt(props[sinkProp(sinkID, propSnapshotID)], 10, 64)
	hasKeptSnap := err == nil
	// onHistory: the kept position was recorded on a snapshot of the
	// current history (an epoch without files keeps only its offsets, on
	// the snapshot that was current then).
	onHistory := hasKeptSnap && (IsAncestor(meta, keptSnap) || keptSnap == -1 && meta.CurrentSnapshot() == nil)
	for e, s := range sinkEpochs(tbl, sinkID) {
		if hasKept && e < kept {
			// The kept epoch is not in the current history: kept without
			// a snapshot, expired, or rolled back. The history is expired
			// oldest first, so a kept epoch newer than this retained one
			// is gone only if it was never on this history.
			switch {
			case onHistory:
				return keptCommitted(props, sinkID, kept), true
			case hasKeptSnap || rolledBack(meta, sinkID, e):
				return Committed{Epoch: e, SnapshotID: s.SnapshotID, Properties: s.Summary.Properties, RolledBack: kept}, true
			}
			break // an older release's properties, and the kept epoch's snapshot was expired
		}
		return Committed{Epoch: e, SnapshotID: s.SnapshotID, Properties: s.Summary.Properties}, true
	}
	if !hasKept {
		return Committed{}, false
	}
	if !onHistory && (hasKeptSnap && meta.SnapshotByID(keptSnap) != nil || rolledBack(meta, sinkID, 0) || behindKept(meta, props[sinkProp(sinkID, propSequence)])) {
		// Rolled back past every epoch of the sink still in the metadata:
		// which of the expired ones the table holds is unknown.
		return Committed{RolledBack: kept}, false
	}
	return keptCommitted(props, sinkID, kept), true
}

// behindKept reports whether the branch holds a snapshot older (by
// sequence number) than seq, the kept position's snapshot's, which the
// metadata no longer has. Expiry removes the oldest snapshots first, so
// had the kept snapshot merely expired, every older one would be gone
// too: an older one still on the branch means the branch was rolled back
// past the kept position.
func behindKept(meta table.Metadata, seq string) bool {
	keptSeq, err := strconv.ParseInt(seq, 10, 64)
	cur := meta.CurrentSnapshot()
	if err != nil || keptSeq <= 0 || cur == nil {
		return false
	}
	for _, s := range table.AncestorsOf(cur.SnapshotID, meta.SnapshotByID) {
		if s.SequenceNumber < keptSeq {
			return true
		}
	}
	return false
}

// bookkeeping reports a kept key that records how the position was kept
// (its snapshot and sequence number, the run's claim, the input's start),
// not a summary property of the epoch.
func bookkeeping(key string) bool {
	return key == propSnapshotID || key == propSequence || key == propRunID || strings.HasPrefix(key, propStart)
}

// keptCommitted is the position the table properties keep for sinkID.
func keptCommitted(props iceberg.Properties, sinkID string, epoch uint64) Committed {
	prefix := PropSinkPrefix + sinkID + "."
	out := iceberg.Properties{}
	for k, v := range props {
		if rest, ok := strings.CutPrefix(k, prefix); ok && !bookkeeping("icesink."+rest) {
			out["icesink."+rest] = v
		}
	}
	out[PropSinkID] = sinkID
	return Committed{Epoch: epoch, Properties: out}
}

// rolledBack reports whether meta holds a snapshot of an epoch of sinkID
// after epoch after that is not in the current snapshot's history: the
// table was rolled back past it.
func rolledBack(meta table.Metadata, sinkID string, after uint64) bool {
	for _, s := range meta.Snapshots() {
		if s.Summary == nil || s.Summary.Properties[PropSinkID] != sinkID {
			continue
		}
		if e, err := strconv.ParseUint(s.Summary.Properties[PropEpoch], 10, 64); err == nil && e > after && !IsAncestor(meta, s.SnapshotID) {
			return true
		}
	}
	return false
}

// CountSince returns the number of snapshots of the table's main-branch
// ancestry that this sink committed for epochs after epoch.
func (c *Committer) CountSince(epoch uint64) int {
	n := 0
	for e := range sinkEpochs(c.tbl, c.sinkID) {
		if e <= epoch {
			break // ancestry runs newest first, and epochs grow along it
		}
		n++
	}
	return n
}

// sinkEpochs yields the snapshots of the table's main-branch ancestry that
// sinkID committed, newest first, with their epochs.
func sinkEpochs(tbl *table.Table, sinkID string) iter.Seq2[uint64, table.Snapshot] {
	return func(yield func(uint64, table.Snapshot) bool) {
		cur := tbl.CurrentSnapshot()
		if cur == nil {
			return
		}
		for _, s := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
			if s.Summary == nil || s.Summary.Properties[PropSinkID] != sinkID {
				continue
			}
			e, err := strconv.ParseUint(s.Summary.Properties[PropEpoch], 10, 64)
			if err != nil {
				continue
			}
			if !yield(e, s) {
				return
			}
		}
	}
}

// Result is the outcome of one Commit.
type Result struct {
	// SnapshotID is the snapshot holding the epoch.
	SnapshotID int64
	// AlreadyCommitted reports that the epoch was found in the table and
	// nothing was committed now.
	AlreadyCommitted bool
	// Empty reports that the payloads held no file, so no snapshot was made.
	Empty bool
	// Recorded reports, for an Empty epoch that moved an input offset,
	// that its position was kept in the table properties.
	Recorded bool
	// Retries is how many times the commit was retried on a moved branch.
	Retries int
}

// ErrRolledBack is returned by Commit when the table's branch was rolled
// back past an epoch this committer committed: the epochs it lost must be
// written again from the input, which the caller restarts (the start
// resumes from what the table holds). Such an error also matches
// ErrForeignChange.
var ErrRolledBack = errors.New("the table was rolled back past an epoch of this run")

// checkHead refuses to commit on a branch that no longer holds the
// committer's last epoch: the same rule the start applies to the kept
// position (lastCommitted), for every delete mode.
func (c *Committer) checkHead() error {
	if c.head == 0 {
		return nil
	}
	meta := c.tbl.Metadata()
	if IsAncestor(meta, c.head) {
		return nil
	}
	if meta.SnapshotByID(c.head) == nil {
		// Expired: the history no longer tells; the start's rule (the
		// kept position's snapshot) still does.
		if last, _ := c.Last(); last.RolledBack == 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: %w: snapshot %d of sink %q's last epoch is no longer on the branch of table %v; the run restarts from what the table holds", ErrForeignChange, ErrRolledBack, c.head, c.sinkID, c.ident)
}

// ErrFenced is returned by Commit when another run of the same sink
// claimed the table (Claim) after this one: only the newest run commits.
var ErrFenced = errors.New("another run of the sink took over the table")

// PropClaim marks the snapshot with which a run of a sink claimed the
// table (Claim): a replace that lists the parent's manifests unchanged.
const PropClaim = "icesink.claim"

// Claim makes this run the one run of the sink that commits to the table.
// It commits a snapshot that changes nothing (a replace listing the
// current manifests, summary icesink.claim = the sink) together with
// runID in the table properties: every commit asserts the branch's
// snapshot, so a run whose table predates the claim fails its commit,
// reloads, finds another run named and stops (ErrFenced). Every format
// version (a v3 claim's manifest list keeps the row lineage); only where
// the committer cannot write its own snapshot (a loader that is not the
// table's catalog) is the property set alone.
func (c *Committer) Claim(ctx context.Context, runID string) error {
	if err := c.retrying(ctx, func() error { return c.claimOnce(ctx, runID) }); err != nil {
		return fmt.Errorf("commit: claiming table %v for run %s of sink %q: %w", c.ident, runID, c.sinkID, err)
	}
	c.runID = runID
	return nil
}

// retrying calls once until it succeeds or fails with an error that is
// not Retryable (nothing was committed: the branch moved), at most
// maxRetries+1 times, with backoff, on a table reloaded after a failure.
func (c *Committer) retrying(ctx context.Context, once func() error) error {
	for attempt := 0; ; attempt++ {
		if c.stale {
			if err := c.Refresh(ctx); err != nil {
				return err
			}
		}
		err := once()
		if err == nil {
			return nil
		}
		c.stale = true
		if !Retryable(err) || attempt >= c.maxRetries {
			return err
		}
		if err := sleepBackoff(ctx, attempt); err != nil {
			return err
		}
	}
}

func (c *Committer) claimOnce(ctx context.Context, runID string) error {
	set := iceberg.Properties{sinkProp(c.sinkID, propRunID): runID}
	cat, wfs, ok, err := c.direct(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return c.setProperties(ctx, set, false)
	}
	var mans []iceberg.ManifestFile
	if cur := c.tbl.CurrentSnapshot(); cur != nil {
		if mans, err = cur.Manifests(wfs); err != nil {
			return fmt.Errorf("reading the manifest list of snapshot %d: %w", cur.SnapshotID, err)
		}
	}
	snapID := newSnapshotID(c.tbl.Metadata())
	props := iceberg.Properties{PropClaim: c.sinkID, propRunID: runID, "manifests-kept": strconv.Itoa(len(mans))}
	return c.commitMetadataSnapshot(ctx, cat, wfs, snapID, "claim", mans, props, []table.Update{table.NewSetPropertiesUpdate(set)}, nil)
}

// direct returns what a snapshot the committer writes itself needs: the
// catalog to commit it (the loader, when it is one) and the table's file
// IO to write with; ok is false when either is missing.
func (c *Committer) direct(ctx context.Context) (tableCommitter, icebergio.WriteFileIO, bool, error) {
	fsys, err := c.tbl.FS(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	cat, ok := c.loader.(tableCommitter)
	wfs, wok := fsys.(icebergio.WriteFileIO)
	return cat, wfs, ok && wok, nil
}

// checkRun refuses to commit for a run another run fenced off.
func (c *Committer) checkRun() error {
	if c.runID == "" {
		return nil
	}
	if cur := c.tbl.Properties()[sinkProp(c.sinkID, propRunID)]; cur != c.runID {
		return fmt.Errorf("%w: sink %q, table %v names run %s, this is run %s (two runs of one sink at once: a rolling deploy, a second process); this run stops", ErrFenced, c.sinkID, c.ident, cur, c.runID)
	}
	return nil
}

// ErrForeignPayload is returned for a payload written for another table
// or another sink.
var ErrForeignPayload = errors.New("payload written for another table or sink")

// CheckPayload reports a payload this committer must not commit: one of
// another sink, or one written for another table (another UUID: for
// example a coordinator's state folder of another table, or of a table
// since dropped and created again).
func (c *Committer) CheckPayload(p *Payload) error {
	if p.SinkID != "" && p.SinkID != c.sinkID {
		return fmt.Errorf("%w: writer %d's payload is of sink %q, this committer's is %q", ErrForeignPayload, p.Writer, p.SinkID, c.sinkID)
	}
	if uuid := c.Table().Metadata().TableUUID().String(); p.TableUUID != "" && p.TableUUID != uuid {
		return fmt.Errorf("%w: writer %d's payload was written for table UUID %s, table %v has UUID %s", ErrForeignPayload, p.Writer, p.TableUUID, c.Table().Identifier(), uuid)
	}
	return nil
}

// ErrForeignChange is returned for a key-indexed payload when another
// writer changed the table's rows after the writer built its key index:
// the window's position deletes could not have seen those rows.
var ErrForeignChange = errors.New("the table's rows were changed by another writer after the sink's key index was built")

// CheckKeyIndexed refuses key-indexed payloads (ErrForeignChange) when the
// table's history after a writer's index base holds a snapshot that is
// neither one of this sink's epochs nor a rewrite of manifests
// (History, Classify: a foreign append, delete or compaction, or the
// sink's own compaction the writer did not follow), or when the walk
// cannot reach the base (expired, or rolled back past it). Empty payloads
// delete nothing and are not refused.
//
// A writer whose payload this committer committed before, with the same
// base, is checked only back to that commit's snapshot: what came before
// it was checked then.
func (c *Committer) CheckKeyIndexed(payloads []Payload) error {
	for i := range payloads {
		if p := &payloads[i]; p.KeyIndexed && !p.Empty() {
			if err := c.checkIndex(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Committer) checkIndex(p *Payload) error {
	meta := c.Table().Metadata()
	stop := p.BaseSnapshot
	if v, ok := c.checked[p.Writer]; ok && v.base == p.BaseSnapshot && IsAncestor(meta, v.snapshot) {
		stop = v.snapshot
	}
	steps, err := History(meta, c.sinkID, stop)
	if err != nil {
		return fmt.Errorf("%w: writer %d's key index was built from snapshot %d: %w; rerun to rebuild the index from the table, or write with --delete-mode equality when other writers change this table", ErrForeignChange, p.Writer, p.BaseSnapshot, err)
	}
	for _, st := range steps {
		if st.Kind != OwnEpoch && st.Kind != MetadataOnly {
			op := "unknown"
			if st.Snapshot.Summary != nil {
				op = string(st.Snapshot.Summary.Operation)
			}
			return fmt.Errorf("%w (snapshot %d, operation %s, %s, after writer %d's index base %d): rerun to rebuild the index from the table, or write with --delete-mode equality when other writers change this table", ErrForeignChange, st.Snapshot.SnapshotID, op, st.Kind, p.Writer, p.BaseSnapshot)
		}
	}
	return nil
}

// vouchable returns the key-indexed payloads whose indexes are consistent
// with the table as the committer sees it now: every non-empty one (after
// CheckKeyIndexed), and the empty ones that pass the same check (an idle
// writer's stale index is not refused, but not vouched for either).
func (c *Committer) vouchable(payloads []Payload) []*Payload {
	var out []*Payload
	for i := range payloads {
		p := &payloads[i]
		if p.KeyIndexed && (!p.Empty() || c.checkIndex(p) == nil) {
			out = append(out, p)
		}
	}
	return out
}

// vouch records that the indexes of ps were consistent with the table up
// to snapshot, the commit's own; a writer not among them loses its record.
func (c *Committer) vouch(payloads []Payload, ps []*Payload, snapshot int64) {
	for i := range payloads {
		delete(c.checked, payloads[i].Writer)
	}
	for _, p := range ps {
		if c.checked == nil {
			c.checked = map[int]checkedIndex{}
		}
		c.checked[p.Writer] = checkedIndex{base: p.BaseSnapshot, snapshot: snapshot}
	}
}

// checkedIndex is a writer's key index as a commit checked it: built from
// base, consistent with the table up to snapshot.
type checkedIndex struct{ base, snapshot int64 }

// Commit commits the payloads of epoch as one RowDelta snapshot whose
// summary carries the sink id, the epoch and props. If the table already
// holds an epoch >= epoch of this sink, nothing is committed
// (AlreadyCommitted). A payload of another table or sink is refused
// (ErrForeignPayload), and so is a key-indexed one whose index the table
// moved away from (ErrForeignChange, CheckKeyIndexed).
//
// A commit that failed with nothing committed (the branch moved under it:
// another sink, a foreign append, a maintenance job) is retried, bounded,
// with backoff, on a freshly loaded table, after checking that the epoch is
// still not there. Any other error is returned; the commit may have landed,
// so the next Commit reloads the table and checks the epoch before
// committing again. A conflict that would lose a delete (a data file the
// payload's position deletes reference is gone) is never retried.
func (c *Committer) Commit(ctx context.Context, epoch uint64, payloads []Payload, props map[string]string) (Result, error) {
	var res Result
	nfiles := 0
	for i := range payloads {
		if err := c.CheckPayload(&payloads[i]); err != nil {
			return res, fmt.Errorf("commit: epoch %d: %w", epoch, err)
		}
		nfiles += len(payloads[i].Files)
	}
	if nfiles == 0 {
		res.Empty = true
		var err error
		res.Recorded, err = c.recordOffsets(ctx, epoch, props)
		return res, err
	}
	for attempt := 0; ; attempt++ {
		if c.stale || !knowsSchemas(c.tbl.Metadata(), payloads) || !knowsBases(c.tbl.Metadata(), payloads) {
			// (A payload written after a schema change names a schema a
			// table loaded before it lacks; a writer of another process
			// built its index from a snapshot newer than this table.)
			if err := c.Refresh(ctx); err != nil {
				return res, err
			}
		}
		if err := c.checkHead(); err != nil {
			return res, fmt.Errorf("commit: epoch %d: %w", epoch, err)
		}
		if last, ok := c.Last(); ok && last.Epoch >= epoch {
			res.AlreadyCommitted = last.Epoch == epoch
			res.SnapshotID = last.SnapshotID
			if last.Epoch > epoch {
				return res, fmt.Errorf("commit: epoch %d: the table already holds the later epoch %d of sink %q", epoch, last.Epoch, c.sinkID)
			}
			return res, nil
		}
		if err := c.checkRun(); err != nil {
			return res, fmt.Errorf("commit: epoch %d: %w", epoch, err)
		}
		if err := c.CheckKeyIndexed(payloads); err != nil {
			return res, fmt.Errorf("commit: epoch %d: %w", epoch, err)
		}
		vouched := c.vouchable(payloads)
		tbl, err := c.commitOnce(ctx, epoch, payloads, props)
		if err == nil {
			res.SnapshotID = tbl.CurrentSnapshot().SnapshotID
			c.head = res.SnapshotID
			c.vouch(payloads, vouched, res.SnapshotID)
			c.adopt(ctx, tbl)
			return res, nil
		}
		c.stale = true
		if !Retryable(err) || attempt >= c.maxRetries {
			return res, fmt.Errorf("commit: epoch %d of sink %q: %w", epoch, c.sinkID, err)
		}
		res.Retries++
		if err := sleepBackoff(ctx, attempt); err != nil {
			return res, fmt.Errorf("commit: epoch %d: %w", epoch, err)
		}
	}
}

// sleepBackoff waits before retry attempt+1: exponential from 10 ms, with
// jitter.
func sleepBackoff(ctx context.Context, attempt int) error {
	backoff := time.Duration(10<<min(attempt, 6)) * time.Millisecond
	backoff += rand.N(backoff)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(backoff):
		return nil
	}
}

// adopt makes the table a commit returned the committer's view. The table
// iceberg-go returns from a transaction keeps the transaction, and through
// it the previous table version, reachable from its new snapshot (the
// snapshot's parent and schema ids point into the producer and the
// metadata builder), so every version since the start stays in memory: a
// run of n commits held O(n^2) bytes. A copy of the metadata made by a
// metadata builder (which clones every snapshot) has no such chain and
// costs far less than reloading the table from the catalog; when neither
// works, the returned table is kept and the next commit reloads.
func (c *Committer) adopt(ctx context.Context, committed *table.Table) {
	c.tbl = committed
	if c.cat != nil {
		if b, err := table.MetadataBuilderFromBase(committed.Metadata(), committed.MetadataLocation()); err == nil {
			if meta, err := b.Build(); err == nil {
				c.tbl = table.New(c.ident, meta, committed.MetadataLocation(), c.fsF, c.cat)
				return
			}
		}
	}
	if err := c.Refresh(ctx); err != nil {
		c.tbl = committed
		c.stale = true
	}
}

// Retryable reports whether err, returned by a commit, means that nothing
// was committed and that the same files may be committed again on a
// refreshed table: the catalog refused a moved branch (iceberg-go reports
// it as table.ErrCommitFailed, or, for the SQL catalog, as a failed
// requirement), or a concurrent commit conflicted. A missing data file is
// not retryable: a position delete would then miss its row.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, table.ErrDataFilesMissing) {
		return false
	}
	if errors.Is(err, table.ErrCommitFailed) || errors.Is(err, table.ErrCommitDiverged) {
		return true
	}
	// The SQL catalog validates the commit's requirements against the
	// table it loads before writing anything, and returns a plain error.
	return strings.Contains(strings.ToLower(err.Error()), "requirement failed: ")
}

// commitProps returns the snapshot summary of epoch's commit with props,
// and the table properties that keep it for the sink.
func (c *Committer) commitProps(epoch uint64, props map[string]string) (summary, kept iceberg.Properties) {
	summary = iceberg.Properties{}
	for k, v := range props {
		summary[k] = v
	}
	summary[PropSinkID] = c.sinkID
	summary[PropEpoch] = strconv.FormatUint(epoch, 10)
	kept = iceberg.Properties{}
	for k, v := range summary {
		if strings.HasPrefix(k, "icesink.") && k != PropSinkID {
			kept[sinkProp(c.sinkID, k)] = v
		}
	}
	return summary, kept
}

// recordOffsets keeps the position of an epoch that wrote no file in the
// table properties alone (no snapshot), when it moved an input offset:
// otherwise a partition whose records all wrote nothing (tombstones,
// skipped events) stays at an old offset, and retention deleting the
// records after it makes the next start refuse them as never read. The
// properties name the snapshot they were recorded on, so a rollback past
// it is still recognised.
func (c *Committer) recordOffsets(ctx context.Context, epoch uint64, props map[string]string) (bool, error) {
	recorded := false
	err := c.retrying(ctx, func() error {
		last, ok := c.Last()
		if ok && last.Epoch >= epoch {
			return nil
		}
		moved := false
		for k, v := range props {
			if strings.HasPrefix(k, PropOffsetPrefix) && last.Properties[k] != v {
				moved = true
			}
		}
		if !moved {
			return nil
		}
		if err := c.checkRun(); err != nil {
			return err
		}
		_, kept := c.commitProps(epoch, props)
		kept[sinkProp(c.sinkID, propSnapshotID)] = "-1"
		if cur := c.tbl.CurrentSnapshot(); cur != nil {
			kept[sinkProp(c.sinkID, propSnapshotID)] = strconv.FormatInt(cur.SnapshotID, 10)
			kept[sinkProp(c.sinkID, propSequence)] = strconv.FormatInt(cur.SequenceNumber, 10)
		}
		if err := c.setProperties(ctx, kept, true); err != nil {
			return err
		}
		recorded = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("commit: recording the offsets of epoch %d of sink %q: %w", epoch, c.sinkID, err)
	}
	return recorded, nil
}

// setProperties commits set to the table properties alone (with onBranch,
// only while the branch is at the snapshot the committer holds) and makes
// the result the committer's table.
func (c *Committer) setProperties(ctx context.Context, set iceberg.Properties, onBranch bool) error {
	tx := c.tbl.NewTransaction()
	if onBranch {
		if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
			return err
		}
	}
	if err := tx.SetProperties(set); err != nil {
		return err
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	c.adopt(ctx, tbl)
	return nil
}

func (c *Committer) commitOnce(ctx context.Context, epoch uint64, payloads []Payload, props map[string]string) (*table.Table, error) {
	meta := c.tbl.Metadata()
	summary, kept := c.commitProps(epoch, props)

	if meta.Version() >= 3 {
		var err error
		if payloads, err = c.mergeVectors(ctx, payloads); err != nil {
			return nil, err
		}
	}
	if meta.Version() >= 3 && !c.rowDeltaOnly && replacesVectors(payloads) {
		cat, wfs, ok, err := c.direct(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			return c.commitVectors(ctx, cat, wfs, payloads, summary, kept)
		}
	}
	tx := c.tbl.NewTransaction()
	// The commit holds only on the snapshot it was checked against: a
	// catalog-side retry (commit.retry.num-retries) must not replay it on
	// a head that moved, past CheckKeyIndexed; it fails into Commit's own
	// retry, which checks again.
	if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
		return nil, fmt.Errorf("asserting the branch's snapshot: %w", err)
	}
	rd := tx.NewRowDelta(summary)
	err := eachFile(meta, payloads, func(_ *Payload, f File, df iceberg.DataFile) error {
		switch f.Kind {
		case DataFile:
			rd.AddRows(df)
		case ReplacedDeletionVector:
			rd.RemoveDeletes(df)
		default:
			rd.AddDeletes(df)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := rd.Commit(ctx); err != nil {
		return nil, err
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return nil, err
	}
	kept[sinkProp(c.sinkID, propSnapshotID)] = strconv.FormatInt(staged.CurrentSnapshot().SnapshotID, 10)
	kept[sinkProp(c.sinkID, propSequence)] = strconv.FormatInt(staged.CurrentSnapshot().SequenceNumber, 10)
	if err := tx.SetProperties(kept); err != nil {
		return nil, fmt.Errorf("recording the sink's epoch in the table properties: %w", err)
	}
	return tx.Commit(ctx)
}

// eachFile calls fn with every file of the payloads and its manifest
// entry, decoded for the table meta.
func eachFile(meta table.Metadata, payloads []Payload, fn func(p *Payload, f File, df iceberg.DataFile) error) error {
	for i := range payloads {
		p := &payloads[i]
		schema, spec, err := payloadSchema(meta, p)
		if err != nil {
			return err
		}
		for _, f := range p.Files {
			df, err := codec.DecodeDataFile(f.Entry, *spec, schema, p.FormatVersion)
			if err != nil {
				return fmt.Errorf("decoding manifest entry of %s: %w", f.Path, err)
			}
			if df.FilePath() != f.Path {
				return fmt.Errorf("manifest entry of %s names %s", f.Path, df.FilePath())
			}
			if err := fn(p, f, df); err != nil {
				return err
			}
		}
	}
	return nil
}

// knowsSchemas reports whether meta holds the schema of every payload.
// knowsBases reports whether meta holds the snapshot every key-indexed
// payload's index was built from.
func knowsBases(meta table.Metadata, payloads []Payload) bool {
	for i := range payloads {
		if p := &payloads[i]; p.KeyIndexed && p.BaseSnapshot > 0 && meta.SnapshotByID(p.BaseSnapshot) == nil {
			return false
		}
	}
	return true
}

func knowsSchemas(meta table.Metadata, payloads []Payload) bool {
	for i := range payloads {
		if _, _, err := payloadSchema(meta, &payloads[i]); err != nil {
			return false
		}
	}
	return true
}

func payloadSchema(meta table.Metadata, p *Payload) (*iceberg.Schema, *iceberg.PartitionSpec, error) {
	var schema *iceberg.Schema
	for _, s := range meta.Schemas() {
		if s.ID == p.SchemaID {
			schema = s
		}
	}
	if schema == nil {
		return nil, nil, fmt.Errorf("payload of writer %d names schema %d, which the table does not have", p.Writer, p.SchemaID)
	}
	spec := meta.PartitionSpecByID(p.SpecID)
	if spec == nil {
		return nil, nil, fmt.Errorf("payload of writer %d names partition spec %d, which the table does not have", p.Writer, p.SpecID)
	}
	if p.FormatVersion != meta.Version() {
		return nil, nil, fmt.Errorf("payload of writer %d was written for format version %d, the table is at %d", p.Writer, p.FormatVersion, meta.Version())
	}
	return schema, spec, nil
}

// EncodeEntry encodes df as a File's Entry for table metadata meta.
func EncodeEntry(df iceberg.DataFile, spec iceberg.PartitionSpec, schema *iceberg.Schema, formatVersion int) ([]byte, error) {
	b, err := codec.EncodeDataFile(df, spec, schema, formatVersion)
	if err != nil {
		return nil, fmt.Errorf("commit: encoding manifest entry of %s: %w", df.FilePath(), err)
	}
	return b, nil
}

// propStart is the key under which the table properties keep, per input
// property (PropOffsetPrefix...), where a sink's input starts when its
// first run chose a moving point (Kafka's latest offsets): decided once,
// so that a run that crashes before its first commit, or another process
// of the sink, starts at the same place.
const propStart = "icesink.start."

// KeptStart returns the input start KeepStart recorded for the sink (nil:
// none), as the summary properties a resume takes.
func (c *Committer) KeptStart() map[string]string {
	prefix := sinkProp(c.sinkID, propStart)
	var out map[string]string
	for k, v := range c.tbl.Properties() {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[rest] = v
		}
	}
	return out
}

// KeepStart records start (summary properties, as KeptStart returns them)
// as the sink's input start unless the table keeps one already, and
// returns the one the table keeps. Two processes racing record one: the
// catalog refuses the second commit, which reloads and finds the first's.
func (c *Committer) KeepStart(ctx context.Context, start map[string]string) (map[string]string, error) {
	var kept map[string]string
	err := c.retrying(ctx, func() error {
		if kept = c.KeptStart(); kept != nil || len(start) == 0 {
			return nil
		}
		set := iceberg.Properties{}
		for k, v := range start {
			set[sinkProp(c.sinkID, propStart+k)] = v
		}
		if err := c.setProperties(ctx, set, false); err != nil {
			return err
		}
		kept = c.KeptStart()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commit: recording where sink %q's input starts in table %v: %w", c.sinkID, c.ident, err)
	}
	return kept, nil
}
