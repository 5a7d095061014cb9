package statestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
)

// The on-disk layout of a state directory:
//
//	STATE_DIR/
//	  chk-<id>/            one directory per checkpoint, id in decimal
//	    _metadata          always; its presence makes the checkpoint complete
//	    _state             only in format V2: the state bytes, nothing else
//	  .tmp-*               temporary names, swept at Open
//
// _metadata, all integers little-endian. A 24-byte header, the same in every
// version, so that any release can read the version before the body:
//
//	+----------+---------+---------+----------+------------+
//	| magic    | version | flags   | id       | header crc |
//	| 8 bytes  | u16     | u16 = 0 | u64      | u32        |
//	| icsk-chk |         |         |          | of [0, 20) |
//	+----------+---------+---------+----------+------------+
//
// Body of format V1 (inline; what a release without the in-file feature
// writes and reads):
//
//	+-----------+-------------------+-----------------------------+
//	| state len | state             | body crc                    |
//	| u64       | state len bytes   | u32 of state len and state  |
//	+-----------+-------------------+-----------------------------+
//
// Body of format V2 (file handle; written only when the state is in _state):
//
//	+-----------+-----------+----------+--------------+----------+
//	| state len | state crc | path len | path         | body crc |
//	| u64       | u32       | u16      | path len     | u32 of   |
//	|           | of _state |          | bytes, UTF-8 | the body |
//	+-----------+-----------+----------+--------------+----------+
//
// The path is a file name relative to the checkpoint directory. The file it
// names holds exactly state len bytes whose CRC-32C is state crc; it has no
// header, as the handle describes it completely. Every checksum is CRC-32C
// (Castagnoli). A file must end exactly where its body ends.
//
// A reader checks the magic and the header checksum first, then the version:
// a version above the highest it knows is reported as a *VersionError
// ("written by a newer version (2); this release reads up to 1"), never
// misread as a corrupt or inline checkpoint.

// FormatVersion is the version of a _metadata file. Its values are durable:
// they are written to disk and must never be renumbered or reused.
type FormatVersion uint16

const (
	// FormatV1Inline holds the state inline in _metadata. It is the only
	// format of releases without the in-file feature, and is written
	// whenever the state is inline, so those releases can read it.
	FormatV1Inline FormatVersion = 1
	// FormatV2FileHandle holds a handle (path, size, checksum) to a state
	// file beside _metadata. It is written only when a state file is used.
	FormatV2FileHandle FormatVersion = 2

	// FormatLatest is the highest version this release reads and writes.
	FormatLatest = FormatV2FileHandle
)

// String returns "v1-inline", "v2-file-handle" or "v<n>".
func (v FormatVersion) String() string {
	switch v {
	case FormatV1Inline:
		return "v1-inline"
	case FormatV2FileHandle:
		return "v2-file-handle"
	}
	return fmt.Sprintf("v%d", uint16(v))
}

const (
	metadataName  = "_metadata"
	stateFileName = "_state"
	tmpPrefix     = ".tmp-"
	chkPrefix     = "chk-"

	magic        = "icsk-chk"
	headerLen    = 24
	v1Overhead   = headerLen + 8 + 4         // header, state len, body crc
	v2FixedLen   = headerLen + 8 + 4 + 2 + 4 // header, len, crc, path len, body crc
	maxPathLen   = 255
	maxV2FileLen = v2FixedLen + maxPathLen
)

// FileHandle locates a checkpoint's state file; the store keeps this, not
// the bytes, for a retained checkpoint whose state is in a file.
type FileHandle struct {
	Path     string // file name relative to the checkpoint directory
	Size     int64  // exact length of the file in bytes
	Checksum uint32 // CRC-32C (Castagnoli) of the file's content
}

// metadata is the decoded content of a _metadata file.
type metadata struct {
	version FormatVersion
	id      uint64
	size    int64
	inline  []byte     // V1 only; aliases the decoded buffer
	file    FileHandle // V2 only
}

func crc32c(crc uint32, b []byte) uint32 {
	return crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), b)
}

