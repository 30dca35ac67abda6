package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/zkimport"
)

func newImport(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Bring another keeper's data over to xkeeper",
	}
	var (
		snapDir, logDir, servers, out string
		timeout                       time.Duration
		allowGaps                     bool
	)
	zk := &cobra.Command{
		Use:   "zookeeper (--snapshot-dir DIR [--log-dir DIR] | --servers H:P,...) --out BACKUP",
		Short: "Read Apache ZooKeeper's data (its files, or a running server) into a backup for `xkeeper snapshot restore`",
		Long: "With --snapshot-dir, reads a stopped ZooKeeper's newest snapshot and replays the transaction logs after it " +
			"(--log-dir, default the same directory; ZooKeeper's dataDir and dataLogDir, or their version-2), as ZooKeeper does " +
			"on start. With --servers, copies a running ZooKeeper's tree through its client protocol (small trees; stop its " +
			"writers first). Every znode comes over with its data, stat and ACL; ephemerals are dropped, as their sessions' " +
			"expiry would drop them after a restart. Then: xkeeper snapshot restore --config FILE --shard S BACKUP.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (snapDir == "") == (servers == "") {
				return usage(fmt.Errorf("give --snapshot-dir or --servers, one of them"))
			}
			if out == "" {
				return usage(fmt.Errorf("--out BACKUP is required"))
			}
			start := time.Now()
			var (
				st  *fsm.State
				sum zkimport.Summary
				err error
			)
			if snapDir != "" {
				st, sum, err = zkimport.FromDataDir(snapDir, cmp.Or(logDir, snapDir), zkimport.Options{AllowGaps: allowGaps})
			} else {
				st, sum, err = importLive(cmd, g, strings.Split(servers, ","), timeout)
			}
			if err != nil {
				return err
			}
			h := backup.Header{Zxid: st.Zxid(), OfficialTime: st.Time(), Taken: time.Now().UTC(), Member: "zookeeper import"}
			size, err := writeFileAtomic(out, func(w io.Writer) error { return backup.Write(w, h, st.Snapshot()) })
			if err != nil {
				return err
			}
			took := time.Since(start)
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"file": out, "bytes": size,
					"seconds": took.Seconds(), "summary": sum})
			}
			w := cmd.OutOrStdout()
			if sum.Snapshot != "" {
				fmt.Fprintf(w, "read %s (zxid %#x) and %d transactions from %d logs", sum.Snapshot, sum.SnapshotZxid, sum.Transactions, sum.Logs)
				if sum.TornTail {
					fmt.Fprint(w, " (the last log ended in an incomplete record, as after a crash: ignored)")
				}
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "imported %d znodes up to zxid %#x into %s (%d bytes) in %s; %d ephemerals dropped, %d TTL znodes kept as persistent\n",
				sum.Znodes, sum.LastZxid, out, size, took.Round(time.Millisecond), sum.Ephemerals, sum.TTL)
			fmt.Fprintf(w, "next: xkeeper snapshot restore --config FILE --shard S %s\n", out)
			return nil
		},
	}
	f := zk.Flags()
	f.StringVar(&snapDir, "snapshot-dir", "", "a stopped ZooKeeper's dataDir")
	f.StringVar(&logDir, "log-dir", "", "its dataLogDir (default the snapshot directory)")
	f.BoolVar(&allowGaps, "allow-missing-logs", false, "import even when transactions are missing after the snapshot (no transaction log, or one missing "+
		"between others): the writes they held are lost; without it such an import is refused")
	f.StringVar(&servers, "servers", "", "a running ZooKeeper's host:port list, to copy through the client protocol")
	f.StringVar(&out, "out", "", "the backup file to write")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "with --servers: give up after this long")
	cmd.AddCommand(zk)
	return cmd
}

// importLive copies a running ZooKeeper's tree, with the --auth identity.
func importLive(cmd *cobra.Command, g *globals, servers []string, timeout time.Duration) (*fsm.State, zkimport.Summary, error) {
	opts, err := g.clientOptions(nil)
	if err != nil {
		return nil, zkimport.Summary{}, err
	}
	ctx, cancel := contextWithTimeout(cmd, timeout)
	defer cancel()
	c, err := client.Connect(ctx, servers, opts...)
	if err != nil {
		return nil, zkimport.Summary{}, err
	}
	defer c.Close()
	return zkimport.FromServer(ctx, c)
}
