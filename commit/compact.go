package commit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/compaction"

	"github.com/icesink/icesink/internal/arrowval"
)

// PropMaintainedBy marks a snapshot that a sink's own maintenance
// committed (a compaction): its value is the sink id. Such a snapshot is
// not one of the sink's epochs, and it moves rows: a key-indexed payload
// whose writer did not follow it is refused like a foreign change.
const PropMaintainedBy = "icesink.maintained-by"

// Compaction is a sink's policy for rewriting its table's small data
// files, their deletes applied, into fewer files (iceberg-go's
// table/compaction planner and Transaction.RewriteDataFiles). A round runs
// between two epochs and delays the next one, so it is bounded.
type Compaction struct {
	// TargetFileSize is the size of the files written; files under three
	// quarters of it are candidates. 0: the table's
	// write.target-file-size-bytes.
	TargetFileSize int64
	// MinInputFiles is the fewest candidate files of a partition worth a
	// rewrite. Default 5 (iceberg-go's).
	MinInputFiles int
	// MaxInputBytes bounds the data files one round reads. Default 256 MiB.
	MaxInputBytes int64
	// MemoryLimit bounds what a round holds in memory besides the
	// deletes of the files it reads: the Arrow batches read and queued
	// and the Parquet row group being written are sized from it and from
	// the size of a row in the files read. 0: DefaultCompactionMemory.
	MemoryLimit int64
	// Select, when set, picks the data files of the round among the
	// candidates: every candidate it returns true for is rewritten (no
	// size tiering; MinInputFiles still applies per partition). For a
	// caller that knows which files it wants rewritten.
	Select func(path string) bool
	// AllDeletes also rewrites every data file a delete applies to,
	// whatever its size, alone if it is the only one (the round that ends
	// a finite input: the table is left with no delete to apply), and
	// holds MaxInputBytes strictly (files that would pass it are left
	// out, smallest first in).
	AllDeletes bool
	// Folder, when set, is the folder under the table's data folder the
	// round writes its files into: CompactionFolder(sinkID) for a sink's
	// own rounds, whose start-up sweep removes what a round killed before
	// its commit left there (a one-shot `icesink maintain` beside a
	// running sink must not write into it). Empty: the table's data
	// folder, as any writer.
	Folder string
}

// DefaultCompactionMemory is a round's memory bound when
// Compaction.MemoryLimit is 0.
const DefaultCompactionMemory = 64 << 20

// DefaultCompaction is what `icesink run --maintain` uses.
func DefaultCompaction() Compaction {
	return Compaction{MinInputFiles: int(compaction.DefaultMinInputFiles), MaxInputBytes: 256 << 20}
}

// Compacted is what one Compact did.
type Compacted struct {
	Snapshot           int64 // the rewrite's snapshot (0: nothing rewritten)
	RemovedDataFiles   int
	AddedDataFiles     int
	RemovedDeleteFiles int
	BytesBefore        int64
	BytesAfter         int64
}

// replacedFiles are a compaction's replaced files, listed by snapshots up to
// parent (and by snapshots of other refs that do not descend from snap,
// the compaction's own).
type replacedFiles struct {
	parent, snap int64
	paths        []string
}

// Compact rewrites the table's small data files per p, in a snapshot of its
// own (operation replace, PropMaintainedBy). Delete files left with nothing
// to delete go in the same snapshot. A concurrent commit that conflicts
// fails the rewrite and leaves the table as it was (iceberg-go's
// validation: a delete committed meanwhile against a rewritten file is
// never lost); the next round plans again. Replaced files are removed
// from storage once snapshot expiry (Tidy) drops the last snapshot that
// lists them.
func (c *Committer) Compact(ctx context.Context, p Compaction) (Compacted, error) {
	for attempt := 0; ; attempt++ {
		if c.stale {
			if err := c.Refresh(ctx); err != nil {
				return Compacted{}, err
			}
		}
		out, err := c.compactOnce(ctx, p)
		if err == nil || !Retryable(err) || attempt == 2 {
			return out, err
		}
		c.stale = true // planned on a table that moved: plan again
	}
}

