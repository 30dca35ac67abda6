package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

func newMember(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "List, add or remove the members of a running shard (Raft configuration changes, one at a time)",
	}
	var (
		timeout time.Duration
		shard   string
	)
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	list := &cobra.Command{
		Use:   "list --config FILE --shard S",
		Short: "The shard's replicated configuration, each member's state, and where the cluster file disagrees",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadShardCluster(shard)
			if err != nil {
				return err
			}
			ctx, cancel := contextWithTimeout(cmd, timeout)
			defer cancel()
			ms, err := keeper.ListMembers(ctx, c, shard, slog.Default())
			if err != nil {
				return err
			}
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(ms)
			}
			printMembership(cmd.OutOrStdout(), ms)
			return nil
		},
	}
	add := &cobra.Command{
		Use:   "add --config FILE ID",
		Short: "Add member ID of the cluster file to its shard: a non-voter until it caught up, then a voter (start it with serve --join first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.loadCluster()
			if err != nil {
				return err
			}
			if _, _, err := c.Member(args[0]); err != nil {
				return usage(err)
			}
			ctx, cancel := contextWithTimeout(cmd, timeout)
			defer cancel()
			st, err := keeper.AddMember(ctx, c, args[0], slog.Default())
			if err != nil {
				return err
			}
			return printChange(g, cmd.OutOrStdout(), "added "+args[0], st)
		},
	}
	remove := &cobra.Command{
		Use:   "remove --config FILE --shard S ID",
		Short: "Remove member ID from the shard's configuration (it may be dead); then stop it and drop it from the cluster file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.loadShardCluster(shard)
			if err != nil {
				return err
			}
			ctx, cancel := contextWithTimeout(cmd, timeout)
			defer cancel()
			st, err := keeper.RemoveMember(ctx, c, shard, args[0], slog.Default())
			if err != nil {
				return err
			}
			return printChange(g, cmd.OutOrStdout(), "removed "+args[0], st)
		},
	}
	list.Flags().StringVar(&shard, "shard", "", "the shard")
	remove.Flags().StringVar(&shard, "shard", "", "the shard")
	cmd.AddCommand(list, add, remove)
	return cmd
}

func printChange(g *globals, w io.Writer, what string, st replica.Status) error {
	if g.format == "json" {
		return json.NewEncoder(w).Encode(map[string]any{"done": what, "shard": st.Shard, "members": st.Members})
	}
	fmt.Fprintf(w, "%s; shard %s now has:\n", what, st.Shard)
	for _, m := range st.Members {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", m.ID, m.RaftAddr, suffrage(m.Voter))
	}
	return nil
}

func suffrage(voter bool) string {
	if voter {
		return "voter"
	}
	return "non-voter"
}

func printMembership(w io.Writer, ms keeper.Membership) {
	fmt.Fprintf(w, "shard %s, leader %s\n", ms.Shard, ms.Leader)
	for _, m := range ms.Members {
		place := "not in the replicated configuration"
		if m.Replicated != nil {
			place = m.Replicated.RaftAddr + " " + suffrage(m.Replicated.Voter)
		}
		state := "unreachable"
		if m.Status != nil {
			state = fmt.Sprintf("applied %d of %d", m.Status.Applied(), m.Status.CommitIndex)
			if m.Status.IsLeader {
				state += ", leader"
			}
			if m.Status.LogStalled {
				state += ", its Raft log write has stalled (disk not answering)"
			}
			if m.Status.LogFailed != "" {
				state += ", its last Raft log write failed: " + m.Status.LogFailed
			}
		}
		if m.Unheard {
			state += ", the leader has not heard from it within an election timeout"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", m.ID, place, state)
	}
	if len(ms.Disagreements) > 0 {
		fmt.Fprintf(w, "the cluster file disagrees:\n  %s\n", strings.Join(ms.Disagreements, "\n  "))
	}
}
