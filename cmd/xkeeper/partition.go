package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
)

// exitFindings is the exit code of an audit that found something, or a
// recovery that left something unfinished.
const exitFindings = 3

// failPointEnv names the step boundary (a movepart.Point) at which a
// partition or recover command kills itself, for crash tests. Unset, it
// does nothing.
const failPointEnv = "XKEEPER_FAILPOINT"

// workflowFlags are the flags of the commands that drive moves.
type workflowFlags struct {
	sessionTimeout time.Duration
	timeout        time.Duration
}

func (w *workflowFlags) add(cmd *cobra.Command, timeout time.Duration) {
	cmd.Flags().DurationVar(&w.sessionTimeout, "session-timeout", 10*time.Second,
		"keeper session timeout: a crashed process's moves can be recovered this long after it died")
	cmd.Flags().DurationVar(&w.timeout, "timeout", timeout, "how long the command may run")
}

// mover opens the router and the mover of the cluster file.
func (g *globals) mover(w *workflowFlags, progress func(copied, total uint64)) (*movepart.Mover, func(), error) {
	c, r, err := g.router(client.WithSessionTimeout(w.sessionTimeout))
	if err != nil {
		return nil, nil, err
	}
	m := movepart.New(c, r, movepart.Options{Log: slog.Default(), FailPoint: failPoint(), Progress: progress})
	return m, func() { m.Close(); r.Close() }, nil
}

// withMover returns a command body that runs f with the cluster's mover
// and a context bounded by --timeout.
func (g *globals) withMover(w *workflowFlags, progress func(copied, total uint64), f func(context.Context, *cobra.Command, *movepart.Mover) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		m, closeAll, err := g.mover(w, progress)
		if err != nil {
			return err
		}
		defer closeAll()
		ctx, cancel := contextWithTimeout(cmd, w.timeout)
		defer cancel()
		return f(ctx, cmd, m)
	}
}

// failPoint returns the hook that kills this process at the step boundary
// $XKEEPER_FAILPOINT names, or nil.
func failPoint() func(movepart.Point) {
	at := movepart.Point(os.Getenv(failPointEnv))
	if at == "" {
		return nil
	}
	return func(p movepart.Point) {
		if p == at {
			fmt.Fprintf(os.Stderr, "xkeeper: fail point %s: killing myself\n", p)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}

func newPartition(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "partition", Short: "Move and copy ClickHouse partitions between tables on different keepers"}
	cmd.AddCommand(newPartitionRun(g, movepart.Move, "move", "Move a partition: afterwards it is in the destination only"),
		newPartitionRun(g, movepart.Attach, "attach", "Copy a partition exactly once: the source keeps it"),
		newPartitionMoves(g), newPartitionTransfer(g, true), newPartitionTransfer(g, false))
	return cmd
}

func newPartitionRun(g *globals, kind movepart.Kind, name, short string) *cobra.Command {
	var w workflowFlags
	var from, to, partition string
	var dryRun, zeroCopy bool
	cmd := &cobra.Command{
		Use:   name + " --from SERVER:DB.TABLE --to SERVER:DB.TABLE --partition ID",
		Short: short,
		Args:  cobra.NoArgs,
	}
	bar := newCopyBar(g, os.Stderr, isatty.IsTerminal(os.Stderr.Fd()))
	cmd.RunE = g.withMover(&w, bar.update, func(ctx context.Context, cmd *cobra.Command, m *movepart.Mover) error {
		req := movepart.Request{Kind: kind, Partition: partition}
		var err error
		if req.From, err = movepart.ParseTableRef(from); err != nil {
			return usage(fmt.Errorf("--from: %w", err))
		}
		if req.To, err = movepart.ParseTableRef(to); err != nil {
			return usage(fmt.Errorf("--to: %w", err))
		}
		if partition == "" {
			return usage(errors.New("--partition ID is required (the partition_id of system.parts)"))
		}
		if zeroCopy {
			return zeroCopyMove(cmd, g, req)
		}
		plan, err := m.Plan(ctx, req)
		if err != nil {
			return err
		}
		if dryRun {
			return printPlan(cmd.OutOrStdout(), g, plan)
		}
		rec, err := m.Run(ctx, plan)
		bar.finish()
		if err != nil {
			return err
		}
		return printMoved(cmd.OutOrStdout(), g, rec)
	})
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "source table, SERVER:DB.TABLE (SERVER as named in clickhouse.servers)")
	f.StringVar(&to, "to", "", "destination table, SERVER:DB.TABLE")
	f.StringVar(&partition, "partition", "", "partition id (system.parts.partition_id)")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	if kind == movepart.Move {
		f.BoolVar(&zeroCopy, "zero-copy", false, "move the partition's S3 object references in the catalog (xkeeper s3): metadata only, no byte moves")
	}
	w.add(cmd, time.Hour)
	return cmd
}

