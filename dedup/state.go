package dedup

import (
	"encoding/binary"
	"fmt"
)

// MaxFile is the largest data-file ordinal a Ref can hold.
const MaxFile = 1<<28 - 1

// Ref is where a row written in the window sits: the writer's data-file
// ordinal and the row's position in that file.
type Ref struct {
	File uint32
	Pos  uint32
}

// State is what the window knows of one key. A key absent from the index
// was not touched since the last commit.
type State struct {
	// Row is where the key's live row sits; valid when HasRow.
	Row Ref
	// HasRow reports that a row for the key was written in this window and
	// not deleted since: a delete must become a position delete of Row.
	HasRow bool
	// EqDeleted reports that an equality delete for the key was already
	// written in this window, so older snapshots hold no row for it.
	EqDeleted bool
	// Partial reports that the state was derived without the key's older
	// state, which the spill runs may hold (Index.Touch found the key
	// neither in memory nor ruled out by the runs' filters): Resolve
	// combines the two through Options.Merge. Spill runs never hold a
	// partial state.
	Partial bool
	// EqDeletedIfRow is, for a partial state, what EqDeleted would be had
	// the key's older state been a live row without an equality delete
	// (the upsert rules differ for such a key after its first change).
	EqDeletedIfRow bool
}

const (
	flagHasRow         = 1 << 31
	flagEqDeleted      = 1 << 30
	flagPartial        = 1 << 29
	flagEqDeletedIfRow = 1 << 28
)

// pack returns the (file|flags, pos) words of s as the memory tier holds them.
func (s State) pack() (uint32, uint32) {
	f := s.Row.File & MaxFile
	if s.HasRow {
		f |= flagHasRow
	}
	if s.EqDeleted {
		f |= flagEqDeleted
	}
	if s.Partial {
		f |= flagPartial
	}
	if s.EqDeletedIfRow {
		f |= flagEqDeletedIfRow
	}
	return f, s.Row.Pos
}

func unpack(f, pos uint32) State {
	return State{
		Row:            Ref{File: f & MaxFile, Pos: pos},
		HasRow:         f&flagHasRow != 0,
		EqDeleted:      f&flagEqDeleted != 0,
		Partial:        f&flagPartial != 0,
		EqDeletedIfRow: f&flagEqDeletedIfRow != 0,
	}
}

// valueLen is the size of a State encoded for a spill run.
const valueLen = 8

// appendValue encodes s as a spill-run value.
func appendValue(dst []byte, s State) []byte {
	f, p := s.pack()
	dst = binary.LittleEndian.AppendUint32(dst, f)
	return binary.LittleEndian.AppendUint32(dst, p)
}

// decodeValue decodes a spill-run value written by appendValue.
func decodeValue(v []byte) (State, error) {
	if len(v) != valueLen {
		return State{}, fmt.Errorf("dedup: spilled value has %d bytes, want %d", len(v), valueLen)
	}
	s := unpack(binary.LittleEndian.Uint32(v), binary.LittleEndian.Uint32(v[4:]))
	if s.Partial {
		return State{}, fmt.Errorf("dedup: spilled value holds a partial state")
	}
	return s, nil
}