func (c *Committer) compactOnce(ctx context.Context, p Compaction) (Compacted, error) {
	var out Compacted
	snap := c.tbl.CurrentSnapshot()
	if snap == nil {
		return out, nil
	}
	cfg := compaction.DefaultConfig()
	target := p.TargetFileSize
	if target <= 0 {
		target = int64(c.tbl.Properties().GetInt(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault))
	}
	cfg.TargetFileSizeBytes, cfg.MinFileSizeBytes, cfg.MaxFileSizeBytes = target, target*3/4, target*9/5
	if p.MinInputFiles > 0 {
		cfg.MinInputFiles = uint(p.MinInputFiles)
	}
	minFiles := int(cfg.MinInputFiles)
	if p.AllDeletes {
		// Every file with a delete is a candidate, in a group of any size
		// (Analyze drops the groups under MinInputFiles: the check below
		// applies it to the others).
		cfg.DeleteFileThreshold, cfg.MinInputFiles = 1, 1
	}
	maxBytes := p.MaxInputBytes
	if maxBytes <= 0 {
		maxBytes = 256 << 20
	}
	plan, err := compaction.Analyze(ctx, c.tbl, cfg)
	if err != nil {
		return out, fmt.Errorf("commit: planning the compaction of %v: %w", c.ident, err)
	}
	var groups []table.CompactionTaskGroup
	rewritten := map[string]struct{}{}
	budget := maxBytes
	for _, g := range plan.Groups {
		var tasks []table.FileScanTask
		var size int64
		if p.Select != nil {
			for _, t := range g.Tasks {
				if p.Select(t.File.FilePath()) {
					tasks, size = append(tasks, t), size+t.File.FileSizeBytes()
				}
			}
		} else {
			tasks, size = tiered(g.Tasks, budget, cfg.DeleteFileThreshold)
		}
		for p.AllDeletes && size > budget && len(tasks) > 0 {
			// tiered's picks are smallest first: drop the largest.
			size -= tasks[len(tasks)-1].File.FileSizeBytes()
			tasks = tasks[:len(tasks)-1]
		}
		if len(tasks) < max(2, minFiles) && !(p.AllDeletes && slices.ContainsFunc(tasks, hasDeletes)) {
			continue // not worth a rewrite yet
		}
		for _, t := range tasks {
			rewritten[t.File.FilePath()] = struct{}{}
		}
		groups = append(groups, table.CompactionTaskGroup{PartitionKey: g.PartitionKey, Tasks: tasks, TotalSizeBytes: size})
		if budget -= size; budget <= 0 {
			break
		}
	}
	if len(groups) == 0 {
		return out, nil
	}
	fsys, err := c.tbl.FS(ctx)
	if err != nil {
		return out, fmt.Errorf("commit: %v: %w", c.ident, err)
	}
	deadEq, err := compaction.CollectDeadEqualityDeletes(ctx, fsys, snap, rewritten)
	if err != nil {
		return out, fmt.Errorf("commit: finding the equality deletes a compaction of %v leaves dead: %w", c.ident, err)
	}
	deadPos, err := compaction.CollectDeadPositionDeletes(ctx, fsys, snap, rewritten)
	if err != nil {
		return out, fmt.Errorf("commit: finding the position deletes a compaction of %v leaves dead: %w", c.ident, err)
	}

	// The groups are executed one by one (iceberg-go's worker step) so
	// that the files written are known: a failed rewrite removes them.
	tx := c.tbl.NewTransaction()
	rw := tx.NewRewrite(iceberg.Properties{PropMaintainedBy: c.sinkID, "icesink.maintain": "compact"})
	var written []string
	fail := func(err error) (Compacted, error) {
		if wfs, ok := fsys.(icebergio.WriteFileIO); ok {
			for _, p := range written {
				if rerr := removeIfPresent(wfs, p); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}
		}
		return Compacted{}, err
	}
	dead := map[string]struct{}{}
	for _, df := range deadPos {
		dead[df.FilePath()] = struct{}{}
	}
	staged := map[string]struct{}{}
	limit := p.MemoryLimit
	if limit <= 0 {
		limit = DefaultCompactionMemory
	}
	group := rowGroupBytes(limit, c.tbl.Properties())
	into, err := c.compactionTable(p.Folder, iceberg.Properties{table.ParquetRowGroupSizeBytesKey: strconv.FormatInt(group, 10)})
	if err != nil {
		return out, err
	}
	for _, g := range groups {
		gr, err := compactGroup(ctx, into, g, target, memoryOptions(g.Tasks, limit, group))
		for _, df := range gr.NewDataFiles {
			written = append(written, df.FilePath())
		}
		if err != nil {
			return fail(fmt.Errorf("commit: compacting %v: %w", c.ident, err))
		}
		if len(gr.OldDataFiles) == 0 && len(gr.NewDataFiles) == 0 {
			continue
		}
		// iceberg-go v0.7.0 counts as safe every position-delete file
		// attached to a rewritten file, also one that deletes rows of
		// files the round keeps (a writer's delete file spans files):
		// removing it would bring those rows back. Only the ones the
		// whole-rewrite check found dead go.
		gr.SafePosDeletes = slices.DeleteFunc(gr.SafePosDeletes, func(df iceberg.DataFile) bool {
			_, ok := dead[df.FilePath()]
			return !ok
		})
		rw.ApplyResult(gr)
		out.RemovedDataFiles += len(gr.OldDataFiles)
		out.AddedDataFiles += len(gr.NewDataFiles)
		out.BytesBefore += gr.BytesBefore
		out.BytesAfter += gr.BytesAfter
		for _, df := range append(gr.SafePosDeletes, gr.SafeDeletionVectors...) {
			staged[df.FilePath()] = struct{}{}
			out.RemovedDeleteFiles++
		}
	}
	if out.RemovedDataFiles == 0 {
		return fail(nil)
	}
	for _, df := range append(deadEq, deadPos...) {
		if _, ok := staged[df.FilePath()]; !ok {
			staged[df.FilePath()] = struct{}{}
			rw.DeleteFile(df)
			out.RemovedDeleteFiles++
		}
	}
	if err := rw.Commit(ctx); err != nil {
		return fail(fmt.Errorf("commit: staging the compaction of %v: %w", c.ident, err))
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		c.stale = true
		if Retryable(err) {
			return fail(fmt.Errorf("commit: committing the compaction of %v: %w", c.ident, err))
		}
		// The outcome is unknown: the files may be in the table.
		return Compacted{}, fmt.Errorf("commit: committing the compaction of %v: %w", c.ident, err)
	}
	// The files no longer listed by the new snapshot are still listed by
	// its parent: they go when that expires.
	gone, err := unlisted(ctx, fsys, snap, tbl.CurrentSnapshot())
	if err != nil {
		return out, err
	}
	c.replaced = append(c.replaced, replacedFiles{parent: snap.SnapshotID, snap: tbl.CurrentSnapshot().SnapshotID, paths: gone})
	c.adopt(ctx, tbl)
	out.Snapshot = c.tbl.CurrentSnapshot().SnapshotID
	return out, nil
}

