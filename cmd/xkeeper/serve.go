package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/monitor"
	"github.com/xkeeper/xkeeper/keeper/router"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
)

func newServe(g *globals) *cobra.Command {
	var (
		member, node    string
		join, bootstrap bool
	)
	cmd := &cobra.Command{
		Use:         "serve --config FILE (--member ID | --node NAME) [--bootstrap | --join]",
		Annotations: map[string]string{annotationServes: "yes"},
		Short:       "Run one keeper member, or every member a node hosts, until SIGTERM",
		Long: `Run one keeper member (--member), or a node (--node): every member the
cluster file places on the node, of several shards, in this one process,
sharing the node's peer port.

A member whose data directory is empty starts only when told how: with
--bootstrap on the first start of a new shard (its first member in the
cluster file bootstraps it with a new random identity, the others take it
from that one), or with --join as a new member of a running shard.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ids, err := hostedMembers(g, member, node)
			if err != nil {
				return err
			}
			keeper.TuneGC(c.Keeper)
			if !c.Keeper.Fsync {
				slog.Warn("keeper.fsync is false: the Raft logs are not synced to disk, and a machine that crashes can lose acknowledged writes (meant for tests)")
			}
			opts := keeper.Options{Join: join, Bootstrap: bootstrap}
			var stop func() error
			if node != "" {
				_, stop, err = startNode(c, node, opts)
			} else {
				_, stop, err = startMember(c, member, opts)
			}
			if err != nil {
				return err
			}
			waitSignal()
			slog.Info("shutting down", "members", ids)
			return stop()
		},
	}
	cmd.Flags().StringVar(&member, "member", "", "member id from the cluster file")
	cmd.Flags().StringVar(&node, "node", "", "node name from the cluster file: serve every member it hosts")
	cmd.Flags().BoolVar(&join, "join", false, "a new member of a running shard: wait for `xkeeper member add` instead of bootstrapping the shard")
	cmd.Flags().BoolVar(&bootstrap, "bootstrap", false, "the first start of a new shard: an empty data directory starts the shard (ignored for a directory that holds a member)")
	return cmd
}

func newBootstrap(g *globals) *cobra.Command {
	var member, node string
	return withMemberFlags(&cobra.Command{
		Use:   "bootstrap --config FILE (--member ID | --node NAME)",
		Short: "Mark the empty data directories of a new shard's members so that their next start bootstraps the shard",
		Long: `Mark the empty data directory of a member (--member) or of every member
a node hosts (--node) so that its next xkeeper serve starts it as
serve --bootstrap would: for a service manager (the packaged systemd unit)
that runs serve with fixed arguments. The mark is gone once the member
holds its shard's identity; a directory that holds a member is refused.
Run it as the user the members run as.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ids, err := hostedMembers(g, member, node)
			if err != nil {
				return err
			}
			dirs, err := keeper.MarkBootstrap(c, ids)
			for _, d := range dirs {
				fmt.Fprintf(cmd.OutOrStdout(), "marked %s: its next xkeeper serve bootstraps the new shard\n", d)
			}
			return err
		},
	}, &member, &node)
}

// hostedMembers loads the cluster file and returns the members --member
// or --node (exactly one of them given) names: the member, or every
// member the node hosts.
func hostedMembers(g *globals, member, node string) (*config.Cluster, []string, error) {
	if err := g.needConfig(); err != nil {
		return nil, nil, err
	}
	if (member == "") == (node == "") {
		return nil, nil, usage(errors.New("give --member ID or --node NAME"))
	}
	c, err := g.loadCluster()
	if err != nil {
		return nil, nil, err
	}
	ids := []string{member}
	if node != "" {
		_, ids, err = c.Node(node)
	} else {
		_, _, err = c.Member(member)
	}
	if err != nil {
		return nil, nil, usage(err)
	}
	return c, ids, nil
}

// withMemberFlags adds --member and --node to cmd.
func withMemberFlags(cmd *cobra.Command, member, node *string) *cobra.Command {
	cmd.Flags().StringVar(member, "member", "", "member id from the cluster file")
	cmd.Flags().StringVar(node, "node", "", "node name from the cluster file: every member it hosts")
	return cmd
}

// startMember starts member id of c and, if it has an http_addr, its
// monitor; stop closes both.
func startMember(c *config.Cluster, id string, opts keeper.Options) (*keeper.Member, func() error, error) {
	m, err := keeper.Start(c, id, opts)
	if err != nil {
		return nil, nil, err
	}
	stop, err := withMonitors(c, []*keeper.Member{m}, m.Close, nil)
	return m, stop, err
}

// startNode starts the node called name in this process (its members
// sharing peer ports, and its client endpoint: keeper.StartNode), and the
// monitors of the members with an http_addr; stop closes them all.
func startNode(c *config.Cluster, name string, opts keeper.Options) (*keeper.Node, func() error, error) {
	n, err := keeper.StartNode(c, name, opts)
	if err != nil {
		return nil, nil, err
	}
	stop, err := withMonitors(c, n.Members, n.Close, n.Endpoint)
	return n, stop, err
}

// withMonitors starts the monitor of every member in ms that has an
// http_addr (the root shard's member also exports the node's endpoint, if
// any) and returns a stop that closes them, then calls closeMembers; on
// error it closes everything itself.
func withMonitors(c *config.Cluster, ms []*keeper.Member, closeMembers func() error, endpoint *router.Router) (stop func() error, err error) {
	var stops []func()
	stop = func() error {
		for _, s := range stops {
			s()
		}
		return closeMembers()
	}
	for _, m := range ms {
		id := m.Replica.ID()
		shard, self, err := c.Member(id)
		if err != nil {
			stop()
			return nil, err
		}
		slog.Info("serving", "member", id, "client_addr", m.Server.Addr())
		if self.HTTPAddr == "" {
			continue
		}
		mo := monitor.New(m, shard.Name, c.Keeper.ElectionTimeout, workflowGauges()...)
		if endpoint != nil && shard.Name == c.Root() {
			// The node's endpoint, on its member of the root shard.
			if err := mo.Register(endpoint.Collectors()...); err != nil {
				stop()
				return nil, err
			}
		}
		stopMonitor, at, err := monitor.Serve(self.HTTPAddr, mo, slog.Default())
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, stopMonitor)
		slog.Info("metrics at http://"+at.String()+"/metrics", "member", id)
	}
	return stop, nil
}

// waitSignal blocks until SIGINT or SIGTERM.
func waitSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
	signal.Stop(ch)
}

// workflowGauges are the partition moves and the S3 catalog as a member
// sees them in its shard's znodes.
func workflowGauges() []monitor.DirGauge {
	return []monitor.DirGauge{
		{Name: "xkeeper_moves_in_flight", Help: "Partition moves in flight recorded on this shard.", Dir: movepart.MovesDir, Depth: 1},
		{Name: "xkeeper_move_locks", Help: "Table partitions locked by moves in flight on this shard.", Dir: movepart.LocksDir, Depth: 1},
		{Name: "xkeeper_moves_journal", Help: "Finished moves kept in this shard's journal.", Dir: movepart.JournalDir, Depth: 1},
		{Name: "xkeeper_s3_objects", Help: "S3 objects of the catalog homed on this shard.", Dir: objects.ObjectsDir, Depth: 2},
		{Name: "xkeeper_s3_references", Help: "References of table part files to S3 objects kept on this shard.", Dir: objects.RefsDir, Depth: 3},
	}
}
