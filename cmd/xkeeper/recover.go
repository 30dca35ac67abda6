package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/recovery"
)

func newAudit(g *globals) *cobra.Command {
	var w workflowFlags
	cmd := &cobra.Command{
		Use:   "audit --config FILE [--all]",
		Short: "Report unfinished moves, misplaced partitions, stray locks and staging tables, in-doubt transactions",
		Long: "audit reads every keeper shard and every ClickHouse server of the cluster file and reports what a crash\n" +
			"left behind, and checks the tables against the moves finished earlier (history findings). A history\n" +
			"finding can be acknowledged (audit ack ID) and ages out after audit.journal_max_age; neither counts any\n" +
			"more, and --all lists them. Exit code 0: nothing open; 3: it found something; 1: it could not run.",
		Args: cobra.NoArgs,
		RunE: g.withMover(&w, nil, func(ctx context.Context, cmd *cobra.Command, m *movepart.Mover) error {
			rep, err := auditAndPrint(ctx, cmd, g, m)
			if err != nil {
				return err
			}
			if !rep.Clean() {
				return exitError{exitFindings, fmt.Errorf("audit found %d problems", len(rep.Open()))}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&g.all, "all", false, "also list acknowledged and aged-out findings")
	w.add(cmd, 10*time.Minute)
	cmd.AddCommand(newAuditAck(g))
	return cmd
}

func newAuditAck(g *globals) *cobra.Command {
	var w workflowFlags
	var note string
	cmd := &cobra.Command{
		Use:   "ack --config FILE ID [--note TEXT]",
		Short: "Acknowledge a history finding by its id: audits no longer count it (the keeper records who and when)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, closeAll, err := g.mover(&w, nil)
			if err != nil {
				return err
			}
			defer closeAll()
			ctx, cancel := contextWithTimeout(cmd, w.timeout)
			defer cancel()
			ack, err := recovery.Acknowledge(ctx, m, args[0], g.who(), note)
			if err != nil {
				return err
			}
			if g.format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(ack)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "acknowledged %s (by %s)\n", ack.ID, ack.By)
			return nil
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why: kept with the acknowledgement")
	w.add(cmd, 10*time.Minute)
	return cmd
}

// who names the operator for the records xkeeper keeps: the digest user
// of --auth or security.auth, else the OS user, at this host.
func (g *globals) who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if c, err := config.Load(g.config); err == nil {
		if u, _, ok := strings.Cut(cmp.Or(g.auth, c.Security.Auth), ":"); ok {
			name = u
		}
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// auditAndPrint audits the cluster and prints the report.
func auditAndPrint(ctx context.Context, cmd *cobra.Command, g *globals, m *movepart.Mover) (*recovery.Report, error) {
	rep, err := recovery.Audit(ctx, m)
	if err != nil {
		return nil, err
	}
	return rep, printReport(cmd.OutOrStdout(), g, rep)
}

func printReport(out io.Writer, g *globals, rep *recovery.Report) error {
	open := rep.Open()
	if g.format == "json" {
		return json.NewEncoder(out).Encode(struct {
			*recovery.Report
			Open int `json:"open"`
		}{rep, len(open)})
	}
	fmt.Fprintf(out, "audited %d shards, %d ClickHouse servers, %d moves in flight, %d finished moves\n",
		rep.Shards, rep.Servers, rep.Moves, rep.Journal)
	if rep.Clean() {
		fmt.Fprintln(out, "clean")
	}
	shown := open
	if g.all {
		shown = rep.Findings
	}
	for _, f := range shown {
		printFinding(out, f)
	}
	if settled := len(rep.Findings) - len(open); settled > 0 && !g.all {
		fmt.Fprintf(out, "(%d acknowledged or aged-out findings not shown: --all lists them)\n", settled)
	}
	return nil
}

func printFinding(out io.Writer, f recovery.Finding) {
	fmt.Fprintf(out, "%s: %s\n    id: %s\n", f.Kind, f.Detail, f.ID)
	switch {
	case f.Acknowledged != nil:
		fmt.Fprintf(out, "    acknowledged by %s at %s", f.Acknowledged.By, f.Acknowledged.At.Format("2006-01-02 15:04:05"))
		if f.Acknowledged.Note != "" {
			fmt.Fprintf(out, ": %s", f.Acknowledged.Note)
		}
		fmt.Fprintln(out)
	case f.AgedOut:
		fmt.Fprintln(out, "    aged out (older than audit.journal_max_age)")
	case f.History:
		fmt.Fprintln(out, "    about a finished move: fix the table by hand, or acknowledge it (xkeeper audit ack ID)")
	}
	if f.Action != "" {
		fmt.Fprintf(out, "    recover: %s\n", f.Action)
	}
}

func newRecover(g *globals) *cobra.Command {
	var w workflowFlags
	var commit bool
	var wait time.Duration
	var parallel int
	cmd := &cobra.Command{
		Use:   "recover --config FILE [--commit]",
		Short: "Finish or roll back every unfinished move; without --commit, print what it would do",
		Long: "recover rolls back every unfinished move that has not reached its commit point, finishes every one that\n" +
			"has, deletes stray locks and drops stray staging tables. Without --commit it only prints what it would do.\n" +
			"It is safe beside live moves and beside another recover. Exit code 0: all clean afterwards; 3: something\n" +
			"is left (see the audit it prints); 1: it could not run.",
		Args: cobra.NoArgs,
		RunE: g.withMover(&w, nil, func(ctx context.Context, cmd *cobra.Command, m *movepart.Mover) error {
			out := cmd.OutOrStdout()
			if !commit {
				rep, err := auditAndPrint(ctx, cmd, g, m)
				if err == nil && !rep.Clean() && g.format == "text" {
					fmt.Fprintln(out, "(dry run: run again with --commit to do it)")
				}
				return err
			}
			done, after, err := recovery.Recover(ctx, m, recovery.Options{Wait: wait, Parallel: parallel})
			if err != nil {
				return err
			}
			if g.format == "json" {
				if err := json.NewEncoder(out).Encode(map[string]any{"done": done, "audit": after}); err != nil {
					return err
				}
			} else {
				for _, o := range done {
					if o.Result == "" {
						continue
					}
					fmt.Fprintf(out, "%s %s: %s", o.Kind, o.Move, o.Result)
					if o.Err != "" {
						fmt.Fprintf(out, ": %s", o.Err)
					}
					fmt.Fprintln(out)
				}
				fmt.Fprintln(out, "afterwards:")
				if err := printReport(out, g, after); err != nil {
					return err
				}
			}
			if !after.Clean() {
				return exitError{exitFindings, fmt.Errorf("%d problems remain", len(after.Open()))}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&commit, "commit", false, "do it (without it, print what it would do)")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for a move another live process drives")
	cmd.Flags().IntVar(&parallel, "parallel", 4, "moves driven at once")
	w.add(cmd, time.Hour)
	return cmd
}
