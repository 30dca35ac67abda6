// Command xkeeper runs keeper shards, cross-shard transactions and the
// ClickHouse workflows over them. Every subcommand reads the shared cluster
// file (--config, or XKEEPER_CONFIG).
package main

import (
	"cmp"
	"context"
	"encoding/json"
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

// annotationServes marks the commands that run keeper members: they log at
// info by default, the others at warn.
const annotationServes = "serves"

// globals are the flags every command shares.
type globals struct {
	config   string
	logLevel string
	format   string
	all      bool // audit --all
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
	code := exitFailure
	var u usageError
	var e exitError
	switch {
	case errors.As(err, &u):
		code = exitUsage
	case errors.As(err, &e):
		return e.code // the command printed its report
	}
	if f := root.PersistentFlags().Lookup("format"); f != nil && f.Value.String() == "json" {
		json.NewEncoder(stdout).Encode(describe(err, code))
	}
	return code
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
			level := slog.LevelWarn // client commands: their output is what they print
			if cmd.Annotations[annotationServes] != "" {
				level = slog.LevelInfo
			}
			if err := level.UnmarshalText([]byte(cmp.Or(g.logLevel, level.String()))); err != nil {
				return usage(fmt.Errorf("--log-level: %w", err))
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})))
			if g.format != "text" && g.format != "json" {
				return usage(fmt.Errorf("--format must be text or json, not %q", g.format))
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	pf := root.PersistentFlags()
	pf.StringVar(&g.config, "config", "", "cluster file (default $XKEEPER_CONFIG)")
	pf.StringVar(&g.logLevel, "log-level", "", "debug, info, warn or error (default info for serve and local, warn for the rest)")
	pf.StringVar(&g.format, "format", "text", "output format: text or json")
	g.connFlags.add(root)
	root.AddCommand(newServe(g), newBootstrap(g), newLocal(g), newClient(g), newBench(g), newTx(g), newPartition(g), newAudit(g), newRecover(g), newS3(g),
		newDemo(g), newMember(g), newNode(g), newSnapshot(g), newImport(g), newDigest(g), newConfig(g), newVersion(g))
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
