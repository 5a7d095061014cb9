package coordinator

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// Machine is the coordinator's deterministic state machine. It has no
// goroutines, does no I/O and reads no clock: inputs arrive through Step,
// time through Tick events, and everything the caller must do comes out of
// Ready. It is not safe for concurrent use; the driver (Start) owns one.
//
// Misuse panics: stepping between Ready and Advance, Advance without Ready,
// Recovered after other events, a CommitDone for an epoch that is not
// committing, a duplicate WriterID.
type Machine struct {
	cfg    Config
	all    *roaring.Bitmap
	vacant *roaring.Bitmap // vnodes no writer needs to hold (Config.Vacant)
	step   func(*Machine, Event) error

	now      int
	started  bool
	readyOut bool

	writers   map[WriterID]*writer
	job       map[string]string // Config.Job, plus what the first writers brought
	undecided []*epochReports   // ascending epochs with reports, not yet decided
	commits   []*commitEpoch    // ascending decided commit epochs, not yet confirmed

	lastCommitted uint64
	lastDecided   uint64

	snapID          uint64 // last snapshot id handed out (or recovered)
	dirty           bool   // the durable state changed since the last snapshot
	lastReadyCommit *commitEpoch
	lastReadySnap   uint64

	msgs   []Message
	failed error
}

type role int

const (
	roleActive  role = iota // in the layout: reports every epoch
	rolePending             // rescale registration waiting for its boundary
	roleRetired             // ended at a boundary; waits for its last result
	roleAborted             // told to abort; kept to deliver recorded epochs' results
)

type writer struct {
	id        WriterID
	vnodes    *roaring.Bitmap
	role      role
	resume    uint64 // the writer starts after this epoch
	welcomed  bool   // MsgRegistered sent
	lastEpoch uint64 // last epoch reported in this registration
	since     int    // tick of registration (rescale timeout)
}

type report struct {
	bytes int64
	final bool
}

type epochReports struct {
	epoch   uint64
	since   int
	reports map[WriterID]report
	covered *roaring.Bitmap
}

type part struct {
	writer  WriterID
	vnodes  *roaring.Bitmap
	payload []byte
	have    bool
}

type commitEpoch struct {
	epoch     uint64
	since     int // tick of the decision
	parts     []part
	missing   int
	complete  bool   // every payload is in, and every earlier epoch is complete
	persistID uint64 // snapshot that recorded it durably; 0 = not recorded
	recovered bool   // from Recovered: its writers are gone
	attempts  int
	retryAt   int
	running   bool
}

// NewMachine returns a machine for a job with no recovered state; step
// Recovered first to resume from a saved one.
func NewMachine(cfg Config) (*Machine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Machine{
		cfg:     cfg,
		all:     allVnodes(cfg.Vnodes),
		vacant:  roaring.New(),
		step:    stepRunning,
		writers: make(map[WriterID]*writer),
		job:     maps.Clone(cfg.Job),
	}
	if cfg.Vacant != nil {
		m.vacant = cfg.Vacant.Clone()
	}
	m.lastCommitted, m.lastDecided = cfg.After, cfg.After
	return m, nil
}

// Step feeds one event to the machine. It returns an error when the event is
// refused (the same error also goes to the writer in Ready.Messages, and, for
// a protocol error of a live writer, aborts the in-flight windows); the
// caller may log it, but owes nothing more.
func (m *Machine) Step(ev Event) error {
	if m.readyOut {
		panic("coordinator: Step called between Ready and Advance")
	}
	if r, ok := ev.(Recovered); ok {
		if m.started {
			panic("coordinator: Recovered must be the first event")
		}
		m.started = true
		return m.recover(r)
	}
	m.started = true
	return m.step(m, ev)
}

