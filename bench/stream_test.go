package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/icesink/icesink/deltawriter"
)

// drainCounts runs the stream of o to its end without building rows.
func drainCounts(t *testing.T, o StreamOptions) Counts {
	t.Helper()
	s, err := NewStream(o)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, _, ok := s.next(); !ok {
			return s.Counts()
		}
	}
}

// events is the number of events of c: an update with UpdateBefore is one
// event but two changes.
func (c Counts) events() int64 { return c.Inserts + c.Updates + c.Deletes + c.Reinserts }

// drainChanges returns every change of the stream of o, rows copied.
func drainChanges(t *testing.T, o StreamOptions) ([]deltawriter.Change, *Stream) {
	t.Helper()
	s, err := NewStream(o)
	if err != nil {
		t.Fatal(err)
	}
	rows := s.Options().Rows
	out := make([]deltawriter.Change, 0, rows)
	slab := make([]any, rows*int64(s.Width()))
	batch := make([]deltawriter.Change, 97) // odd, so batches split -U/+U pairs
	for {
		n := s.Fill(batch)
		if n == 0 {
			return out, s
		}
		for _, ch := range batch[:n] {
			row := slab[:len(ch.Row):len(ch.Row)]
			slab = slab[len(ch.Row):]
			copy(row, ch.Row)
			out = append(out, deltawriter.Change{Op: ch.Op, Row: row})
		}
	}
}

func TestStreamShares(t *testing.T) {
	big := int64(1_000_000)
	if testing.Short() {
		big = 250_000
	}
	def := DefaultStream()
	def.Rows, def.Keys = big, big/4
	with := func(o StreamOptions, f func(*StreamOptions)) StreamOptions { f(&o); return o }
	const n = 150_000
	small := with(def, func(o *StreamOptions) { o.Rows, o.Keys = n, n/4 })
	half := StreamOptions{Rows: n, Keys: n / 2, Updates: 0.4, Deletes: 0.05, Reinserts: 0.05, Seed: 3}
	heavy := StreamOptions{Rows: n, Keys: n / 2, Updates: 0.4, Deletes: 0.2, Reinserts: 0.1, Seed: 4}
	cases := []struct {
		name string
		o    StreamOptions
	}{
		{"defaults", def},
		{"defaults/seed7", with(small, func(o *StreamOptions) { o.Seed = 7 })},
		{"defaults/zipf1.2", with(small, func(o *StreamOptions) { o.Zipf = 1.2 })},
		{"defaults/zipf2", with(small, func(o *StreamOptions) { o.Zipf = 2 })},
		{"defaults/zipf5", with(small, func(o *StreamOptions) { o.Zipf, o.Seed = 5, 9 })},
		{"defaults/update-before", with(small, func(o *StreamOptions) { o.UpdateBefore = true })},
		{"half-keys", half},
		{"half-keys/zipf1.5", with(half, func(o *StreamOptions) { o.Zipf = 1.5 })},
		{"heavy-deletes", heavy},
		{"heavy-deletes/zipf2", with(heavy, func(o *StreamOptions) { o.Zipf = 2 })},
		{"update-heavy", StreamOptions{Rows: n, Keys: 30_000, Updates: 0.8, Deletes: 0.05, Reinserts: 0.05, Seed: 5}},
		{"update-heavy/zipf2", StreamOptions{Rows: n, Keys: 30_000, Updates: 0.8, Deletes: 0.05, Reinserts: 0.05, Zipf: 2, Seed: 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := drainCounts(t, tc.o)
			ev := float64(c.events())
			// ±0.5 points at 1M events. The binomial noise of a share is
			// at most 0.05 points there and 0.13 at 150k events, so the
			// same tolerance serves the smaller streams too.
			const tol = 0.005
			t.Logf("%d events: first inserts %.4f, updates %.4f, deletes %.4f, re-inserts %.4f",
				c.events(), float64(c.Inserts)/ev, float64(c.Updates)/ev, float64(c.Deletes)/ev, float64(c.Reinserts)/ev)
			o := tc.o
			for _, s := range []struct {
				what      string
				got, want float64
			}{
				{"updates", float64(c.Updates) / ev, o.Updates},
				{"deletes", float64(c.Deletes) / ev, o.Deletes},
				{"re-inserts", float64(c.Reinserts) / ev, o.Reinserts},
				{"first inserts", float64(c.Inserts) / ev, 1 - o.Updates - o.Deletes - o.Reinserts},
			} {
				if math.Abs(s.got-s.want) > tol {
					t.Errorf("%s: share %.4f, want %.4f ± %.3f (counts %+v)", s.what, s.got, s.want, tol, c)
				}
			}
			if c.Inserts+c.Reinserts-c.Deletes != c.Live {
				t.Errorf("live %d, want inserts + re-inserts - deletes = %d", c.Live, c.Inserts+c.Reinserts-c.Deletes)
			}
			if c.Changes != o.Rows {
				t.Errorf("%d changes, want %d", c.Changes, o.Rows)
			}
			if want := c.events(); o.UpdateBefore {
				want += c.Updates
				if c.Changes != want {
					t.Errorf("%d changes, want %d events + %d -U", c.Changes, c.events(), c.Updates)
				}
			} else if c.Changes != want {
				t.Errorf("%d changes, want %d events", c.Changes, want)
			}
		})
	}
}

