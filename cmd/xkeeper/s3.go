package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
)

func newS3(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "s3", Short: "The catalog of S3 objects shared between tables (hard links across keeper shards)"}
	cmd.AddCommand(newS3Ls(g), newS3Link(g), newS3Unlink(g), newS3GC(g), newS3Audit(g), newS3AbortExport(g))
	return cmd
}

// withCatalog runs f with the cluster file's object catalog.
func (g *globals) withCatalog(timeout *time.Duration, f func(context.Context, *cobra.Command, *objects.Catalog) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, r, err := g.router()
		if err != nil {
			return err
		}
		defer r.Close()
		ctx, cancel := contextWithTimeout(cmd, *timeout)
		defer cancel()
		b, err := objects.OpenS3(ctx, c.S3)
		if err != nil {
			return err
		}
		cat := objects.New(r, b, slog.Default())
		if hook := failPoint(); hook != nil {
			cat.Point = func(step string) { hook(movepart.Point(step)) }
		}
		return f(ctx, cmd, cat)
	}
}

// parseRef parses SERVER:DB.TABLE/PART/FILE.
func parseRef(s string) (objects.Ref, error) {
	table, rest, ok := strings.Cut(s, "/")
	part, file, ok2 := strings.Cut(rest, "/")
	t, err := movepart.ParseTableRef(table)
	if err != nil || !ok || !ok2 || part == "" || file == "" {
		return objects.Ref{}, usage(fmt.Errorf("reference %q: want SERVER:DB.TABLE/PART/FILE", s))
	}
	return objects.Ref{Table: t, Part: part, File: file}, nil
}