// rowGroupBytes is the size of the row groups a round of memory limit
// writes into a table of properties props: an eighth of the limit, at
// least 1 MiB, unless the table sets its own
// (write.parquet.row-group-size-bytes), which wins. arrow-go holds a row
// group's encoded pages until it is closed (in buffers that grow by
// doubling), and the next round reads its column chunks whole:
// iceberg-go's 128 MiB row groups held a 16 MiB round at 52 MiB live.
// The pages keep the table's size (1 MiB): 64 KiB pages held 5 MiB less
// in a 16 MiB round but made the files 26% larger (1,000 commits of 1.5M
// changes: 422 MiB written against 335).
func rowGroupBytes(limit int64, props iceberg.Properties) int64 {
	return int64(props.GetInt(table.ParquetRowGroupSizeBytesKey, int(max(limit/8, 1<<20))))
}

// groupMemory is how a compaction round reads and writes: rows per batch
// read, batches queued, rows per row group.
type groupMemory struct{ batchRows, queued, groupRows int }

// memoryOptions size the compaction of tasks to hold about limit bytes,
// with row groups of group bytes: iceberg-go's defaults (batches of the
// table's read.parquet.batch-size, 64 of them queued) raised a round's
// peak well past the writers' budget. A quarter of the limit goes to the
// batches read and queued (a batch in the reader's hands, a queue of 4,
// one routed, one encoded); a row's size is estimated from the files
// read, its compressed size in them decoded at most decodedRatio times
// larger. iceberg-go cuts a row group by the bytes of its pages already
// encoded, which lag the values written: the rows a group's bytes hold
// cut it in time (31 MiB against 37 live in a 16 MiB round).
func memoryOptions(tasks []table.FileScanTask, limit, group int64) groupMemory {
	const decodedRatio = 8
	var rows, bytes int64
	for _, t := range tasks {
		rows, bytes = rows+t.File.Count(), bytes+t.File.FileSizeBytes()
	}
	stored := max(bytes/max(rows, 1), 1)
	return groupMemory{
		batchRows: int(min(max(limit/4/6/(stored*decodedRatio), 256), 64<<10)),
		queued:    4,
		groupRows: int(min(max(group/stored, 4<<10), 1<<20)),
	}
}