// TestStreamSharesInconsistent checks what StreamOptions says of requests
// the keys cannot follow, and of the start of the stream.
func TestStreamSharesInconsistent(t *testing.T) {
	t.Run("updates-only", func(t *testing.T) {
		// The first event is the insert of key 0; all else updates it.
		ch, _ := drainChanges(t, StreamOptions{Rows: 100, Keys: 10, Updates: 1})
		for i, c := range ch {
			want := deltawriter.UpdateAfter
			if i == 0 {
				want = deltawriter.Insert
			}
			if c.Op != want || c.Row[0] != int64(0) {
				t.Fatalf("change %d: %v of %v, want %v of key 0", i, c.Op, c.Row[0], want)
			}
		}
	})
	t.Run("deletes-only", func(t *testing.T) {
		// Insert, delete, insert a new key, ...; once all keys are in,
		// the inserts are re-inserts.
		c := drainCounts(t, StreamOptions{Rows: 1000, Keys: 10, Deletes: 1})
		if c.Inserts != 10 || c.Deletes != 500 || c.Reinserts != 490 || c.Updates != 0 || c.Live != 0 {
			t.Errorf("counts %+v", c)
		}
	})
	t.Run("reinserts-only", func(t *testing.T) {
		// Nothing is ever deleted: re-inserts become first inserts, then
		// (all keys in) updates.
		c := drainCounts(t, StreamOptions{Rows: 1000, Keys: 10, Reinserts: 1})
		if c.Inserts != 10 || c.Updates != 990 || c.Reinserts != 0 || c.Deletes != 0 {
			t.Errorf("counts %+v", c)
		}
	})
	t.Run("more-reinserts-than-deletes", func(t *testing.T) {
		c := drainCounts(t, StreamOptions{Rows: 100_000, Keys: 50_000, Updates: 0.3, Deletes: 0.05, Reinserts: 0.2})
		if c.Reinserts > c.Deletes {
			t.Errorf("%d re-inserts of %d deletes", c.Reinserts, c.Deletes)
		}
		if d := float64(c.Deletes) / float64(c.Changes); math.Abs(d-0.05) > 0.005 {
			t.Errorf("deletes share %.4f, want 0.05", d)
		}
	})
	t.Run("few-keys", func(t *testing.T) {
		// 1-0.75 of 100k is 25k first inserts, but there are 1000 keys:
		// the other insert draws become updates.
		c := drainCounts(t, StreamOptions{Rows: 100_000, Keys: 1000, Updates: 0.65, Deletes: 0.05, Reinserts: 0.05})
		if c.Inserts != 1000 {
			t.Errorf("%d first inserts, want all 1000 keys", c.Inserts)
		}
		if u := float64(c.Updates) / float64(c.Changes); math.Abs(u-0.89) > 0.01 {
			t.Errorf("updates share %.4f, want about 0.65 + 0.25 - 0.01", u)
		}
	})
}

