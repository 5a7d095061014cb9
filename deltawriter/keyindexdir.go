package deltawriter

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/dedup"
	"github.com/icesink/icesink/spill"
)

// The saved key index: Options.KeyIndexDir holds the index's sorted runs
// (spill format) and a manifest, keyIndexFile, naming them with what they
// are consistent with. Version 2 of the manifest is JSON:
//
//	format, version        "icesink-keyindex", 2
//	table_uuid, sink_id    whose rows the index holds
//	snapshot               the table snapshot it is consistent with
//	spec_id, key_field_ids the partitioning and key it was built with
//	runs                   run files, oldest first
//	files, lanes           the file table: file id -> data file path, and its
//	                       partition key's bytes in base64 ("" for a file a
//	                       compaction removed: ids are positions)
//
// Version 1 wrote the partition keys as JSON strings, which turned bytes
// that are not UTF-8 into U+FFFD; a version 1 manifest is not read (the
// index is rebuilt from the table).
//
// New reads it and removes it at once (a crash afterwards leaves no
// manifest, so the next start rebuilds); SaveKeyIndex writes it again
// (temporary file, fsync, rename).
const (
	keyIndexFile    = "KEYINDEX"
	keyIndexFormat  = "icesink-keyindex"
	keyIndexVersion = 2
)

// byteStrings are strings of any bytes, written to JSON in base64: a
// partition key's bytes are seldom UTF-8.
type byteStrings []string

// MarshalJSON writes each string as base64.
func (b byteStrings) MarshalJSON() ([]byte, error) {
	enc := make([][]byte, len(b))
	for i, s := range b {
		enc[i] = []byte(s)
	}
	return json.Marshal(enc)
}

// UnmarshalJSON reads the base64 strings MarshalJSON wrote.
func (b *byteStrings) UnmarshalJSON(data []byte) error {
	var dec [][]byte
	if err := json.Unmarshal(data, &dec); err != nil {
		return err
	}
	*b = make(byteStrings, len(dec))
	for i, d := range dec {
		(*b)[i] = string(d)
	}
	return nil
}

type keyIndexManifest struct {
	Format      string      `json:"format"`
	Version     int         `json:"version"`
	TableUUID   string      `json:"table_uuid"`
	SinkID      string      `json:"sink_id"`
	Snapshot    int64       `json:"snapshot"`
	SpecID      int         `json:"spec_id"`
	KeyFieldIDs []int       `json:"key_field_ids"`
	Runs        []string    `json:"runs"`
	Files       []string    `json:"files"`
	Lanes       byteStrings `json:"lanes"`
}

// keyFieldIDs returns the field ids of the writer's key columns.
func (w *Writer) keyFieldIDs() []int {
	var ids []int
	for _, c := range w.keys.Columns() {
		ids = append(ids, w.schema.Field(c).ID)
	}
	return ids
}

