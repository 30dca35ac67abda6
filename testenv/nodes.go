package testenv

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
)

// KillNode stops a node of the cluster, every member it hosts and its
// peer port, abruptly as far as the other nodes can tell.
func (c *Cluster) KillNode(name string) {
	c.mu.Lock()
	n := c.nodes[name]
	c.nodes[name] = nil
	if n != nil {
		for _, m := range n.Members {
			c.members[m.Replica.ID()] = nil
		}
	}
	c.mu.Unlock()
	if n != nil {
		n.Close()
	}
}

// RestartNode starts a stopped node again, every member it hosts from its
// data directory (its first start in the cluster bootstraps its members'
// shards, as Restart does for a member).
func (c *Cluster) RestartNode(name string) {
	c.t.Helper()
	opts := c.memberOpts(name)
	opts.Bootstrap = c.firstStart(name)
	var n *keeper.Node
	if err := retryBusyPort(func() (err error) { n, err = keeper.StartNode(c.Config, name, opts); return err }); err != nil {
		c.t.Fatalf("start node %s: %v", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[name] = n
	for _, m := range n.Members {
		c.members[m.Replica.ID()] = m
	}
}

// IsolateNode cuts the Raft traffic of every member a node hosts from
// their peers (or restores it): the node is cut off as by a network
// partition, its client ports still answer.
func (c *Cluster) IsolateNode(name string, on bool) {
	c.mu.Lock()
	n := c.nodes[name]
	c.mu.Unlock()
	if n != nil {
		for _, m := range n.Members {
			m.Replica.Isolate(on)
		}
	}
}

// WaitBalanced polls until the nodes' leader balancers have nothing left
// to hand on: every shard has a leader its members know, and no node leads
// two more shards than another (keeper's balancer moves a leadership only
// then). Until then a transfer can come at any moment and cost a client
// its connection, as any change of leader does. A cluster whose nodes do
// not all host the same shards is not balanced by keeper, and is not
// waited for.
func (c *Cluster) WaitBalanced() {
	c.t.Helper()
	nodesOf := func(sh config.Shard) string {
		var nodes []string
		for _, m := range sh.Members {
			nodes = append(nodes, m.Node)
		}
		slices.Sort(nodes)
		return strings.Join(nodes, ",")
	}
	for _, sh := range c.Config.Shards {
		if nodesOf(sh) != nodesOf(c.Config.Shards[0]) {
			return
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		leads := map[string]int{}
		for _, m := range c.Config.Shards[0].Members {
			leads[m.Node] = 0
		}
		for _, sh := range c.Config.Shards {
			_, m, err := c.Config.Member(c.WaitLeader(sh.Name))
			if err != nil {
				c.t.Fatal(err)
			}
			leads[m.Node]++
		}
		counts := slices.Collect(maps.Values(leads))
		if slices.Max(counts)-slices.Min(counts) < 2 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("testenv: leaders not balanced over the nodes after 30s: %v", leads)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NodeRunning reports whether a node of the cluster runs.
func (c *Cluster) NodeRunning(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name] != nil
}

// retryBusyPort runs start until it does not fail for a port in use, for
// at most 10 s: a just-closed port can take a moment to be free again.
func retryBusyPort(start func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := start()
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Endpoint returns the address of a node's client endpoint, waiting until
// its mount points exist; "" if the node does not run.
func (c *Cluster) Endpoint(name string) string {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[name]
	c.mu.Unlock()
	if n == nil || n.Endpoint == nil {
		return ""
	}
	select {
	case <-n.Endpoint.Ready():
	case <-time.After(30 * time.Second):
		c.t.Fatalf("node %s: the mount points were not created within 30 s", name)
	}
	return n.Endpoint.Addr()
}