func stepRunning(m *Machine, ev Event) error {
	switch ev := ev.(type) {
	case Register:
		return m.register(ev)
	case Report:
		return m.report(ev)
	case Payload:
		return m.payload(ev)
	case CommitDone:
		m.commitDone(ev)
	case PersistFailed:
		m.persistFailed(ev)
	case Disconnect:
		m.disconnect(ev)
	case Tick:
		m.tick()
	case Vacate:
		return m.vacate(ev)
	default:
		panic(fmt.Sprintf("coordinator: unknown event %T", ev))
	}
	return nil
}

// stepFailed is the phase after the machine gave up: it only refuses.
func stepFailed(m *Machine, ev Event) error {
	switch ev := ev.(type) {
	case Register:
		if _, dup := m.writers[ev.Writer]; dup {
			panic(fmt.Sprintf("coordinator: duplicate WriterID %v", ev.Writer))
		}
		return m.refuse(ev.Writer, m.failed)
	case Report:
		return m.refuse(ev.Writer, m.failed)
	case Payload:
		return m.refuse(ev.Writer, m.failed)
	case Disconnect:
		delete(m.writers, ev.Writer)
	case CommitDone:
		panic(fmt.Sprintf("coordinator: CommitDone for epoch %d while failed", ev.Epoch))
	case PersistFailed, Tick:
	case Vacate:
		return m.failed
	default:
		panic(fmt.Sprintf("coordinator: unknown event %T", ev))
	}
	return nil
}

func (m *Machine) logf(format string, args ...any) { m.cfg.Logf(format, args...) }

func (m *Machine) send(msg Message) { m.msgs = append(m.msgs, msg) }

// refuse answers a request with an error without touching the job.
func (m *Machine) refuse(w WriterID, err error) error {
	m.send(Message{To: w, Type: MsgError, Err: err})
	return err
}

func (m *Machine) recover(r Recovered) error {
	s, err := DecodeState(r.State)
	if err != nil {
		return fmt.Errorf("coordinator: recovering state %d: %w", r.ID, err)
	}
	m.snapID = r.ID
	m.lastCommitted = s.LastCommitted
	for _, e := range s.Epochs {
		if e.Epoch <= m.lastCommitted {
			continue
		}
		c := &commitEpoch{epoch: e.Epoch, complete: true, persistID: r.ID, recovered: true}
		for _, p := range e.Parts {
			c.parts = append(c.parts, part{writer: p.Writer, vnodes: p.Vnodes, payload: p.Payload, have: true})
		}
		m.commits = append(m.commits, c)
	}
	m.lastDecided = m.highestRecorded()
	m.raiseToAfter()
	layout := make([]string, 0, len(s.Writers))
	for _, w := range s.Writers {
		layout = append(layout, w.Writer.String()+":"+FormatVnodes(w.Vnodes))
	}
	m.logf("recovered state %d: last committed %d, %d recorded epochs to commit, previous layout %v",
		r.ID, m.lastCommitted, len(m.commits), layout)
	return nil
}

