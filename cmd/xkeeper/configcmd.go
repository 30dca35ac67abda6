package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
)

func newConfig(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check, print or start a cluster file",
	}
	check := &cobra.Command{
		Use:   "check --config FILE",
		Short: "Validate the cluster file (with the environment's overrides); exit 2 names every bad key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadCluster()
			if err != nil {
				return err
			}
			members := 0
			for _, sh := range c.Shards {
				members += len(sh.Members)
			}
			summary := map[string]any{"ok": true, "shards": len(c.Shards), "members": members,
				"clickhouse_servers": len(c.ClickHouse.Servers)}
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(summary)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d shards, %d members, %d ClickHouse servers\n",
				len(c.Shards), members, len(c.ClickHouse.Servers))
			return nil
		},
	}
	print := &cobra.Command{
		Use:   "print --config FILE",
		Short: "Print the effective configuration: the file with the environment's overrides and every default, secrets masked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadCluster()
			if err != nil {
				return err
			}
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(c.Masked())
			}
			return c.Masked().Encode(cmd.OutOrStdout())
		},
	}
	def := &cobra.Command{
		Use:   "default",
		Short: "Print a commented cluster file: one shard of three members on loopback, every keeper default",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.Example)
			return err
		},
	}
	cmd.AddCommand(check, print, def)
	return cmd
}
