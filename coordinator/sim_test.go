package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

// TestSimulation drives the machine with seeded random interleavings of
// registrations, reports, payloads, kills, ticks, slow and failing commits,
// failing saves and coordinator restarts, and checks it against a naive
// model after every step:
//   - the table applies every epoch at most once, in increasing order, and
//     only with payloads covering all vnodes;
//   - a commit starts only after a saved state records its epoch;
//   - a decision goes to writers covering all vnodes, is the same for all of
//     them, and commits exactly when the model says so;
//   - an epoch whose reports cover all vnodes never stays undecided;
//   - every writer of a committed epoch gets the result;
//   - every resume epoch announced is at least the last applied epoch, and
//     is applied by the end (nothing lost);
//   - after the chaos, a calm phase keeps committing (nothing stalls).
func TestSimulation(t *testing.T) {
	seeds := 150
	if testing.Short() {
		seeds = 20
	}
	for seed := range seeds {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			t.Parallel()
			newSim(t, uint64(seed)).run(1500)
		})
	}
}

const simVnodes = 8

type simWriter struct {
	id         WriterID
	slot       int
	welcomed   bool
	next       uint64 // next epoch to report
	reported   uint64 // reported, waiting for its decision
	rep        report
	owe        []uint64 // commit epochs whose payload is still to send
	retired    bool
	dead       bool // aborted or refused: disconnects next
	gotResults map[uint64]bool
}

type simCommit struct {
	req   CommitRequest
	ticks int
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	cfg     Config
	m       *Machine
	storeID uint64
	state   []byte
	slots   []*roaring.Bitmap
	writers map[WriterID]*simWriter
	ever    map[WriterID]*simWriter // every writer of this incarnation, gone or not
	bySlot  []*simWriter
	nextID  WriterID
	applied map[uint64][][]byte
	maxApp  uint64
	running *simCommit
	// payloads sent per epoch in this incarnation, and who must hear the
	// result of a just-confirmed epoch.
	sent         map[uint64][]WriterID
	resultsOwed  map[uint64][]WriterID
	resumes      []uint64
	calm         bool
	steps        int
	failPersists int
	restarts     int
}

func newSim(t *testing.T, seed uint64) *sim {
	rng := rand.New(rand.NewPCG(seed, 0x1ce51))
	cfg := Config{
		Vnodes:         simVnodes,
		CommitInterval: uint64(1 + rng.IntN(4)),
		AlignTimeout:   30,
		PayloadTimeout: 30,
		CommitAttempts: 3,
		CommitBackoff:  2,
	}
	if rng.IntN(2) == 0 {
		cfg.CommitBytes = 1000
	}
	s := &sim{t: t, rng: rng, cfg: cfg, writers: map[WriterID]*simWriter{}, applied: map[uint64][][]byte{}}
	slots, err := SplitVnodes(simVnodes, 1+rng.IntN(4))
	if err != nil {
		t.Fatal(err)
	}
	s.slots = slots
	s.restart()
	return s
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("step %d: "+format, append([]any{s.steps}, args...)...)
}

func (s *sim) step(ev Event) {
	_ = s.m.Step(ev) // refusals are part of the game
	s.checkLiveness()
}

