package keeper

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// SaveBackup writes a backup of the named shard to w, from the first of
// its members that can take one: every write committed before the call,
// the shard's official time and its cross-shard records. The bytes are
// checked (complete, checksum) as they pass.
func SaveBackup(ctx context.Context, c *config.Cluster, shard string, w io.Writer, log *slog.Logger) (backup.Header, error) {
	sh, err := c.Shard(shard)
	if err != nil {
		return backup.Header{}, err
	}
	auth, err := PeerAuth(c, log)
	if err != nil {
		return backup.Header{}, err
	}
	var errs []error
	for _, m := range sh.Members {
		h, started, err := saveFrom(ctx, auth, m.ClientAddr, w)
		if err == nil || started {
			return h, err
		}
		errs = append(errs, fmt.Errorf("member %s (%s): %w", m.ID, m.ClientAddr, err))
	}
	return backup.Header{}, fmt.Errorf("keeper: no member of shard %s gave a backup: %w", shard, errors.Join(errs...))
}

// saveFrom asks one member for a backup; started says whether any of it
// reached w (then another member cannot take over).
func saveFrom(ctx context.Context, auth *peerlink.Auth, addr string, w io.Writer) (backup.Header, bool, error) {
	conn, closeLink, err := dialLink(ctx, auth, addr, replica.BackupMagic)
	if err != nil {
		return backup.Header{}, false, err
	}
	defer closeLink()
	br := bufio.NewReaderSize(conn, 64<<10)
	status, err := br.ReadByte()
	if err != nil {
		return backup.Header{}, false, err
	}
	if status != 0 {
		why, _ := io.ReadAll(io.LimitReader(br, 4096))
		return backup.Header{}, false, errors.New(string(why))
	}
	r, err := backup.NewReader(io.TeeReader(br, w))
	if err != nil {
		return backup.Header{}, true, err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return r.Header, true, err
	}
	return r.Header, true, nil
}

// Restored is what RestoreBackup built.
type Restored struct {
	Header  backup.Header
	Shard   string
	Members []string // the members whose data directories it wrote
	Znodes  int
	// Identity is the restored shard's: new and random for every restore,
	// or the one RestoreBackupAs was given.
	Identity string
}

// RestoreBackup builds data directories for the named shard of the
// cluster from the backup in r: those of the members listed, or of every
// member of the shard when none is. The restored shard is a new
// incarnation: its members refuse Raft links with the shard the backup was
// saved from, even where they reuse its addresses, and never another
// restore of the same backup: each restore draws a new random identity.
// Every data directory must be empty.
func RestoreBackup(c *config.Cluster, shard string, members []string, r io.Reader, log *slog.Logger) (Restored, error) {
	return RestoreBackupAs(c, shard, members, "", r, log)
}

// RestoreBackupAs is RestoreBackup restoring members into the shard
// identity identity, that of a restore of the shard's other members run
// before (on another machine, say); with identity "", a new one, which
// needs the shard's first member among those restored: restores of some
// members only, without the identity, would give each a shard of its own.
func RestoreBackupAs(c *config.Cluster, shard string, members []string, identity string, r io.Reader, log *slog.Logger) (Restored, error) {
	sh, err := c.Shard(shard)
	if err != nil {
		return Restored{}, err
	}
	switch {
	case identity != "" && !replica.ValidIdentity(identity):
		return Restored{}, fmt.Errorf("keeper: %q is no shard identity (32 hex digits, as a restore prints it)", identity)
	case identity == "" && len(members) > 0 && !slices.Contains(members, sh.Members[0].ID):
		return Restored{}, fmt.Errorf("keeper: restoring only some members of shard %s, without the first (%s): "+
			"give the identity the restore of the shard's first member printed (--identity), or restore the first member too", sh.Name, sh.Members[0].ID)
	case identity == "":
		identity = replica.NewIdentity()
	}
	br, err := backup.NewReader(r)
	if err != nil {
		return Restored{}, err
	}
	body, err := io.ReadAll(br)
	if err != nil {
		return Restored{}, err
	}
	st, err := fsm.Restore(bytes.NewReader(body))
	if err != nil {
		return Restored{}, fmt.Errorf("keeper: the backup's snapshot does not load: %w", err)
	}
	out := Restored{Header: br.Header, Shard: sh.Name, Znodes: st.NodeCount(), Identity: identity}
	peers := peersOf(sh)
	if len(members) == 0 {
		for _, m := range sh.Members {
			members = append(members, m.ID)
		}
	}
	for _, id := range members {
		msh, m, err := c.Member(id)
		if err != nil {
			return out, err
		}
		if msh.Name != sh.Name {
			return out, fmt.Errorf("keeper: member %s belongs to shard %s, not %s", id, msh.Name, sh.Name)
		}
		cfg := replica.Config{Shard: sh.Name, ID: id, DataDir: m.DataDir, Peers: peers, LogStore: c.Keeper.LogStore, Logger: log}
		owner, err := ownerOfNearest(m.DataDir)
		if err != nil {
			return out, fmt.Errorf("keeper: member %s: %w", id, err)
		}
		if err := replica.Seed(cfg, identity, bytes.NewReader(body)); err != nil {
			return out, fmt.Errorf("keeper: member %s: %w", id, err)
		}
		if err := owner.give(); err != nil {
			return out, fmt.Errorf("keeper: member %s: %w", id, err)
		}
		out.Members = append(out.Members, id)
	}
	return out, nil
}

// fileOwner is the user and group a restored data directory is for, and
// the topmost directory the restore makes (or dir itself).
type fileOwner struct {
	uid, gid int
	top      string
}

// ownerOfNearest returns the owner of dir, or of its nearest ancestor that
// exists: whoever the directory is made for (the packaged unit's user for
// /var/lib/xkeeper).
func ownerOfNearest(dir string) (fileOwner, error) {
	top := filepath.Clean(dir)
	for d := top; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return fileOwner{top: top}, nil
			}
			return fileOwner{uid: int(st.Uid), gid: int(st.Gid), top: top}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || d == filepath.Dir(d) {
			return fileOwner{}, err
		}
		top = d
	}
}

// give hands the directories the restore made, and everything in them, to
// o when this process runs as root and o is not root: a restore run as
// root then leaves directories the member's own user (the packaged unit
// runs as xkeeper) can write.
func (o fileOwner) give() error {
	if os.Geteuid() != 0 || o.uid == 0 {
		return nil
	}
	return filepath.WalkDir(o.top, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, o.uid, o.gid)
	})
}
