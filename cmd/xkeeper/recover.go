package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/recovery"
)

func newAudit(g *globals) *cobra.Command {
	var w workflowFlags
	cmd := &cobra.Command{
		Use:   "audit --config FILE",
		Short: "Report unfinished moves, misplaced partitions, stray locks and staging tables, in-doubt transactions",
		Long: "audit reads every keeper shard and every ClickHouse server of the cluster file and reports what a crash\n" +
			"left behind. Exit code 0: clean; 3: it found something; 1: it could not run.",
		Args: cobra.NoArgs,
		RunE: g.withMover(&w, nil, func(ctx context.Context, cmd *cobra.Command, m *movepart.Mover) error {
			rep, err := auditAndPrint(ctx, cmd, g, m)
			if err != nil {
				return err
			}
			if !rep.Clean() {
				return exitError{exitFindings, fmt.Errorf("audit found %d problems", len(rep.Findings))}
			}
			return nil
		}),
	}
	w.add(cmd, 10*time.Minute)
	return cmd
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
	if g.format == "json" {
		return json.NewEncoder(out).Encode(rep)
	}
	fmt.Fprintf(out, "audited %d shards, %d ClickHouse servers, %d moves in flight, %d finished moves\n",
		rep.Shards, rep.Servers, rep.Moves, rep.Journal)
	if rep.Clean() {
		fmt.Fprintln(out, "clean")
	}
	for _, f := range rep.Findings {
		printFinding(out, f)
	}
	return nil
}

func printFinding(out io.Writer, f recovery.Finding) {
	fmt.Fprintf(out, "%s: %s\n", f.Kind, f.Detail)
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
				return exitError{exitFindings, fmt.Errorf("%d problems remain", len(after.Findings))}
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
