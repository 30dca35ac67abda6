package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Backup writes to w a backup of the shard holding every write committed
// before the call: a barrier through the log first, then a snapshot of
// the state this member has applied. The snapshot is taken at once (the
// tree is shared copy-on-write), so writes go on while it streams.
func (r *Replica) Backup(w io.Writer) (backup.Header, error) {
	zxid, code := r.Barrier()
	if code != proto.ErrOK {
		return backup.Header{}, fmt.Errorf("replica: no barrier through the log (%v): is the shard's quorum up?", code)
	}
	if !r.WaitApplied(zxid, r.leaderWait(), nil) {
		return backup.Header{}, errors.New("replica: this member did not catch up with the barrier in time")
	}
	r.mu.Lock()
	snap := r.state.Snapshot()
	r.mu.Unlock()
	h := backup.Header{Shard: r.cfg.Shard, Member: r.cfg.ID, Zxid: snap.Zxid(), OfficialTime: snap.Time(),
		Taken: r.cfg.Clock().UTC()}
	return h, backup.Write(w, h, snap)
}

// BackupMagic opens, on a member's client port, a member's link that asks
// for a backup: after the link authenticates, the member answers one byte,
// 0 and the backup or 1 and why it cannot, and closes the link.
const BackupMagic = "xkbk"

// ErrNotEmpty is returned by Seed for a data directory that already holds
// a member.
var ErrNotEmpty = errors.New("replica: the data directory already holds a member's data")

// Seed builds a new member's data directory from a restored state machine
// snapshot: the snapshot becomes the first entry of a new shard whose
// members are cfg.Peers and whose identity is identity, so the member
// starts serving that state and never joins the shard the backup came
// from. cfg.DataDir must hold no member yet.
func Seed(cfg Config, identity string, snapshot io.Reader) error {
	if has, err := holdsMember(cfg.DataDir); err != nil || has {
		if err == nil {
			err = fmt.Errorf("%w: %s (restore into empty data directories; move this one aside first)", ErrNotEmpty, cfg.DataDir)
		}
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// A restored member's log starts empty. A store the configuration
	// names is claimed now; otherwise the member claims the default when it
	// first starts, which is the node's log on a node (restore runs with no
	// node log open, so it cannot name the member's group there).
	if store := cfg.LogStore; store != "" && store != LogStoreNode {
		if err := claimLogStore(cfg.DataDir, store, nil); err != nil {
			return err
		}
	}
	if err := recordIdentity(cfg.DataDir, identity); err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, newHclog(cfg.Logger, "snapshot"))
	if err != nil {
		return err
	}
	_, trans := raft.NewInmemTransport("") // only encodes the peers' addresses
	sink, err := snaps.Create(raft.SnapshotVersionMax, 1, 1, configuration(cfg.Peers), 1, trans)
	if err != nil {
		return err
	}
	if _, err := io.Copy(sink, snapshot); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// holdsMember reports whether dir holds any of a member's state.
func holdsMember(dir string) (bool, error) {
	for _, name := range []string{logStoreMarker, boltFile, walDir, identityFile, joinMarker, "snapshots"} {
		_, err := os.Stat(filepath.Join(dir, name))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	return false, nil
}
