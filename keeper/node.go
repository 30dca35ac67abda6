package keeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/keeper/router"
)

// Node is the members of several shards that one process hosts. Members
// with the same raft address (a node's peer port) share one listener:
// each Raft link and forwarding link finds its member by the identity of
// the shard it offers.
type Node struct {
	Members []*Member
	// Endpoint is the node's client endpoint (nodes[].client_addr), nil
	// if it has none.
	Endpoint *router.Router
	log      *nodelog.Log // the members' shared Raft log
	ports    []*replica.PeerPort
	stop     context.CancelFunc // ends the leader balancers
	wg       sync.WaitGroup
	closed   sync.Once
	closeErr error
}

// StartNode starts the node called name: every member the cluster file
// places on it, each as Start would, with the node's Raft log (package
// nodelog, in DATA_DIR/nodelog) for the members whose data directory keeps
// its log there, one peer port per raft address they have, a leader
// balancer per port (keeper.leader_balance_interval), and the node's
// client endpoint if it has a client_addr. On error nothing is left
// running.
func StartNode(c *config.Cluster, name string, opts Options) (_ *Node, err error) {
	if opts.PeerPort != nil {
		return nil, errors.New("keeper: StartNode opens the peer ports itself")
	}
	node, ids, err := c.Node(name)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	balance, stop := context.WithCancel(context.Background())
	n := &Node{stop: stop}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	auth, err := PeerAuth(c, opts.Logger)
	if err != nil {
		return nil, err
	}
	if n.log, err = nodelog.Open(filepath.Join(node.DataDir, nodeLogDir), nodelog.Options{
		Fsync: c.Keeper.Fsync, Logger: opts.Logger.With("node", name)}); err != nil {
		return nil, fmt.Errorf("keeper: node %s: open the node log: %w", name, err)
	}
	// The first members of their shards first: a member of a new shard
	// that is not its first waits for its first (chooseStart), maybe on
	// another node, which must not be waiting for this one.
	ids = slices.Clone(ids)
	slices.SortStableFunc(ids, func(a, b string) int { return firstOfShard(c, b) - firstOfShard(c, a) })
	ports := map[string]*replica.PeerPort{}
	shards := map[string]router.Member{}
	balancers := map[string]*balancer{}
	for _, id := range ids {
		shard, self, err := c.Member(id)
		if err != nil {
			return nil, err
		}
		b, ok := balancers[self.RaftAddr]
		if !ok {
			log := opts.Logger.With("peer_addr", self.RaftAddr)
			port, err := replica.ListenPeers(self.RaftAddr, auth, log)
			if err != nil {
				return nil, err
			}
			n.ports = append(n.ports, port)
			ports[self.RaftAddr] = port
			b = &balancer{c: c, self: self.RaftAddr, auth: auth, log: log, failed: map[string]time.Time{}}
			balancers[self.RaftAddr] = b
		}
		mopts := opts
		mopts.PeerPort = ports[self.RaftAddr]
		mopts.NodeLog = n.log
		m, err := Start(c, id, mopts)
		if err != nil {
			return nil, fmt.Errorf("keeper: member %s: %w", id, err)
		}
		n.Members = append(n.Members, m)
		shards[shard.Name] = m.Server
		b.members = append(b.members, m)
	}
	if node.ClientAddr != "" || node.SecureClientAddr != "" {
		if n.Endpoint, err = listen(c, node, shards, opts.Logger); err != nil {
			return nil, err
		}
	}
	if every := c.Keeper.LeaderBalanceInterval; every > 0 {
		for _, b := range balancers {
			n.wg.Go(func() { b.run(balance, every) })
		}
	}
	return n, nil
}

// firstOfShard is 1 if member id is the first of its shard in c, else 0.
func firstOfShard(c *config.Cluster, id string) int {
	if sh, _, err := c.Member(id); err == nil && sh.Members[0].ID == id {
		return 1
	}
	return 0
}

// nodeLogDir is the node log's directory in the node's data directory.
const nodeLogDir = "nodelog"

// Close stops the leader balancers, every member, the peer ports, then
// the node log; later calls return what the first did.
func (n *Node) Close() error {
	n.closed.Do(func() {
		n.stop()
		n.wg.Wait()
		var errs []error
		if n.Endpoint != nil {
			errs = append(errs, n.Endpoint.Close())
		}
		for _, m := range n.Members {
			errs = append(errs, m.Close())
		}
		for _, p := range n.ports {
			errs = append(errs, p.Close())
		}
		if n.log != nil {
			errs = append(errs, n.log.Close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// listen opens a node's client endpoint (and its TLS twin), routing to the
// members that serve each shard.
func listen(c *config.Cluster, node *config.Node, shards map[string]router.Member, log *slog.Logger) (*router.Router, error) {
	cfg := router.Config{Addr: node.ClientAddr, SecureAddr: node.SecureClientAddr, Root: c.Root(), Mounts: c.Mounts,
		Shards: shards, MaxPacket: c.Keeper.MaxPacketBytes, MaxConnsPerIP: c.Security.ConnectionsPerIP(), Logger: log}
	if cfg.SecureAddr != "" {
		var err error
		if cfg.TLS, err = c.Security.ClientTLS.ServerConfig(); err != nil {
			return nil, err
		}
	}
	r, err := router.Listen(cfg)
	if err == nil {
		log.Info("client endpoint", "addr", r.Addr(), "secure_addr", r.SecureAddr(), "root_shard", c.Root(), "mounts", len(c.Mounts))
	}
	return r, err
}
