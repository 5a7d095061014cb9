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
	// graves are the files this committer's compactions replaced: they
	// are removed once the snapshots that still list them expire.
	graves []grave
	// cat and fsF rebuild a committed table without reloading it (adopt);
	// cat is nil when the loader is not also the table's catalog.
	cat table.CatalogIO
	fsF table.FSysF
	// lastOwn is the snapshot of this committer's last commit (0: none
	// yet): key-indexed payloads are checked for foreign changes after it.
	lastOwn int64
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

func lastCommitted(tbl *table.Table, sinkID string) (Committed, bool) {
	props := tbl.Properties()
	kept, err := strconv.ParseUint(props[sinkProp(sinkID, PropEpoch)], 10, 64)
	hasKept := err == nil
	for e, s := range sinkEpochs(tbl, sinkID) {
		if hasKept && e < kept {
			break // the snapshot of the kept epoch was expired
		}
		return Committed{Epoch: e, SnapshotID: s.SnapshotID, Properties: s.Summary.Properties}, true
	}
	if !hasKept {
		return Committed{}, false
	}
	prefix := PropSinkPrefix + sinkID + "."
	out := iceberg.Properties{}
	for k, v := range props {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			out["icesink."+rest] = v
		}
	}
	out[PropSinkID] = sinkID
	return Committed{Epoch: kept, Properties: out}, true
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
	// Retries is how many times the commit was retried on a moved branch.
	Retries int
}

// Commit commits the payloads of epoch as one RowDelta snapshot whose
// summary carries the sink id, the epoch and props. If the table already
// holds an epoch >= epoch of this sink, nothing is committed
// (AlreadyCommitted).
//
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

// CheckKeyIndexed refuses key-indexed payloads (ErrForeignChange) when a
// snapshot that is not this sink's and changed rows (ChangesRows: anything
// but a rewrite of manifests; a foreign compaction moves rows) came after
// the newest of the writers' index base and this committer's last commit.
func (c *Committer) CheckKeyIndexed(payloads []Payload) error {
	var bases []int64
	for i := range payloads {
		if payloads[i].KeyIndexed && !payloads[i].Empty() {
			bases = append(bases, payloads[i].BaseSnapshot)
		}
	}
	if len(bases) == 0 {
		return nil
	}
	meta := c.Table().Metadata()
	// Every base must be reached going back from the current snapshot
	// with only this sink's commits and replaces on the way (or, once this
	// committer has committed, its last commit).
	for _, base := range bases {
		for s := meta.CurrentSnapshot(); s != nil; {
			if s.SnapshotID == base || s.SnapshotID == c.lastOwn {
				break
			}
			if s.Summary == nil || (ChangesRows(s) && s.Summary.Properties[PropSinkID] != c.sinkID) {
				op := "unknown"
				if s.Summary != nil {
					op = string(s.Summary.Operation)
				}
				return fmt.Errorf("%w (snapshot %d, operation %s): rerun to rebuild the index from the table, or write with --delete-mode equality when other writers change this table", ErrForeignChange, s.SnapshotID, op)
			}
			if s.ParentSnapshotID == nil {
				if base >= 0 {
					return fmt.Errorf("%w: snapshot %d, which the index was built from, is no longer in the table's history; rerun to rebuild", ErrForeignChange, base)
				}
				break
			}
			s = meta.SnapshotByID(*s.ParentSnapshotID)
		}
	}
	return nil
}

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
		return res, nil
	}
	for attempt := 0; ; attempt++ {
		if c.stale {
			if err := c.Refresh(ctx); err != nil {
				return res, err
			}
		}
		if last, ok := c.Last(); ok && last.Epoch >= epoch {
			res.AlreadyCommitted = last.Epoch == epoch
			res.SnapshotID = last.SnapshotID
			if last.Epoch > epoch {
				return res, fmt.Errorf("commit: epoch %d: the table already holds the later epoch %d of sink %q", epoch, last.Epoch, c.sinkID)
			}
			return res, nil
		}
		if err := c.CheckKeyIndexed(payloads); err != nil {
			return res, fmt.Errorf("commit: epoch %d: %w", epoch, err)
		}
		tbl, err := c.commitOnce(ctx, epoch, payloads, props)
		if err == nil {
			res.SnapshotID = tbl.CurrentSnapshot().SnapshotID
			c.lastOwn = res.SnapshotID
			c.adopt(ctx, tbl)
			return res, nil
		}
		c.stale = true
		if !Retryable(err) || attempt >= c.maxRetries {
			return res, fmt.Errorf("commit: epoch %d of sink %q: %w", epoch, c.sinkID, err)
		}
		res.Retries++
		backoff := time.Duration(10<<min(attempt, 6)) * time.Millisecond
		backoff += rand.N(backoff)
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("commit: epoch %d: %w", epoch, ctx.Err())
		case <-time.After(backoff):
		}
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

