package keeper

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

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
}

// RestoreBackup builds data directories for the named shard of the
// cluster from the backup in r: those of the members listed, or of every
// member of the shard when none is. The restored shard is a new
// incarnation: its members refuse Raft links with the shard the backup was
// saved from, even where they reuse its addresses. Every data directory
// must be empty.
func RestoreBackup(c *config.Cluster, shard string, members []string, r io.Reader, log *slog.Logger) (Restored, error) {
	sh, err := c.Shard(shard)
	if err != nil {
		return Restored{}, err
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
	out := Restored{Header: br.Header, Shard: sh.Name, Znodes: st.NodeCount()}
	peers := peersOf(sh)
	identity := replica.RestoredIdentity(sh.Name, peers, br.Sum())
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
		if err := replica.Seed(cfg, identity, bytes.NewReader(body)); err != nil {
			return out, fmt.Errorf("keeper: member %s: %w", id, err)
		}
		out.Members = append(out.Members, id)
	}
	return out, nil
}
