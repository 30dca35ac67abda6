package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// clientVerb is one verb of `xkeeper client`, in the style of zkCli and
// clickhouse-keeper-client.
type clientVerb struct {
	args string // usage of the arguments
	min  int    // least number of arguments
	run  func(ctx context.Context, c *client.Client, args []string) (any, error)
}

var clientVerbs = map[string]clientVerb{
	"ls": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		return c.GetChildren(ctx, a[0])
	}},
	"get": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		data, _, err := c.Get(ctx, a[0])
		return string(data), err
	}},
	"stat": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		_, st, err := c.Get(ctx, a[0])
		return st, err
	}},
	"exists": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		ok, _, err := c.Exists(ctx, a[0])
		return ok, err
	}},
	"create": {"PATH [DATA] [persistent|ephemeral|sequential|ephemeral_sequential]", 1,
		func(ctx context.Context, c *client.Client, a []string) (any, error) {
			flags, err := createFlags(a)
			if err != nil {
				return nil, err
			}
			return c.Create(ctx, a[0], []byte(arg(a, 1)), flags, nil)
		}},
	"set": {"PATH DATA [VERSION]", 2, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		v, err := version(a, 2)
		if err != nil {
			return nil, err
		}
		return c.Set(ctx, a[0], []byte(a[1]), v)
	}},
	"rm": {"PATH [VERSION]", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		v, err := version(a, 1)
		if err != nil {
			return nil, err
		}
		return nil, c.Delete(ctx, a[0], v)
	}},
	"rmr": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		return nil, removeRecursive(ctx, c, a[0])
	}},
	"getacl": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		acl, _, err := c.GetACL(ctx, a[0])
		return acl, err
	}},
	"count": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		return c.GetAllChildrenNumber(ctx, a[0])
	}},
	"sync": {"PATH", 1, func(ctx context.Context, c *client.Client, a []string) (any, error) {
		return c.Sync(ctx, a[0])
	}},
}

func arg(a []string, i int) string {
	if i < len(a) {
		return a[i]
	}
	return ""
}

func version(a []string, i int) (int32, error) {
	if i >= len(a) {
		return -1, nil
	}
	v, err := strconv.ParseInt(a[i], 10, 32)
	if err != nil {
		return 0, usage(fmt.Errorf("version %q: %w", a[i], err))
	}
	return int32(v), nil
}

func createFlags(a []string) (int32, error) {
	switch arg(a, 2) {
	case "", "persistent":
		return 0, nil
	case "ephemeral":
		return proto.FlagEphemeral, nil
	case "sequential":
		return proto.FlagSequential, nil
	case "ephemeral_sequential":
		return proto.FlagEphemeral | proto.FlagSequential, nil
	}
	return 0, usage(fmt.Errorf("unknown create mode %q", a[2]))
}

// removeRecursive deletes path and everything below it, children first.
func removeRecursive(ctx context.Context, c *client.Client, path string) error {
	kids, err := c.GetChildren(ctx, path)
	if err != nil {
		return err
	}
	for _, k := range kids {
		child := strings.TrimSuffix(path, "/") + "/" + k
		if err := removeRecursive(ctx, c, child); err != nil && !errors.Is(err, proto.ErrNoNode) {
			return err
		}
	}
	if err := c.Delete(ctx, path, -1); err != nil && !errors.Is(err, proto.ErrNoNode) {
		return err
	}
	return nil
}

func newClient(g *globals) *cobra.Command {
	var shard, servers string
	var timeout time.Duration
	var names []string
	for n, v := range clientVerbs {
		names = append(names, n+" "+v.args)
	}
	cmd := &cobra.Command{
		Use:   "client (--config FILE --shard NAME | --servers H:P,...) VERB ARGS...",
		Short: "ZooKeeper client verbs against one shard",
		Long:  "Verbs:\n  " + strings.Join(sortedStrings(names), "\n  "),
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			verb, ok := clientVerbs[args[0]]
			if !ok {
				return usage(fmt.Errorf("unknown verb %q", args[0]))
			}
			if len(args)-1 < verb.min {
				return usage(fmt.Errorf("%s needs %s", args[0], verb.args))
			}
			addrs, opts, err := g.connection(servers, shard)
			if err != nil {
				return err
			}
			ctx, cancel := contextWithTimeout(cmd, timeout)
			defer cancel()
			c, err := client.Connect(ctx, addrs, opts...)
			if err != nil {
				return err
			}
			defer c.Close()
			out, err := verb.run(ctx, c, args[1:])
			if err != nil {
				return err
			}
			return printValue(cmd.OutOrStdout(), g.format, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&shard, "shard", "", "shard of the cluster file")
	f.StringVar(&servers, "servers", "", "comma-separated host:port list instead of --config/--shard")
	f.DurationVar(&timeout, "timeout", 15*time.Second, "operation timeout")
	return cmd
}

func printValue(w io.Writer, format string, v any) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(v)
	}
	switch x := v.(type) {
	case nil:
	case []string:
		for _, s := range x {
			fmt.Fprintln(w, s)
		}
	case *proto.Stat:
		fmt.Fprintf(w, "cZxid = 0x%x\nctime = %s\nmZxid = 0x%x\nmtime = %s\npZxid = 0x%x\ncversion = %d\n"+
			"dataVersion = %d\naclVersion = %d\nephemeralOwner = 0x%x\ndataLength = %d\nnumChildren = %d\n",
			x.Czxid, time.UnixMilli(x.Ctime).UTC().Format(time.RFC3339Nano), x.Mzxid,
			time.UnixMilli(x.Mtime).UTC().Format(time.RFC3339Nano), x.Pzxid, x.Cversion, x.Version, x.Aversion,
			uint64(x.EphemeralOwner), x.DataLength, x.NumChildren)
	case []proto.ACL:
		for _, a := range x {
			fmt.Fprintf(w, "'%s,'%s\n: %s\n", a.Scheme, a.ID.ID, perms(a.Perms))
		}
	default:
		fmt.Fprintln(w, x)
	}
	return nil
}

func perms(p int32) string {
	var b strings.Builder
	for _, x := range []struct {
		bit  int32
		name byte
	}{{proto.PermCreate, 'c'}, {proto.PermDelete, 'd'}, {proto.PermRead, 'r'}, {proto.PermWrite, 'w'}, {proto.PermAdmin, 'a'}} {
		if p&x.bit != 0 {
			b.WriteByte(x.name)
		}
	}
	return b.String()
}

func sortedStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}
