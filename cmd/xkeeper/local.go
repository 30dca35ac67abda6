package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
)

func newLocal(g *globals) *cobra.Command {
	var shards, nodes int
	var dir string
	var mounts []string
	cmd := &cobra.Command{
		Use:         "local [--shards N] [--nodes R] [--mount PATH=SHARD]... [--dir D]",
		Annotations: map[string]string{annotationServes: "yes"},
		Short:       "Run an embedded cluster of N shards on R nodes (a member of every shard each) on free loopback ports",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			temp := dir == ""
			if temp {
				d, err := os.MkdirTemp("", "xkeeper-local-")
				if err != nil {
					return err
				}
				dir = d
				defer os.RemoveAll(dir)
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			ms, err := parseMounts(mounts)
			if err != nil {
				return usage(err)
			}
			c, file, stop, err := startLocal(dir, shards, nodes, ms)
			if err != nil {
				return err
			}
			defer stop()
			printLocal(cmd, g, c, file)
			waitSignal()
			slog.Info("stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&shards, "shards", 2, "number of shards")
	f.IntVar(&nodes, "nodes", 3, "nodes, each hosting a member of every shard on one peer port")
	f.IntVar(&nodes, "members", 3, "members per shard: the same as --nodes")
	f.MarkDeprecated("members", "use --nodes")
	f.StringVar(&dir, "dir", "", "data directory (default: a temporary one, removed on exit)")
	f.StringArrayVar(&mounts, "mount", nil, "place a subtree on a shard for the nodes' one endpoint, as PATH=SHARD (repeatable); the rest is shard a's")
	return cmd
}

// parseMounts reads --mount PATH=SHARD flags.
func parseMounts(flags []string) ([]config.Mount, error) {
	var ms []config.Mount
	for _, f := range flags {
		path, shard, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("--mount %q: want PATH=SHARD, as /clickhouse/tables/t1=b", f)
		}
		ms = append(ms, config.Mount{Path: path, Shard: shard})
	}
	return ms, nil
}

// startLocal writes the cluster file of shards placed on nodes, on free
// loopback ports under dir (each member with its monitor), and runs every
// node in this process until stop; it returns when every shard has a
// leader.
func startLocal(dir string, shards, nodes int, mounts []config.Mount) (c *config.Cluster, file string, stop func(), err error) {
	laid := config.NodePorts(shards, nodes)
	ports, err := config.FreeLoopbackPorts(laid + shards*nodes)
	if err != nil {
		return nil, "", nil, err
	}
	c, err = config.LayoutNodes(dir, shards, nodes, ports[:laid], config.Default())
	if err == nil && len(mounts) > 0 {
		c.Mounts = mounts
		err = c.Validate()
	}
	if err != nil {
		return nil, "", nil, usage(err)
	}
	for i := range c.Shards {
		for j := range c.Shards[i].Members {
			c.Shards[i].Members[j].HTTPAddr = fmt.Sprintf("127.0.0.1:%d", ports[laid+i*nodes+j])
		}
	}
	// xkeeper's own commands get an identity of their own, so that its
	// znodes are theirs alone (the secret is Layout's).
	c.Security.Auth = "xkeeper:" + config.NewClusterSecret()[:32]
	keeper.TuneGC(c.Keeper)
	file = filepath.Join(dir, "cluster.yaml")
	if err := c.Write(file); err != nil {
		return nil, "", nil, err
	}
	var running []*keeper.Member
	var stops []func() error
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, node := range c.Nodes {
		kn, s, err := startNode(c, node.Name, keeper.Options{Bootstrap: true}) // only an empty directory bootstraps
		if err != nil {
			stop()
			return nil, "", nil, err
		}
		running, stops = append(running, kn.Members...), append(stops, s)
	}
	if err := waitLeaders(running, 30*time.Second); err != nil {
		stop()
		return nil, "", nil, err
	}
	return c, file, stop, nil
}

// waitLeaders polls until every shard has a leader.
func waitLeaders(ms []*keeper.Member, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ready := true
		for _, m := range ms {
			if m.Replica.Leader() == "" {
				ready = false
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no leader after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endpoint is the connect string of the nodes' client endpoints.
func endpoint(c *config.Cluster) string {
	var addrs []string
	for _, n := range c.Nodes {
		if n.ClientAddr != "" {
			addrs = append(addrs, n.ClientAddr)
		}
	}
	return strings.Join(addrs, ",")
}

// metricsURLs lists every member's /metrics.
func metricsURLs(c *config.Cluster) []string {
	var out []string
	for _, sh := range c.Shards {
		for _, m := range sh.Members {
			out = append(out, "http://"+m.HTTPAddr+"/metrics")
		}
	}
	return out
}

func printLocal(cmd *cobra.Command, g *globals, c *config.Cluster, file string) {
	out := cmd.OutOrStdout()
	if g.format == "json" {
		shards := map[string]string{}
		for i := range c.Shards {
			shards[c.Shards[i].Name] = c.Shards[i].ConnectString()
		}
		nodes := map[string]string{}
		for _, n := range c.Nodes {
			nodes[n.Name] = n.PeerAddr
		}
		json.NewEncoder(out).Encode(map[string]any{"config": file, "shards": shards, "nodes": nodes,
			"endpoint": endpoint(c), "metrics": metricsURLs(c)})
		return
	}
	fmt.Fprintf(out, "cluster file: %s\n", file)
	for _, n := range c.Nodes {
		fmt.Fprintf(out, "node %s: peer port %s, client endpoint %s\n", n.Name, n.PeerAddr, n.ClientAddr)
	}
	fmt.Fprintf(out, "endpoint (every shard; root shard %s): %s\n", c.Root(), endpoint(c))
	for _, m := range c.Mounts {
		fmt.Fprintf(out, "  %s -> shard %s\n", m.Path, m.Shard)
	}
	for i := range c.Shards {
		fmt.Fprintf(out, "shard %s: %s\n", c.Shards[i].Name, c.Shards[i].ConnectString())
	}
	fmt.Fprintf(out, "metrics: %s\n", strings.Join(metricsURLs(c), " "))
	fmt.Fprintf(out, "try: xkeeper client --servers %s ls /\nCtrl-C stops the cluster.\n", endpoint(c))
}