func (m *Machine) register(ev Register) error {
	if _, dup := m.writers[ev.Writer]; dup {
		panic(fmt.Sprintf("coordinator: duplicate WriterID %v", ev.Writer))
	}
	switch {
	case ev.VnodeCount != 0 && ev.VnodeCount != m.cfg.Vnodes:
		return m.refuse(ev.Writer, protocolErrorf("%v routes with %d vnodes, the coordinator with %d", ev.Writer, ev.VnodeCount, m.cfg.Vnodes))
	case ev.Vnodes == nil || ev.Vnodes.IsEmpty():
		return m.refuse(ev.Writer, protocolErrorf("%v registered no vnodes", ev.Writer))
	case ev.Vnodes.Maximum() >= uint32(m.cfg.Vnodes):
		return m.refuse(ev.Writer, protocolErrorf("%v vnodes %s reach past %d", ev.Writer, FormatVnodes(ev.Vnodes), m.cfg.Vnodes-1))
	}
	if diff := JobDiff(m.job, ev.Job); diff != "" {
		return m.refuse(ev.Writer, fmt.Errorf("%w: %v writes into another job than this coordinator's: %s", ErrJobMismatch, ev.Writer, diff))
	}
	if m.job == nil {
		m.job = make(map[string]string, len(ev.Job))
	}
	for k, v := range ev.Job {
		m.job[k] = v
	}
	vnodes := ev.Vnodes.Clone()
	overlapsActive := false
	for _, o := range m.sortedWriters() {
		if o.role != roleActive && o.role != rolePending {
			continue
		}
		if !o.vnodes.Intersects(vnodes) {
			continue
		}
		if o.role == rolePending || !ev.Rescale {
			return m.refuse(ev.Writer, &OverlapError{Writer: ev.Writer, Vnodes: vnodes, Owner: o.id,
				Overlap: roaring.And(o.vnodes, vnodes), Pending: o.role == rolePending})
		}
		overlapsActive = true
	}
	w := &writer{id: ev.Writer, vnodes: vnodes, since: m.now}
	m.writers[w.id] = w
	// Vacant vnodes are taken from the next undecided epoch on.
	m.vacant.AndNot(vnodes)
	if overlapsActive {
		w.role = rolePending
		m.logf("%v vnodes %s: rescale pending, takes over after the next commit epoch", w.id, FormatVnodes(vnodes))
		return nil
	}
	w.role = roleActive
	w.resume = m.lastDecided
	m.logf("%v vnodes %s: joined after epoch %d", w.id, FormatVnodes(vnodes), w.resume)
	m.welcome(w)
	return nil
}

// welcome sends MsgRegistered once every epoch to commit up to the
// writer's resume epoch is committed: the table then holds all the data
// of its vnodes up to it. An epoch decided without a commit holds none of
// a joining writer's vnodes (they were vacant, or their writer's leaving
// aborted it), so it is not waited for: the next epoch needs the
// writer's report, and waiting would hang it.
func (m *Machine) welcome(w *writer) {
	if w.role == roleActive && !w.welcomed && (len(m.commits) == 0 || m.commits[0].epoch > w.resume) {
		w.welcomed = true
		m.send(Message{To: w.id, Type: MsgRegistered, Resume: w.resume})
	}
}

func (m *Machine) report(ev Report) error {
	w := m.writers[ev.Writer]
	if err := m.checkLive(w, ev.Writer, "report"); err != nil {
		return err
	}
	switch {
	case w.role == roleRetired:
		return m.refuse(w.id, fmt.Errorf("%w: %v reported epoch %d after retiring at epoch %d", ErrRetired, w.id, ev.Epoch, w.lastEpoch))
	case !w.welcomed:
		return m.failWriter(w, protocolErrorf("%v reported epoch %d before its registration was accepted", w.id, ev.Epoch))
	case ev.Epoch <= w.resume:
		return m.failWriter(w, protocolErrorf("%v reported epoch %d, not after its resume epoch %d", w.id, ev.Epoch, w.resume))
	case ev.Epoch <= w.lastEpoch:
		return m.failWriter(w, protocolErrorf("%v reported epoch %d after epoch %d", w.id, ev.Epoch, w.lastEpoch))
	case w.lastEpoch > m.lastDecided:
		return m.failWriter(w, protocolErrorf("%v reported epoch %d before epoch %d was decided", w.id, ev.Epoch, w.lastEpoch))
	case ev.Epoch <= m.lastDecided:
		return m.failWriter(w, protocolErrorf("%v reported epoch %d, already decided (last decided %d)", w.id, ev.Epoch, m.lastDecided))
	case ev.BufferedBytes < 0:
		return m.failWriter(w, protocolErrorf("%v reported negative buffered bytes %d", w.id, ev.BufferedBytes))
	}
	w.lastEpoch = ev.Epoch
	e := m.undecidedEpoch(ev.Epoch)
	e.reports[w.id] = report{bytes: ev.BufferedBytes, final: ev.Final}
	e.covered.Or(w.vnodes)
	m.tryDecide()
	return nil
}