func TestStreamDeterministic(t *testing.T) {
	for _, o := range []StreamOptions{
		{Rows: 3000, Keys: 500, Updates: 0.6, Deletes: 0.1, Reinserts: 0.05, Seed: 11},
		{Rows: 3000, Keys: 500, Updates: 0.6, Deletes: 0.1, Reinserts: 0.05, Seed: 11, Zipf: 1.3, KeyType: KeyComposite, UpdateBefore: true},
		{Rows: 3000, Keys: 6000, Updates: 0.5, Deletes: 0.1, Reinserts: 0.1, Seed: 11, Zipf: 2, KeyType: KeyString, RowBytes: 300},
	} {
		od, _ := o.withDefaults()
		t.Run(fmt.Sprintf("zipf%g/%s", od.Zipf, od.KeyType), func(t *testing.T) {
			a, sa := drainChanges(t, o)
			b, sb := drainChanges(t, o)
			if !reflect.DeepEqual(a, b) {
				t.Fatal("the same options gave different streams")
			}
			if sa.Counts() != sb.Counts() {
				t.Fatalf("counts %+v and %+v", sa.Counts(), sb.Counts())
			}
			o2 := o
			o2.Seed++
			c, _ := drainChanges(t, o2)
			same := 0
			for i := range a {
				if reflect.DeepEqual(a[i], c[i]) {
					same++
				}
			}
			if same > len(a)/10 {
				t.Errorf("seeds %d and %d: %d of %d changes equal", o.Seed, o2.Seed, same, len(a))
			}
			if o.Zipf == 0 {
				// Seed 0 is seed 1.
				o1, o0 := o, o
				o1.Seed, o0.Seed = 1, 0
				d1, _ := drainChanges(t, o1)
				d0, _ := drainChanges(t, o0)
				if !reflect.DeepEqual(d1, d0) {
					t.Error("seed 0 is not the default seed 1")
				}
			}
		})
	}
}

// streamKey identifies a key by its column values.
type streamKey struct{ a, b any }

func keyOf(kt KeyType, row []any) streamKey {
	if kt == KeyComposite {
		return streamKey{row[0], row[1]}
	}
	return streamKey{a: row[0]}
}

// TestStreamChangelog replays streams against a model of the table: every
// update or delete hits a live key, every insert a key without a row; an
// insert of a deleted key is a re-insert; -U is followed by the +U of its
// key; and the stream uses at most Keys keys.
func TestStreamChangelog(t *testing.T) {
	for _, o := range []StreamOptions{
		{Rows: 15_000, Keys: 3750, Updates: 0.65, Deletes: 0.05, Reinserts: 0.05},
		{Rows: 15_000, Keys: 3750, Updates: 0.65, Deletes: 0.05, Reinserts: 0.05, Zipf: 2},
		{Rows: 15_000, Keys: 7500, Updates: 0.4, Deletes: 0.05, Reinserts: 0.05, Zipf: 1.5, KeyType: KeyString},
		{Rows: 20_000, Keys: 500, Updates: 0.3, Deletes: 0.3, Reinserts: 0.3, KeyType: KeyComposite, UpdateBefore: true},
		{Rows: 20_000, Keys: 2000, Updates: 0.3, Deletes: 0.3, Reinserts: 0.3, Zipf: 3, KeyType: KeyComposite, UpdateBefore: true},
		{Rows: 20_000, Keys: 2000, Updates: 0.1, Deletes: 0.6}, // all keys deleted again and again
		{Rows: 20_000, Keys: 2000, Updates: 0.1, Deletes: 0.6, Zipf: 2},
		{Rows: 20_000, Keys: 40_000, Updates: 0.2, Deletes: 0.1, Reinserts: 0.05, Zipf: 1.1}, // never runs out of keys
		{Rows: 2, Keys: 1, Updates: 1, UpdateBefore: true},                                   // no room for -U/+U
	} {
		od, _ := o.withDefaults()
		name := fmt.Sprintf("keys%d/u%g-d%g-r%g/zipf%g/%s/ub%v", od.Keys, od.Updates, od.Deletes, od.Reinserts, od.Zipf, od.KeyType, od.UpdateBefore)
		t.Run(name, func(t *testing.T) {
			changes, s := drainChanges(t, o)
			o := s.Options()
			if int64(len(changes)) != o.Rows {
				t.Fatalf("%d changes, want %d", len(changes), o.Rows)
			}
			const (
				none = iota
				live
				dead
			)
			state := map[streamKey]int{}
			var c Counts
			var pending *streamKey
			for i, ch := range changes {
				k := keyOf(o.KeyType, ch.Row)
				if pending != nil {
					if ch.Op != deltawriter.UpdateAfter || k != *pending {
						t.Fatalf("change %d: %v of %v after the -U of %v", i, ch.Op, k, *pending)
					}
					pending = nil
					continue
				}
				switch ch.Op {
				case deltawriter.Insert:
					switch state[k] {
					case live:
						t.Fatalf("change %d: insert of live key %v", i, k)
					case dead:
						c.Reinserts++
					default:
						c.Inserts++
					}
					state[k] = live
				case deltawriter.UpdateBefore, deltawriter.UpdateAfter:
					if state[k] != live {
						t.Fatalf("change %d: %v of key %v with no row", i, ch.Op, k)
					}
					if ch.Op == deltawriter.UpdateBefore {
						if !o.UpdateBefore {
							t.Fatalf("change %d: -U without UpdateBefore", i)
						}
						pending = &k
					} else if o.UpdateBefore {
						t.Fatalf("change %d: +U without its -U", i)
					}
					c.Updates++
				case deltawriter.Delete:
					if state[k] != live {
						t.Fatalf("change %d: delete of key %v with no row", i, k)
					}
					state[k] = dead
					c.Deletes++
				default:
					t.Fatalf("change %d: op %v", i, ch.Op)
				}
			}
			if pending != nil {
				t.Fatal("the stream ends between a -U and its +U")
			}
			for _, st := range state {
				if st == live {
					c.Live++
				}
			}
			c.Changes = int64(len(changes))
			if got := s.Counts(); got != c {
				t.Errorf("Counts() = %+v; the changes show %+v", got, c)
			}
			if int64(len(state)) > o.Keys {
				t.Errorf("%d distinct keys, more than Keys = %d", len(state), o.Keys)
			}
			if int64(len(state)) != c.Inserts {
				t.Errorf("%d distinct keys, %d first inserts", len(state), c.Inserts)
			}
		})
	}
}

