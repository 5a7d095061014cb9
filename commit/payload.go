package commit

import (
	"encoding/json"
	"errors"
	"fmt"
)

// PayloadVersion is the encoding version of a Payload. Durable: payloads
// are recorded in the coordinator's state before they are committed, so a
// release must keep reading every version it ever wrote.
const PayloadVersion = 1

// FileKind is what an Iceberg file written by a window holds.
type FileKind uint8

// The file kinds of a window.
const (
	DataFile           FileKind = iota + 1 // rows
	PositionDeleteFile                     // (file_path, pos) of deleted rows
	EqualityDeleteFile                     // key columns of deleted keys
	// DeletionVector is one data file's deleted positions (format v3), a
	// blob of a Puffin file that may hold the vectors of other data files.
	DeletionVector
	// ReplacedDeletionVector is a live deletion vector of the table that
	// a DeletionVector of the same payload replaces (it holds all of its
	// positions): removed in the same snapshot, never deleted as a file by
	// the writer.
	ReplacedDeletionVector
)

// String names k.
func (k FileKind) String() string {
	switch k {
	case DataFile:
		return "data"
	case PositionDeleteFile:
		return "position-delete"
	case EqualityDeleteFile:
		return "equality-delete"
	case DeletionVector:
		return "deletion-vector"
	case ReplacedDeletionVector:
		return "replaced-deletion-vector"
	}
	return fmt.Sprintf("FileKind(%d)", uint8(k))
}

// File is one file a window wrote.
type File struct {
	Kind  FileKind `json:"kind"`
	Path  string   `json:"path"`
	Rows  int64    `json:"rows"`
	Bytes int64    `json:"bytes"`
	// Entry is the file's Iceberg manifest entry (iceberg-go's codec
	// encoding of the DataFile, at the payload's format version and against
	// its schema and partition spec): statistics, partition and all.
	Entry []byte `json:"entry"`
	// Ref is the data file a deletion vector applies to (DeletionVector
	// and ReplacedDeletionVector files).
	Ref string `json:"referenced_data_file,omitempty"`
}

// Payload is everything one writer's window wrote: the files that must be
// committed together, in one snapshot, or not at all.
type Payload struct {
	Version int    `json:"version"`
	SinkID  string `json:"sink_id"`
	// TableUUID is the UUID of the table the files were written for;
	// empty in payloads of releases before it was recorded.
	TableUUID     string `json:"table_uuid,omitempty"`
	Writer        int    `json:"writer"`
	SchemaID      int    `json:"schema_id"`
	SpecID        int    `json:"spec_id"`
	FormatVersion int    `json:"format_version"`
	// InputPosition is the input line the window covers up to (set by the
	// pipeline that feeds the writer; recorded in the snapshot summary).
	InputPosition int64 `json:"input_position"`
	// InputID identifies the input those lines came from (see
	// PropInputID); empty when unknown.
	InputID string `json:"input_id,omitempty"`
	// InputOffsets are the offsets (PropOffsetPrefix properties) of a
	// partitioned input (Kafka) that the window covers up to; recorded in
	// the snapshot summary. Empty for line input.
	InputOffsets map[string]string `json:"input_offsets,omitempty"`
	// KeyIndexed marks a window whose deletes of earlier rows were found
	// in a key index built from the table at snapshot BaseSnapshot (-1:
	// an empty table): the committer refuses it when another writer has
	// changed the table's rows since, as the index cannot have seen them.
	KeyIndexed   bool   `json:"key_indexed,omitempty"`
	BaseSnapshot int64  `json:"base_snapshot,omitempty"`
	Files        []File `json:"files"`
}

// Empty reports whether the window wrote nothing.
func (p *Payload) Empty() bool { return len(p.Files) == 0 }

// Count returns the number of files and rows of kind k.
func (p *Payload) Count(k FileKind) (files int, rows int64) {
	for _, f := range p.Files {
		if f.Kind == k {
			files++
			rows += f.Rows
		}
	}
	return files, rows
}

// Marshal encodes p.
func (p *Payload) Marshal() ([]byte, error) {
	q := *p
	q.Version = PayloadVersion
	b, err := json.Marshal(&q)
	if err != nil {
		return nil, fmt.Errorf("commit: encoding payload: %w", err)
	}
	return b, nil
}

// ErrPayloadVersion is returned when a payload was written by a newer release.
var ErrPayloadVersion = errors.New("commit: payload written by a newer version")

// UnmarshalPayload decodes a payload written by Marshal.
func UnmarshalPayload(b []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return Payload{}, fmt.Errorf("commit: decoding payload: %w", err)
	}
	if p.Version < 1 || p.Version > PayloadVersion {
		return Payload{}, fmt.Errorf("%w (%d); this release reads up to %d", ErrPayloadVersion, p.Version, PayloadVersion)
	}
	for i, f := range p.Files {
		if f.Kind < DataFile || f.Kind > ReplacedDeletionVector || f.Path == "" || len(f.Entry) == 0 {
			return Payload{}, fmt.Errorf("commit: decoding payload: file %d (%q) is malformed", i, f.Path)
		}
	}
	return p, nil
}