// parts returns the encoding of m as prefix, payload and trailer, so that a
// large inline state is written without being copied; payload is m.inline
// for V1 and nil for V2.
func (m metadata) parts() (prefix, payload, trailer []byte) {
	prefix = make([]byte, headerLen, v2FixedLen+len(m.file.Path))
	copy(prefix, magic)
	binary.LittleEndian.PutUint16(prefix[8:], uint16(m.version))
	binary.LittleEndian.PutUint16(prefix[10:], 0)
	binary.LittleEndian.PutUint64(prefix[12:], m.id)
	binary.LittleEndian.PutUint32(prefix[20:], crc32c(0, prefix[:20]))

	prefix = binary.LittleEndian.AppendUint64(prefix, uint64(m.size))
	switch m.version {
	case FormatV1Inline:
		payload = m.inline
		crc := crc32c(crc32c(0, prefix[headerLen:]), payload)
		trailer = binary.LittleEndian.AppendUint32(nil, crc)
	case FormatV2FileHandle:
		prefix = binary.LittleEndian.AppendUint32(prefix, m.file.Checksum)
		prefix = binary.LittleEndian.AppendUint16(prefix, uint16(len(m.file.Path)))
		prefix = append(prefix, m.file.Path...)
		trailer = binary.LittleEndian.AppendUint32(nil, crc32c(0, prefix[headerLen:]))
	default:
		panic(fmt.Sprintf("statestore: encoding unknown format version %d", m.version))
	}
	return prefix, payload, trailer
}

// encodeMetadata returns the whole encoding of m.
func encodeMetadata(m metadata) []byte {
	p, q, t := m.parts()
	return bytes.Join([][]byte{p, q, t}, nil)
}

// decodeMetadata decodes a _metadata file read from path. A version above
// maxVersion is a *VersionError; decodeMetadata(data, path, FormatV1Inline)
// is the reader of a release without the in-file feature. Every other
// failure is a *CorruptionError. An inline state aliases data.
func decodeMetadata(data []byte, path string, maxVersion FormatVersion) (metadata, error) {
	var m metadata
	if len(data) < headerLen {
		return m, corruptf(path, "truncated header: %d bytes", len(data))
	}
	if string(data[:8]) != magic {
		return m, corruptf(path, "bad magic %q", data[:8])
	}
	if got, want := crc32c(0, data[:20]), binary.LittleEndian.Uint32(data[20:]); got != want {
		return m, corruptf(path, "header checksum mismatch: %08x, want %08x", got, want)
	}
	m.version = FormatVersion(binary.LittleEndian.Uint16(data[8:]))
	if flags := binary.LittleEndian.Uint16(data[10:]); flags != 0 {
		return m, corruptf(path, "reserved flags %#x set", flags)
	}
	m.id = binary.LittleEndian.Uint64(data[12:])
	if m.version == 0 {
		return m, corruptf(path, "format version 0")
	}
	if m.version > maxVersion {
		return m, &VersionError{Path: path, Version: m.version, Max: maxVersion}
	}
	body := data[headerLen:]
	if len(body) < 8+4 {
		return m, corruptf(path, "truncated body: %d bytes", len(body))
	}
	size := binary.LittleEndian.Uint64(body)
	if size > math.MaxInt64 {
		return m, corruptf(path, "state length %d out of range", size)
	}
	m.size = int64(size)
	if got, want := crc32c(0, body[:len(body)-4]), binary.LittleEndian.Uint32(body[len(body)-4:]); got != want {
		return m, corruptf(path, "body checksum mismatch: %08x, want %08x", got, want)
	}
	switch m.version {
	case FormatV1Inline:
		if size != uint64(len(body)-12) {
			return m, corruptf(path, "state length %d, body holds %d bytes", size, len(body)-12)
		}
		m.inline = body[8 : len(body)-4 : len(body)-4]
	case FormatV2FileHandle:
		if len(body) < v2FixedLen-headerLen {
			return m, corruptf(path, "truncated file handle: %d bytes", len(body))
		}
		m.file.Checksum = binary.LittleEndian.Uint32(body[8:])
		n := int(binary.LittleEndian.Uint16(body[12:]))
		if n != len(body)-(v2FixedLen-headerLen) {
			return m, corruptf(path, "path length %d, body holds %d bytes", n, len(body)-(v2FixedLen-headerLen))
		}
		m.file.Path = string(body[14 : 14+n])
		m.file.Size = m.size
		if !validStateName(m.file.Path) {
			return m, corruptf(path, "invalid state file name %q", m.file.Path)
		}
	default:
		// Reached only when maxVersion is above what this code decodes.
		return m, &VersionError{Path: path, Version: m.version, Max: FormatLatest}
	}
	return m, nil
}

// validStateName reports whether name may be a state file's relative path:
// a plain file name inside the checkpoint directory.
func validStateName(name string) bool {
	return name != "" && len(name) <= maxPathLen && name != "." && name != ".." &&
		name != metadataName && !strings.HasPrefix(name, tmpPrefix) &&
		!strings.ContainsAny(name, "/\\\x00")
}
