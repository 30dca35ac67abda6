package testenv

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/xshard"
)

// Cluster is a set of in-process keeper shards on free loopback ports,
// each member with its own data directory, for tests and benchmarks.
type Cluster struct {
	t       testing.TB
	Config  *config.Cluster
	mu      sync.Mutex
	members map[string]*keeper.Member // nil while killed
	nodes   map[string]*keeper.Node   // of a cluster on nodes; nil while killed
	opts    keeper.Options
	clock   func(member string) func() time.Time
	started map[string]bool // members and nodes started once: later starts do not bootstrap
}

// ClusterOptions shapes a test cluster.
type ClusterOptions struct {
	Shards  int
	Members int
	Fsync   bool
	Tick    time.Duration    // default 500ms: session timeouts from 1s to 10s
	Clock   func() time.Time // wall clock of every member
	// MemberClock, if set, gives each member its own wall clock (fault
	// tests skew members apart); it overrides Clock. On nodes it is asked
	// for each node's clock, by the node's name.
	MemberClock func(member string) func() time.Time
	Keeper      func(*config.Keeper)
	Security    func(*config.Security) // adjusts the security section (the secret is set)
	XHook       xshard.Hook            // fault injection in every member's transaction driver
	// Only, if set, names the members StartConfig starts, or on nodes the
	// nodes; the others stay stopped (Restart, RestartNode start them).
	Only []string
	// Nodes, if set, places the shards on that many nodes, one member of
	// each shard per node (config.LayoutNodes); Members is then ignored,
	// and a node is killed and restarted whole (KillNode, RestartNode).
	Nodes int
	// NetNS, with Nodes, runs each node of a process cluster in a network
	// namespace of its own (StartNet), which ProcessCluster.Net cuts,
	// delays or makes lossy.
	NetNS bool
	// Mounts, with Nodes, is the mount table of the nodes' client
	// endpoints (root shard a).
	Mounts []config.Mount
	// HideKeeperSystem has every member's client port answer NoNode to
	// reads by path under /keeper, as ZooKeeper does: ClickHouse then sees
	// no feature flags (keeper.Options.HideKeeperSystem). A node's
	// endpoint, which routes, still serves them.
	HideKeeperSystem bool
}

// TestKeeper returns keeper tunables with Raft timings short enough for
// failover tests on loopback.
func TestKeeper(fsync bool) config.Keeper {
	k := config.Default()
	k.Tick = 500 * time.Millisecond
	k.HeartbeatTimeout = 500 * time.Millisecond
	k.ElectionTimeout = 500 * time.Millisecond
	k.LeaderLeaseTimeout = 250 * time.Millisecond
	k.Fsync = fsync
	k.LeaderBalanceInterval = 500 * time.Millisecond
	return k
}

// NewClusterConfig lays out shards × members on free loopback ports with
// data directories under dir (see config.Layout).
func NewClusterConfig(t testing.TB, dir string, shards, members int) *config.Cluster {
	c, err := config.Layout(dir, shards, members, FreePorts(t, 2*shards*members), TestKeeper(false))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// layoutOf lays out o's shards under dir: o.Members members each
// (NewClusterConfig), or one member on each of o.Nodes nodes.
func layoutOf(t testing.TB, dir string, o ClusterOptions) *config.Cluster {
	if o.Nodes == 0 {
		return NewClusterConfig(t, dir, o.Shards, o.Members)
	}
	c, err := config.LayoutNodes(dir, o.Shards, o.Nodes, FreePorts(t, config.NodePorts(o.Shards, o.Nodes)), TestKeeper(false))
	if err != nil {
		t.Fatal(err)
	}
	c.Mounts = o.Mounts
	return c
}

// StartCluster starts every member and waits until each shard has a leader.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Shards == 0 {
		o.Shards = 1
	}
	if o.Members == 0 {
		o.Members = 3
	}
	cfg := layoutOf(t, t.TempDir(), o)
	cfg.Keeper.Fsync = o.Fsync
	if o.Tick > 0 {
		cfg.Keeper.Tick = o.Tick
	}
	if o.Keeper != nil {
		o.Keeper(&cfg.Keeper)
	}
	if o.Security != nil {
		o.Security(&cfg.Security)
	}
	return StartConfig(t, cfg, o)
}

