package bench

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
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
// key (+I).
//
// Updates, Deletes and Reinserts are shares of all events, that is of
// Counts.Inserts+Updates+Deletes+Reinserts: of Rows, except with
// UpdateBefore, where an update is one event but two changes. First
// inserts take the rest, 1-Updates-Deletes-Reinserts. Each event draws its
// kind independently with these probabilities; a kind that cannot happen
// at that point of the stream is replaced, and counted, as follows:
//
//   - a re-insert when no key is deleted becomes a first insert (an update
//     once all Keys are inserted);
//   - an update or delete when no key is live becomes a first insert (a
//     re-insert once all Keys are inserted);
//   - a first insert once all Keys are inserted becomes an update;
//   - with UpdateBefore, an update drawn for the last change becomes a
//     delete (no room is left for its -U/+U pair).
//
// At the start of the stream no key is live or deleted: the first event is
// always the insert of key 0, and re-inserts drawn before the first delete
// become first inserts. These replacements are rare, so the realized
// shares track the requested ones up to sampling noise (a few hundredths
// of a point at 1M events) when the request is consistent: Reinserts at
// most Deletes (a key is deleted before it is re-inserted; surplus
// re-inserts become first inserts), and (1-Updates-Deletes-Reinserts)*Rows
// at most Keys (surplus first inserts become updates, so Updates is
// exceeded).
type StreamOptions struct {
	// Rows is the number of changes in the stream. Default 1,000,000.
	Rows int64 `json:"rows"`
	// Keys is the number of distinct keys (at most 2^32): the stream never
	// writes more, and fewer when the first-insert share runs out first.
	// Default Rows/4.
	Keys int64 `json:"keys"`
	// Updates is the share of all events that update a live key. No default.
	Updates float64 `json:"updates"`
	// Deletes is the share of all events that delete a live key. No default.
	Deletes float64 `json:"deletes"`
	// Reinserts is the share of all events that re-insert a deleted key
	// (one drawn uniformly among the deleted keys). No default.
	Reinserts float64 `json:"reinserts"`
	// Zipf skews the choice of the key an update or delete hits: 0 picks
	// uniformly among the live keys; s > 1 follows a Zipf law of exponent
	// s over the live keys in insertion order (key k weighs (1+k)^-s: the
	// oldest are hottest). Under a strong skew deletes hit the hottest
	// keys, which then stay deleted until re-inserted, so the hottest live
	// keys are the oldest ones not deleted. The skew never changes an
	// event's kind. Default 0.
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
// options and holds O(Keys/8 + deleted keys) bytes of state, and 64 KiB
// more with a Zipf skew. It is not safe for concurrent use.
type Stream struct {
	opts    StreamOptions
	rng     *rand.Rand
	zipf    *zipfPicker // nil: uniform
	rows    rowMaker
	live    []uint64 // bit per key: has a live row
	summary []uint64 // bit per word of live: the word is not zero
	dead    []uint32 // the deleted keys, each once (only popDead re-inserts)
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
	s.summary = make([]uint64, (len(s.live)+63)/64)
	if opts.Zipf > 1 && opts.Keys > 1 {
		s.zipf = newZipfPicker(s.rng, opts.Zipf, uint64(opts.Keys))
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

func (s *Stream) setLive(k uint64) {
	s.live[k>>6] |= 1 << (k & 63)
	s.summary[k>>12] |= 1 << ((k >> 6) & 63)
	if s.zipf != nil {
		s.zipf.setLive(k, true)
	}
}

func (s *Stream) clearLive(k uint64) {
	if s.live[k>>6] &^= 1 << (k & 63); s.live[k>>6] == 0 {
		s.summary[k>>12] &^= 1 << ((k >> 6) & 63)
	}
	if s.zipf != nil {
		s.zipf.setLive(k, false)
	}
}

// pickLive draws a live key: uniformly, or by the Zipf law restricted to
// the live keys. ok is false when no key is live. It draws until it hits
// a live key; after 16 draws that hit deleted (or not yet inserted) keys
// it returns the first live key after the last draw, wrapping around, so
// that an update or delete always keeps its kind.
func (s *Stream) pickLive() (k uint64, ok bool) {
	if s.counts.Live == 0 {
		return 0, false
	}
	for range 16 {
		if s.zipf != nil {
			k = s.zipf.draw(s.rng)
		} else {
			k = s.rng.Uint64N(s.nextKey)
		}
		if s.isLive(k) {
			return k, true
		}
	}
	return s.nextLive(k), true
}

// nextLive returns the first live key at or after k, wrapping around.
// Some key must be live. It skips runs of dead keys 4096 at a time.
func (s *Stream) nextLive(k uint64) uint64 {
	i := k >> 6
	if w := s.live[i] &^ (1<<(k&63) - 1); w != 0 {
		return i<<6 + uint64(bits.TrailingZeros64(w))
	}
	// The next word that is not zero, by the summary; it may be word i
	// again, below k, after wrapping around.
	j := (i + 1) >> 6
	sw := uint64(0)
	if j < uint64(len(s.summary)) {
		sw = s.summary[j] &^ (1<<((i+1)&63) - 1)
	}
	for sw == 0 {
		if j++; j >= uint64(len(s.summary)) {
			j = 0
		}
		sw = s.summary[j]
	}
	i = j<<6 + uint64(bits.TrailingZeros64(sw))
	return i<<6 + uint64(bits.TrailingZeros64(s.live[i]))
}

// popDead removes and returns a deleted key, drawn uniformly; ok is false
// when none is.
func (s *Stream) popDead() (uint64, bool) {
	if len(s.dead) == 0 {
		return 0, false
	}
	i := s.rng.IntN(len(s.dead))
	k := uint64(s.dead[i])
	s.dead[i] = s.dead[len(s.dead)-1]
	s.dead = s.dead[:len(s.dead)-1]
	return k, true
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
	// Replace events that cannot happen now (see StreamOptions).
	if ev == evReinsert {
		if k, ok := s.popDead(); ok {
			return s.emitInsert(k, seq, true)
		}
		ev = evInsert
	}
	if ev == evInsert && s.nextKey >= uint64(s.opts.Keys) {
		ev = evUpdate
	}
	if ev != evInsert && s.counts.Live == 0 {
		// No live key to update or delete (the start of the stream, or all
		// keys deleted): insert a new key, else re-insert a deleted one.
		if s.nextKey < uint64(s.opts.Keys) {
			ev = evInsert
		} else if k, ok := s.popDead(); ok {
			return s.emitInsert(k, seq, true)
		}
	}
	if ev == evInsert {
		k := s.nextKey
		s.nextKey++
		return s.emitInsert(k, seq, false)
	}
	// Some key is live here: with none, the event became an insert above
	// (the dead keys then are all the Keys, so popDead found one).
	k, _ := s.pickLive()
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

// Zipf sampling over the live keys. Key k weighs (1+k)^-s. The zipfHead
// hottest keys are in a Fenwick tree of the weights of the live ones, so
// they are drawn exactly in proportion among the live keys however many of
// them are deleted (under a strong skew deletes hit the hottest keys, and
// most of them stay deleted until a re-insert draws them back). The other
// keys are drawn from rand.Zipf and rejected when not live.
const (
	zipfHead  = 4096
	zipfScale = 1 << 40 // weight of key 0 in the tree's fixed point
)

type zipfPicker struct {
	head  uint64     // keys in the tree: min(Keys, zipfHead)
	w     []uint64   // scaled weight of each head key
	tree  []uint64   // Fenwick tree (1-based) of the live head keys' weights
	live  uint64     // sum of the live head keys' weights
	tailW float64    // scaled weight of the keys head .. Keys-1
	tail  *rand.Zipf // draws key-head for the keys from head on; nil when none
	top   uint64     // highest power of two <= head
}

func newZipfPicker(rng *rand.Rand, exp float64, keys uint64) *zipfPicker {
	z := &zipfPicker{head: min(keys, zipfHead)}
	z.w = make([]uint64, z.head)
	for k := range z.w {
		z.w[k] = uint64(math.Round(zipfScale * math.Pow(float64(k+1), -exp)))
	}
	z.tree = make([]uint64, z.head+1)
	z.top = 1 << (bits.Len64(z.head) - 1)
	if keys > z.head {
		z.tail = rand.NewZipf(rng, exp, float64(z.head+1), keys-1-z.head)
		// The sum of n^-exp for n in [a, b], by Euler-Maclaurin (a > 4096:
		// the terms left out are below 1e-14 of it).
		a, b := float64(z.head+1), float64(keys)
		f := func(x float64) float64 { return math.Pow(x, -exp) }
		df := func(x float64) float64 { return -exp * math.Pow(x, -exp-1) }
		sum := (math.Pow(a, 1-exp)-math.Pow(b, 1-exp))/(exp-1) + (f(a)+f(b))/2 + (df(b)-df(a))/12
		z.tailW = zipfScale * sum
	}
	return z
}

// setLive records that key k is now live, or not.
func (z *zipfPicker) setLive(k uint64, live bool) {
	if k >= z.head {
		return
	}
	d := z.w[k]
	if live {
		z.live += d
	} else {
		z.live -= d
		d = -d // two's complement: adding it subtracts
	}
	for i := k + 1; i <= z.head; i += i & -i {
		z.tree[i] += d
	}
}

// draw returns a key by the weights of the live head keys and of all the
// other keys; the caller rejects it when it is not live.
func (z *zipfPicker) draw(rng *rand.Rand) uint64 {
	u := rng.Float64() * (float64(z.live) + z.tailW)
	if u >= float64(z.live) {
		if z.tail == nil {
			return 0 // no live key at all; the caller rejects it
		}
		return z.head + z.tail.Uint64()
	}
	// The head key whose weights' prefix sum first exceeds r.
	r := min(uint64(u), z.live-1)
	pos := uint64(0)
	for step := z.top; step > 0; step >>= 1 {
		if next := pos + step; next <= z.head && z.tree[next] <= r {
			pos = next
			r -= z.tree[next]
		}
	}
	return pos
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