// checkLive refuses requests of writers that are unknown or not in the
// layout; those do not abort anything.
func (m *Machine) checkLive(w *writer, id WriterID, what string) error {
	switch {
	case w == nil:
		return m.refuse(id, protocolErrorf("%s from unregistered writer %v", what, id))
	case w.role == rolePending:
		return m.refuse(id, protocolErrorf("%s from %v, whose rescale registration is still pending", what, id))
	case w.role == roleAborted:
		return m.refuse(id, protocolErrorf("%s from %v after its session was aborted", what, id))
	}
	return nil
}

func (m *Machine) undecidedEpoch(epoch uint64) *epochReports {
	i, found := slices.BinarySearchFunc(m.undecided, epoch, func(e *epochReports, t uint64) int { return cmp.Compare(e.epoch, t) })
	if found {
		return m.undecided[i]
	}
	e := &epochReports{epoch: epoch, since: m.now, reports: make(map[WriterID]report), covered: roaring.New()}
	m.undecided = slices.Insert(m.undecided, i, e)
	return e
}

// tryDecide decides aligned epochs, oldest first; an older unaligned epoch
// holds back newer ones until it aligns or times out.
func (m *Machine) tryDecide() {
	for len(m.undecided) > 0 && m.aligned(m.undecided[0]) {
		e := m.undecided[0]
		m.undecided = m.undecided[1:]
		m.decide(e)
	}
}

// aligned reports whether e's reports and the vacant vnodes cover every
// vnode.
func (m *Machine) aligned(e *epochReports) bool {
	if m.vacant.IsEmpty() {
		return e.covered.GetCardinality() == uint64(m.cfg.Vnodes)
	}
	return roaring.Or(e.covered, m.vacant).GetCardinality() == uint64(m.cfg.Vnodes)
}

// vacate gives vnodes whose writers left back to the vacant set.
func (m *Machine) vacate(ev Vacate) error {
	if ev.Vnodes == nil || ev.Vnodes.IsEmpty() {
		return nil
	}
	if ev.Vnodes.Maximum() >= uint32(m.cfg.Vnodes) {
		return fmt.Errorf("coordinator: vacating vnodes %s: they reach past %d", FormatVnodes(ev.Vnodes), m.cfg.Vnodes-1)
	}
	for _, w := range m.sortedWriters() {
		if (w.role == roleActive || w.role == rolePending) && w.vnodes.Intersects(ev.Vnodes) {
			return fmt.Errorf("coordinator: vacating vnodes %s: %v still holds %s", FormatVnodes(ev.Vnodes), w.id, FormatVnodes(roaring.And(w.vnodes, ev.Vnodes)))
		}
	}
	m.vacant.Or(ev.Vnodes)
	m.logf("vnodes %s vacant", FormatVnodes(ev.Vnodes))
	m.tryDecide()
	return nil
}

// raiseToAfter makes Config.After the last committed epoch once no
// recovered epoch is left to commit: writers that joined meanwhile start
// after it.
func (m *Machine) raiseToAfter() {
	if len(m.commits) > 0 || m.lastCommitted >= m.cfg.After {
		return
	}
	m.logf("starting after epoch %d (the tables' last)", m.cfg.After)
	m.lastCommitted = m.cfg.After
	m.lastDecided = max(m.lastDecided, m.cfg.After)
	m.dirty = true
	for _, w := range m.sortedWriters() {
		if !w.welcomed && w.role == roleActive {
			w.resume = max(w.resume, m.cfg.After)
		}
	}
}