// StartConfig starts the members of cfg, or those o.Only names (the
// options' shape and keeper settings are ignored; its clocks and hooks
// apply), and waits until each shard has a leader and, on nodes, until
// the leaders are balanced (WaitBalanced).
func StartConfig(t testing.TB, cfg *config.Cluster, o ClusterOptions) *Cluster {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, Config: cfg, members: map[string]*keeper.Member{}, nodes: map[string]*keeper.Node{},
		opts: keeper.Options{Logger: TestLogger(t), Clock: o.Clock, XHook: o.XHook, HideKeeperSystem: o.HideKeeperSystem}, clock: o.MemberClock, started: map[string]bool{}}
	t.Cleanup(c.Stop)
	for _, n := range cfg.Nodes {
		if len(o.Only) == 0 || slices.Contains(o.Only, n.Name) {
			c.RestartNode(n.Name)
		}
	}
	for _, sh := range cfg.Shards {
		for _, m := range sh.Members {
			if m.Node == "" && (len(o.Only) == 0 || slices.Contains(o.Only, m.ID)) {
				c.Restart(m.ID)
			}
		}
	}
	for _, sh := range cfg.Shards {
		c.WaitLeader(sh.Name)
	}
	if len(cfg.Nodes) > 0 && len(o.Only) == 0 && cfg.Keeper.LeaderBalanceInterval > 0 {
		c.WaitBalanced()
	}
	return c
}

// StartShard starts one shard of n members.
func StartShard(t testing.TB, n int) *Cluster {
	return StartCluster(t, ClusterOptions{Shards: 1, Members: n})
}

// Stop closes every node and member.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// All at once: closed one by one, the last members of a shard would
	// lose their quorum first and wait out requests that can no longer
	// commit.
	var wg sync.WaitGroup
	for name, n := range c.nodes {
		if n != nil {
			wg.Go(func() { n.Close() })
			for _, m := range n.Members {
				delete(c.members, m.Replica.ID())
			}
		}
		delete(c.nodes, name)
	}
	for id, m := range c.members {
		if m != nil {
			wg.Go(func() { m.Close() })
		}
		delete(c.members, id)
	}
	wg.Wait()
}

// Member returns a running member, or nil.
func (c *Cluster) Member(id string) *keeper.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[id]
}