// openTableIndex reuses the index saved in Options.KeyIndexDir when it is
// consistent with tbl, and otherwise builds it from the table (in that
// folder, so that it can be saved again).
func (w *Writer) openTableIndex(ctx context.Context, tbl *table.Table) error {
	dir := w.opts.tableIndex.Dir
	if dir == "" {
		return w.buildTableIndex(ctx, tbl, nil)
	}
	reason, err := w.loadTableIndex(ctx, tbl, dir)
	if err != nil {
		return err
	}
	if reason == "" {
		w.stats.IndexesReused = 1
		return nil
	}
	w.stats.IndexRebuildReason = reason
	// Take the folder (its old runs go) and build into it.
	ix, err := dedup.Open(w.opts.tableIndex, nil)
	switch {
	case errors.Is(err, spill.ErrLocked):
		w.stats.IndexRebuildReason = reasonInUse
		w.opts.tableIndex.Dir = "" // another process's: build a private one
		ix = nil
	case err != nil:
		return fmt.Errorf("deltawriter: opening the key index folder: %w", err)
	default:
		if err := os.Remove(filepath.Join(dir, keyIndexFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			ix.Close()
			return fmt.Errorf("deltawriter: removing the stale key index manifest in %s: %w", dir, err)
		}
	}
	if err := w.buildTableIndex(ctx, tbl, ix); err != nil {
		return err
	}
	if w.CheckpointsKeyIndex() && w.stats.IndexRebuildFiles > 0 {
		// A crash before the first commit need not rebuild again. (An
		// index of a table without data files is not saved: building it
		// reads nothing, and a database run creating its tables would
		// pay a manifest's fsyncs for each.)
		if _, err := w.saveKeyIndex(ctx, tbl); err != nil {
			return err
		}
	}
	return nil
}

// CheckpointsKeyIndex reports whether CheckpointKeyIndex saves the key
// index: a DeleteByPosition writer with a key index folder and a bounded
// key index, whose committed windows are sorted runs on disk already (an
// unbounded one holds them in memory: saving it writes it whole, which
// SaveKeyIndex does once, at the end of a run).
func (w *Writer) CheckpointsKeyIndex() bool {
	return w.tidx != nil && w.opts.tableIndex.Dir != "" && w.opts.tableIndex.MemoryLimit > 0
}

// CheckpointKeyIndex saves the key index as SaveKeyIndex does, after a
// commit (tbl holds it), when CheckpointsKeyIndex: what costs a manifest
// and the fsync of the runs written since the last one. A restart after a
// crash then takes the index saved at the last commit instead of reading
// the table's key columns again. It returns why nothing was saved, as
// SaveKeyIndex does.
func (w *Writer) CheckpointKeyIndex(ctx context.Context, tbl *table.Table) (string, error) {
	if !w.CheckpointsKeyIndex() {
		return "the key index is saved at the end of the run only", nil
	}
	why, err := w.saveKeyIndex(ctx, tbl)
	if why == "" && err == nil {
		w.stats.IndexCheckpoints++
	}
	return why, err
}

const reasonInUse = "the key index folder is in use by another process"

// loadTableIndex opens the index saved in dir and returns "" when it is
// consistent with tbl, or why it is not (then nothing is open). Only an
// unexpected error reading the table is returned as an error.
func (w *Writer) loadTableIndex(ctx context.Context, tbl *table.Table, dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, keyIndexFile))
	if errors.Is(err, os.ErrNotExist) {
		return "no saved key index", nil
	}
	if err != nil {
		return fmt.Sprintf("reading the saved key index: %v", err), nil
	}
	var m keyIndexManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Sprintf("the saved key index's manifest is damaged: %v", err), nil
	}
	meta := tbl.Metadata()
	switch {
	case m.Format != keyIndexFormat || m.Version != keyIndexVersion:
		return fmt.Sprintf("the saved key index has format %q version %d, this build reads %q version %d", m.Format, m.Version, keyIndexFormat, keyIndexVersion), nil
	case m.TableUUID != meta.TableUUID().String():
		return "the saved key index belongs to another table", nil
	case m.SinkID != w.opts.SinkID:
		return fmt.Sprintf("the saved key index belongs to sink %q", m.SinkID), nil
	case m.SpecID != meta.DefaultPartitionSpec() || !slices.Equal(m.KeyFieldIDs, w.keyFieldIDs()):
		return "the table's key or partitioning changed since the key index was saved", nil
	case len(m.Files) != len(m.Lanes) || len(m.Files) > dedup.MaxFile+1:
		return "the saved key index's file table is damaged", nil
	}
	if why := sinceSaved(meta, m.Snapshot); why != "" {
		return why, nil
	}
	opts := w.opts.tableIndex
	opts.Dir = dir
	ix, err := dedup.Open(opts, m.Runs)
	if errors.Is(err, spill.ErrLocked) {
		return reasonInUse, nil
	}
	if err != nil {
		return fmt.Sprintf("the saved key index's runs could not be read: %v", err), nil
	}
	// The manifest stays while the runs are as it names them: whatever
	// changes the index first removes it (unsave), so a crash before that
	// finds it again.
	w.saved, w.savedSnap = true, m.Snapshot
	w.failpoint("keyindex-load")
	t := &tableIndex{ix: ix, files: m.Files, lanes: m.Lanes, ids: make(map[string]uint32, len(m.Files)), base: -1}
	for i, p := range m.Files {
		if p != "" { // a file a compaction removed
			t.ids[p] = uint32(i)
		}
	}
	if s := meta.CurrentSnapshot(); s != nil {
		t.base = s.SnapshotID
	}
	w.tidx = t
	if w.version >= 3 {
		// The live deletion vectors come from the manifests alone.
		if s := tbl.CurrentSnapshot(); s != nil {
			fsys, err := tbl.FS(ctx)
			if err != nil {
				return "", err
			}
			plan, err := planRebuild(fsys, s)
			if err != nil {
				return "", fmt.Errorf("deltawriter: listing the table's deletion vectors: %w", err)
			}
			for i := range plan.data {
				if df, ok := plan.vector(i); ok {
					if w.dvs.live == nil {
						w.dvs.live = map[string]iceberg.DataFile{}
					}
					w.dvs.live[plan.data[i].df.FilePath()] = df
				}
			}
		}
	}
	return "", nil
}