func newS3Ls(g *globals) *cobra.Command {
	timeout := 10 * time.Minute
	cmd := &cobra.Command{
		Use:   "ls --config FILE [SERVER:DB.TABLE]",
		Short: "List a table's part files and their objects, or every object with its count",
		Args:  cobra.MaximumNArgs(1),
		RunE: g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
			out := cmd.OutOrStdout()
			if cmd.Flags().NArg() == 1 {
				t, err := movepart.ParseTableRef(cmd.Flags().Arg(0))
				if err != nil {
					return usage(err)
				}
				refs, err := c.Refs(ctx, t)
				if err != nil {
					return err
				}
				rows := [][]string{{"PART", "FILE", "OBJECT", "HOME"}}
				for _, r := range refs {
					rows = append(rows, []string{r.Part, r.File, r.Key, r.Home})
				}
				return printRows(out, g, refs, rows)
			}
			objs, err := c.Objects(ctx)
			if err != nil {
				return err
			}
			rows := [][]string{{"OBJECT", "REFS", "STATE", "HOME"}}
			for _, o := range objs {
				rows = append(rows, []string{o.Key, fmt.Sprint(o.Refs), string(o.State), o.Home})
			}
			return printRows(out, g, objs, rows)
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long the command may run")
	return cmd
}

// printRows writes v as JSON, or rows (a header first) as aligned text.
func printRows(out io.Writer, g *globals, v any, rows [][]string) error {
	if g.format == "json" {
		return json.NewEncoder(out).Encode(v)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func newS3Link(g *globals) *cobra.Command {
	timeout := time.Minute
	cmd := &cobra.Command{
		Use:   "link --config FILE SRC DST",
		Short: "Make part file DST (SERVER:DB.TABLE/PART/FILE) refer to the object SRC refers to",
		Args:  cobra.ExactArgs(2),
		RunE: g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
			src, err := parseRef(cmd.Flags().Arg(0))
			if err != nil {
				return err
			}
			dst, err := parseRef(cmd.Flags().Arg(1))
			if err != nil {
				return err
			}
			if err := c.Link(ctx, src, dst); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "linked %s to the object of %s\n", dst, src)
			return nil
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long the command may run")
	return cmd
}

func newS3Unlink(g *globals) *cobra.Command {
	timeout := time.Minute
	cmd := &cobra.Command{
		Use:   "unlink --config FILE REF",
		Short: "Remove a part file's reference; an object left without one becomes deletable",
		Args:  cobra.ExactArgs(1),
		RunE: g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
			ref, err := parseRef(cmd.Flags().Arg(0))
			if err != nil {
				return err
			}
			if err := c.Unlink(ctx, ref); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "unlinked %s\n", ref)
			return nil
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long the command may run")
	return cmd
}

func newS3GC(g *globals) *cobra.Command {
	timeout := time.Hour
	var commit bool
	cmd := &cobra.Command{
		Use:   "gc --config FILE [--commit]",
		Short: "Delete deletable objects and orphans past the grace period; without --commit, list them",
		Args:  cobra.NoArgs,
		RunE: g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
			done, err := c.GC(ctx, commit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.format == "json" {
				return json.NewEncoder(out).Encode(done)
			}
			verb := "would delete"
			if commit {
				verb = "deleted"
			}
			for _, k := range done.Deleted {
				fmt.Fprintf(out, "%s %s (no reference left)\n", verb, k)
			}
			for _, k := range done.Orphans {
				fmt.Fprintf(out, "%s %s (orphan: in no catalog, past the grace period)\n", verb, k)
			}
			for _, k := range done.Leftovers {
				fmt.Fprintf(out, "%s %s (collected before: never registered again)\n", verb, k)
			}
			fmt.Fprintf(out, "%d deletable, %d orphans, %d leftovers\n", len(done.Deleted), len(done.Orphans), len(done.Leftovers))
			return nil
		}),
	}
	cmd.Flags().BoolVar(&commit, "commit", false, "delete (without it, list)")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long the command may run")
	return cmd
}

func newS3Audit(g *globals) *cobra.Command {
	timeout := time.Hour
	cmd := &cobra.Command{
		Use:   "audit --config FILE",
		Short: "List the bucket against every shard: counts, missing objects, orphans (exit 3 if it found something)",
		Args:  cobra.NoArgs,
		RunE: g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
			rep, err := c.Audit(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.format == "json" {
				err = json.NewEncoder(out).Encode(rep)
			} else {
				fmt.Fprintf(out, "%d objects, %d references, %d objects in the bucket, %d deletable (waiting for gc), %d collected\n",
					rep.Objects, rep.References, rep.InBucket, rep.Deletable, rep.Collected)
				for _, f := range rep.Findings {
					fmt.Fprintf(out, "%s %s: %s\n", f.Kind, f.Key, f.Detail)
				}
			}
			if err == nil && len(rep.Findings) > 0 {
				err = exitError{exitFindings, errors.New("the catalog audit found problems")}
			}
			return err
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long the command may run")
	return cmd
}

func newS3AbortExport(g *globals) *cobra.Command {
	timeout := time.Minute
	cmd := &cobra.Command{
		Use:   "abort-export --config FILE SERVER:DB.TABLE PARTITION",
		Short: "End an export whose process is gone: its uploads become orphans for gc (the audit lists abandoned exports)",
		Args:  cobra.ExactArgs(2),
		RunE: g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
			t, err := movepart.ParseTableRef(cmd.Flags().Arg(0))
			if err != nil {
				return usage(err)
			}
			e, err := c.AbortExport(ctx, t, cmd.Flags().Arg(1))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "aborted export %s of partition %s of %s (step %s, %d files); remove its frozen copy %s on %s's host\n",
				e.ID, e.Partition, e.Table, e.Step, e.Files, e.Shadow, e.Table.Server)
			return nil
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long the command may run")
	return cmd
}

// newPartitionTransfer makes `partition export` and `partition import`,
// which run beside the ClickHouse server's data directory.
func newPartitionTransfer(g *globals, export bool) *cobra.Command {
	timeout := time.Hour
	var table, partition string
	use, short, flag := "import --to SERVER:DB.TABLE --partition ID",
		"Download a partition's parts from the S3 catalog into the table's detached/ and attach them, exactly once", "to"
	if export {
		use, short, flag = "export --from SERVER:DB.TABLE --partition ID",
			"Freeze a partition, upload its files and register them for the table in the S3 catalog, exactly once", "from"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  short + ".\nIt reads or writes the server's files: run it on the server's host. Run again after a crash, it resumes.",
		Args:  cobra.NoArgs,
		RunE: g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
			t, err := movepart.ParseTableRef(table)
			if err != nil {
				return usage(fmt.Errorf("--%s: %w", flag, err))
			}
			if partition == "" {
				return usage(errors.New("--partition ID is required"))
			}
			cl, err := g.loadCluster()
			if err != nil {
				return err
			}
			s, err := cl.ClickHouseServer(t.Server)
			if err != nil {
				return usage(err)
			}
			ch, err := clickhouse.Connect(ctx, clickhouse.Server{Name: s.Name, Addr: s.Address, User: s.User, Password: s.Password})
			if err != nil {
				return err
			}
			defer ch.Close()
			out := cmd.OutOrStdout()
			if export {
				files, err := c.Export(ctx, ch, t, partition)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "exported partition %s of %s: %d files registered\n", partition, t, len(files))
				return nil
			}
			parts, err := c.Import(ctx, ch, t, partition)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "imported partition %s into %s: parts %s attached\n", partition, t, strings.Join(parts, ", "))
			return nil
		}),
	}
	cmd.Flags().StringVar(&table, flag, "", "table, SERVER:DB.TABLE")
	cmd.Flags().StringVar(&partition, "partition", "", "partition id (system.parts.partition_id)")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long the command may run")
	return cmd
}