// rowBytes is the size of a row by the measure of StreamOptions.RowBytes.
func rowBytes(row []any) int {
	n := 0
	for _, v := range row {
		switch v := v.(type) {
		case string:
			n += len(v)
		case int64, float64:
			n += 8
		}
	}
	return n
}

func TestStreamRows(t *testing.T) {
	for _, kt := range []KeyType{KeyLong, KeyString, KeyComposite} {
		for _, rb := range []int{0, 20, 100, 400} {
			t.Run(fmt.Sprintf("%s/%d", kt, rb), func(t *testing.T) {
				o := StreamOptions{Rows: 5000, Keys: 1000, Updates: 0.5, Deletes: 0.1, Reinserts: 0.05, KeyType: kt, RowBytes: rb, UpdateBefore: true}
				changes, s := drainChanges(t, o)
				o = s.Options()
				if rb == 0 && o.RowBytes != 100 {
					t.Fatalf("RowBytes defaults to %d, want 100", o.RowBytes)
				}
				sc := o.Schema()
				nkey := kt.keyColumns()
				if s.Width() != nkey+5 || sc.NumFields() != s.Width() {
					t.Fatalf("width %d, schema %d fields, want %d", s.Width(), sc.NumFields(), nkey+5)
				}
				wantIDs := []int{1}
				if kt == KeyComposite {
					wantIDs = []int{1, 2}
				}
				if !reflect.DeepEqual(sc.IdentifierFieldIDs, wantIDs) {
					t.Fatalf("identifier fields %v, want %v", sc.IdentifierFieldIDs, wantIDs)
				}
				fields := sc.Fields()
				total, rows, notes := 0, 0, 0
				for i, ch := range changes {
					if len(ch.Row) != s.Width() {
						t.Fatalf("change %d: %d values, want %d", i, len(ch.Row), s.Width())
					}
					if err := checkKey(kt, ch.Row); err != nil {
						t.Fatalf("change %d (%v): %v", i, ch.Op, err)
					}
					if ch.Op.IsDelete() {
						for j, v := range ch.Row[nkey:] {
							if v != nil {
								t.Fatalf("change %d (%v): column %s = %v, want only the key", i, ch.Op, fields[nkey+j].Name, v)
							}
						}
						continue
					}
					for j, f := range fields {
						if err := checkValue(f, ch.Row[j]); err != nil {
							t.Fatalf("change %d (%v): %v", i, ch.Op, err)
						}
					}
					total += rowBytes(ch.Row)
					rows++
					if lenNote(ch.Row) > 0 {
						notes++
					}
				}
				mean := float64(total) / float64(rows)
				if s.rows.note == 0 {
					// No room for a note: rows are the fixed columns only.
					if o.RowBytes > 60 {
						t.Fatalf("no note in rows of %d bytes", o.RowBytes)
					}
					if notes != 0 {
						t.Errorf("%d notes in rows with no room for one", notes)
					}
				} else if want := float64(o.RowBytes); math.Abs(mean-want) > 0.05*want {
					t.Errorf("mean row %.1f bytes, want %.0f ± 5%%", mean, want)
				}
			})
		}
	}
}