// sinceSaved returns "" when the snapshots of meta after snapshot saved
// (-1: none) changed no rows (rewrites of manifests only), or why the
// saved index is not consistent with the table.
func sinceSaved(meta table.Metadata, saved int64) string {
	steps, err := commit.History(meta, "", saved)
	if err != nil {
		return fmt.Sprintf("the saved key index is consistent with a snapshot the table's history no longer leads to: %v", err)
	}
	for _, st := range steps {
		if st.Kind != commit.MetadataOnly {
			op := "unknown"
			if st.Snapshot.Summary != nil {
				op = string(st.Snapshot.Summary.Operation)
			}
			return fmt.Sprintf("the table changed after the key index was saved (snapshot %d, operation %s)", st.Snapshot.SnapshotID, op)
		}
	}
	return ""
}

// SaveKeyIndex keeps a DeleteByPosition writer's key index in
// Options.KeyIndexDir for the next run's New, which then skips the
// rebuild when the table did not change in between. tbl is the table as
// the caller last loaded it, holding the writer's last commit. The caller
// calls it after its last Committed (and Follow) and before giving up its
// keys (a sink: before its coordinator session ends), so that no later
// commit can have touched them. (A table that moved since tbl was loaded
// is caught by the next New, which compares the saved snapshot with the
// table then.) It returns why nothing was saved, if it did not save ("" when it
// did): no folder, a failed writer, a window prepared and not confirmed,
// a table changed by another writer. Errors are I/O errors.
func (w *Writer) SaveKeyIndex(ctx context.Context, tbl *table.Table) (string, error) {
	why, err := w.saveKeyIndex(ctx, tbl)
	w.stats.IndexNotSaved = why
	return why, err
}

func (w *Writer) saveKeyIndex(ctx context.Context, tbl *table.Table) (string, error) {
	switch {
	case w.tidx == nil:
		return "the writer keeps no key index", nil
	case w.opts.tableIndex.Dir == "":
		return "no key index folder", nil
	case w.err != nil:
		return "the writer failed", nil
	case w.pending != nil:
		return "a prepared window was neither committed nor aborted", nil
	case len(w.tidx.dups) > 0:
		return "the key index holds keys that are live more than once", nil
	}
	meta := tbl.Metadata()
	snap := int64(-1)
	if s := meta.CurrentSnapshot(); s != nil {
		snap = s.SnapshotID
	}
	if w.saved && w.savedSnap == snap {
		// The manifest on disk names this index at this snapshot (a run
		// that ends right after its last commit's checkpoint), checked
		// when it was written: writing it again would cost its fsyncs
		// for nothing.
		return "", nil
	}
	// Every commit of this sink after the index's base went through
	// Committed (the committer refuses one whose writers' indexes missed
	// a change); nothing else may have changed rows since the base.
	steps, err := commit.History(meta, w.opts.SinkID, w.tidx.base)
	if err != nil {
		return fmt.Sprintf("the key index's base: %v", err), nil
	}
	for _, st := range steps {
		if st.Kind != commit.OwnEpoch && st.Kind != commit.MetadataOnly {
			return fmt.Sprintf("snapshot %d (%s) changed the table after the key index's base", st.Snapshot.SnapshotID, st.Kind), nil
		}
	}
	runs, err := w.tidx.ix.Save()
	if err != nil {
		return "", fmt.Errorf("deltawriter: saving the key index: %w", err)
	}
	w.failpoint("keyindex-save")
	m := keyIndexManifest{
		Format: keyIndexFormat, Version: keyIndexVersion,
		TableUUID: w.tableUUID, SinkID: w.opts.SinkID, Snapshot: snap,
		SpecID: w.spec.ID(), KeyFieldIDs: w.keyFieldIDs(),
		Runs: runs, Files: w.tidx.files, Lanes: w.tidx.lanes,
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	dir := w.opts.tableIndex.Dir
	if err := writeFileSync(filepath.Join(dir, keyIndexFile), b); err != nil {
		return "", fmt.Errorf("deltawriter: saving the key index's manifest in %s: %w", dir, err)
	}
	w.saved, w.savedSnap = true, snap
	return "", nil
}

// KeyIndexMaxAge is how long RemoveStaleKeyIndexes keeps a saved key
// index of another table or sink.
const KeyIndexMaxAge = 7 * 24 * time.Hour

// writeFileSync replaces path with b atomically and durably: a temporary
// file, fsync, rename, fsync of the folder.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// unsave removes the manifest SaveKeyIndex wrote before the index changes.
func (w *Writer) unsave() error {
	if !w.saved {
		return nil
	}
	w.saved = false
	path := filepath.Join(w.opts.tableIndex.Dir, keyIndexFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deltawriter: removing the key index manifest %s: %w", path, err)
	}
	return nil
}

// readManifestHead reads the leading members of the manifest at path (its
// format, table, sink and snapshot), not the lists after them, which can
// be long: RemoveStaleKeyIndexes judges every folder of a base by them.
func readManifestHead(path string) (keyIndexManifest, error) {
	var m keyIndexManifest
	f, err := os.Open(path)
	if err != nil {
		return m, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 4096))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return m, fmt.Errorf("deltawriter: %s: not a key index manifest", path)
	}
	for seen := 0; seen < 5 && dec.More(); {
		t, err := dec.Token()
		if err != nil {
			return m, err
		}
		key, _ := t.(string)
		var dst any
		switch key {
		case "format":
			dst = &m.Format
		case "version":
			dst = &m.Version
		case "table_uuid":
			dst = &m.TableUUID
		case "sink_id":
			dst = &m.SinkID
		case "snapshot":
			dst = &m.Snapshot
		default:
			var skip json.RawMessage
			dst = &skip
			seen-- // not one of the five
		}
		if err := dec.Decode(dst); err != nil {
			return m, err
		}
		seen++
	}
	return m, nil
}

