package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/deltawriter"
)

// KeyType is the shape of the generated table's key.
type KeyType uint8

// The key shapes a stream can have.
const (
	KeyLong      KeyType = iota + 1 // one long column
	KeyString                       // one 24-byte string column
	KeyComposite                    // (tenant string, id long)
)

// ParseKeyType parses "long", "string" or "composite".
func ParseKeyType(s string) (KeyType, error) {
	switch s {
	case "long", "":
		return KeyLong, nil
	case "string":
		return KeyString, nil
	case "composite":
		return KeyComposite, nil
	}
	return 0, fmt.Errorf("unknown key type %q (want long, string or composite)", s)
}

// String returns the name ParseKeyType accepts.
func (k KeyType) String() string {
	switch k {
	case KeyLong:
		return "long"
	case KeyString:
		return "string"
	case KeyComposite:
		return "composite"
	}
	return fmt.Sprintf("KeyType(%d)", uint8(k))
}

// MarshalText returns the key type's name.
func (k KeyType) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses a name MarshalText returned.
func (k *KeyType) UnmarshalText(b []byte) error {
	v, err := ParseKeyType(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// StreamOptions describe a seeded synthetic upsert stream. Each change is
// one of four events: the first insert of a new key (+I), an update of a
// live key (+U), a delete of a live key (-D), or a re-insert of a deleted
// key (+I). Updates, Deletes and Reinserts are the shares of the events;
// first inserts take the rest until all Keys are inserted, after which an
// insert draw becomes an update. An event that cannot happen (a delete
// with no live key, a re-insert with no deleted key) falls back to one
// that can, so the shares hold when they are consistent with Keys/Rows.
type StreamOptions struct {
	// Rows is the number of changes in the stream. Default 1,000,000.
	Rows int64 `json:"rows"`
	// Keys is the number of distinct keys (at most 2^32). Default Rows/4.
	Keys int64 `json:"keys"`
	// Updates is the share of events that update a live key. No default.
	Updates float64 `json:"updates"`
	// Deletes is the share of events that delete a live key. No default.
	Deletes float64 `json:"deletes"`
	// Reinserts is the share of events that re-insert a deleted key. No default.
	Reinserts float64 `json:"reinserts"`
	// Zipf skews the choice of the key an update or delete hits: 0 picks
	// uniformly among the inserted keys; s > 1 follows a Zipf law of
	// exponent s over the keys in insertion order (the oldest are hottest).
	// Default 0.
	Zipf float64 `json:"zipf"`
	// RowBytes is the approximate uncompressed size of a row (key and
	// payload columns); the note column takes what the others leave.
	// Default 100.
	RowBytes int `json:"row_bytes"`
	// KeyType is the shape of the key. Default KeyLong.
	KeyType KeyType `json:"key_type"`
	// UpdateBefore emits a -U of the key before each +U (the changelog
	// form, for deltawriter.Changelog mode); an update then takes two
	// changes of Rows. Default false (upsert form: +U only).
	UpdateBefore bool `json:"update_before"`
	// Seed seeds the stream; equal options give equal streams. Default 1.
	Seed uint64 `json:"seed"`
}

// DefaultStream returns the stream `icesink bench` generates by default:
// an update-heavy stream of 1M changes over 250k keys.
func DefaultStream() StreamOptions {
	return StreamOptions{
		Rows:      1_000_000,
		Keys:      250_000,
		Updates:   0.65,
		Deletes:   0.05,
		Reinserts: 0.05,
		RowBytes:  100,
		KeyType:   KeyLong,
		Seed:      1,
	}
}

func (o StreamOptions) withDefaults() (StreamOptions, error) {
	if o.Rows <= 0 {
		o.Rows = 1_000_000
	}
	if o.Keys <= 0 {
		o.Keys = max(o.Rows/4, 1)
	}
	if o.RowBytes <= 0 {
		o.RowBytes = 100
	}
	if o.KeyType == 0 {
		o.KeyType = KeyLong
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	switch {
	case o.Keys > 1<<32:
		return o, fmt.Errorf("bench: %d keys; at most 2^32", o.Keys)
	case o.Rows >= 1<<32-1:
		return o, fmt.Errorf("bench: %d rows; at most 2^32-2", o.Rows)
	case o.Updates < 0 || o.Deletes < 0 || o.Reinserts < 0:
		return o, errors.New("bench: negative update, delete or re-insert share")
	case o.Updates+o.Deletes+o.Reinserts > 1:
		return o, fmt.Errorf("bench: update, delete and re-insert shares sum to %.3f, more than 1", o.Updates+o.Deletes+o.Reinserts)
	case o.Zipf != 0 && o.Zipf <= 1:
		return o, fmt.Errorf("bench: zipf exponent %g; want 0 (uniform) or more than 1", o.Zipf)
	case o.KeyType > KeyComposite:
		return o, fmt.Errorf("bench: unknown key type %d", o.KeyType)
	}
	return o, nil
}

// Schema returns the Iceberg schema of the stream's table: the key
// columns (the identifier fields), then seq long, ts timestamptz,
// amount double, status string and note string.
func (o StreamOptions) Schema() *iceberg.Schema {
	var fields []iceberg.NestedField
	var ids []int
	switch o.KeyType {
	case KeyString:
		fields = append(fields, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.String, Required: true})
		ids = []int{1}
	case KeyComposite:
		fields = append(fields,
			iceberg.NestedField{ID: 1, Name: "tenant", Type: iceberg.PrimitiveTypes.String, Required: true},
			iceberg.NestedField{ID: 2, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
		ids = []int{1, 2}
	default:
		fields = append(fields, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
		ids = []int{1}
	}
	next := len(fields) + 1
	for _, f := range []iceberg.NestedField{
		{Name: "seq", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		{Name: "amount", Type: iceberg.PrimitiveTypes.Float64},
		{Name: "status", Type: iceberg.PrimitiveTypes.String},
		{Name: "note", Type: iceberg.PrimitiveTypes.String},
	} {
		f.ID = next
		next++
		fields = append(fields, f)
	}
	return iceberg.NewSchemaWithIdentifiers(0, ids, fields...)
}

// keyColumns is the number of key columns of a key type.
func (k KeyType) keyColumns() int {
	if k == KeyComposite {
		return 2
	}
	return 1
}

// Counts are the events a stream emitted.
type Counts struct {
	Changes   int64 `json:"changes"`   // changes emitted (an update with UpdateBefore counts two)
	Inserts   int64 `json:"inserts"`   // first inserts of a key
	Updates   int64 `json:"updates"`   // updates of a live key
	Deletes   int64 `json:"deletes"`   // deletes of a live key
	Reinserts int64 `json:"reinserts"` // inserts of a deleted key
	Live      int64 `json:"live"`      // keys with a live row after the changes so far
}

// event kinds
const (
	evInsert = iota
	evUpdate
	evDelete
	evReinsert
)

const (
	tenants = 64
	baseTS  = int64(1_767_225_600_000_000) // 2026-01-01T00:00:00Z in microseconds
)

// Stream generates the changes of StreamOptions. It is deterministic per
// options and holds O(Keys/8 + deleted keys) bytes of state. It is not
// safe for concurrent use.
type Stream struct {
	opts    StreamOptions
	rng     *rand.Rand
	zipf    *rand.Zipf
	rows    rowMaker
	live    []uint64 // bit per key: has a live row
	dead    []uint32 // deleted keys; entries live again are dropped lazily
	counts  Counts
	pending uint64 // key of the +U that follows an emitted -U, plus one
	nextKey uint64 // keys [0, nextKey) were inserted
}

// NewStream returns the stream of opts (zero fields take their defaults).
func NewStream(opts StreamOptions) (*Stream, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Stream{
		opts: opts,
		rng:  rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15)),
		rows: newRowMaker(opts),
		live: make([]uint64, (opts.Keys+63)/64),
	}
	if opts.Zipf > 1 && opts.Keys > 1 {
		s.zipf = rand.NewZipf(s.rng, opts.Zipf, 1, uint64(opts.Keys-1))
	}
	return s, nil
}

// Options returns the stream's options with defaults filled in.
func (s *Stream) Options() StreamOptions { return s.opts }

// Counts returns the events emitted so far.
func (s *Stream) Counts() Counts { return s.counts }

// Width returns the number of values in a row.
func (s *Stream) Width() int { return s.rows.width }

func (s *Stream) isLive(k uint64) bool { return s.live[k>>6]&(1<<(k&63)) != 0 }
func (s *Stream) setLive(k uint64)     { s.live[k>>6] |= 1 << (k & 63) }
func (s *Stream) clearLive(k uint64)   { s.live[k>>6] &^= 1 << (k & 63) }

// pick draws an inserted key: Zipf-skewed when asked, else uniform.
func (s *Stream) pick() uint64 {
	if s.zipf != nil {
		for range 16 {
			if k := s.zipf.Uint64(); k < s.nextKey {
				return k
			}
		}
	}
	return s.rng.Uint64N(s.nextKey)
}

// pickLive draws a live key; ok is false when 16 draws hit deleted keys.
func (s *Stream) pickLive() (k uint64, ok bool) {
	if s.counts.Live == 0 {
		return 0, false
	}
	for range 16 {
		if k = s.pick(); s.isLive(k) {
			return k, true
		}
	}
	return k, false
}

// popDead removes and returns a deleted key; ok is false when none is.
func (s *Stream) popDead() (uint64, bool) {
	for len(s.dead) > 0 {
		i := s.rng.IntN(len(s.dead))
		k := uint64(s.dead[i])
		s.dead[i] = s.dead[len(s.dead)-1]
		s.dead = s.dead[:len(s.dead)-1]
		if !s.isLive(k) {
			return k, true
		}
	}
	return 0, false
}

// next returns the next change as (op, key, seq); ok is false at the end.
// seq numbers the changes from 1 and fixes the row's payload.
func (s *Stream) next() (op deltawriter.Op, key uint64, seq uint64, ok bool) {
	if s.counts.Changes >= s.opts.Rows {
		return 0, 0, 0, false
	}
	s.counts.Changes++
	seq = uint64(s.counts.Changes)
	if s.pending != 0 {
		key = s.pending - 1
		s.pending = 0
		return deltawriter.UpdateAfter, key, seq, true
	}
	u := s.rng.Float64()
	ev := evInsert
	switch o := s.opts; {
	case u < o.Updates:
		ev = evUpdate
	case u < o.Updates+o.Deletes:
		ev = evDelete
	case u < o.Updates+o.Deletes+o.Reinserts:
		ev = evReinsert
	}
	// Fall back from events that cannot happen now.
	if ev == evReinsert {
		if k, ok := s.popDead(); ok {
			return s.emitInsert(k, seq, true)
		}
		ev = evInsert
	}
	if ev == evInsert && s.nextKey >= uint64(s.opts.Keys) {
		ev = evUpdate
	}
	if s.nextKey == 0 {
		ev = evInsert // Keys >= 1, so key 0 is there to insert
	}
	if ev == evInsert {
		k := s.nextKey
		s.nextKey++
		return s.emitInsert(k, seq, false)
	}
	k, live := s.pickLive()
	if !live {
		// Nearly every drawn key is deleted: write it again.
		return s.emitInsert(k, seq, true)
	}
	if ev == evUpdate && s.opts.UpdateBefore && s.counts.Changes >= s.opts.Rows {
		ev = evDelete // no room left for the -U/+U pair
	}
	switch ev {
	case evUpdate:
		s.counts.Updates++
		if s.opts.UpdateBefore {
			s.pending = k + 1
			return deltawriter.UpdateBefore, k, seq, true
		}
		return deltawriter.UpdateAfter, k, seq, true
	default:
		s.counts.Deletes++
		s.counts.Live--
		s.clearLive(k)
		s.dead = append(s.dead, uint32(k))
		return deltawriter.Delete, k, seq, true
	}
}

func (s *Stream) emitInsert(k, seq uint64, again bool) (deltawriter.Op, uint64, uint64, bool) {
	if again {
		s.counts.Reinserts++
	} else {
		s.counts.Inserts++
	}
	s.counts.Live++
	s.setLive(k)
	return deltawriter.Insert, k, seq, true
}

// Fill fills batch with the next changes and returns how many it filled;
// 0 means the stream has ended. It reuses the Row slices of batch, so a
// change is valid until the next Fill (deltawriter.Writer.Write keeps no
// reference to a row).
func (s *Stream) Fill(batch []deltawriter.Change) int {
	n := 0
	for n < len(batch) {
		op, k, seq, ok := s.next()
		if !ok {
			break
		}
		ch := &batch[n]
		ch.Op = op
		if cap(ch.Row) < s.rows.width {
			ch.Row = make([]any, s.rows.width)
		}
		ch.Row = ch.Row[:s.rows.width]
		if op.IsDelete() {
			s.rows.key(ch.Row, k)
		} else {
			s.rows.row(ch.Row, k, seq)
		}
		n++
	}
	return n
}

// rowMaker turns (key, seq) into row values, the same for a change and
// for the final row the baselines write.
type rowMaker struct {
	keyType KeyType
	width   int
	nkey    int
	note    int    // mean note length
	pool    string // note text; notes are substrings of it (no allocation)
	tenant  [tenants]string
	status  [5]string
}

func newRowMaker(o StreamOptions) rowMaker {
	m := rowMaker{keyType: o.KeyType, nkey: o.KeyType.keyColumns()}
	m.width = m.nkey + 5
	fixed := 8 + 8 + 8 + 7 // seq, ts, amount, status
	switch o.KeyType {
	case KeyString:
		fixed += 24
	case KeyComposite:
		fixed += 9 + 8
	default:
		fixed += 8
	}
	m.note = max(o.RowBytes-fixed, 0)
	rng := rand.New(rand.NewPCG(o.Seed, 7))
	const letters = "abcdefghijklmnopqrstuvwxyz      "
	b := make([]byte, 8192+2*m.note)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	m.pool = string(b)
	m.status = [5]string{"new", "paid", "shipped", "returned", "cancelled"}
	for i := range m.tenant {
		m.tenant[i] = fmt.Sprintf("tenant-%02d", i)
	}
	return m
}

// mix is a 64-bit finalizer (splitmix64).
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// key sets the key columns of row for key k and clears the others.
func (m *rowMaker) key(row []any, k uint64) {
	switch m.keyType {
	case KeyString:
		var b [24]byte
		copy(b[:], "key-00000000000000000000")
		d := strconv.AppendUint(nil, mix(k), 10)
		copy(b[24-len(d):], d)
		row[0] = string(b[:])
	case KeyComposite:
		row[0] = m.tenant[k%tenants]
		row[1] = int64(k / tenants)
	default:
		row[0] = int64(k)
	}
	clear(row[m.nkey:])
}

// row sets every column of row for key k written by change seq.
func (m *rowMaker) row(row []any, k, seq uint64) {
	m.key(row, k)
	h := mix(seq ^ k<<32)
	v := row[m.nkey:]
	v[0] = int64(seq)
	v[1] = baseTS + int64(seq)*1000
	v[2] = float64(h%1_000_000) / 100
	v[3] = m.status[(h>>20)%uint64(len(m.status))]
	if m.note > 0 {
		n := m.note*3/4 + int((h>>24)%uint64(m.note/2+1))
		off := int((h >> 40) % uint64(len(m.pool)-n))
		v[4] = m.pool[off : off+n]
	} else {
		v[4] = nil
	}
}

// FinalRows yields the live rows a stream leaves behind, in key order:
// the rows an append-only writer must write to give the same table.
type FinalRows struct {
	rows rowMaker
	last []uint32 // seq of the key's live row, 0 when it has none
	next uint64
	n    int64
}

// NewFinalRows replays the stream of opts (without building its rows) and
// returns its live rows. It holds 4 bytes per key.
func NewFinalRows(opts StreamOptions) (*FinalRows, error) {
	s, err := NewStream(opts)
	if err != nil {
		return nil, err
	}
	f := &FinalRows{rows: s.rows, last: make([]uint32, s.opts.Keys)}
	for {
		op, k, seq, ok := s.next()
		if !ok {
			break
		}
		switch op {
		case deltawriter.Insert, deltawriter.UpdateAfter:
			f.last[k] = uint32(seq)
		case deltawriter.Delete:
			f.last[k] = 0
		}
	}
	f.n = s.counts.Live
	return f, nil
}

// Len returns the number of live rows.
func (f *FinalRows) Len() int64 { return f.n }

// Width returns the number of values in a row.
func (f *FinalRows) Width() int { return f.rows.width }

// Fill fills rows with the next live rows and returns how many it
// filled; 0 means the end. It reuses the slices of rows.
func (f *FinalRows) Fill(rows [][]any) int {
	n := 0
	for n < len(rows) && f.next < uint64(len(f.last)) {
		k := f.next
		f.next++
		seq := f.last[k]
		if seq == 0 {
			continue
		}
		if cap(rows[n]) < f.rows.width {
			rows[n] = make([]any, f.rows.width)
		}
		rows[n] = rows[n][:f.rows.width]
		f.rows.row(rows[n], k, uint64(seq))
		n++
	}
	return n
}