func lenNote(row []any) int {
	if s, ok := row[len(row)-1].(string); ok {
		return len(s)
	}
	return 0
}

// checkKey returns what is wrong with the key columns of row, if anything.
func checkKey(kt KeyType, row []any) error {
	switch kt {
	case KeyLong:
		if _, ok := row[0].(int64); !ok {
			return fmt.Errorf("long key %T %v", row[0], row[0])
		}
	case KeyString:
		if k, ok := row[0].(string); !ok || len(k) != 24 || !strings.HasPrefix(k, "key-") {
			return fmt.Errorf("string key %T %q, want 24 bytes key-...", row[0], row[0])
		}
	case KeyComposite:
		if tenant, ok := row[0].(string); !ok || !strings.HasPrefix(tenant, "tenant-") {
			return fmt.Errorf("tenant %T %v", row[0], row[0])
		}
		if _, ok := row[1].(int64); !ok {
			return fmt.Errorf("composite id %T %v", row[1], row[1])
		}
	}
	return nil
}

// checkValue returns what is wrong with value v of field f, if anything.
func checkValue(f iceberg.NestedField, v any) error {
	if v == nil {
		if f.Required || f.Name != "note" {
			return fmt.Errorf("%s is null", f.Name)
		}
		return nil
	}
	var ok bool
	switch f.Type {
	case iceberg.PrimitiveTypes.Int64, iceberg.PrimitiveTypes.TimestampTz:
		_, ok = v.(int64)
	case iceberg.PrimitiveTypes.Float64:
		_, ok = v.(float64)
	case iceberg.PrimitiveTypes.String:
		_, ok = v.(string)
	}
	if !ok {
		return fmt.Errorf("%s (%s) holds %T", f.Name, f.Type, v)
	}
	return nil
}

func TestStreamKeyTypesDistinct(t *testing.T) {
	// Distinct key numbers give distinct key values in every key type,
	// and composite keys spread over the tenants.
	for _, kt := range []KeyType{KeyLong, KeyString, KeyComposite} {
		m := newRowMaker(StreamOptions{KeyType: kt, RowBytes: 100, Seed: 1})
		row := make([]any, m.width)
		seen := map[streamKey]bool{}
		tenantsSeen := map[any]bool{}
		for k := range uint64(10_000) {
			m.key(row, k)
			seen[keyOf(kt, row)] = true
			tenantsSeen[row[0]] = true
		}
		if len(seen) != 10_000 {
			t.Errorf("%s: 10000 keys gave %d values", kt, len(seen))
		}
		if kt == KeyComposite && len(tenantsSeen) != tenants {
			t.Errorf("composite: %d tenants, want %d", len(tenantsSeen), tenants)
		}
	}
}

func TestFinalRowsMatchStream(t *testing.T) {
	for _, o := range []StreamOptions{
		{Rows: 20_000, Keys: 4000, Updates: 0.6, Deletes: 0.1, Reinserts: 0.05, KeyType: KeyComposite},
		{Rows: 20_000, Keys: 4000, Updates: 0.6, Deletes: 0.1, Reinserts: 0.05, Zipf: 2, UpdateBefore: true},
	} {
		changes, s := drainChanges(t, o)
		want := map[streamKey][]any{}
		for _, ch := range changes {
			k := keyOf(o.KeyType, ch.Row)
			switch ch.Op {
			case deltawriter.Insert, deltawriter.UpdateAfter:
				want[k] = ch.Row
			case deltawriter.Delete:
				delete(want, k)
			}
		}
		f, err := NewFinalRows(o)
		if err != nil {
			t.Fatal(err)
		}
		if f.Len() != int64(len(want)) || f.Len() != s.Counts().Live {
			t.Fatalf("final rows %d, want %d (live %d)", f.Len(), len(want), s.Counts().Live)
		}
		rows := make([][]any, 333)
		got := 0
		for {
			n := f.Fill(rows)
			if n == 0 {
				break
			}
			for _, r := range rows[:n] {
				if w, ok := want[keyOf(o.KeyType, r)]; !ok || !reflect.DeepEqual(r, w) {
					t.Fatalf("final row %v, want %v", r, w)
				}
			}
			got += n
		}
		if got != len(want) {
			t.Fatalf("filled %d final rows, want %d", got, len(want))
		}
	}
}

