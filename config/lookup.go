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

// ConnectString returns the shard's client addresses joined by commas, the
// form ZooKeeper clients take as a connect string.
func (s *Shard) ConnectString() string {
	addrs := make([]string, len(s.Members))
	for i, m := range s.Members {
		addrs[i] = m.ClientAddr
	}
	return strings.Join(addrs, ",")
}

func known(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}
