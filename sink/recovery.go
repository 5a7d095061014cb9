package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/warehouse"
)

// identified is a Source that fingerprints the input it read
// (changelog.Decoder).
type identified interface {
	Identity() string
	IdentityOf(n int) string
}

// inputID is what a checkpoint of src records as its input's identity.
func inputID(cfg Config, src Source) string {
	if cfg.InputID != "" {
		return "user:" + cfg.InputID
	}
	if id, ok := src.(identified); ok {
		return id.Identity()
	}
	return ""
}

// checkInput refuses to resume from start with an input other than the
// one start's commits came from.
func checkInput(cfg Config, src Source, start Position) error {
	if start.InputID == "" {
		return nil // recorded before identities were
	}
	var have string
	if rest, ok := strings.CutPrefix(start.InputID, "user:"); ok {
		if cfg.InputID == "" || cfg.InputID == rest {
			return nil // named before and not now: the rerun is trusted
		}
		have = "user:" + cfg.InputID
	} else {
		id, ok := src.(identified)
		if !ok {
			return nil
		}
		n, _, _ := strings.Cut(start.InputID, ":")
		size, err := strconv.Atoi(n)
		if err != nil {
			return nil
		}
		if have = id.IdentityOf(size); have == start.InputID {
			return nil
		}
	}
	return fmt.Errorf("the input is not the one sink %q committed its first %d lines from (recorded input %s, this input %s): "+
		"to write this input as a new stream, give another --sink-id; to continue, give the same input",
		cfg.SinkID, start.Line, start.InputID, cmp.Or(have, "shorter than the recorded part"))
}

// Resume returns the position the table holds for the sink: its last
// committed epoch and the input lines that epoch covers.
func Resume(ctx context.Context, cfg Config) (Position, error) {
	cfg = cfg.withDefaults()
	if err := warehouse.CheckName(cfg.SinkID); err != nil {
		return Position{}, fmt.Errorf("sink id: %w", err)
	}
	cm, err := commit.NewCommitter(ctx, cfg.Loader, cfg.Ident, cfg.SinkID)
	if err != nil {
		return Position{}, err
	}
	return positionOf(cm)
}

func positionOf(cm *commit.Committer) (Position, error) {
	last, ok := cm.Last()
	if !ok {
		if last.RolledBack > 0 {
			return Position{}, fmt.Errorf("table %v was rolled back past every epoch of sink %q it still has a snapshot of (its newest was epoch %d): which of the sink's older epochs it holds is unknown; "+
				"to write the input again from its start, give another --sink-id", cm.Table().Identifier(), cm.SinkID(), last.RolledBack)
		}
		return Position{}, nil
	}
	line, err := strconv.ParseInt(last.Properties[commit.PropInputPosition], 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("snapshot %d of table %v has no valid %s: %w", last.SnapshotID, cm.Table().Identifier(), commit.PropInputPosition, err)
	}
	pos := Position{Epoch: last.Epoch, Line: line, InputID: last.Properties[commit.PropInputID], RolledBack: last.RolledBack}
	for k, v := range last.Properties {
		if strings.HasPrefix(k, commit.PropOffsetPrefix) {
			if pos.Offsets == nil {
				pos.Offsets = map[string]string{}
			}
			pos.Offsets[k] = v
		}
	}
	return pos, nil
}

// checkRecorded refuses a state store whose recorded, uncommitted epochs
// hold payloads the committer must not commit (another table's files, or
// another sink's), before the coordinator would commit them on recovery.
// A recorded epoch whose key-indexed deletes another writer's later change
// of the table made stale (commit.ErrForeignChange) is dropped, with the
// epochs after it, from the state: its lines are written again from the
// input by writers whose key index is rebuilt from the table (its files
// are left as orphans, which an in-process run removes).
func checkRecorded(ctx context.Context, store coordinator.StateStore, cm *commit.Committer, log *slog.Logger) error {
	id, b, err := store.Latest(ctx)
	if errors.Is(err, coordinator.ErrNoState) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := coordinator.DecodeState(b)
	if err != nil {
		return err
	}
	if last, _ := cm.Last(); last.RolledBack > 0 {
		// The table was rolled back: recorded epochs were written on top
		// of a table that is gone, after input the table no longer holds.
		i := slices.IndexFunc(st.Epochs, func(e coordinator.RecordedEpoch) bool { return e.Epoch > st.LastCommitted })
		if i < 0 {
			return nil
		}
		dropped := st.Epochs[i:]
		st.Epochs = st.Epochs[:i]
		if err := store.Save(ctx, id+1, coordinator.EncodeState(st)); err != nil {
			return fmt.Errorf("dropping recorded epochs after a rollback: %w", err)
		}
		log.Warn("sink: recorded epochs dropped: the table was rolled back; their input is written again", "epochs", fmt.Sprintf("%d-%d", dropped[0].Epoch, dropped[len(dropped)-1].Epoch), "rolled-back-past", last.RolledBack)
		return nil
	}
	for i, e := range st.Epochs {
		if e.Epoch <= st.LastCommitted {
			continue
		}
		var ps []commit.Payload
		for _, part := range e.Parts {
			if len(part.Payload) == 0 {
				continue
			}
			p, err := commit.UnmarshalPayload(part.Payload)
			if err != nil {
				return fmt.Errorf("recorded epoch %d: %w", e.Epoch, err)
			}
			if err := cm.CheckPayload(&p); err != nil {
				return fmt.Errorf("recorded epoch %d: %w", e.Epoch, err)
			}
			ps = append(ps, p)
		}
		if err := cm.CheckKeyIndexed(ps); errors.Is(err, commit.ErrForeignChange) {
			dropped := st.Epochs[i:]
			st.Epochs = st.Epochs[:i]
			if err := store.Save(ctx, id+1, coordinator.EncodeState(st)); err != nil {
				return fmt.Errorf("dropping recorded epochs after a foreign change: %w", err)
			}
			log.Warn("sink: recorded epochs dropped; their input is written again", "epochs", fmt.Sprintf("%d-%d", dropped[0].Epoch, dropped[len(dropped)-1].Epoch), "reason", err)
			return nil
		} else if err != nil {
			return fmt.Errorf("recorded epoch %d: %w", e.Epoch, err)
		}
	}
	return nil
}