func (m *Machine) decide(e *epochReports) {
	var reasons []string
	if e.epoch%m.cfg.CommitInterval == 0 {
		reasons = append(reasons, "interval")
	}
	var sum int64
	final := false
	for _, r := range e.reports {
		sum += r.bytes
		final = final || r.final
	}
	if m.cfg.CommitBytes > 0 && sum >= m.cfg.CommitBytes {
		reasons = append(reasons, fmt.Sprintf("bytes %d>=%d", sum, m.cfg.CommitBytes))
	}
	if final {
		reasons = append(reasons, "final")
	}
	var pending []*writer
	for _, w := range m.sortedWriters() {
		if w.role == rolePending {
			pending = append(pending, w)
		}
	}
	if len(pending) > 0 {
		reasons = append(reasons, "rescale")
	}
	commit := len(reasons) > 0
	reporters := make([]*writer, 0, len(e.reports))
	for id := range e.reports {
		reporters = append(reporters, m.writers[id])
	}
	sortByVnode(reporters)
	c := &commitEpoch{epoch: e.epoch, since: m.now}
	for _, w := range reporters {
		retire := e.reports[w.id].final
		for _, p := range pending {
			retire = retire || p.vnodes.Intersects(w.vnodes)
		}
		if retire {
			w.role = roleRetired
		}
		m.send(Message{To: w.id, Type: MsgDecision, Epoch: e.epoch, Commit: commit, Retire: retire})
		c.parts = append(c.parts, part{writer: w.id, vnodes: w.vnodes})
	}
	m.lastDecided = e.epoch
	for _, p := range pending {
		p.role = roleActive
		p.resume = e.epoch
		m.logf("%v vnodes %s: rescale takes effect after epoch %d", p.id, FormatVnodes(p.vnodes), e.epoch)
	}
	if !commit {
		m.logf("epoch %d aligned: no commit (buffered %d)", e.epoch, sum)
		return
	}
	m.logf("epoch %d aligned: commit (%s)", e.epoch, joinReasons(reasons))
	c.missing = len(c.parts)
	m.commits = append(m.commits, c)
}

func joinReasons(r []string) string {
	s := ""
	for i, x := range r {
		if i > 0 {
			s += ", "
		}
		s += x
	}
	return s
}

func (m *Machine) payload(ev Payload) error {
	w := m.writers[ev.Writer]
	if err := m.checkLive(w, ev.Writer, "payload"); err != nil {
		return err
	}
	var c *commitEpoch
	for _, x := range m.commits {
		if x.epoch == ev.Epoch {
			c = x
		}
	}
	if c == nil {
		return m.failWriter(w, protocolErrorf("%v sent a payload for epoch %d, which is not a pending commit epoch", w.id, ev.Epoch))
	}
	i := slices.IndexFunc(c.parts, func(p part) bool { return p.writer == w.id })
	switch {
	case i < 0:
		return m.failWriter(w, protocolErrorf("%v sent a payload for epoch %d, which it did not report", w.id, ev.Epoch))
	case c.parts[i].have:
		return m.failWriter(w, protocolErrorf("%v sent a second payload for epoch %d", w.id, ev.Epoch))
	}
	c.parts[i].payload = ev.Data
	c.parts[i].have = true
	c.missing--
	for _, x := range m.commits {
		if x.complete {
			continue
		}
		if x.missing > 0 {
			break
		}
		x.complete = true
		m.dirty = true
		m.logf("epoch %d: all %d payloads in, recording", x.epoch, len(x.parts))
	}
	return nil
}

func (m *Machine) running() *commitEpoch {
	if len(m.commits) > 0 && m.commits[0].running {
		return m.commits[0]
	}
	return nil
}

func (m *Machine) commitDone(ev CommitDone) {
	c := m.running()
	if c == nil || c.epoch != ev.Epoch {
		panic(fmt.Sprintf("coordinator: CommitDone for epoch %d, which is not committing", ev.Epoch))
	}
	c.running = false
	if ev.Err != nil && errors.Is(ev.Err, ErrStale) {
		m.dropStale(c, ev.Err)
		return
	}
	if ev.Err != nil {
		if c.attempts >= m.cfg.CommitAttempts || errors.Is(ev.Err, ErrPermanent) {
			m.fail(c, &CommitError{Epoch: c.epoch, Attempts: c.attempts, Err: ev.Err})
			return
		}
		c.retryAt = m.now + m.cfg.CommitBackoff<<(c.attempts-1)
		m.logf("epoch %d: commit attempt %d failed, retry at tick %d: %v", c.epoch, c.attempts, c.retryAt, ev.Err)
		return
	}
	m.commits = m.commits[1:]
	m.lastCommitted = c.epoch
	m.dirty = true
	m.logf("epoch %d committed", c.epoch)
	m.raiseToAfter()
	if !c.recovered {
		for _, p := range c.parts {
			if _, ok := m.writers[p.writer]; ok {
				m.send(Message{To: p.writer, Type: MsgResult, Epoch: c.epoch})
			}
		}
	}
	for _, w := range m.sortedWriters() {
		m.welcome(w)
	}
}

