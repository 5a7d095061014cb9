package coordinator

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/RoaringBitmap/roaring/v2"
)

// The durable state, as saved through the StateStore (format version 1):
//
//	+---------+---------+------------------+----------+---------+---------+
//	| "ICSC"  | version | last committed   | writers  | epochs  | crc32c  |
//	| 4 bytes | 1 byte  | uvarint          |          |         | 4 bytes |
//	+---------+---------+------------------+----------+---------+---------+
//
//	writers: uvarint count, then per writer:
//	         uvarint writer id, uvarint length, roaring bitmap (portable format)
//	epochs:  uvarint count, then per recorded epoch in ascending order:
//	         uvarint epoch, uvarint part count, then per part:
//	         uvarint writer id, uvarint length, roaring bitmap,
//	         uvarint length, payload bytes
//	crc32c:  Castagnoli checksum of every byte before it, little endian
//
// Version numbers are durable: a reader refuses versions it does not know.
// "writers" is the registry of live writers when the state was saved (kept for
// inspection and for the rescale log; writer ids do not survive a restart);
// "epochs" are the recorded epochs that were not confirmed committed.
const (
	stateMagic = "ICSC"
	// StateVersion is the version of the state encoding this package writes.
	StateVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// State is the decoded durable state of a coordinator.
type State struct {
	// LastCommitted is the last epoch confirmed in the table when the state
	// was saved.
	LastCommitted uint64
	// Writers is the registry of live writers when the state was saved.
	Writers []WriterVnodes
	// Epochs are the recorded, unconfirmed epochs in ascending order: a
	// recovering coordinator commits each of them (idempotently) in order.
	Epochs []RecordedEpoch
}

// RecordedEpoch is one epoch's pre-commit record: every writer's payload.
type RecordedEpoch struct {
	Epoch uint64
	Parts []EpochPart
}

// EpochPart is one writer's payload of a recorded epoch.
type EpochPart struct {
	Writer  WriterID
	Vnodes  *roaring.Bitmap
	Payload []byte
}

// EncodeState encodes s in the current format version.
func EncodeState(s State) []byte {
	b := make([]byte, 0, 64)
	b = append(b, stateMagic...)
	b = append(b, StateVersion)
	b = binary.AppendUvarint(b, s.LastCommitted)
	b = binary.AppendUvarint(b, uint64(len(s.Writers)))
	for _, w := range s.Writers {
		b = binary.AppendUvarint(b, uint64(w.Writer))
		b = appendBitmap(b, w.Vnodes)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Epochs)))
	for _, e := range s.Epochs {
		b = binary.AppendUvarint(b, e.Epoch)
		b = binary.AppendUvarint(b, uint64(len(e.Parts)))
		for _, p := range e.Parts {
			b = binary.AppendUvarint(b, uint64(p.Writer))
			b = appendBitmap(b, p.Vnodes)
			b = binary.AppendUvarint(b, uint64(len(p.Payload)))
			b = append(b, p.Payload...)
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendBitmap(b []byte, bm *roaring.Bitmap) []byte {
	if bm == nil {
		bm = roaring.New()
	}
	raw, err := bm.ToBytes()
	if err != nil {
		// ToBytes writes to memory and cannot fail.
		panic(fmt.Sprintf("coordinator: encoding vnode bitmap: %v", err))
	}
	b = binary.AppendUvarint(b, uint64(len(raw)))
	return append(b, raw...)
}

// DecodeState decodes a state written by EncodeState. Corruption, a bad
// checksum or an unknown version give an error matching ErrCorruptState.
func DecodeState(data []byte) (State, error) {
	var s State
	if len(data) < len(stateMagic)+1+4 || string(data[:len(stateMagic)]) != stateMagic {
		return s, fmt.Errorf("%w: not a coordinator state", ErrCorruptState)
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return s, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorruptState, got, sum)
	}
	if v := body[len(stateMagic)]; v != StateVersion {
		return s, fmt.Errorf("%w: unknown version %d (this build reads %d)", ErrCorruptState, v, StateVersion)
	}
	d := decoder{buf: body[len(stateMagic)+1:]}
	s.LastCommitted = d.uvarint()
	nw := d.count()
	for range nw {
		s.Writers = append(s.Writers, WriterVnodes{Writer: WriterID(d.uvarint()), Vnodes: d.bitmap()})
	}
	ne := d.count()
	for range ne {
		e := RecordedEpoch{Epoch: d.uvarint()}
		np := d.count()
		for range np {
			p := EpochPart{Writer: WriterID(d.uvarint()), Vnodes: d.bitmap()}
			p.Payload = d.bytes()
			e.Parts = append(e.Parts, p)
		}
		s.Epochs = append(s.Epochs, e)
	}
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.buf))
	}
	if d.err != nil {
		return State{}, fmt.Errorf("%w: %v", ErrCorruptState, d.err)
	}
	return s, nil
}

type decoder struct {
	buf []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// count reads a count that cannot exceed the remaining bytes.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		if d.err == nil {
			d.err = fmt.Errorf("count %d exceeds %d remaining bytes", n, len(d.buf))
		}
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.err = fmt.Errorf("length %d exceeds %d remaining bytes", n, len(d.buf))
		return nil
	}
	out := make([]byte, n)
	copy(out, d.buf[:n])
	d.buf = d.buf[n:]
	return out
}

func (d *decoder) bitmap() *roaring.Bitmap {
	raw := d.bytes()
	if d.err != nil {
		return nil
	}
	bm := roaring.New()
	if err := bm.UnmarshalBinary(raw); err != nil {
		d.err = fmt.Errorf("vnode bitmap: %v", err)
		return nil
	}
	return bm
}
