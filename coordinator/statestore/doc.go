// Package statestore checkpoints the coordinator's state: an opaque []byte
// (pending pre-commit payloads per epoch, writer registry, last committed
// epoch) that the coordinator encodes itself and that can reach hundreds of
// MB when a commit window holds thousands of files.
//
// Each checkpoint is a directory STATE_DIR/chk-<id>/ holding a small
// _metadata file and, when the state is large, one state file beside it
// (the layout and both format versions are drawn in format.go). States of
// at most Options.InlineThreshold bytes (coordinator-state-inline-threshold,
// default 20 KiB) are stored inline in _metadata (format V1). Larger states
// go to their own file and _metadata holds a handle to it (format V2), but
// only when Options.InFileEnabled (coordinator-state-in-file.enabled) is
// set; it is off by default, so that by default every checkpoint stays
// readable by a release without the feature, which rejects a V2 checkpoint
// with a *VersionError instead of misreading it.
//
// The store retains the newest Options.Retain checkpoints (default 3). For
// an inline one it keeps the bytes in memory; for one in a file, only its
// FileHandle. Disposing of a checkpoint deletes its state file too, and Open
// sweeps whatever a crash left behind.
//
// # Usage
//
// The coordinator's driver (not the deterministic coordinator core, which
// does no I/O) owns the store:
//
//  1. Open the store at start-up. Open loads the retained checkpoints'
//     _metadata and removes orphans.
//  2. To recover, start a restore off the event loop with a Restorer and
//     feed the result into the coordinator when it arrives on Results. A
//     later restore supersedes an earlier one; closing stops it. Only the
//     latest restore's result is delivered; compare RestoreResult.Seq with
//     the value Restore returned.
//  3. On every checkpoint, Save (or Checkpoint) the coordinator's encoded
//     state. It returns once the checkpoint is durable; only then may the
//     checkpoint be acknowledged.
//  4. Dispose of checkpoints the coordinator no longer needs (for example
//     once their epoch is committed); retention disposes of the rest.
//  5. Close the store when the coordinator closes; Restorer.Wait then waits
//     for stopped reads to exit.
//
// A driver loop:
//
//	st, err := statestore.Open(ctx, statestore.Options{Dir: dir, InFileEnabled: true})
//	if err != nil {
//		return err
//	}
//	defer st.Close()
//	rs := st.NewRestorer()
//	want, err := rs.RestoreLatest(ctx)
//	if err != nil {
//		return err
//	}
//	for {
//		select {
//		case res := <-rs.Results():
//			if res.Seq != want {
//				continue // a restore this loop no longer wants
//			}
//			if errors.Is(res.Err, statestore.ErrNoState) {
//				// fresh start
//			} else if res.Err != nil {
//				return res.Err
//			} else {
//				coord.Restore(res.ID, res.State)
//			}
//		case ckpt := <-checkpoints:
//			if err := st.Save(ctx, ckpt.ID, coord.EncodeState()); err != nil {
//				return err
//			}
//		}
//	}
//
// Store satisfies the coordinator's two-method StateStore interface (Save,
// Latest) directly. Its "no state" error matches ErrNoState; set
// Options.NoStateError to make it match the coordinator's sentinel as well.
//
// Errors wrap the sentinels in errors.go and name the file involved; a
// failed checksum or structure check is a *CorruptionError (ErrCorruption),
// an unknown newer format a *VersionError (ErrNewerVersion).
package statestore
