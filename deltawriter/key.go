package deltawriter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/cespare/xxhash/v2"
	"github.com/google/uuid"
)

// KeyCodec encodes a row's key columns (the schema's identifier fields) to
// canonical bytes: typed, fixed-width big-endian for numbers, length-prefixed
// for strings and binaries, so that equal keys give equal bytes however
// their input was spelled and distinct keys never give equal bytes.
// The key's hash is xxhash64 of those bytes.
type KeyCodec struct {
	cols  []int // positions of the key columns in the row
	types []iceberg.Type
	names []string
	// nullable: a null encodes as a 0 byte and a value follows a 1 byte
	// (an equality-delete file's columns, which need not be the key).
	nullable bool
}

// NewKeyCodec returns the codec of schema's identifier fields. It fails if
// the schema has no identifier fields or one is not a primitive type Iceberg
// allows as an identifier (no float, double or nested types).
func NewKeyCodec(schema *iceberg.Schema) (*KeyCodec, error) {
	if len(schema.IdentifierFieldIDs) == 0 {
		return nil, errors.New("schema has no identifier-field-ids: an upsert table needs a key")
	}
	return newCodec(schema, schema.IdentifierFieldIDs, false)
}

// newEqualityCodec returns the codec of the columns an equality-delete file
// names (its equality_ids): another engine's delete may name part of the
// key, or other columns, and may delete nulls.
func newEqualityCodec(schema *iceberg.Schema, ids []int) (*KeyCodec, error) {
	if len(ids) == 0 {
		return nil, errors.New("an equality-delete file without equality_ids")
	}
	return newCodec(schema, ids, true)
}

func newCodec(schema *iceberg.Schema, ids []int, nullable bool) (*KeyCodec, error) {
	kc := &KeyCodec{nullable: nullable}
	fields := schema.Fields()
	for _, id := range ids {
		pos := -1
		for i, f := range fields {
			if f.ID == id {
				pos = i
				break
			}
		}
		if pos < 0 {
			return nil, fmt.Errorf("identifier field id %d is not a top-level field of the schema", id)
		}
		f := fields[pos]
		switch f.Type.(type) {
		case iceberg.BooleanType, iceberg.Int32Type, iceberg.Int64Type, iceberg.DecimalType,
			iceberg.DateType, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType,
			iceberg.StringType, iceberg.UUIDType, iceberg.FixedType, iceberg.BinaryType:
		default:
			return nil, fmt.Errorf("key column %q has type %s, which Iceberg does not allow as an identifier field", f.Name, f.Type)
		}
		kc.cols = append(kc.cols, pos)
		kc.types = append(kc.types, f.Type)
		kc.names = append(kc.names, f.Name)
	}
	return kc, nil
}

// Columns returns the row positions of the key columns, in key order.
func (kc *KeyCodec) Columns() []int { return kc.cols }

// Append appends the canonical bytes of row's key to dst. It fails when a
// key column is null or holds a value of the wrong Go type.
func (kc *KeyCodec) Append(dst []byte, row []any) ([]byte, error) {
	for i, c := range kc.cols {
		if kc.nullable {
			if c >= len(row) || row[c] == nil {
				dst = append(dst, 0)
				continue
			}
			dst = append(dst, 1)
		}
		if c >= len(row) || row[c] == nil {
			return dst, fmt.Errorf("key column %q is null", kc.names[i])
		}
		var ok bool
		switch v := row[c].(type) {
		case bool:
			_, ok = kc.types[i].(iceberg.BooleanType)
			b := byte(0)
			if v {
				b = 1
			}
			dst = append(dst, b)
		case int32:
			switch kc.types[i].(type) {
			case iceberg.Int32Type, iceberg.DateType:
				ok = true
			}
			dst = binary.BigEndian.AppendUint32(dst, uint32(v)^(1<<31))
		case int64:
			switch kc.types[i].(type) {
			case iceberg.Int64Type, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
				ok = true
			}
			dst = binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
		case decimal128.Num:
			_, ok = kc.types[i].(iceberg.DecimalType)
			dst = binary.BigEndian.AppendUint64(dst, uint64(v.HighBits())^(1<<63))
			dst = binary.BigEndian.AppendUint64(dst, v.LowBits())
		case string:
			_, ok = kc.types[i].(iceberg.StringType)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		case uuid.UUID:
			_, ok = kc.types[i].(iceberg.UUIDType)
			dst = append(dst, v[:]...)
		case []byte:
			switch t := kc.types[i].(type) {
			case iceberg.BinaryType:
				ok = true
			case iceberg.FixedType:
				ok = len(v) == t.Len()
			}
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
		if !ok {
			return dst, fmt.Errorf("key column %q: value %v (%T) does not fit type %s", kc.names[i], row[c], row[c], kc.types[i])
		}
	}
	return dst, nil
}

// Hash returns xxhash64 of canonical key bytes.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// Decode sets the key columns of row (a row of the codec's schema) to the
// values of canonical key bytes, as Append wrote them.
func (kc *KeyCodec) Decode(key []byte, row []any) error {
	short := func(i, n int) error {
		if len(key) < n {
			return fmt.Errorf("key column %q: %d bytes left, want %d", kc.names[i], len(key), n)
		}
		return nil
	}
	for i, c := range kc.cols {
		var v any
		switch kc.types[i].(type) {
		case iceberg.BooleanType:
			if err := short(i, 1); err != nil {
				return err
			}
			v, key = key[0] == 1, key[1:]
		case iceberg.Int32Type, iceberg.DateType:
			if err := short(i, 4); err != nil {
				return err
			}
			v, key = int32(binary.BigEndian.Uint32(key)^(1<<31)), key[4:]
		case iceberg.Int64Type, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType:
			if err := short(i, 8); err != nil {
				return err
			}
			v, key = int64(binary.BigEndian.Uint64(key)^(1<<63)), key[8:]
		case iceberg.DecimalType:
			if err := short(i, 16); err != nil {
				return err
			}
			v, key = decimal128.New(int64(binary.BigEndian.Uint64(key)^(1<<63)), binary.BigEndian.Uint64(key[8:])), key[16:]
		case iceberg.UUIDType:
			if err := short(i, 16); err != nil {
				return err
			}
			v, key = uuid.UUID(key[:16]), key[16:]
		case iceberg.StringType, iceberg.BinaryType, iceberg.FixedType:
			n, w := binary.Uvarint(key)
			if w <= 0 || uint64(len(key)-w) < n {
				return fmt.Errorf("key column %q: bad length", kc.names[i])
			}
			b := key[w : w+int(n)]
			key = key[w+int(n):]
			if _, ok := kc.types[i].(iceberg.StringType); ok {
				v = string(b)
			} else {
				v = bytes.Clone(b)
			}
		default:
			return fmt.Errorf("key column %q: type %s", kc.names[i], kc.types[i])
		}
		row[c] = v
	}
	if len(key) != 0 {
		return fmt.Errorf("key has %d bytes past its columns", len(key))
	}
	return nil
}