// compactGroup rewrites the live rows of g's files into new files of tbl
// (one scan at a time, within mem) and says which files and deletes the
// new ones replace: iceberg-go's table.ExecuteCompactionGroup, but for
// the batches it writes, which pass through arrowval.WithValueBuffers
// (the scanner's delete filter leaves a batch of only empty strings
// without value bytes, and arrow-go then writes a lower bound above "").
func compactGroup(ctx context.Context, tbl *table.Table, g table.CompactionTaskGroup, target int64, mem groupMemory) (table.CompactionGroupResult, error) {
	out := table.CompactionGroupResult{PartitionKey: g.PartitionKey}
	if len(g.Tasks) == 0 {
		return out, nil
	}
	scanOpts := []table.ScanOption{table.WithMaxConcurrency(1), table.WithArrowBatchSize(mem.batchRows)}
	writeOpts := []table.WriteRecordOption{
		table.WithClusteredWrite(), // a group is one partition
		table.WithTargetFileSize(target),
		table.WithRecordBatchBufferSize(mem.queued),
		table.WithParquetRowGroupLimit(mem.groupRows),
	}
	// Row lineage is kept when every file has it (iceberg-go's rule: a
	// group mixing files with and without it drops it).
	lineage := tbl.Metadata().Version() >= 3 && !slices.ContainsFunc(g.Tasks, func(t table.FileScanTask) bool { return t.FirstRowID == nil })
	if lineage {
		scanOpts = append(scanOpts, table.WithRowLineage())
	}
	asc, records, err := tbl.Scan(scanOpts...).ReadTasks(ctx, g.Tasks)
	if err != nil {
		return out, fmt.Errorf("reading the files of partition %q: %w", g.PartitionKey, err)
	}
	if lineage {
		sc := iceberg.SchemaWithRowLineage(tbl.Schema())
		if asc, err = table.SchemaToArrowSchemaWithOptions(sc, table.ArrowSchemaOptions{IncludeFieldIDs: true, TableProperties: tbl.Metadata().Properties()}); err != nil {
			return out, fmt.Errorf("the row-lineage schema of partition %q: %w", g.PartitionKey, err)
		}
		writeOpts = append(writeOpts, table.WithPreserveRowLineage(sc))
	}
	fixed := func(yield func(arrow.RecordBatch, error) bool) {
		for rec, err := range records {
			if err != nil {
				yield(nil, err)
				return
			}
			f := arrowval.WithValueBuffers(rec)
			rec.Release()
			if !yield(f, nil) {
				return
			}
		}
	}
	for df, err := range table.WriteRecords(ctx, tbl, asc, fixed, writeOpts...) {
		if err != nil {
			return out, fmt.Errorf("writing the compacted files of partition %q: %w", g.PartitionKey, err)
		}
		out.NewDataFiles = append(out.NewDataFiles, df)
		out.BytesAfter += df.FileSizeBytes()
	}
	for _, t := range g.Tasks {
		out.OldDataFiles = append(out.OldDataFiles, t.File)
	}
	out.SafePosDeletes = table.CollectSafePositionDeletes(g.Tasks)
	out.SafeDeletionVectors = table.CollectSafeDeletionVectors(g.Tasks)
	out.BytesBefore = g.TotalSizeBytes
	return out, nil
}

