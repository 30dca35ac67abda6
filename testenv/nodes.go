package testenv

import (
	"strings"
	"time"

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
// data directory.
func (c *Cluster) RestartNode(name string) {
	c.t.Helper()
	_, ids, err := c.Config.Node(name)
	if err != nil {
		c.t.Fatal(err)
	}
	opts := c.opts
	if c.clock != nil {
		opts.Clock = c.clock(name)
	}
	var n *keeper.Node
	if err := retryBusyPort(func() (err error) { n, err = keeper.StartNode(c.Config, ids, opts); return err }); err != nil {
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
