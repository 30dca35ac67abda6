package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

func newSnapshot(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a shard from a running cluster, and restore a backup into new members",
	}
	cmd.AddCommand(newSnapshotSave(g), newSnapshotRestore(g), newSnapshotStatus(g))
	return cmd
}

func newSnapshotSave(g *globals) *cobra.Command {
	var (
		shard   string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "save --config FILE --shard S BACKUP",
		Short: "Write a consistent backup of a running shard: every write committed before the command, its official time and its cross-shard records",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.loadShardCluster(shard)
			if err != nil {
				return err
			}
			ctx, cancel := contextWithTimeout(cmd, timeout)
			defer cancel()
			start := time.Now()
			var h backup.Header
			bar := byteBar(g, "saving backup", -1)
			size, err := writeFileAtomic(args[0], func(w io.Writer) error {
				h, err = keeper.SaveBackup(ctx, c, shard, counting(w, bar), slog.Default())
				return err
			})
			finishBar(bar)
			if err != nil {
				return err
			}
			took := time.Since(start)
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"file": args[0], "bytes": size,
					"seconds": took.Seconds(), "header": h})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved shard %s at zxid %#x (official time %s) from member %s: %s, %d bytes in %s\n",
				h.Shard, h.Zxid, time.UnixMilli(h.OfficialTime).UTC().Format(time.RFC3339Nano), h.Member, args[0], size, took.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&shard, "shard", "", "the shard to back up")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}

func newSnapshotRestore(g *globals) *cobra.Command {
	var (
		shard, identity string
		members         []string
	)
	cmd := &cobra.Command{
		Use:   "restore --config FILE [--shard S] [--member ID]... [--identity ID] BACKUP",
		Short: "Build the data directories of a new shard's members from a backup; the new shard never joins the one the backup came from",
		Long: "Restore writes, for each member named (default: every member of the shard), a data directory " +
			"holding the backup as the first state of a new shard made of the shard's members in the cluster file. " +
			"Every data directory must be empty. Start the members with `xkeeper serve` afterwards. The shard " +
			"defaults to the one the backup was saved from. Each restore gives the shard a new random identity, " +
			"which it prints; members restored apart (--member, on other machines) are given it with --identity.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.loadCluster()
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return usage(err)
			}
			defer f.Close()
			if shard == "" {
				r, err := backup.NewReader(f)
				if err != nil {
					return err
				}
				shard = r.Header.Shard
				if shard == "" {
					return usage(fmt.Errorf("--shard is required: the backup (an import) names no shard"))
				}
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					return err
				}
			}
			var size int64
			if st, err := f.Stat(); err == nil {
				size = st.Size()
			}
			bar := byteBar(g, "reading backup", size)
			out, err := keeper.RestoreBackupAs(c, shard, members, identity, io.TeeReader(f, counting(io.Discard, bar)), slog.Default())
			finishBar(bar)
			if err != nil {
				return err
			}
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %d znodes of shard %s (zxid %#x) as shard %s (identity %s), members %v: start them with xkeeper serve\n",
				out.Znodes, out.Header.Shard, out.Header.Zxid, out.Shard, out.Identity, out.Members)
			if sh, err := c.Shard(out.Shard); err == nil && len(out.Members) < len(sh.Members) {
				fmt.Fprintf(cmd.OutOrStdout(), "restore the shard's other members with --identity %s\n", out.Identity)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&shard, "shard", "", "the shard of the cluster file to restore into (default: the backup's)")
	cmd.Flags().StringSliceVar(&members, "member", nil, "a member to build (repeat; default every member of the shard)")
	cmd.Flags().StringVar(&identity, "identity", "", "the restored shard's identity, as the restore of its first member printed (default: a new one)")
	return cmd
}

// backupStatus is what `snapshot status` tells about a backup.
type backupStatus struct {
	Header     backup.Header `json:"header"`
	Znodes     int           `json:"znodes"`
	Sessions   int           `json:"sessions"`
	Ephemerals int           `json:"ephemerals"`
	Pending    int           `json:"pending_transactions"`
	Records    int           `json:"transaction_records"`
}

func newSnapshotStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status BACKUP",
		Short: "Check a backup (complete, checksum, loads) and print what it holds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return usage(err)
			}
			defer f.Close()
			r, err := backup.NewReader(f)
			if err != nil {
				return err
			}
			st, err := fsm.Restore(r)
			if err != nil {
				return err
			}
			if _, err := io.Copy(io.Discard, r); err != nil { // the checksum, after the snapshot's last byte
				return err
			}
			s := backupStatus{Header: r.Header, Znodes: st.NodeCount(), Sessions: st.SessionCount(), Ephemerals: st.EphemeralCount()}
			for _, rec := range st.XRecords() {
				s.Records++
				if rec.Status == proto.XPending {
					s.Pending++
				}
			}
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(s)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backup of shard %s from member %s at zxid %#x, official time %s, taken %s\n"+
				"%d znodes, %d sessions (%d ephemerals), %d cross-shard records (%d pending); checksum ok\n",
				s.Header.Shard, s.Header.Member, s.Header.Zxid, time.UnixMilli(s.Header.OfficialTime).UTC().Format(time.RFC3339Nano),
				s.Header.Taken.Format(time.RFC3339), s.Znodes, s.Sessions, s.Ephemerals, s.Records, s.Pending)
			return nil
		},
	}
}

// writeFileAtomic writes path through fill: into a temporary file beside
// it, synced and renamed over path only once fill succeeded, so a failed
// or interrupted save leaves no partial file under the name.
func writeFileAtomic(path string, fill func(io.Writer) error) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".part-*")
	if err != nil {
		return 0, usage(err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := fill(tmp); err != nil {
		return 0, err
	}
	if err := tmp.Sync(); err != nil {
		return 0, err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	return size, os.Rename(tmp.Name(), path)
}
