package spill

import (
	"bytes"
	"fmt"
)

// pick returns how many of the newest runs to merge (at least 2, and enough
// to leave at most FanIn runs).
func (s *Set) pick() int {
	n := len(s.runs)
	if s.opts.Compaction == CompactAll {
		return n
	}
	need := max(n-s.opts.FanIn+1, 2)
	k, sum := 1, s.runs[n-1].info.Entries
	for k < n && (k < need || s.runs[n-1-k].info.Entries <= sum) {
		sum += s.runs[n-1-k].info.Entries
		k++
	}
	return k
}

// compact merges runs[lo:] into one run that replaces them. Newest wins for a
// key present in several inputs; if lo == 0 the output is the oldest run and
// SetOptions.Drop removes entries that shadow nothing. On error the inputs
// are untouched and the partial output is removed.
func (s *Set) compact(lo int) error {
	inputs := s.runs[lo:]
	var expected int64
	for _, rn := range inputs {
		expected += rn.info.Entries
	}
	drop := s.opts.Drop
	if lo != 0 {
		drop = nil
	}
	var dropped int64
	out, err := s.writeRun(int(expected), func(w *Writer) error {
		var err error
		dropped, err = merge(w, inputs, drop)
		return err
	})
	if err != nil {
		return fmt.Errorf("spill: compact %d runs: %w", len(inputs), err)
	}
	s.c.compactions.Add(1)
	s.c.compactedRuns.Add(int64(len(inputs)))
	s.c.dropped.Add(dropped)
	if out != nil {
		s.c.compactedBytes.Add(out.info.Bytes)
	}
	old := append([]*run(nil), inputs...)
	s.runs = s.runs[:lo]
	s.dirSynced = false
	if out != nil {
		s.runs = append(s.runs, out)
	}
	err = s.dropRuns(old)
	s.updateGauges()
	return err
}

// mergeSource is one input of a merge; age orders inputs, newer is larger.
type mergeSource struct {
	it  *Iter
	age int
}

// less orders sources by (hash, key), newer first among equals.
func (a *mergeSource) less(b *mergeSource) bool {
	if a.it.hash != b.it.hash {
		return a.it.hash < b.it.hash
	}
	if c := bytes.Compare(a.it.key, b.it.key); c != 0 {
		return c < 0
	}
	return a.age > b.age
}

// merge writes the union of the inputs (oldest first) to w, the newest
// version of each key only, skipping those drop (if set) returns true for.
// It holds one iterator per input: memory is bounded by the inputs' count.
func merge(w *Writer, inputs []*run, drop func([]byte) bool) (dropped int64, err error) {
	return mergeRuns(inputs, drop, func(hash uint64, key, value []byte) (bool, error) {
		return true, w.Add(hash, key, value)
	})
}

// Scan calls fn with the newest version of every key in the set's runs, in
// (hash, key) order, skipping those SetOptions.Drop drops, until fn
// returns false. key and value are valid only during the call. It reads
// the runs sequentially, one block of each at a time.
func (s *Set) Scan(fn func(hash uint64, key, value []byte) bool) error {
	if s.closed.Load() {
		return s.errClosed("scan")
	}
	_, err := mergeRuns(s.runs, s.opts.Drop, func(hash uint64, key, value []byte) (bool, error) {
		return fn(hash, key, value), nil
	})
	return err
}

// mergeRuns calls emit with the newest version of each key of the inputs
// (oldest first), skipping those drop (if set) returns true for, until
// emit returns false or an error.
func mergeRuns(inputs []*run, drop func([]byte) bool, emit func(hash uint64, key, value []byte) (bool, error)) (dropped int64, err error) {
	h := make([]*mergeSource, 0, len(inputs))
	defer func() {
		for _, src := range h {
			src.it.Close()
		}
	}()
	for age, rn := range inputs {
		src := &mergeSource{it: rn.r.NewIter(), age: age}
		if src.it.Next() {
			h = append(h, src)
		} else if err := src.it.Err(); err != nil {
			return 0, err
		}
	}
	heapInit(h)
	var (
		lastHash uint64
		lastKey  []byte
		have     bool
	)
	for len(h) > 0 {
		top := h[0]
		it := top.it
		if !have || it.hash != lastHash || !bytes.Equal(it.key, lastKey) {
			// The newest version of a key: older ones follow and are skipped.
			lastHash, lastKey, have = it.hash, append(lastKey[:0], it.key...), true
			if drop != nil && drop(it.value) {
				dropped++
			} else if more, err := emit(it.hash, it.key, it.value); err != nil || !more {
				return dropped, err
			}
		}
		if it.Next() {
			heapFix(h, 0)
			continue
		}
		if err := it.Err(); err != nil {
			return dropped, err
		}
		it.Close()
		n := len(h) - 1
		h[0] = h[n]
		h = h[:n]
		if n > 0 {
			heapFix(h, 0)
		}
	}
	return dropped, nil
}

func heapInit(h []*mergeSource) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapFix(h, i)
	}
}

// heapFix sifts h[i] down.
func heapFix(h []*mergeSource, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