func TestStreamOptionsInvalid(t *testing.T) {
	for _, o := range []StreamOptions{
		{Keys: 1<<32 + 1},
		{Rows: 1<<32 - 1},
		{Updates: -0.1},
		{Updates: 0.5, Deletes: 0.3, Reinserts: 0.3},
		{Zipf: 0.5},
		{Zipf: 1},
		{KeyType: KeyComposite + 1},
	} {
		if _, err := NewStream(o); err == nil {
			t.Errorf("NewStream(%+v) took invalid options", o)
		}
	}
}

// allLive returns a stream of keys with every key inserted and live.
func allLive(t *testing.T, keys int64, zipf float64) *Stream {
	t.Helper()
	s, err := NewStream(StreamOptions{Rows: 1, Keys: keys, Zipf: zipf})
	if err != nil {
		t.Fatal(err)
	}
	for k := range uint64(keys) {
		s.setLive(k)
	}
	s.nextKey, s.counts.Live = uint64(keys), keys
	return s
}

// TestStreamZipfPickLive checks that a Zipf-skewed pick follows the Zipf law
// restricted to the live keys, however hot the deleted keys are.
func TestStreamZipfPickLive(t *testing.T) {
	const keys, exp, draws = 10_000, 1.5, 200_000
	s := allLive(t, keys, exp)
	dead := map[uint64]bool{0: true, 1: true, 2: true, 5: true, 4095: true, 4096: true}
	for k := uint64(6000); k < 6100; k++ {
		dead[k] = true
	}
	for k := range dead {
		s.clearLive(k)
		s.counts.Live--
	}
	w := func(k uint64) float64 { return math.Pow(float64(k+1), -exp) }
	total := 0.0
	for k := range uint64(keys) {
		if !dead[k] {
			total += w(k)
		}
	}
	hits := map[uint64]int{}
	tail := 0
	for range draws {
		k, ok := s.pickLive()
		if !ok || dead[k] || k >= keys {
			t.Fatalf("picked %d (ok %v), dead or out of range", k, ok)
		}
		if k >= zipfHead {
			tail++
		} else {
			hits[k]++
		}
	}
	check := func(what string, got int, p float64) {
		t.Helper()
		want := draws * p
		if sd := math.Sqrt(want * (1 - p)); math.Abs(float64(got)-want) > 5*sd+1 {
			t.Errorf("%s: %d picks, want %.0f ± %.0f", what, got, want, 5*sd)
		}
	}
	for _, k := range []uint64{3, 4, 6, 7, 20, 100, 4094} {
		check(fmt.Sprintf("key %d", k), hits[k], w(k)/total)
	}
	tailP := 0.0
	for k := uint64(zipfHead); k < keys; k++ {
		if !dead[k] {
			tailP += w(k) / total
		}
	}
	check("keys from 4096", tail, tailP)

	// Uniform picks hit only live keys too.
	u := allLive(t, 300, 0)
	for k := range uint64(290) {
		u.clearLive(k)
		u.counts.Live--
	}
	for range 1000 {
		if k, ok := u.pickLive(); !ok || k < 290 || k >= 300 {
			t.Fatalf("uniform pick %d (ok %v), want a live key of 290..299", k, ok)
		}
	}
}

func TestStreamZipfTailWeight(t *testing.T) {
	for _, exp := range []float64{1.01, 1.5, 3} {
		for _, keys := range []uint64{zipfHead + 1, 10_000, 100_000} {
			z := newZipfPicker(rand.New(rand.NewPCG(1, 2)), exp, keys)
			want := 0.0
			for n := keys; n > zipfHead; n-- { // smallest terms first
				want += math.Pow(float64(n), -exp)
			}
			if got := z.tailW / zipfScale; math.Abs(got-want) > 1e-9*want {
				t.Errorf("exp %g, %d keys: tail weight %.12g, want %.12g", exp, keys, got, want)
			}
		}
	}
}

func TestStreamNextLive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, keys := range []int64{1, 63, 64, 65, 4096, 4097, 70_000} {
		for _, density := range []float64{0.0001, 0.01, 0.5} {
			s := allLive(t, keys, 0)
			for k := range uint64(keys) {
				if rng.Float64() >= density {
					s.clearLive(k)
				}
			}
			last := uint64(keys) - 1
			s.setLive(last) // at least one live key
			live := func(k uint64) bool { return s.isLive(k) }
			for range 200 {
				k := rng.Uint64N(uint64(keys))
				want := k
				for !live(want) {
					want = (want + 1) % uint64(keys)
				}
				if got := s.nextLive(k); got != want {
					t.Fatalf("keys %d, density %g: nextLive(%d) = %d, want %d", keys, density, k, got, want)
				}
			}
		}
	}
}
