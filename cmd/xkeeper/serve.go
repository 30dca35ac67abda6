package main

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/monitor"
)

func newServe(g *globals) *cobra.Command {
	var member string
	cmd := &cobra.Command{
		Use:         "serve --config FILE --member ID",
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
			shard, self, err := c.Member(member)
			if err != nil {
				return usage(err)
			}
			keeper.TuneGC(c.Keeper)
			m, err := keeper.Start(c, member, keeper.Options{})
			if err != nil {
				return err
			}
			slog.Info("serving", "member", member, "client_addr", m.Server.Addr())
			if self.HTTPAddr != "" {
				stop, at, err := monitor.Serve(self.HTTPAddr, monitor.New(m, shard.Name, c.Keeper.ElectionTimeout), slog.Default())
				if err != nil {
					m.Close()
					return err
				}
				defer stop()
				slog.Info("metrics at http://"+at.String()+"/metrics", "member", member)
			}
			waitSignal()
			slog.Info("shutting down", "member", member)
			return m.Close()
		},
	}
	cmd.Flags().StringVar(&member, "member", "", "member id from the cluster file")
	return cmd
}

// waitSignal blocks until SIGINT or SIGTERM.
func waitSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
	signal.Stop(ch)
}
