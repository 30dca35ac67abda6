package main

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/bench"
	"github.com/xkeeper/xkeeper/config"
)

func newBench(g *globals) *cobra.Command {
	var o bench.Options
	var servers, shard, ops string
	var clients []int
	cmd := &cobra.Command{
		Use:   "bench [--servers H:P,...|--config FILE --shard NAME] --op create,set,get --clients 1,16,64",
		Short: "Load any ZooKeeper-protocol endpoint and report throughput and latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case servers != "":
				o.Servers = strings.Split(servers, ",")
			case g.config != "" && shard != "":
				c, err := config.Load(g.config)
				if err != nil {
					return usage(err)
				}
				sh, err := c.Shard(shard)
				if err != nil {
					return usage(err)
				}
				o.Servers = strings.Split(sh.ConnectString(), ",")
			default:
				return usage(errors.New("--servers, or --config with --shard, is required"))
			}
			var results []bench.Result
			for _, op := range strings.Split(ops, ",") {
				for _, n := range clients {
					run := o
					run.Op, run.Clients = op, n
					r, err := bench.Run(cmd.Context(), run)
					if err != nil {
						return err
					}
					results = append(results, r)
				}
			}
			if g.format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(results)
			}
			bench.WriteTable(cmd.OutOrStdout(), results)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&servers, "servers", "", "comma-separated host:port list of any ZooKeeper-protocol endpoint")
	f.StringVar(&shard, "shard", "", "shard of the cluster file to load (with --config)")
	f.StringVar(&ops, "op", "create,set,get", "operations: "+strings.Join(bench.Ops, ","))
	f.IntSliceVar(&clients, "clients", []int{1, 16, 64}, "concurrent clients (sessions), one run each")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "measured length of each run")
	f.IntVar(&o.Requests, "requests", 0, "requests per run instead of --duration")
	f.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured start of each run")
	f.IntVar(&o.DataSize, "data-size", 100, "bytes of data per create/set")
	f.IntVar(&o.KeySpace, "key-space", 1000, "nodes get/set/exists pick from")
	f.IntVar(&o.Width, "width", 1000, "children of the parent for the children op")
	f.IntVar(&o.MultiOps, "multi-ops", 4, "ops per multi")
	f.StringVar(&o.Prefix, "prefix", "/xkeeper-bench", "root of the benchmark's nodes")
	return cmd
}
