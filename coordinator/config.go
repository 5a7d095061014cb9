package coordinator

import (
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
)

// Config tunes the state machine. Durations are in ticks: the caller decides
// how long a tick is (the driver's default is 100ms). The zero value of each
// field means its default.
type Config struct {
	// Vnodes is the number of vnodes the key space is split into; every
	// registration must cover part of [0, Vnodes). Default: 256.
	Vnodes int
	// CommitInterval makes every epoch divisible by it a commit epoch (all
	// writers count the same barriers). Default: 1 (every checkpoint).
	CommitInterval uint64
	// CommitBytes, when positive, also makes an epoch a commit epoch when the
	// buffered bytes reported by all its writers add up to at least this.
	// Default: 0 (off).
	CommitBytes int64
	// AlignTimeout is how long an epoch may wait, from its first report, for
	// all vnodes to be reported. Default: 600.
	AlignTimeout int
	// PayloadTimeout is how long a commit epoch may wait, from its decision,
	// for the payloads of all its writers. Default: 600.
	PayloadTimeout int
	// RescaleTimeout is how long a rescale registration may wait for its
	// epoch boundary before it is refused. Default: 600.
	RescaleTimeout int
	// CommitAttempts is how many times an epoch's commit is tried before the
	// coordinator gives up and fails (the epoch stays recorded for recovery).
	// Default: 4.
	CommitAttempts int
	// CommitBackoff is the wait before the first retry of a failed commit;
	// it doubles with each further retry. Default: 10.
	CommitBackoff int
	// BarrierInterval, when positive, makes the coordinator drive the
	// epochs: every so many ticks it asks every live writer to end the
	// lowest undecided epoch (MsgBarrier), so that writers whose inputs
	// share no line numbers (a Kafka topic's partitions) end each epoch
	// together. Writers that end epochs on their own ignore it. Default: 0
	// (off).
	BarrierInterval int
	// Job identifies what this coordinator commits (table UUID, schema,
	// sink id, ...): a writer whose Register.Job gives another value for
	// any of these keys is refused at join, before it writes a file. Keys
	// the coordinator does not know (a writer-side setting such as its
	// checkpoint interval) are taken from the first writer that joins and
	// then bind every later one. Default: empty.
	Job map[string]string
	// Vacant, when set, lists vnodes no writer needs to hold: an epoch
	// aligns once its reports and the vacant vnodes together cover every
	// vnode. A registration takes its vnodes out of it; Vacate gives them
	// back once their writers have left. It is for a job whose members
	// come and go (a database's tables, each a range of vnodes, joining
	// at an epoch boundary and leaving when they stop). The set is not
	// saved: a restart starts from this one. Default: none.
	Vacant *roaring.Bitmap
	// After is the epoch a job starts after when no saved state says
	// more: the last committed epoch becomes at least After once the
	// recovered epochs are committed (the tables of a database that
	// joined one coordinator with epochs of their own). Default: 0.
	After uint64
	// Logf, if set, receives one line per decision the machine takes
	// (alignment, commit, abort). Default: no logging.
	Logf func(format string, args ...any)
}

// withDefaults returns a copy of c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Vnodes == 0 {
		c.Vnodes = DefaultVnodes
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 1
	}
	if c.AlignTimeout == 0 {
		c.AlignTimeout = 600
	}
	if c.PayloadTimeout == 0 {
		c.PayloadTimeout = 600
	}
	if c.RescaleTimeout == 0 {
		c.RescaleTimeout = 600
	}
	if c.CommitAttempts == 0 {
		c.CommitAttempts = 4
	}
	if c.CommitBackoff == 0 {
		c.CommitBackoff = 10
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Vnodes < 1 || c.Vnodes > 1<<20:
		return fmt.Errorf("coordinator: config: Vnodes %d out of range [1, %d]", c.Vnodes, 1<<20)
	case c.CommitBytes < 0:
		return fmt.Errorf("coordinator: config: negative CommitBytes %d", c.CommitBytes)
	case c.AlignTimeout < 0 || c.PayloadTimeout < 0 || c.BarrierInterval < 0 || c.RescaleTimeout < 0 || c.CommitBackoff < 0:
		return fmt.Errorf("coordinator: config: negative tick count")
	case c.CommitAttempts < 0:
		return fmt.Errorf("coordinator: config: negative CommitAttempts %d", c.CommitAttempts)
	case c.Vacant != nil && !c.Vacant.IsEmpty() && c.Vacant.Maximum() >= uint32(c.Vnodes):
		return fmt.Errorf("coordinator: config: vacant vnodes %s reach past %d", FormatVnodes(c.Vacant), c.Vnodes-1)
	}
	return nil
}
