package config

import (
	"fmt"
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