// Kill stops a member abruptly as far as its peers and clients can tell:
// its port and Raft transport close and its goroutines stop.
func (c *Cluster) Kill(id string) {
	c.mu.Lock()
	m := c.members[id]
	c.members[id] = nil
	c.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

// Restart starts a stopped member again from its data directory. A
// member's first start in the cluster is its shard's first start
// (keeper.Options.Bootstrap: it bootstraps if its directory is empty);
// later ones are plain restarts, which an empty directory refuses.
func (c *Cluster) Restart(id string) {
	c.t.Helper()
	c.start(id, false)
}

// Bootstrap starts a member as one of a new shard's first members
// (keeper.Options.Bootstrap), as `xkeeper serve --bootstrap` does: on an
// emptied data directory, a shard made anew.
func (c *Cluster) Bootstrap(id string) error {
	c.t.Helper()
	opts := c.memberOpts(id)
	opts.Bootstrap = true
	return c.startWith(id, opts)
}

// Join starts a member that the cluster file lists but its shard does not
// have yet (see Grow), as a newcomer waiting for keeper.AddMember.
func (c *Cluster) Join(id string) {
	c.t.Helper()
	c.start(id, true)
}

func (c *Cluster) start(id string, join bool) {
	c.t.Helper()
	opts := c.memberOpts(id)
	opts.Join = join
	opts.Bootstrap = !join && c.firstStart(id)
	if err := c.startWith(id, opts); err != nil {
		c.t.Fatalf("start member %s: %v", id, err)
	}
}

// memberOpts returns the options member (or node) id starts with.
func (c *Cluster) memberOpts(id string) keeper.Options {
	opts := c.opts
	if c.clock != nil {
		opts.Clock = c.clock(id)
	}
	return opts
}

// firstStart reports whether member or node id was never started in the
// cluster before, and records that it now is.
func (c *Cluster) firstStart(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.started[id]
	c.started[id] = true
	return first
}

func (c *Cluster) startWith(id string, opts keeper.Options) error {
	var m *keeper.Member
	err := retryBusyPort(func() (err error) { m, err = keeper.Start(c.Config, id, opts); return err })
	if err != nil {
		return err
	}
	c.firstStart(id)
	c.mu.Lock()
	c.members[id] = m
	c.mu.Unlock()
	return nil
}

// Grow adds a new member to a shard of the cluster file, on free ports
// with a data directory of its own, and returns its id. The file is
// copied, not changed in place: running members keep reading theirs.
func (c *Cluster) Grow(shard string) string {
	c.t.Helper()
	grown := *c.Config
	grown.Shards = slices.Clone(c.Config.Shards)
	i := slices.IndexFunc(grown.Shards, func(sh config.Shard) bool { return sh.Name == shard })
	if i < 0 {
		c.t.Fatalf("no shard %s", shard)
	}
	sh := &grown.Shards[i]
	sh.Members = slices.Clone(sh.Members)
	id := ""
	for n := len(sh.Members) + 1; id == "" || slices.ContainsFunc(sh.Members, func(m config.Member) bool { return m.ID == id }); n++ {
		id = fmt.Sprintf("%s%d", shard, n)
	}
	ports := FreePorts(c.t, 2)
	sh.Members = append(sh.Members, config.Member{ID: id,
		ClientAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		RaftAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		DataDir:    filepath.Join(c.t.TempDir(), id)})
	if err := grown.Validate(); err != nil {
		c.t.Fatal(err)
	}
	c.Config = &grown
	return id
}

// Isolate cuts a member's Raft traffic from its peers (or restores it).
func (c *Cluster) Isolate(id string, on bool) {
	if m := c.Member(id); m != nil {
		m.Replica.Isolate(on)
	}
}

// Shard returns a shard's configuration.
func (c *Cluster) Shard(name string) *config.Shard {
	sh, err := c.Config.Shard(name)
	if err != nil {
		c.t.Fatal(err)
	}
	return sh
}

// Servers returns a shard's client addresses.
func (c *Cluster) Servers(shard string) []string { return c.Shard(shard).ClientAddrs() }

// Leader returns the id of a shard's leader, or "" if no running member
// leads.
func (c *Cluster) Leader(shard string) string {
	for _, m := range c.Shard(shard).Members {
		if r := c.Member(m.ID); r != nil && r.Replica.IsLeader() {
			return m.ID
		}
	}
	return ""
}

// WaitLeader polls until the shard has a leader that every running member
// knows, and returns its id.
func (c *Cluster) WaitLeader(shard string) string {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if id := c.Leader(shard); id != "" && c.agree(shard, id) {
			return id
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("shard %s has no leader after 20s", shard)
	return ""
}

// Follower returns a member of shard that does not lead it, once the shard
// has a leader every running member knows.
func (c *Cluster) Follower(shard string) config.Member {
	c.t.Helper()
	leader := c.WaitLeader(shard)
	for _, m := range c.Shard(shard).Members {
		if m.ID != leader {
			return m
		}
	}
	c.t.Fatalf("shard %s has no follower", shard)
	return config.Member{}
}

func (c *Cluster) agree(shard, leader string) bool {
	for _, m := range c.Shard(shard).Members {
		if r := c.Member(m.ID); r != nil && r.Replica.Leader() != leader {
			return false
		}
	}
	return true
}

// TestLogger returns a logger that writes warnings and errors into the
// test's log while the test runs, and drops them afterwards.
func TestLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

var _ io.Writer = (*testWriter)(nil)

// MemberRouter returns a router that speaks to the shards as a member
// does, over authenticated member links: tests send the cross-shard
// protocol's messages with it. It is closed with the test.
func (c *Cluster) MemberRouter() *xshard.Router {
	auth, err := keeper.PeerAuth(c.Config, TestLogger(c.t))
	if err != nil {
		c.t.Fatal(err)
	}
	r := keeper.MemberRouter(c.Config, auth, TestLogger(c.t))
	c.t.Cleanup(r.Close)
	return r
}