// deleteFiles is the number of delete files that apply to t's data file.
func deleteFiles(t table.FileScanTask) int {
	return len(t.DeleteFiles) + len(t.EqualityDeleteFiles) + len(t.DeletionVectorFiles)
}

// hasDeletes reports whether a delete file applies to t's data file.
func hasDeletes(t table.FileScanTask) bool { return deleteFiles(t) > 0 }

// tiered picks the files of a planned group one round rewrites, smallest
// first: a file joins while it is at most twice the size of those picked
// before it (so a file is rewritten again only once the files merged into
// it have grown to its size: each row is rewritten O(log) times, not once
// per round as re-reading the group's one big file would), and within
// budget bytes. A file with at least threshold delete files joins
// whatever its size: its deletes go with it.
func tiered(tasks []table.FileScanTask, budget int64, threshold int) ([]table.FileScanTask, int64) {
	tasks = slices.Clone(tasks)
	slices.SortFunc(tasks, func(a, b table.FileScanTask) int {
		return cmp.Compare(a.File.FileSizeBytes(), b.File.FileSizeBytes())
	})
	var picked []table.FileScanTask
	var size int64
	for _, t := range tasks {
		sz := t.File.FileSizeBytes()
		if size+sz > budget && len(picked) >= 2 {
			break
		}
		if len(picked) > 0 && sz > 2*size && deleteFiles(t) < threshold {
			continue
		}
		picked = append(picked, t)
		size += sz
	}
	return picked, size
}

// fileLister lists the data and delete files of snapshots, reading each
// manifest once however many of them list it (a table's retained
// snapshots share most of their manifests: reading them per snapshot made
// a sink's history upkeep over a quarter of a run of small commits).
type fileLister struct {
	fsys  icebergio.IO
	lists map[string][]iceberg.ManifestFile // manifest list path: its manifests
	files map[string][]string               // manifest path: the files its live entries name
}

func newFileLister(fsys icebergio.IO) *fileLister {
	return &fileLister{fsys: fsys, lists: map[string][]iceberg.ManifestFile{}, files: map[string][]string{}}
}

// add puts the files snapshot s lists into into.
func (l *fileLister) add(s *table.Snapshot, into map[string]struct{}) error {
	mans, ok := l.lists[s.ManifestList]
	if !ok {
		var err error
		if mans, err = s.Manifests(l.fsys); err != nil {
			return fmt.Errorf("commit: reading the manifest list of snapshot %d: %w", s.SnapshotID, err)
		}
		if s.ManifestList != "" { // a v1 snapshot may embed its manifests instead
			l.lists[s.ManifestList] = mans
		}
	}
	for _, m := range mans {
		paths, ok := l.files[m.FilePath()]
		if !ok {
			entries, err := m.FetchEntries(l.fsys, true)
			if err != nil {
				return fmt.Errorf("commit: reading manifest %s: %w", m.FilePath(), err)
			}
			paths = make([]string, len(entries))
			for i, e := range entries {
				paths[i] = e.DataFile().FilePath()
			}
			l.files[m.FilePath()] = paths
		}
		for _, p := range paths {
			into[p] = struct{}{}
		}
	}
	return nil
}

// listed returns the data and delete files snapshot s lists.
func (l *fileLister) listed(s *table.Snapshot) (map[string]struct{}, error) {
	files := map[string]struct{}{}
	return files, l.add(s, files)
}

// unlisted returns the data and delete files before lists and after does
// not.
func unlisted(ctx context.Context, fsys icebergio.IO, before, after *table.Snapshot) ([]string, error) {
	l := newFileLister(fsys)
	was, err := l.listed(before)
	if err != nil {
		return nil, err
	}
	now, err := l.listed(after)
	if err != nil {
		return nil, err
	}
	var gone []string
	for p := range was {
		if _, ok := now[p]; !ok {
			gone = append(gone, p)
		}
	}
	slices.Sort(gone)
	return gone, nil
}

