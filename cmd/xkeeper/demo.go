package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/recovery"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// demoOptions shape `xkeeper demo`.
type demoOptions struct {
	Dir     string // where everything lives; a temporary directory, removed at the end, if empty
	Rows    int    // rows of the partition moved
	Install bool   // install ClickHouse with the repository's script if it is missing
}

// demo is a running demo, as the test inspects it.
type demo struct {
	Dir     string
	File    string // the cluster file
	Config  *config.Cluster
	Servers map[string]*testenv.ClickHouse // by name, demoServers
}

// demoServers are the demo's ClickHouse servers: ca1 and ca2 keep their
// tables' metadata on keeper shard a, cb1 and cb2 on b, so that demo.events
// has two replicas on each shard.
var demoServers = []string{"ca1", "ca2", "cb1", "cb2"}

// The demo's table, a ReplicatedMergeTree on all four servers: one table of
// two replicas on each keeper shard.
const (
	demoTable     = "demo.events"
	demoPartition = "202401"
	demoDDL       = "CREATE TABLE IF NOT EXISTS demo.events (d Date, k UInt64, v String) " +
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/demo/events', '{replica}') PARTITION BY toYYYYMM(d) ORDER BY k"
)

func newDemo(g *globals) *cobra.Command {
	var o demoOptions
	var noInstall bool
	cmd := &cobra.Command{
		Use:   "demo [--dir D] [--rows N]",
		Short: "See a partition move in one command: two keeper shards, four ClickHouse servers, an S3, a move across both; Ctrl-C stops it all",
		Long: "demo starts two keeper shards on three nodes (a member of each per node), an S3 API in this process, and four ClickHouse servers on " +
			"free ports, ca1 and ca2 keeping their tables' metadata on shard a and cb1 and cb2 on shard b; writes a complete cluster file; " +
			"creates demo.events, a replicated table of two replicas on each shard, fills partition 202401 through ca1, moves it to " +
			"the replicas on cb1 and cb2 (across servers and keeper shards) and audits, printing the rows on every replica; then leaves " +
			"everything running and prints commands to try. It installs ClickHouse with .ci/install-deps.sh when it is missing (run from the repository).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Install = !noInstall
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, cmd.OutOrStdout(), o, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", "", "keep everything in this directory (default: a temporary one, removed at the end)")
	f.IntVar(&o.Rows, "rows", 100_000, "rows of the partition to move")
	f.BoolVar(&noInstall, "no-install", false, "do not install ClickHouse when it is missing")
	return cmd
}

// stepper prints the demo's steps, each with the time it took.
type stepper struct {
	out   io.Writer
	began time.Time
}

func (s *stepper) do(what string, fn func() (string, error)) error {
	fmt.Fprintf(s.out, "• %s… ", what)
	t0 := time.Now()
	detail, err := fn()
	if err != nil {
		fmt.Fprintln(s.out, "failed")
		return fmt.Errorf("%s: %w", what, err)
	}
	fmt.Fprintf(s.out, "%s (%s)\n", detail, time.Since(t0).Round(time.Millisecond))
	return nil
}

// runDemo runs the demo until ctx ends, then stops and removes what it
// started. ready, if set, sees the demo once the move is done.
func runDemo(ctx context.Context, out io.Writer, o demoOptions, ready func(*demo) error) (err error) {
	if o.Rows <= 0 {
		return usage(errors.New("--rows must be positive"))
	}
	s := &stepper{out: out, began: time.Now()}
	if err := s.do("ClickHouse", func() (string, error) { return ensureClickHouse(out, o.Install) }); err != nil {
		return err
	}
	d := &demo{Dir: o.Dir}
	if d.Dir != "" {
		if err := os.MkdirAll(d.Dir, 0o755); err != nil {
			return err
		}
	} else {
		if d.Dir, err = os.MkdirTemp("", "xkeeper-demo-"); err != nil {
			return err
		}
		defer func() {
			os.RemoveAll(d.Dir)
			fmt.Fprintf(out, "removed %s\n", d.Dir)
		}()
	}
	logPath := filepath.Join(d.Dir, "xkeeper.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// The members run in this process: their logs go to the file, the
	// terminal shows the steps.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo})))
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
		fmt.Fprintln(out, "stopped the ClickHouse servers, the S3 and the keeper shards")
	}()
	if err := s.do("keeper shards a and b on 3 nodes", func() (string, error) {
		c, file, stop, err := startLocal(d.Dir, 2, 3, nil)
		if err != nil {
			return "", err
		}
		cleanup = append(cleanup, stop)
		d.Config, d.File = c, file
		return "a: " + c.Shards[0].ConnectString() + ", b: " + c.Shards[1].ConnectString(), nil
	}); err != nil {
		return err
	}
	if err := s.do("S3 API in this process", func() (string, error) {
		s3, err := testenv.StartMemS3("xkeeper-demo")
		if err != nil {
			return "", err
		}
		cleanup = append(cleanup, func() { s3.Close() })
		d.Config.S3 = s3.Config
		return "http://" + s3.Config.Endpoint + ", bucket " + s3.Config.Bucket, nil
	}); err != nil {
		return err
	}
	d.Servers = map[string]*testenv.ClickHouse{}
	for _, name := range demoServers {
		shard := name[1:2]
		if err := s.do(fmt.Sprintf("ClickHouse server %s on keeper shard %s", name, shard), func() (string, error) {
			sh, err := d.Config.Shard(shard)
			if err != nil {
				return "", err
			}
			ch, err := testenv.LaunchClickHouse(filepath.Join(d.Dir, name), testenv.ClickHouseOptions{
				ZooKeeper: sh.ClientAddrs(), Replica: name, LogLevel: "warning"})
			if err != nil {
				return "", err
			}
			cleanup = append(cleanup, ch.Stop)
			d.Servers[name] = ch
			return "native " + ch.NativeAddr() + ", http " + ch.HTTPAddr(), nil
		}); err != nil {
			return err
		}
	}
	if err := s.do("cluster file", func() (string, error) {
		c := d.Config
		c.ClickHouse.Servers, c.Tables = nil, nil
		for _, name := range demoServers {
			c.ClickHouse.Servers = append(c.ClickHouse.Servers, config.ClickHouseServer{Name: name, Address: d.Servers[name].NativeAddr()})
			c.Tables = append(c.Tables, config.Table{Server: name, Shard: name[1:2]})
		}
		if err := c.Validate(); err != nil {
			return "", err
		}
		return d.File, c.Write(d.File)
	}); err != nil {
		return err
	}
	if err := s.do(fmt.Sprintf("table %s on all four servers, %d rows in partition %s through ca1", demoTable, o.Rows, demoPartition), func() (string, error) {
		for _, name := range demoServers {
			for _, sql := range []string{"CREATE DATABASE IF NOT EXISTS demo", demoDDL} {
				if _, err := d.Servers[name].Query(ctx, sql); err != nil {
					return "", err
				}
			}
		}
		ca1 := d.Servers["ca1"]
		_, err := ca1.Query(ctx, fmt.Sprintf("INSERT INTO %s SELECT toDate('2024-01-01') + number %% 31, number, "+
			"concat('event ', toString(number)) FROM numbers(%d)", demoTable, o.Rows))
		if err == nil {
			_, err = ca1.Query(ctx, "INSERT INTO "+demoTable+" SELECT toDate('2024-02-01'), number, 'stays' FROM numbers(1000)")
		}
		if err == nil {
			_, err = d.Servers["ca2"].Query(ctx, "SYSTEM SYNC REPLICA "+demoTable)
		}
		return demoRows(ctx, d), err
	}); err != nil {
		return err
	}
	r := xshard.NewRouter(d.Config, slog.Default(), client.WithAuth("digest", []byte(d.Config.Security.Auth)))
	defer r.Close()
	m := movepart.New(d.Config, r, movepart.Options{Log: slog.Default()})
	defer m.Close()
	if err := s.do("move partition "+demoPartition+" from ca1:"+demoTable+" to cb1:"+demoTable, func() (string, error) {
		plan, err := m.Plan(ctx, movepart.Request{Kind: movepart.Move, Partition: demoPartition,
			From: movepart.TableRef{Server: "ca1", Database: "demo", Table: "events"},
			To:   movepart.TableRef{Server: "cb1", Database: "demo", Table: "events"}})
		if err != nil {
			return "", err
		}
		rec, err := m.Run(ctx, plan)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("move %s %s; %s", rec.ID, rec.Step, demoRows(ctx, d)), nil
	}); err != nil {
		return err
	}
	if err := s.do("audit", func() (string, error) {
		rep, err := recovery.Audit(ctx, m)
		if err != nil {
			return "", err
		}
		if !rep.Clean() {
			return "", fmt.Errorf("%d open findings, the first: %s: %s", len(rep.Open()), rep.Open()[0].Kind, rep.Open()[0].Detail)
		}
		return "clean", nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nall up after %s (logs in %s); try, in another terminal:\n", time.Since(s.began).Round(time.Millisecond), logPath)
	self := selfCommand()
	for _, c := range []string{
		"partition move --config %[1]s --from cb1:demo.events --to ca1:demo.events --partition 202401 --dry-run",
		"partition move --config %[1]s --from cb1:demo.events --to ca1:demo.events --partition 202401",
		"audit --config %[1]s",
		"s3 ls --config %[1]s",
		"client --config %[1]s --shard a ls /",
	} {
		fmt.Fprintf(out, "  %s %s\n", self, fmt.Sprintf(c, d.File))
	}
	fmt.Fprintf(out, "  curl -s http://%s/?query=SELECT+_partition_id,count()+FROM+demo.events+GROUP+BY+_partition_id\n", d.Servers["cb2"].HTTPAddr())
	fmt.Fprintln(out, "Ctrl-C stops everything and removes what the demo made.")
	if ready != nil {
		if err := ready(d); err != nil {
			return err
		}
	}
	<-ctx.Done()
	fmt.Fprintln(out, "stopping…")
	return nil
}

// demoRows says how many rows of the partition each replica holds.
func demoRows(ctx context.Context, d *demo) string {
	var counts []string
	for _, name := range demoServers {
		n, err := d.Servers[name].Query(ctx, "SELECT count() FROM "+demoTable+" WHERE _partition_id = '"+demoPartition+"'")
		if err != nil {
			n = "?"
		}
		counts = append(counts, name+" "+strings.TrimSpace(n))
	}
	return fmt.Sprintf("partition %s rows: %s", demoPartition, strings.Join(counts, ", "))
}

// ensureClickHouse finds clickhouse-server, installing it with the
// repository's install script (the one CI uses) when it is missing.
func ensureClickHouse(out io.Writer, install bool) (string, error) {
	if cmd := testenv.ClickHouseCommand(); cmd != nil {
		return cmd[0], nil
	}
	const script = ".ci/install-deps.sh"
	if !install {
		return "", errors.New("clickhouse-server is not installed: apt-get install clickhouse-server, or run without --no-install")
	}
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("clickhouse-server is not installed and %s is not here (run from the repository, or apt-get install clickhouse-server)", script)
	}
	fmt.Fprintf(out, "installing with %s clickhouse-server\n", script)
	cmd := exec.Command("sh", script, "clickhouse-server")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	if cmd := testenv.ClickHouseCommand(); cmd != nil {
		return "installed " + cmd[0], nil
	}
	return "", errors.New("clickhouse-server still missing after the install")
}

// selfCommand is how the user runs this program: `go run ./cmd/xkeeper`
// when it was built by go run, else its name.
func selfCommand() string {
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, "go-build") {
		return "go run ./cmd/xkeeper"
	}
	return "xkeeper"
}
