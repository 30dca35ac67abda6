package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Shard returns the shard called name, or an error listing the known shards.
func (c *Cluster) Shard(name string) (*Shard, error) {
	names := make([]string, 0, len(c.Shards))
	for i := range c.Shards {
		if c.Shards[i].Name == name {
			return &c.Shards[i], nil
		}
		names = append(names, c.Shards[i].Name)
	}
	return nil, fmt.Errorf("config: no shard %q; known shards: %s", name, known(names))
}

// Member returns the member with the given id and the shard it belongs to,
// or an error listing the known member ids.
func (c *Cluster) Member(id string) (*Shard, *Member, error) {
	var ids []string
	for i := range c.Shards {
		s := &c.Shards[i]
		for j := range s.Members {
			if s.Members[j].ID == id {
				return s, &s.Members[j], nil
			}
			ids = append(ids, s.Members[j].ID)
		}
	}
	return nil, nil, fmt.Errorf("config: no member %q; known members: %s", id, known(ids))
}

// ClickHouseServer returns the ClickHouse server called name, or an error
// listing the known servers.
func (c *Cluster) ClickHouseServer(name string) (*ClickHouseServer, error) {
	for i := range c.ClickHouse.Servers {
		if c.ClickHouse.Servers[i].Name == name {
			return &c.ClickHouse.Servers[i], nil
		}
	}
	return nil, fmt.Errorf("config: no ClickHouse server %q; known servers: %s", name, known(c.serverNames()))
}

// TableShard returns the keeper shard that holds the metadata of table
// database.table of ClickHouse server server: that of the entry of tables
// naming the table, else of the entry naming its database, else of the
// entry naming its server. A table no entry covers is an error.
func (c *Cluster) TableShard(server, database, table string) (*Shard, error) {
	best, rank := -1, 0
	for i, t := range c.Tables {
		if t.Server != server || (t.Database != "" && t.Database != database) || (t.Table != "" && t.Table != table) {
			continue
		}
		r := 1
		if t.Database != "" {
			r++
		}
		if t.Table != "" {
			r++
		}
		if r > rank {
			best, rank = i, r
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("config: no shard for table %s:%s.%s: no entry of tables names it, its database or its server", server, database, table)
	}
	return c.Shard(c.Tables[best].Shard)
}

func (c *Cluster) serverNames() []string {
	names := make([]string, len(c.ClickHouse.Servers))
	for i, s := range c.ClickHouse.Servers {
		names[i] = s.Name
	}
	return names
}

func (c *Cluster) shardNames() []string {
	names := make([]string, len(c.Shards))
	for i, s := range c.Shards {
		names[i] = s.Name
	}
	return names
}

// ConnectString returns the shard's client addresses joined by commas, the
// form ZooKeeper clients take as a connect string.
func (s *Shard) ConnectString() string { return strings.Join(s.ClientAddrs(), ",") }

// ClientAddrs returns the members' client addresses in file order.
func (s *Shard) ClientAddrs() []string {
	addrs := make([]string, len(s.Members))
	for i, m := range s.Members {
		addrs[i] = m.ClientAddr
	}
	return addrs
}

func known(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// Node returns the node called name and the ids of the members it hosts,
// or an error listing the known nodes.
func (c *Cluster) Node(name string) (*Node, []string, error) {
	for i := range c.Nodes {
		if n := &c.Nodes[i]; n.Name == name {
			var ids []string
			for _, s := range c.Shards {
				for _, m := range s.Members {
					if m.Node == name {
						ids = append(ids, m.ID)
					}
				}
			}
			if len(ids) == 0 {
				return nil, nil, fmt.Errorf("config: node %q hosts no member: give members node: %s", name, name)
			}
			return n, ids, nil
		}
	}
	return nil, nil, fmt.Errorf("config: no node %q; known nodes: %s", name, known(c.nodeNames()))
}

func (c *Cluster) nodeNames() []string {
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	return names
}

// PlaceOnNodes gives every member placed on a node what it takes from the
// node when the file leaves it out: the node's peer address as its raft
// address and a data directory under the node's. Load calls it before it
// validates.
func (c *Cluster) PlaceOnNodes() {
	for i := range c.Shards {
		for j := range c.Shards[i].Members {
			m := &c.Shards[i].Members[j]
			for _, n := range c.Nodes {
				if m.Node != "" && n.Name == m.Node {
					if m.RaftAddr == "" {
						m.RaftAddr = n.PeerAddr
					}
					if m.DataDir == "" && n.DataDir != "" {
						m.DataDir = filepath.Join(n.DataDir, m.ID)
					}
				}
			}
		}
	}
}

// Root returns the name of the root shard: root_shard, or the first shard.
func (c *Cluster) Root() string {
	if c.RootShard != "" || len(c.Shards) == 0 {
		return c.RootShard
	}
	return c.Shards[0].Name
}

// EndpointShards returns the shards a node's client endpoint routes to:
// the root shard, then each mounted shard once, in the file's order.
func (c *Cluster) EndpointShards() []string {
	shards := []string{c.Root()}
	for _, m := range c.Mounts {
		if !slices.Contains(shards, m.Shard) {
			shards = append(shards, m.Shard)
		}
	}
	return shards
}