func (s *sim) restart() {
	s.restarts++
	if s.running != nil && s.rng.IntN(2) == 0 {
		s.apply(s.running.req) // the commit landed before the crash
	}
	s.running = nil
	m, err := NewMachine(s.cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.m = m
	if s.state != nil {
		if err := m.Step(Recovered{ID: s.storeID, State: s.state}); err != nil {
			s.fatalf("recover: %v", err)
		}
	}
	s.writers = map[WriterID]*simWriter{}
	s.ever = map[WriterID]*simWriter{}
	s.bySlot = make([]*simWriter, len(s.slots))
	s.sent = map[uint64][]WriterID{}
	s.resultsOwed = map[uint64][]WriterID{}
}

func (s *sim) run(chaosSteps int) {
	for s.steps = 0; s.steps < chaosSteps; s.steps++ {
		s.randomAction()
	}
	s.calm = true
	target := s.maxApp + 3
	for i := 0; s.maxApp < target; i++ {
		if i > 20000 {
			s.fatalf("calm phase stalled: applied %d, want %d; status %+v", s.maxApp, target, s.m.Status())
		}
		s.steps++
		s.randomAction()
	}
	// Drain: let the recorded epochs commit, then check nothing was lost.
	for i := 0; i < 1000 && (len(s.m.Status().Recorded) > 0 || s.running != nil); i++ {
		s.steps++
		if s.running != nil {
			s.finishCommit()
		}
		s.processReady()
		if s.m.Status().Failed != nil {
			s.restart()
		}
	}
	for _, r := range s.resumes {
		if _, ok := s.applied[r]; r != 0 && !ok {
			s.fatalf("resume epoch %d was announced but never applied (applied up to %d)", r, s.maxApp)
		}
	}
	s.t.Logf("interval %d bytes %d writers %d: %d epochs applied (last %d), %d restarts, %d failed saves, %d steps",
		s.cfg.CommitInterval, s.cfg.CommitBytes, len(s.slots), len(s.applied), s.maxApp, s.restarts, s.failPersists, s.steps)
}

func (s *sim) randomAction() {
	if s.m.Status().Failed != nil && (s.calm || s.rng.IntN(4) == 0) {
		s.restart()
		return
	}
	switch r := s.rng.IntN(100); {
	case r < 30:
		s.processReady()
	case r < 45:
		s.actWriter()
	case r < 60:
		s.report()
	case r < 70:
		s.sendPayload()
	case r < 80:
		if s.running != nil {
			s.finishCommit()
		}
	case r < 88:
		s.step(Tick{})
	case r < 90:
		if !s.calm {
			s.kill()
		}
	case r < 91:
		if !s.calm && s.rng.IntN(3) == 0 {
			s.restart()
		}
	default:
		s.report()
	}
}

// actWriter registers a writer in an empty slot or disconnects a dead one.
func (s *sim) actWriter() {
	slot := s.rng.IntN(len(s.slots))
	w := s.bySlot[slot]
	switch {
	case w == nil:
		s.nextID++
		w = &simWriter{id: s.nextID, slot: slot, gotResults: map[uint64]bool{}}
		s.writers[w.id] = w
		s.ever[w.id] = w
		s.bySlot[slot] = w
		s.step(Register{Writer: w.id, Vnodes: s.slots[slot].Clone(), VnodeCount: simVnodes})
	case w.dead || (w.retired && len(w.owe) == 0):
		s.disconnect(w, nil)
	}
}

func (s *sim) disconnect(w *simWriter, err error) {
	delete(s.writers, w.id)
	s.bySlot[w.slot] = nil
	s.step(Disconnect{Writer: w.id, Err: err})
}

func (s *sim) kill() {
	for _, w := range s.bySlot {
		if w != nil && s.rng.IntN(len(s.slots)) == 0 {
			s.disconnect(w, errors.New("killed"))
			return
		}
	}
}

func (s *sim) pick(ok func(*simWriter) bool) *simWriter {
	var c []*simWriter
	for _, w := range s.bySlot {
		if w != nil && ok(w) {
			c = append(c, w)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.IntN(len(c))]
}

func (s *sim) report() {
	w := s.pick(func(w *simWriter) bool { return w.welcomed && !w.dead && !w.retired && w.reported == 0 })
	if w == nil {
		return
	}
	w.rep = report{}
	if s.rng.IntN(3) == 0 {
		w.rep.bytes = int64(s.rng.IntN(800))
	}
	w.rep.final = !s.calm && s.rng.IntN(50) == 0
	w.reported = w.next
	s.step(Report{Writer: w.id, Epoch: w.next, BufferedBytes: w.rep.bytes, Final: w.rep.final})
}

func (s *sim) sendPayload() {
	w := s.pick(func(w *simWriter) bool { return len(w.owe) > 0 && !w.dead })
	if w == nil {
		return
	}
	e := w.owe[0]
	w.owe = w.owe[1:]
	s.sent[e] = append(s.sent[e], w.id)
	s.step(Payload{Writer: w.id, Epoch: e, Data: []byte(fmt.Sprintf("%s|%d", FormatVnodes(s.slots[w.slot]), e))})
}

func (s *sim) apply(req CommitRequest) {
	if prev, ok := s.applied[req.Epoch]; ok {
		if !slices.EqualFunc(prev, req.Payloads, bytes.Equal) {
			s.fatalf("epoch %d committed again with other payloads: %q then %q", req.Epoch, prev, req.Payloads)
		}
		return // the idempotent committer skips it
	}
	if req.Epoch <= s.maxApp {
		s.fatalf("epoch %d committed after epoch %d", req.Epoch, s.maxApp)
	}
	s.applied[req.Epoch] = req.Payloads
	s.maxApp = req.Epoch
}

func (s *sim) finishCommit() {
	c := s.running
	if c.ticks > 0 && !s.calm {
		c.ticks--
		return
	}
	s.running = nil
	if !s.calm && s.rng.IntN(5) == 0 {
		if s.rng.IntN(2) == 0 {
			s.apply(c.req) // landed, but the answer was lost
		}
		s.step(CommitDone{Epoch: c.req.Epoch, Err: errors.New("catalog unavailable")})
		return
	}
	s.apply(c.req)
	owed := []WriterID{}
	for _, id := range s.sent[c.req.Epoch] {
		if _, ok := s.writers[id]; ok {
			owed = append(owed, id)
		}
	}
	s.resultsOwed[c.req.Epoch] = owed
	s.step(CommitDone{Epoch: c.req.Epoch})
}

func (s *sim) storedEpochs() (last uint64, epochs []uint64) {
	if s.state == nil {
		return 0, nil
	}
	st, err := DecodeState(s.state)
	if err != nil {
		s.fatalf("stored state: %v", err)
	}
	for _, e := range st.Epochs {
		epochs = append(epochs, e.Epoch)
	}
	return st.LastCommitted, epochs
}

func (s *sim) processReady() {
	for s.m.HasReady() {
		rd := s.m.Ready()
		var saveErr error
		if p := rd.Persist; p != nil {
			if !s.calm && s.rng.IntN(40) == 0 {
				saveErr = errors.New("disk full")
				s.failPersists++
			} else {
				if p.ID <= s.storeID {
					s.fatalf("snapshot id %d not above %d", p.ID, s.storeID)
				}
				s.storeID, s.state = p.ID, p.State
			}
		}
		if c := rd.Commit; c != nil && saveErr == nil {
			if s.running != nil {
				s.fatalf("commit %d started while %d runs", c.Epoch, s.running.req.Epoch)
			}
			s.checkCommitRequest(*c)
			s.running = &simCommit{req: *c, ticks: s.rng.IntN(4)}
		}
		s.deliver(rd.Messages)
		s.m.Advance()
		if saveErr != nil {
			s.step(PersistFailed{ID: rd.Persist.ID, Err: saveErr})
		}
	}
}

func (s *sim) checkCommitRequest(c CommitRequest) {
	_, recorded := s.storedEpochs()
	if !slices.Contains(recorded, c.Epoch) {
		s.fatalf("commit of epoch %d started before a saved state recorded it (saved: %v)", c.Epoch, recorded)
	}
	covered := roaring.New()
	for _, p := range c.Payloads {
		vn, e, _ := strings.Cut(string(p), "|")
		if e != strconv.FormatUint(c.Epoch, 10) {
			s.fatalf("epoch %d commits payload %q of another epoch", c.Epoch, p)
		}
		b, err := ParseVnodes(vn, simVnodes)
		if err != nil {
			s.fatalf("payload %q: %v", p, err)
		}
		if covered.Intersects(b) {
			s.fatalf("epoch %d: payloads overlap at %s", c.Epoch, FormatVnodes(roaring.And(covered, b)))
		}
		covered.Or(b)
	}
	if covered.GetCardinality() != simVnodes {
		s.fatalf("epoch %d commits payloads covering only %s", c.Epoch, FormatVnodes(covered))
	}
}

func (s *sim) deliver(msgs []Message) {
	type decided struct {
		commit  bool
		writers []*simWriter
	}
	decisions := map[uint64]*decided{}
	got := map[uint64]map[WriterID]bool{}
	for _, msg := range msgs {
		if msg.Type == MsgResult && msg.Err == nil {
			if got[msg.Epoch] == nil {
				got[msg.Epoch] = map[WriterID]bool{}
			}
			got[msg.Epoch][msg.To] = true
			if _, ok := s.applied[msg.Epoch]; !ok {
				s.fatalf("%v told epoch %d committed, but the table does not have it", msg.To, msg.Epoch)
			}
		}
		if (msg.Type == MsgRegistered || msg.Type == MsgAbort) && msg.Resume < s.maxApp {
			s.fatalf("%v told to resume after %d, but epoch %d is in the table", msg.To, msg.Resume, s.maxApp)
		}
		if msg.Type == MsgRegistered || msg.Type == MsgAbort {
			s.resumes = append(s.resumes, msg.Resume)
		}
		w := s.ever[msg.To]
		if w == nil {
			s.fatalf("message to unknown writer: %v", msg)
		}
		switch msg.Type {
		case MsgRegistered:
			w.welcomed, w.next = true, msg.Resume+1
		case MsgDecision:
			if w.reported != msg.Epoch {
				s.fatalf("%v got a decision for epoch %d, reported %d", w.id, msg.Epoch, w.reported)
			}
			d := decisions[msg.Epoch]
			if d == nil {
				d = &decided{commit: msg.Commit}
				decisions[msg.Epoch] = d
			}
			if d.commit != msg.Commit {
				s.fatalf("epoch %d: writers got different decisions", msg.Epoch)
			}
			d.writers = append(d.writers, w)
			w.reported, w.next = 0, msg.Epoch+1
			if msg.Commit {
				w.owe = append(w.owe, msg.Epoch)
			}
			w.retired = w.retired || msg.Retire
		case MsgResult:
			w.gotResults[msg.Epoch] = true
		case MsgAbort, MsgError:
			w.dead = true
		}
	}
	for e, d := range decisions {
		covered := roaring.New()
		var sum int64
		final := false
		for _, w := range d.writers {
			covered.Or(s.slots[w.slot])
			sum += w.rep.bytes
			final = final || w.rep.final
		}
		if covered.GetCardinality() != simVnodes {
			s.fatalf("epoch %d decided with only %s reported", e, FormatVnodes(covered))
		}
		want := e%s.cfg.CommitInterval == 0 || (s.cfg.CommitBytes > 0 && sum >= s.cfg.CommitBytes) || final
		if d.commit != want {
			s.fatalf("epoch %d: commit=%t, model says %t (sum %d, final %t)", e, d.commit, want, sum, final)
		}
	}
	for e, owed := range s.resultsOwed {
		for _, id := range owed {
			if !got[e][id] {
				s.fatalf("%v sent its payload for epoch %d but got no result", id, e)
			}
		}
		delete(s.resultsOwed, e)
	}
}

// checkLiveness: the oldest undecided epoch must not be covered by reports.
func (s *sim) checkLiveness() {
	st := s.m.Status()
	if len(st.Undecided) == 0 {
		return
	}
	e := st.Undecided[0]
	covered := roaring.New()
	for _, w := range s.writers {
		if w.reported == e && !w.dead {
			covered.Or(s.slots[w.slot])
		}
	}
	if covered.GetCardinality() == simVnodes {
		s.fatalf("epoch %d is fully reported but undecided", e)
	}
}

var _ = context.Background