// dropStale drops commit epoch c, which the table changed under, and the
// recorded epochs after it, and aborts the windows: the writers start again
// from what the table holds, after the last committed epoch. The state
// persisted next has none of them (a crash before that finds c recorded,
// and the recovery's check of the table drops it again).
func (m *Machine) dropStale(c *commitEpoch, err error) {
	m.logf("epoch %d: the table changed under it; dropped with %d recorded epochs after it: %v", c.epoch, len(m.commits)-1, err)
	m.commits = nil
	m.dirty = true
	m.abort(fmt.Errorf("coordinator: epoch %d dropped: %w", c.epoch, err))
}

// fail gives up after a commit that cannot be done: everything unrecorded is
// aborted, recorded epochs stay for recovery, and the machine only refuses
// from now on.
func (m *Machine) fail(c *commitEpoch, err *CommitError) {
	m.logf("epoch %d: giving up: %v", c.epoch, err)
	m.abort(err)
	m.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	for _, x := range m.commits {
		var res error = err
		if x != c {
			res = fmt.Errorf("%w: epoch %d recorded but not committed (a restart commits it): %w", ErrFailed, x.epoch, err)
		}
		if !x.recovered {
			for _, p := range x.parts {
				if _, ok := m.writers[p.writer]; ok {
					m.send(Message{To: p.writer, Type: MsgResult, Epoch: x.epoch, Err: res})
				}
			}
		}
	}
	m.step = stepFailed
}

func (m *Machine) persistFailed(ev PersistFailed) {
	if ev.ID == 0 || ev.ID != m.lastReadySnap {
		panic(fmt.Sprintf("coordinator: PersistFailed for snapshot %d, the last Ready persisted %d", ev.ID, m.lastReadySnap))
	}
	m.lastReadySnap = 0
	if c := m.lastReadyCommit; c != nil && c.running {
		c.running = false
		c.attempts--
	}
	for _, c := range m.commits {
		if c.persistID == ev.ID {
			c.persistID = 0
		}
	}
	// The saved state stays the previous snapshot; the next change saves again.
	m.abort(fmt.Errorf("coordinator: saving state %d: %w", ev.ID, ev.Err))
}

func (m *Machine) disconnect(ev Disconnect) {
	w := m.writers[ev.Writer]
	if w == nil {
		return
	}
	delete(m.writers, w.id)
	reason := &WriterError{Writer: w.id, Vnodes: w.vnodes, Err: ev.Err}
	switch w.role {
	case rolePending, roleAborted:
		m.logf("%v left", w.id)
	case roleActive:
		if m.inFlight() {
			m.abort(reason)
			return
		}
		m.logf("%v left between windows; vnodes %s wait for a new writer", w.id, FormatVnodes(w.vnodes))
	case roleRetired:
		if m.owesPayload(w.id) {
			m.abort(reason)
			return
		}
		m.logf("%v left after retiring", w.id)
	}
}

// failWriter aborts because a live writer broke the protocol.
func (m *Machine) failWriter(w *writer, err error) error {
	m.abort(&WriterError{Writer: w.id, Vnodes: w.vnodes, Err: err})
	return err
}

func (m *Machine) owesPayload(id WriterID) bool {
	for _, c := range m.commits {
		for _, p := range c.parts {
			if p.writer == id && !p.have {
				return true
			}
		}
	}
	return false
}

// highestRecorded is the last epoch that is committed or durably recorded.
func (m *Machine) highestRecorded() uint64 {
	h := m.lastCommitted
	for _, c := range m.commits {
		if c.persistID != 0 {
			h = c.epoch
		}
	}
	return h
}

