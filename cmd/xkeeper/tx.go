package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/xshard"
)

func newTx(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tx", Short: "Cross-shard transactions"}
	cmd.AddCommand(newTxApply(g), newTxList(g))
	return cmd
}

// txFile is the YAML form of a transaction for `xkeeper tx apply`.
type txFile struct {
	ID          string        `yaml:"id"`
	Coordinator string        `yaml:"coordinator"`
	Deadline    time.Duration `yaml:"deadline"`
	Shards      []struct {
		Shard string     `yaml:"shard"`
		Ops   []txFileOp `yaml:"ops"`
	} `yaml:"shards"`
}

// txFileOp is one op: exactly one of create, set, delete, check names the
// path.
type txFileOp struct {
	Create     string `yaml:"create"`
	Set        string `yaml:"set"`
	Delete     string `yaml:"delete"`
	Check      string `yaml:"check"`
	Data       string `yaml:"data"`
	Version    *int32 `yaml:"version"`
	Sequential bool   `yaml:"sequential"`
}

func (o txFileOp) build() (proto.MultiOp, error) {
	version := int32(-1)
	if o.Version != nil {
		version = *o.Version
	}
	var ops []proto.MultiOp
	if o.Create != "" {
		flags := int32(0)
		if o.Sequential {
			flags = proto.FlagSequential
		}
		ops = append(ops, proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: o.Create, Data: []byte(o.Data),
			ACL: proto.WorldACL(proto.PermAll), Flags: flags}})
	}
	if o.Set != "" {
		ops = append(ops, proto.MultiOp{Op: proto.OpSetData, Req: &proto.SetDataRequest{Path: o.Set, Data: []byte(o.Data), Version: version}})
	}
	if o.Delete != "" {
		ops = append(ops, proto.MultiOp{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: o.Delete, Version: version}})
	}
	if o.Check != "" {
		ops = append(ops, proto.MultiOp{Op: proto.OpCheck, Req: &proto.PathVersionRequest{Path: o.Check, Version: version}})
	}
	if len(ops) != 1 {
		return proto.MultiOp{}, errors.New("each op needs exactly one of create, set, delete, check")
	}
	return ops[0], nil
}

func loadTx(path string) ([]xshard.MultiRequestForShard, xshard.Options, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, xshard.Options{}, err
	}
	var f txFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, xshard.Options{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Shards) == 0 {
		return nil, xshard.Options{}, fmt.Errorf("%s: shards: required", path)
	}
	var reqs []xshard.MultiRequestForShard
	for i, sh := range f.Shards {
		rq := xshard.MultiRequestForShard{Shard: sh.Shard}
		for j, o := range sh.Ops {
			op, err := o.build()
			if err != nil {
				return nil, xshard.Options{}, fmt.Errorf("%s: shards[%d].ops[%d]: %w", path, i, j, err)
			}
			rq.Requests = append(rq.Requests, op)
		}
		reqs = append(reqs, rq)
	}
	return reqs, xshard.Options{ID: f.ID, Coordinator: f.Coordinator, Deadline: f.Deadline}, nil
}

func (g *globals) loadCluster() (*config.Cluster, error) {
	if err := g.needConfig(); err != nil {
		return nil, err
	}
	c, err := config.Load(g.config)
	if err != nil {
		return nil, usage(err)
	}
	return c, nil
}

// loadShardCluster loads the cluster file of a command that needs --shard.
func (g *globals) loadShardCluster(shard string) (*config.Cluster, error) {
	c, err := g.loadCluster()
	if err != nil {
		return nil, err
	}
	if shard == "" {
		return nil, usage(errors.New("--shard is required"))
	}
	return c, nil
}

func newTxApply(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "apply --config FILE TX.yaml",
		Short: "Apply a transaction's ops on every shard, or on none",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := g.router()
			if err != nil {
				return err
			}
			defer r.Close()
			reqs, opts, err := loadTx(args[0])
			if err != nil {
				return usage(err)
			}
			for _, rq := range reqs {
				if _, err := c.Shard(rq.Shard); err != nil {
					return usage(err)
				}
			}
			ctx, cancel := contextWithTimeout(cmd, timeout)
			defer cancel()
			res, err := xshard.CrossShardTransaction(ctx, r, reqs, opts)
			if err != nil {
				return err
			}
			return printTxResults(cmd, g, reqs, res)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the outcome")
	return cmd
}

func printTxResults(cmd *cobra.Command, g *globals, reqs []xshard.MultiRequestForShard, res []xshard.ShardResponses) error {
	out := cmd.OutOrStdout()
	type opResult struct {
		Op   string `json:"op"`
		Path string `json:"path,omitempty"`
	}
	all := map[string][]opResult{}
	for i, sr := range res {
		for j, r := range sr.Results {
			or := opResult{Op: reqs[i].Requests[j].Op.String()}
			switch v := r.Resp.(type) {
			case *proto.PathRequest:
				or.Path = v.Path
			case *proto.Create2Response:
				or.Path = v.Path
			}
			all[sr.Shard] = append(all[sr.Shard], or)
		}
	}
	if g.format == "json" {
		return json.NewEncoder(out).Encode(map[string]any{"status": "committed", "shards": all})
	}
	fmt.Fprintln(out, "committed")
	for _, sr := range res {
		for _, or := range all[sr.Shard] {
			fmt.Fprintf(out, "  %s: %s %s\n", sr.Shard, or.Op, or.Path)
		}
	}
	return nil
}

func newTxList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list --config FILE",
		Short: "Show pending and in-doubt transactions on every shard",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, r, err := g.router()
			if err != nil {
				return err
			}
			defer r.Close()
			ctx, cancel := contextWithTimeout(cmd, 15*time.Second)
			defer cancel()
			type row struct {
				Shard       string `json:"shard"`
				ID          string `json:"id"`
				Status      string `json:"status"`
				Coordinator string `json:"coordinator"`
				AgeMs       int64  `json:"age_ms"`
				DeadlineMs  int64  `json:"deadline_in_ms"`
			}
			var rows []row
			var failures []error
			for _, sh := range c.Shards {
				cl, err := r.Client(ctx, sh.Name)
				if err != nil {
					failures = append(failures, err)
					continue
				}
				var list proto.XListResponse
				if _, err := cl.Do(ctx, proto.OpXList, proto.Empty{}, &list); err != nil {
					failures = append(failures, fmt.Errorf("shard %s: %w", sh.Name, err))
					continue
				}
				for _, rec := range list.Records {
					rows = append(rows, row{Shard: sh.Name, ID: rec.ID, Status: rec.Status.String(), Coordinator: rec.Coordinator,
						AgeMs: list.Time - rec.Created, DeadlineMs: rec.Deadline - list.Time})
				}
			}
			out := cmd.OutOrStdout()
			if g.format == "json" {
				if rows == nil {
					rows = []row{}
				}
				json.NewEncoder(out).Encode(rows)
			} else {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SHARD\tID\tSTATUS\tCOORDINATOR\tAGE\tDEADLINE IN")
				for _, rw := range rows {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%v\n", rw.Shard, rw.ID, rw.Status, rw.Coordinator,
						time.Duration(rw.AgeMs)*time.Millisecond, time.Duration(rw.DeadlineMs)*time.Millisecond)
				}
				tw.Flush()
			}
			return errors.Join(failures...)
		},
	}
}