// removeReplaced removes the files of the compactions whose parent snapshot the
// table no longer has (expired), except those a retained snapshot that
// does not descend from the compaction still lists: a tag or a branch
// taken before it (time travel to a tag must keep working).
func (c *Committer) removeReplaced(ctx context.Context) error {
	if len(c.replaced) == 0 {
		return nil
	}
	fsys, err := c.tbl.FS(ctx)
	if err != nil {
		return err
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return nil
	}
	meta := c.tbl.Metadata()
	var keep []replacedFiles
	var errs []error
	l := newFileLister(fsys)
	for _, g := range c.replaced {
		if meta.SnapshotByID(g.parent) != nil {
			keep = append(keep, g)
			continue
		}
		held, err := heldElsewhere(l, meta, g.snap)
		if err != nil {
			return err
		}
		var pending []string
		for i, p := range g.paths {
			if _, ok := held[p]; ok {
				pending = append(pending, p)
				continue
			}
			if err := removeIfPresent(wfs, p); err != nil {
				errs = append(errs, fmt.Errorf("commit: removing %s, which a compaction replaced: %w", p, err))
				pending = append(pending, g.paths[i:]...)
				break
			}
		}
		if len(pending) > 0 {
			keep = append(keep, replacedFiles{parent: g.parent, snap: g.snap, paths: pending})
		}
	}
	c.replaced = keep
	return errors.Join(errs...)
}

// heldElsewhere returns the files listed by the retained snapshots of meta
// that do not descend from snapshot snap (those of tags and branches taken
// before it), nil when there are none.
func heldElsewhere(l *fileLister, meta table.Metadata, snap int64) (map[string]struct{}, error) {
	var held map[string]struct{}
	for _, s := range meta.Snapshots() {
		descends := false
		for _, a := range table.AncestorsOf(s.SnapshotID, meta.SnapshotByID) {
			if a.SnapshotID == snap {
				descends = true
				break
			}
		}
		if descends {
			continue
		}
		if held == nil {
			held = map[string]struct{}{}
		}
		if err := l.add(&s, held); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// CompactionFile reports whether path is in the folder where sink
// sinkID's own compaction rounds write (CompactionFolder, given as
// Compaction.Folder): a round that did not commit (the process was killed
// mid-round) leaves its files there, and the sink's next start removes
// those no snapshot references, as it does its writers'
// (deltawriter.SinkFile). iceberg-go names the files of a rewrite like any
// writer's, so the folder is what tells them.
func CompactionFile(path, sinkID string) bool {
	return strings.Contains(path, "/"+CompactionFolder(sinkID)+"/")
}

// CompactionFolder is the folder, under the table's data folder, of sink
// sinkID's compaction rounds' files.
func CompactionFolder(sinkID string) string { return sinkID + "-compacted" }

// compactionTable is the table as a compaction round's writer sees it:
// the same metadata with props set and its data path (write.data.path)
// set to folder under the table's data folder (empty: the table's data
// folder). Only the files' location and layout change; the round commits
// through c.tbl.
func (c *Committer) compactionTable(folder string, props iceberg.Properties) (*table.Table, error) {
	meta := c.tbl.Metadata()
	set := maps.Clone(props)
	if folder != "" {
		set[table.WriteDataPathKey] = dataFolder(meta) + "/" + folder
	}
	b, err := table.MetadataBuilderFromBase(meta, c.tbl.MetadataLocation())
	if err != nil {
		return nil, fmt.Errorf("commit: %v: %w", c.ident, err)
	}
	if err := b.SetProperties(set); err != nil {
		return nil, fmt.Errorf("commit: %v: %w", c.ident, err)
	}
	m, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("commit: %v: %w", c.ident, err)
	}
	return table.New(c.tbl.Identifier(), m, c.tbl.MetadataLocation(), c.tbl.FS, nil), nil
}