// inFlight reports whether some writer holds data that is not durable: an
// undecided report or a window after the last recorded epoch.
func (m *Machine) inFlight() bool {
	return len(m.undecided) > 0 || m.lastDecided > m.highestRecorded()
}

// abort drops every window that is not durably recorded and ends every
// session; recorded epochs go on committing.
func (m *Machine) abort(reason error) {
	resume := m.highestRecorded()
	m.undecided = nil
	m.commits = slices.DeleteFunc(m.commits, func(c *commitEpoch) bool { return c.persistID == 0 })
	m.lastDecided = resume
	ae := &AbortError{Resume: resume, Reason: reason}
	m.logf("abort after epoch %d: %v", resume, reason)
	for _, w := range m.sortedWriters() {
		if w.role == roleAborted || (w.role == roleRetired && !m.owesPayload(w.id) && w.lastEpoch <= resume) {
			continue
		}
		w.role = roleAborted
		m.send(Message{To: w.id, Type: MsgAbort, Resume: resume, Err: ae})
	}
}

func (m *Machine) tick() {
	m.now++
	if m.cfg.BarrierInterval > 0 && m.now%m.cfg.BarrierInterval == 0 {
		for _, w := range m.sortedWriters() {
			if w.role == roleActive && w.welcomed {
				m.send(Message{To: w.id, Type: MsgBarrier, Epoch: m.lastDecided + 1})
			}
		}
	}
	for _, e := range m.undecided {
		if m.now-e.since >= m.cfg.AlignTimeout {
			missing := roaring.AndNot(m.all, e.covered)
			missing.AndNot(m.vacant)
			te := &TimeoutError{Epoch: e.epoch, Wait: "alignment", Ticks: m.now - e.since, Missing: missing}
			for _, w := range m.sortedWriters() {
				if _, ok := e.reports[w.id]; !ok && w.role == roleActive {
					te.Writers = append(te.Writers, WriterVnodes{Writer: w.id, Vnodes: w.vnodes})
				}
			}
			m.abort(te)
			return
		}
	}
	for _, c := range m.commits {
		if c.missing > 0 && m.now-c.since >= m.cfg.PayloadTimeout {
			te := &TimeoutError{Epoch: c.epoch, Wait: "payloads", Ticks: m.now - c.since, Missing: roaring.New()}
			for _, p := range c.parts {
				if !p.have {
					te.Missing.Or(p.vnodes)
					te.Writers = append(te.Writers, WriterVnodes{Writer: p.writer, Vnodes: p.vnodes})
				}
			}
			m.abort(te)
			return
		}
	}
	for _, w := range m.sortedWriters() {
		if w.role == rolePending && m.now-w.since >= m.cfg.RescaleTimeout {
			delete(m.writers, w.id)
			m.refuse(w.id, &TimeoutError{Epoch: m.lastDecided + 1, Wait: "rescale", Ticks: m.now - w.since})
		}
	}
}

// HasReady reports whether Ready has duties for the caller.
func (m *Machine) HasReady() bool {
	return len(m.msgs) > 0 || (m.failed == nil && (m.dirty || m.nextCommit() != nil))
}

// nextCommit is the commit to start now, if any: the oldest epoch, recorded,
// nothing running, not waiting for a retry.
func (m *Machine) nextCommit() *commitEpoch {
	if len(m.commits) == 0 {
		return nil
	}
	c := m.commits[0]
	if c.running || !c.complete || (c.persistID == 0 && !m.dirty) || m.now < c.retryAt {
		return nil
	}
	return c
}