func printPlan(out io.Writer, g *globals, p *movepart.Plan) error {
	if g.format == "json" {
		return json.NewEncoder(out).Encode(p)
	}
	fmt.Fprintf(out, "%s of partition %s\n  from %s (keeper shard %s)\n  to   %s (keeper shard %s)\n",
		p.Kind, p.Partition, p.Source.TableRef, p.Source.Shard, p.Destination.TableRef, p.Destination.Shard)
	fmt.Fprintf(out, "  %d parts, %d rows, %d bytes on disk; the destination holds %d rows of it now\n",
		len(p.Parts), p.Rows, p.Bytes, p.Destination.Fingerprint.Rows)
	for _, part := range p.Parts {
		fmt.Fprintf(out, "    part %s: %d rows, %d bytes\n", part.Name, part.Rows, part.Bytes)
	}
	for _, n := range p.Notes {
		fmt.Fprintln(out, "  note:", n)
	}
	fmt.Fprintln(out, "steps (dry run: nothing was done):")
	for i, s := range p.Statements {
		fmt.Fprintf(out, "  %2d. %s\n", i+1, s)
	}
	return nil
}

func printMoved(out io.Writer, g *globals, rec *movepart.Record) error {
	if g.format == "json" {
		return json.NewEncoder(out).Encode(map[string]any{"status": "done", "move": rec})
	}
	want := rec.Expected()
	fmt.Fprintf(out, "%s %s done: partition %s of %s is in %s (%d rows)\n",
		rec.Kind, rec.ID, rec.Partition, rec.Source.TableRef, rec.Destination.TableRef, want.Rows)
	return nil
}

// copyBar draws a progress bar for a cross-server copy, in text format on
// a terminal only: piped output stays free of it.
type copyBar struct {
	g        *globals
	out      io.Writer
	terminal bool // out is a terminal
	bar      *progressbar.ProgressBar
}

func newCopyBar(g *globals, out io.Writer, terminal bool) *copyBar {
	return &copyBar{g: g, out: out, terminal: terminal}
}

func (b *copyBar) update(copied, total uint64) {
	if b.bar == nil {
		if b.g.format != "text" || !b.terminal {
			return
		}
		b.bar = progressbar.NewOptions64(int64(total), progressbar.OptionSetWriter(b.out),
			progressbar.OptionSetDescription("copying rows"), progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond))
	}
	_ = b.bar.Set64(int64(copied))
}

// byteBar returns a progress bar of bytes (total, or -1 when unknown) for
// a long command on a terminal, or nil (drawing nothing) when stderr is
// piped or the format is json; finish it with finishBar.
func byteBar(g *globals, description string, total int64) *progressbar.ProgressBar {
	if g.format != "text" || !isatty.IsTerminal(os.Stderr.Fd()) {
		return nil
	}
	return progressbar.NewOptions64(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowBytes(true),
		progressbar.OptionSetDescription(description), progressbar.OptionThrottle(100*time.Millisecond))
}

// counting returns w, counting what passes into bar when there is one.
func counting(w io.Writer, bar *progressbar.ProgressBar) io.Writer {
	if bar == nil {
		return w
	}
	return io.MultiWriter(w, bar)
}

// finishBar ends a bar on its own line.
func finishBar(bar *progressbar.ProgressBar) {
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(os.Stderr)
	}
}

func (b *copyBar) finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
		fmt.Fprintln(b.out)
	}
}

func newPartitionMoves(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "moves --config FILE",
		Short: "List the moves in flight: step, age, owner, last error",
		Args:  cobra.NoArgs,
		RunE: g.withMover(&workflowFlags{sessionTimeout: 10 * time.Second, timeout: 30 * time.Second}, nil, func(ctx context.Context, cmd *cobra.Command, m *movepart.Mover) error {
			moves, err := m.Store().Moves(ctx)
			if err != nil {
				return err
			}
			type row struct {
				*movepart.Record
				Age   string `json:"age"`
				Owner string `json:"owner,omitempty"`
			}
			rows := []row{}
			for _, rec := range moves {
				r := row{Record: rec, Age: time.Since(rec.Created()).Round(time.Second).String()}
				if o, found, err := m.Store().OwnerOf(ctx, rec.Source.Shard, rec.ID); err == nil && found {
					r.Owner = o.String()
				}
				rows = append(rows, r)
			}
			out := cmd.OutOrStdout()
			if g.format == "json" {
				return json.NewEncoder(out).Encode(rows)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tPARTITION\tFROM\tTO\tSTEP\tAGE\tOWNER\tLAST ERROR")
			for _, r := range rows {
				owner := r.Owner
				if owner == "" {
					owner = "(none: recover takes it)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, r.Partition, r.Source.TableRef,
					r.Destination.TableRef, r.Step, r.Age, owner, r.LastError)
			}
			return tw.Flush()
		}),
	}
}

// zeroCopyMove moves a partition's references in the S3 object catalog
// from one table to the other, in one transaction.
func zeroCopyMove(cmd *cobra.Command, g *globals, req movepart.Request) error {
	timeout := time.Hour
	return g.withCatalog(&timeout, func(ctx context.Context, cmd *cobra.Command, c *objects.Catalog) error {
		n, err := c.MovePartition(ctx, req.From, req.To, req.Partition)
		if err != nil {
			return err
		}
		if g.format == "json" {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"status": "done", "references": n})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "zero-copy move done: %d part files of partition %s moved from %s to %s in the catalog\n",
			n, req.Partition, req.From, req.To)
		return nil
	})(cmd, nil)
}
