package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
)

func newNode(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Look after a node's own files (the Raft log its members share)",
	}
	prune := onStoppedNode(g, &cobra.Command{
		Use:   "prune --config FILE --node NAME [--commit]",
		Short: "Drop from a stopped node's Raft log the groups no member data directory names; without --commit, print what it would drop",
		Long: "A node's members share one Raft log (DATA_DIR/nodelog). The entries of a member that left the node, or whose data\n" +
			"directory was made anew, stay in it and keep its files. prune lists every group of the log with the member\n" +
			"data directory that names it, and with --commit deletes the entries of the groups none names. A group a data\n" +
			"directory names is never touched: delete the directory of a member moved elsewhere first. The node must be\n" +
			"stopped (the log is locked while it runs), and with --commit every member the cluster file places on it must\n" +
			"have its data directory (a missing one, say an unmounted disk, stops the prune before anything is dropped).",
	}, "groups", "drop the groups no member data directory names (default: only print them)", keeper.PruneNodeLog, printNodeLog)
	adopt := onStoppedNode(g, &cobra.Command{
		Use:   "adopt --config FILE --node NAME [--commit]",
		Short: "Move into a stopped node's Raft log the logs its members keep on their own; without --commit, print where each member's log is",
		Long: "A member data directory made before the node log (or by a member process) keeps its own Raft log (raft-wal, bolt,\n" +
			"or a node log of its own) when a node hosts it: one fdatasync per member instead of one for the node. adopt lists\n" +
			"each member the cluster file places on the node with its log store, and with --commit copies each log of its own\n" +
			"into the node log, points the data directory at it and removes the old log. After a crash, run adopt again: a move cut short\n" +
			"before the directory was pointed at the copy is made anew (prune drops the old copy), one cut short after it\n" +
			"removes the old log. The node must be stopped, and keeper.log_store unset or node.",
	}, "members", "move the logs (default: only print where they are)", keeper.AdoptMemberLogs, printMemberLogs)
	clearFailure := onStoppedNode(g, &cobra.Command{
		Use:   "clear-failure --config FILE --node NAME [--commit]",
		Short: "Let a stopped node whose Raft log failed a write start again, once its disk is checked; without --commit, print the failure",
		Long: "A write or fdatasync of a node's Raft log that fails leaves a record (DATA_DIR/nodelog/write-failed), and the node\n" +
			"refuses to start while it is there: what the failed write carried may still read back from the page cache without\n" +
			"being on disk. Check the disk first (kernel log, SMART, free space); clear-failure prints the record and with\n" +
			"--commit deletes it. If the disk lost entries, Raft's checks on start and the peers' copies are what remain: on\n" +
			"a disk you do not trust, wipe the member instead (member remove, then serve --join on a new directory).",
	}, "failures", "delete the record of the failed write (default: only print it)", keeper.ClearNodeLogFailure, printNodeLogFailures)
	cmd.AddCommand(prune, adopt, clearFailure)
	return cmd
}

// onStoppedNode completes cmd, a node subcommand with --node and
// --commit: it runs do, and prints what do returns as JSON under key or
// as text with print (in text, also what it did before an error).
func onStoppedNode[T any](g *globals, cmd *cobra.Command, key, commitHelp string,
	do func(*config.Cluster, string, bool, *slog.Logger) ([]T, error), print func(io.Writer, string, bool, []T)) *cobra.Command {
	var (
		name   string
		commit bool
	)
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.loadCluster()
		if err != nil {
			return err
		}
		if name == "" {
			return usage(fmt.Errorf("--node is required"))
		}
		done, err := do(c, name, commit, slog.Default())
		switch {
		case err != nil:
			if len(done) > 0 && g.format != "json" {
				print(cmd.OutOrStdout(), name, commit, done)
			}
			return err
		case g.format == "json":
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"node": name, "committed": commit, key: done})
		}
		print(cmd.OutOrStdout(), name, commit, done)
		return nil
	}
	cmd.Flags().StringVar(&name, "node", "", "node name from the cluster file")
	cmd.Flags().BoolVar(&commit, "commit", false, commitHelp)
	return cmd
}

func printMemberLogs(w io.Writer, name string, commit bool, members []keeper.MemberLog) {
	fmt.Fprintf(w, "node %s, members' Raft logs:\n", name)
	own := 0
	for _, m := range members {
		var state string
		switch {
		case m.Moved:
			state = fmt.Sprintf("moved %d entries from its own %s log into the node log", m.Entries, m.Store)
		case m.Store == "":
			state = "never started"
		case m.Store == "node" && !m.Own:
			state = "in the node log"
		default:
			state = fmt.Sprintf("its own %s log, %d entries: would be moved", m.Store, m.Entries)
			own++
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", m.Member, m.DataDir, state)
	}
	if own > 0 && !commit {
		fmt.Fprintf(w, "%d logs to move; run again with --commit to move them\n", own)
	}
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

func printNodeLogFailures(w io.Writer, name string, commit bool, failures []keeper.NodeLogFailure) {
	if len(failures) == 0 {
		fmt.Fprintf(w, "node %s: its Raft log records no failed write\n", name)
		return
	}
	for _, f := range failures {
		fmt.Fprintf(w, "node %s: a write of its Raft log failed: %s\n", name, f.Note)
		if f.Cleared {
			fmt.Fprintf(w, "cleared (deleted %s): the node starts again\n", f.File)
		} else if !commit {
			fmt.Fprintf(w, "check the disk, then run again with --commit to delete %s\n", f.File)
		}
	}
}
