package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/keeper"
)

func newNode(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Look after a node's own files (the Raft log its members share)",
	}
	var (
		name   string
		commit bool
	)
	prune := &cobra.Command{
		Use:   "prune --config FILE --node NAME [--commit]",
		Short: "Drop from a stopped node's Raft log the groups no member data directory names; without --commit, print what it would drop",
		Long: "A node's members share one Raft log (DATA_DIR/nodelog). The entries of a member that left the node, or whose data\n" +
			"directory was made anew, stay in it and keep its files. prune lists every group of the log with the member\n" +
			"data directory that names it, and with --commit deletes the entries of the groups none names. A group a data\n" +
			"directory names is never touched: delete the directory of a member moved elsewhere first. The node must be\n" +
			"stopped (the log is locked while it runs), and with --commit every member the cluster file places on it must\n" +
			"have its data directory (a missing one, say an unmounted disk, stops the prune before anything is dropped).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadCluster()
			if err != nil {
				return err
			}
			if name == "" {
				return usage(fmt.Errorf("--node is required"))
			}
			groups, err := keeper.PruneNodeLog(c, name, commit, slog.Default())
			if err != nil {
				if len(groups) > 0 && g.format != "json" {
					printNodeLog(cmd.OutOrStdout(), name, commit, groups) // what it did before the error
				}
				return err
			}
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"node": name, "committed": commit, "groups": groups})
			}
			printNodeLog(cmd.OutOrStdout(), name, commit, groups)
			return nil
		},
	}
	prune.Flags().StringVar(&name, "node", "", "node name from the cluster file")
	prune.Flags().BoolVar(&commit, "commit", false, "drop the groups no member data directory names (default: only print them)")
	cmd.AddCommand(prune)
	return cmd
}

func printNodeLog(w io.Writer, name string, commit bool, groups []keeper.NodeLogGroup) {
	fmt.Fprintf(w, "node %s, Raft log groups:\n", name)
	orphans := 0
	for _, gr := range groups {
		state := "member directory " + gr.DataDir
		switch {
		case gr.Dropped:
			state = "named by no member directory: dropped"
		case gr.DataDir == "":
			state = "named by no member directory: would be dropped"
			orphans++
		}
		entries := "no entries"
		if gr.Last > 0 {
			entries = fmt.Sprintf("entries %d-%d", gr.First, gr.Last)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", gr.Group, entries, state)
	}
	if orphans > 0 && !commit {
		fmt.Fprintf(w, "%d groups to drop; run again with --commit to drop them\n", orphans)
	}
}