func (c *Committer) commitOnce(ctx context.Context, epoch uint64, payloads []Payload, props map[string]string) (*table.Table, error) {
	meta := c.tbl.Metadata()
	summary := iceberg.Properties{}
	for k, v := range props {
		summary[k] = v
	}
	summary[PropSinkID] = c.sinkID
	summary[PropEpoch] = strconv.FormatUint(epoch, 10)
	kept := iceberg.Properties{}
	for k, v := range summary {
		if strings.HasPrefix(k, "icesink.") && k != PropSinkID {
			kept[sinkProp(c.sinkID, k)] = v
		}
	}

	if err := oneVectorPerFile(payloads); err != nil {
		return nil, err
	}
	tx := c.tbl.NewTransaction()
	rd := tx.NewRowDelta(summary)
	for i := range payloads {
		p := &payloads[i]
		schema, spec, err := payloadSchema(meta, p)
		if err != nil {
			return nil, err
		}
		for _, f := range p.Files {
			df, err := codec.DecodeDataFile(f.Entry, *spec, schema, p.FormatVersion)
			if err != nil {
				return nil, fmt.Errorf("decoding manifest entry of %s: %w", f.Path, err)
			}
			if df.FilePath() != f.Path {
				return nil, fmt.Errorf("manifest entry of %s names %s", f.Path, df.FilePath())
			}
			switch f.Kind {
			case DataFile:
				rd.AddRows(df)
			case ReplacedDeletionVector:
				rd.RemoveDeletes(df)
			default:
				rd.AddDeletes(df)
			}
		}
	}
	if err := rd.Commit(ctx); err != nil {
		return nil, err
	}
	if err := tx.SetProperties(kept); err != nil {
		return nil, fmt.Errorf("recording the sink's epoch in the table properties: %w", err)
	}
	return tx.Commit(ctx)
}

// ErrVectorsOfOneFile is returned for an epoch in which several writers
// wrote a deletion vector for one data file: a format v3 table written by
// writers grouped otherwise (another --writers or --vnodes layout), whose
// older data files hold keys of several of today's writers. Each writer
// merges only the vector it knows, so the epoch cannot keep the v3 rule
// of one vector per data file.
var ErrVectorsOfOneFile = errors.New("several writers wrote deletion vectors for one data file")

// oneVectorPerFile refuses payloads that hold two deletion vectors (or two
// replacements) for one data file.
func oneVectorPerFile(payloads []Payload) error {
	seen := map[string]int{}
	for i := range payloads {
		for _, f := range payloads[i].Files {
			if f.Kind != DeletionVector {
				continue
			}
			ref := f.Ref
			if w, dup := seen[ref]; dup && w != payloads[i].Writer {
				return fmt.Errorf("%w (%s, writers %d and %d): the table was written with another writer layout; write a format v3 table with the same --writers/--vnodes as before, or use --delete-mode equality", ErrVectorsOfOneFile, ref, w, payloads[i].Writer)
			}
			seen[ref] = payloads[i].Writer
		}
	}
	return nil
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

// ChangesRows reports whether snapshot s may have changed the table's live
// rows or where they sit: every snapshot but a replace that added and
// removed no data file and no delete file (a rewrite or merge of
// manifests). A compaction is a replace that does.
func ChangesRows(s *table.Snapshot) bool {
	if s.Summary == nil || s.Summary.Operation != table.OpReplace {
		return true
	}
	for _, k := range []string{"added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files", "added-records", "deleted-records"} {
		if v, ok := s.Summary.Properties[k]; ok && v != "0" {
			return true
		}
	}
	return false
}
