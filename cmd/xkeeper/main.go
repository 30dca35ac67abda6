// Command xkeeper runs keeper shards, cross-shard transactions and the
// ClickHouse workflows over them. Every subcommand reads the shared cluster
// file (--config, or XKEEPER_CONFIG).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the operation failed
	exitUsage   = 2 // bad flags, bad config
)

// usageError marks errors that are the caller's: bad flags or config.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func usage(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// globals are the flags every command shares.
type globals struct {
	config   string
	logLevel string
	format   string
	connFlags
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "xkeeper:", err)
	var u usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	var e exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitFailure
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	error
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "xkeeper",
		Short:         "ZooKeeper-compatible keeper shards with cross-shard transactions",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.config == "" {
				g.config = os.Getenv("XKEEPER_CONFIG")
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
				return usage(fmt.Errorf("--log-level: %w", err))
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
			if g.format != "text" && g.format != "json" {
				return usage(fmt.Errorf("--format must be text or json, not %q", g.format))
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	pf := root.PersistentFlags()
	pf.StringVar(&g.config, "config", "", "cluster file (default $XKEEPER_CONFIG)")
	pf.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	pf.StringVar(&g.format, "format", "text", "output format: text or json")
	g.connFlags.add(root)
	root.AddCommand(newServe(g), newLocal(g), newClient(g), newBench(g), newTx(g), newPartition(g), newAudit(g), newRecover(g), newS3(g),
		newDigest(g))
	return root
}

// needConfig reports a missing --config as a usage error.
func (g *globals) needConfig() error {
	if strings.TrimSpace(g.config) == "" {
		return usage(errors.New("--config FILE (or XKEEPER_CONFIG) is required"))
	}
	return nil
}

// contextWithTimeout bounds a command's work.
func contextWithTimeout(cmd *cobra.Command, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), d)
}