// KeyIndexFolderPrefix begins the name of a writer's key index folder
// under a base (w-DIGEST); the sweep judges only such folders.
const KeyIndexFolderPrefix = "w-"

// IsKeyIndexFolder reports whether name is a writer's key index folder
// name: the prefix and a hex digest.
func IsKeyIndexFolder(name string) bool {
	digest, ok := strings.CutPrefix(name, KeyIndexFolderPrefix)
	if !ok || digest == "" {
		return false
	}
	for _, c := range digest {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// RemoveStaleKeyIndexes removes the writers' folders (w-DIGEST) under base (siblings of the
// Options.KeyIndexDir folders a sink names there) that no writer could
// reuse any more: no live holder (their lock can be taken) and no saved
// manifest, or a manifest of sink sinkID on tbl that the table has moved
// past, or a manifest of another table or sink saved more than
// KeyIndexMaxAge ago (a dropped table's). Those still reusable are left
// alone. It returns how many it removed.
func RemoveStaleKeyIndexes(base string, tbl *table.Table, sinkID string) (int, error) {
	names, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("deltawriter: listing key index folders in %s: %w", base, err)
	}
	meta := tbl.Metadata()
	n := 0
	for _, e := range names {
		if !e.IsDir() || !IsKeyIndexFolder(e.Name()) {
			// Not a writer's folder (a database run's per-table folder,
			// t-NS.NAME, holds its writers' own): not ours to judge.
			continue
		}
		dir := filepath.Join(base, e.Name())
		lock, err := spill.OSFS{}.Lock(filepath.Join(dir, "LOCK"))
		if err != nil {
			continue // held, or not ours to judge
		}
		stale := true
		mpath := filepath.Join(dir, keyIndexFile)
		if m, err := readManifestHead(mpath); err == nil {
			if m.Format == keyIndexFormat {
				switch {
				case m.TableUUID != meta.TableUUID().String() || m.SinkID != sinkID:
					// Another table's or sink's: kept unless old.
					st, err := os.Stat(mpath)
					stale = err == nil && time.Since(st.ModTime()) > KeyIndexMaxAge
				case sinceSaved(meta, m.Snapshot) == "":
					stale = false // still reusable
				}
			}
		}
		if stale {
			if err := os.RemoveAll(dir); err != nil {
				lock.Close()
				return n, fmt.Errorf("deltawriter: removing the stale key index %s: %w", dir, err)
			}
			n++
		}
		lock.Close()
	}
	return n, nil
}
