package statestore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func v1Meta(id uint64, state []byte) metadata {
	return metadata{version: FormatV1Inline, id: id, size: int64(len(state)), inline: state}
}

func v2Meta(id uint64, state []byte) metadata {
	h := FileHandle{Path: stateFileName, Size: int64(len(state)), Checksum: crc32c(0, state)}
	return metadata{version: FormatV2FileHandle, id: id, size: h.Size, file: h}
}

// TestFormatGolden pins the byte layout drawn in format.go. A change here is
// a format change: it needs a new FormatVersion, not a new golden string.
func TestFormatGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    metadata
		want string
	}{
		{"v1", v1Meta(7, []byte("abc")),
			"6963736b2d63686b" + "0100" + "0000" + "0700000000000000" + "4765e0d9" +
				"0300000000000000" + "616263" + "87448040"},
		{"v2", v2Meta(7, []byte("abc")),
			"6963736b2d63686b" + "0200" + "0000" + "0700000000000000" + "1719728a" +
				"0300000000000000" + "b73f4b36" + "0600" + "5f7374617465" + "f8d58406"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hex.EncodeToString(encodeMetadata(tc.m))
			if got != tc.want {
				t.Fatalf("encoding\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	for _, m := range []metadata{
		v1Meta(0, []byte{}),
		v1Meta(1, []byte("state")),
		v1Meta(1<<63, bytes.Repeat([]byte{0xab}, 70000)),
		v2Meta(2, []byte("state")),
		v2Meta(^uint64(0), bytes.Repeat([]byte{1}, 1<<20)),
	} {
		data := encodeMetadata(m)
		got, err := decodeMetadata(data, "x/_metadata", FormatLatest)
		if err != nil {
			t.Fatalf("%v id %d: %v", m.version, m.id, err)
		}
		if got.version != m.version || got.id != m.id || got.size != m.size ||
			!bytes.Equal(got.inline, m.inline) || got.file != m.file {
			t.Fatalf("round trip: got %+v, want %+v", got.file, m.file)
		}
		if m.version == FormatV2FileHandle && len(data) > 64 {
			t.Fatalf("V2 _metadata is %d bytes, want small", len(data))
		}
	}
}

// TestOldReaderRejectsV2 simulates a release without the in-file feature:
// it reads V1 and rejects V2 with a clear error rather than misreading it.
func TestOldReaderRejectsV2(t *testing.T) {
	v1 := encodeMetadata(v1Meta(3, []byte("inline")))
	m, err := decodeMetadata(v1, "chk-3/_metadata", FormatV1Inline)
	if err != nil || string(m.inline) != "inline" {
		t.Fatalf("old reader on V1: %q, %v", m.inline, err)
	}

	v2 := encodeMetadata(v2Meta(3, []byte("in a file")))
	_, err = decodeMetadata(v2, "chk-3/_metadata", FormatV1Inline)
	var ve *VersionError
	if !errors.As(err, &ve) || !errors.Is(err, ErrNewerVersion) || errors.Is(err, ErrCorruption) {
		t.Fatalf("old reader on V2: %v, want *VersionError", err)
	}
	if ve.Version != 2 || ve.Max != 1 {
		t.Fatalf("VersionError %+v", ve)
	}
	want := "chk-3/_metadata: written by a newer version (2); this release reads up to 1"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q lacks %q", err, want)
	}

	// And this release on a future version 3.
	v3 := setVersion(v2, 3)
	if _, err := decodeMetadata(v3, "p", FormatLatest); !errors.As(err, &ve) || ve.Version != 3 || ve.Max != 2 {
		t.Fatalf("current reader on V3: %v", err)
	}
}

// setVersion rewrites the version field and re-seals the header checksum,
// as a newer release would write it.
func setVersion(data []byte, v FormatVersion) []byte {
	out := bytes.Clone(data)
	out[8], out[9] = byte(v), byte(v>>8)
	c := crc32c(0, out[:20])
	out[20], out[21], out[22], out[23] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
	return out
}

// TestMetadataCorruption checks that every truncation and every single-bit
// flip of a _metadata file is reported as corruption, by both readers.
func TestMetadataCorruption(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"v1", encodeMetadata(v1Meta(9, []byte("a small inline state, a few dozen bytes")))},
		{"v2", encodeMetadata(v2Meta(9, bytes.Repeat([]byte("x"), 1<<16)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, data []byte) {
				t.Helper()
				for _, max := range []FormatVersion{FormatV1Inline, FormatLatest} {
					_, err := decodeMetadata(data, "p", max)
					if err == nil {
						t.Fatalf("%s (reader v%d): decoded without error", what, max)
					}
					if !errors.Is(err, ErrCorruption) && !(max == FormatV1Inline && errors.Is(err, ErrNewerVersion)) {
						t.Fatalf("%s (reader v%d): %v, want corruption", what, max, err)
					}
				}
			}
			for n := range len(tc.data) {
				check("truncated", tc.data[:n])
			}
			check("extended", append(bytes.Clone(tc.data), 0))
			for i := range len(tc.data) * 8 {
				d := bytes.Clone(tc.data)
				d[i/8] ^= 1 << (i % 8)
				check("bit flip", d)
			}
		})
	}
}

func FuzzDecodeMetadata(f *testing.F) {
	f.Add(encodeMetadata(v1Meta(1, []byte("state"))))
	f.Add(encodeMetadata(v2Meta(2, []byte("state"))))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMetadata(data, "p", FormatLatest)
		if err != nil {
			if !errors.Is(err, ErrCorruption) && !errors.Is(err, ErrNewerVersion) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if got := encodeMetadata(m); !bytes.Equal(got, data) {
			t.Fatalf("decoded %x but re-encodes as %x", data, got)
		}
	})
}
