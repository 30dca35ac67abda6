package main

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/monitor"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
)

func newServe(g *globals) *cobra.Command {
	var (
		member string
		join   bool
	)
	cmd := &cobra.Command{
		Use:         "serve --config FILE --member ID [--join]",
		Annotations: map[string]string{annotationServes: "yes"},
		Short:       "Run one keeper member until SIGTERM",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.needConfig(); err != nil {
				return err
			}
			if member == "" {
				return usage(errors.New("--member ID is required"))
			}
			c, err := g.loadCluster()
			if err != nil {
				return err
			}
			if _, _, err := c.Member(member); err != nil {
				return usage(err)
			}
			keeper.TuneGC(c.Keeper)
			_, stop, err := startMember(c, member, keeper.Options{Join: join})
			if err != nil {
				return err
			}
			waitSignal()
			slog.Info("shutting down", "member", member)
			return stop()
		},
	}
	cmd.Flags().StringVar(&member, "member", "", "member id from the cluster file")
	cmd.Flags().BoolVar(&join, "join", false, "a new member of a running shard: wait for `xkeeper member add` instead of bootstrapping the shard")
	return cmd
}

// startMember starts member id of c and, if it has an http_addr, its
// monitor; stop closes both.
func startMember(c *config.Cluster, id string, opts keeper.Options) (m *keeper.Member, stop func() error, err error) {
	shard, self, err := c.Member(id)
	if err != nil {
		return nil, nil, err
	}
	m, err = keeper.Start(c, id, opts)
	if err != nil {
		return nil, nil, err
	}
	slog.Info("serving", "member", id, "client_addr", m.Server.Addr())
	if self.HTTPAddr == "" {
		return m, m.Close, nil
	}
	stopMonitor, at, err := monitor.Serve(self.HTTPAddr, monitor.New(m, shard.Name, c.Keeper.ElectionTimeout, workflowGauges()...), slog.Default())
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	slog.Info("metrics at http://"+at.String()+"/metrics", "member", id)
	return m, func() error { stopMonitor(); return m.Close() }, nil
}

// waitSignal blocks until SIGINT or SIGTERM.
func waitSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
	signal.Stop(ch)
}

// workflowGauges are the partition moves and the S3 catalog as a member
// sees them in its shard's znodes.
func workflowGauges() []monitor.DirGauge {
	return []monitor.DirGauge{
		{Name: "xkeeper_moves_in_flight", Help: "Partition moves in flight recorded on this shard.", Dir: movepart.MovesDir, Depth: 1},
		{Name: "xkeeper_move_locks", Help: "Table partitions locked by moves in flight on this shard.", Dir: movepart.LocksDir, Depth: 1},
		{Name: "xkeeper_moves_journal", Help: "Finished moves kept in this shard's journal.", Dir: movepart.JournalDir, Depth: 1},
		{Name: "xkeeper_s3_objects", Help: "S3 objects of the catalog homed on this shard.", Dir: objects.ObjectsDir, Depth: 2},
		{Name: "xkeeper_s3_references", Help: "References of table part files to S3 objects kept on this shard.", Dir: objects.RefsDir, Depth: 3},
	}
}
