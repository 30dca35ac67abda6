package main

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/bench"
)

func newBench(g *globals) *cobra.Command {
	var o bench.Options
	var servers, shard, ops string
	var clients []int
	var x bench.XOptions
	var xshardMode bool
	cmd := &cobra.Command{
		Use:   "bench [--servers H:P,...|--config FILE --shard NAME] --op create,set,get --clients 1,16,64",
		Short: "Load any ZooKeeper-protocol endpoint and report throughput and latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if xshardMode {
				return benchXShard(cmd, g, x, clients, o)
			}
			addrs, err := g.servers(servers, shard)
			if err != nil {
				return err
			}
			o.Servers = addrs
			var results []bench.Result
			opList := strings.Split(ops, ",")
			if ops == "all" {
				opList = bench.Ops
			}
			for _, op := range opList {
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
			return writeResults(cmd, g, results)
		},
	}
	f := cmd.Flags()
	f.StringVar(&servers, "servers", "", "comma-separated host:port list of any ZooKeeper-protocol endpoint")
	f.StringVar(&shard, "shard", "", "shard of the cluster file to load (with --config)")
	f.StringVar(&ops, "op", "create,set,get", "operations: "+strings.Join(bench.Ops, ",")+", or all")
	f.IntSliceVar(&clients, "clients", []int{1, 16, 64}, "concurrent clients (sessions), one run each")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "measured length of each run")
	f.IntVar(&o.Requests, "requests", 0, "requests per run instead of --duration")
	f.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured start of each run")
	f.IntVar(&o.DataSize, "data-size", 100, "bytes of data per create/set")
	f.IntVar(&o.KeySpace, "key-space", 1000, "nodes get/set/exists pick from")
	f.IntVar(&o.Width, "width", 1000, "children of the parent for the children op")
	f.IntVar(&o.MultiOps, "multi-ops", 4, "ops per multi")
	f.StringVar(&o.Prefix, "prefix", "/xkeeper-bench", "root of the benchmark's nodes")
	f.BoolVar(&xshardMode, "xshard", false, "run cross-shard transactions over the cluster file's shards (--config)")
	f.IntVar(&x.Span, "span", 2, "with --xshard: shards per transaction")
	f.Float64Var(&x.Fraction, "fraction", 1, "with --xshard: share of transactions that span shards; the rest are one-shard multis")
	f.IntVar(&x.Ops, "tx-ops", 2, "with --xshard: setData ops per transaction")
	return cmd
}

func benchXShard(cmd *cobra.Command, g *globals, x bench.XOptions, clients []int, o bench.Options) error {
	c, err := g.loadCluster()
	if err != nil {
		return err
	}
	x.Cluster, x.Duration, x.Warmup, x.Keys, x.Prefix = c, o.Duration, o.Warmup, o.KeySpace, o.Prefix
	var results []bench.Result
	for _, n := range clients {
		x.Clients = n
		r, err := bench.RunX(cmd.Context(), x)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	return writeResults(cmd, g, results)
}

func writeResults(cmd *cobra.Command, g *globals, results []bench.Result) error {
	if g.format == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	bench.WriteTable(cmd.OutOrStdout(), results)
	return nil
}
