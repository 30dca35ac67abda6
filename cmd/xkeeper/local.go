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
	cmd := &cobra.Command{
		Use:         "local [--shards N] [--nodes R] [--dir D]",
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
			c, file, stop, err := startLocal(dir, shards, nodes)
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
	return cmd
}

// startLocal writes the cluster file of shards placed on nodes, on free
// loopback ports under dir (each member with its monitor), and runs every
// node in this process until stop; it returns when every shard has a
// leader.
func startLocal(dir string, shards, nodes int) (c *config.Cluster, file string, stop func(), err error) {
	laid := config.NodePorts(shards, nodes)
	ports, err := config.FreeLoopbackPorts(laid + shards*nodes)
	if err != nil {
		return nil, "", nil, err
	}
	c, err = config.LayoutNodes(dir, shards, nodes, ports[:laid], config.Default())
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
		kn, s, err := startNode(c, node.Name, keeper.Options{})
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
		json.NewEncoder(out).Encode(map[string]any{"config": file, "shards": shards, "nodes": nodes, "metrics": metricsURLs(c)})
		return
	}
	fmt.Fprintf(out, "cluster file: %s\n", file)
	for _, n := range c.Nodes {
		fmt.Fprintf(out, "node %s: peer port %s\n", n.Name, n.PeerAddr)
	}
	for i := range c.Shards {
		fmt.Fprintf(out, "shard %s: %s\n", c.Shards[i].Name, c.Shards[i].ConnectString())
	}
	fmt.Fprintf(out, "metrics: %s\n", strings.Join(metricsURLs(c), " "))
	fmt.Fprintf(out, "try: xkeeper client --config %s --shard a ls /\nCtrl-C stops the cluster.\n", file)
}