// Ready returns the caller's duties (see Ready for their order). The caller
// must call Advance when it has done them, before the next Step.
func (m *Machine) Ready() Ready {
	if m.readyOut {
		panic("coordinator: Ready called twice without Advance")
	}
	m.readyOut = true
	var rd Ready
	m.lastReadyCommit, m.lastReadySnap = nil, 0
	if m.failed == nil {
		if m.dirty {
			m.snapID++
			rd.Persist = &Snapshot{ID: m.snapID, State: EncodeState(m.durableState())}
			for _, c := range m.commits {
				if c.complete && c.persistID == 0 {
					c.persistID = m.snapID
				}
			}
			m.dirty = false
			m.lastReadySnap = m.snapID
		}
		if c := m.nextCommit(); c != nil {
			c.running = true
			c.attempts++
			req := &CommitRequest{Epoch: c.epoch, Attempt: c.attempts}
			for _, p := range c.parts {
				req.Payloads = append(req.Payloads, p.payload)
			}
			rd.Commit = req
			m.lastReadyCommit = c
		}
	}
	rd.Messages, m.msgs = m.msgs, nil
	return rd
}

// Advance acknowledges that the duties of the last Ready were done.
func (m *Machine) Advance() {
	if !m.readyOut {
		panic("coordinator: Advance called without Ready")
	}
	m.readyOut = false
}

func (m *Machine) durableState() State {
	s := State{LastCommitted: m.lastCommitted}
	for _, w := range m.sortedWriters() {
		if w.role == roleActive {
			s.Writers = append(s.Writers, WriterVnodes{Writer: w.id, Vnodes: w.vnodes})
		}
	}
	for _, c := range m.commits {
		if !c.complete {
			break
		}
		e := RecordedEpoch{Epoch: c.epoch}
		for _, p := range c.parts {
			e.Parts = append(e.Parts, EpochPart{Writer: p.writer, Vnodes: p.vnodes, Payload: p.payload})
		}
		s.Epochs = append(s.Epochs, e)
	}
	return s
}

// Status returns a view of the machine.
func (m *Machine) Status() Status {
	s := Status{LastCommitted: m.lastCommitted, LastDecided: m.lastDecided, Failed: m.failed}
	for _, c := range m.commits {
		if c.persistID != 0 {
			s.Recorded = append(s.Recorded, c.epoch)
		}
		if c.running {
			s.Committing = c.epoch
		}
	}
	for _, e := range m.undecided {
		s.Undecided = append(s.Undecided, e.epoch)
	}
	// Held vnodes are gathered first and taken out of the rest at once: a
	// database's hundreds of writers, taken out one by one, made Status a
	// twentieth of a 200-table run's CPU.
	held := []*roaring.Bitmap{m.vacant}
	for _, w := range m.sortedWriters() {
		switch w.role {
		case roleActive:
			held = append(held, w.vnodes)
			s.Writers = append(s.Writers, WriterVnodes{Writer: w.id, Vnodes: w.vnodes})
		case rolePending:
			s.Pending = append(s.Pending, WriterVnodes{Writer: w.id, Vnodes: w.vnodes})
		case roleRetired:
			// Ended its input and waits for its last result: its vnodes
			// are not waiting for a writer.
			held = append(held, w.vnodes)
		}
	}
	s.Missing = roaring.AndNot(m.all, roaring.FastOr(held...))
	return s
}

// sortedWriters returns the writers ordered by lowest vnode, then id, so that
// everything the machine emits is deterministic.
func (m *Machine) sortedWriters() []*writer {
	ws := make([]*writer, 0, len(m.writers))
	for _, w := range m.writers {
		ws = append(ws, w)
	}
	sortByVnode(ws)
	return ws
}

func sortByVnode(ws []*writer) {
	slices.SortFunc(ws, func(a, b *writer) int {
		if c := cmp.Compare(a.vnodes.Minimum(), b.vnodes.Minimum()); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
}

// JobDiff lists, key by key, where a writer's job differs from the one
// the coordinator holds (have); "" when they agree on every key both know.
func JobDiff(have, writer map[string]string) string {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(writer)) {
		if v, ok := have[k]; ok && v != writer[k] {
			diffs = append(diffs, fmt.Sprintf("%s %q, the coordinator's %q", k, writer[k], v))
		}
	}
	return strings.Join(diffs, "; ")
}
