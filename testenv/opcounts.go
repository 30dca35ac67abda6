package testenv

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xkeeper/xkeeper/keeper"
)

// OpCounts returns how many client requests of each operation the running
// members of shards (every shard if none is named) have answered, summed
// by operation name (the op label of xkeeper_request_duration_seconds: a
// multi counts once as "multi", whatever it holds). Requests through a
// node's endpoint count at the member that served them.
func (c *Cluster) OpCounts(shards ...string) map[string]uint64 {
	c.t.Helper()
	if len(shards) == 0 {
		for _, sh := range c.Config.Shards {
			shards = append(shards, sh.Name)
		}
	}
	var members []*keeper.Member
	for _, s := range shards {
		for _, m := range c.Shard(s).Members {
			if r := c.Member(m.ID); r != nil {
				members = append(members, r)
			}
		}
	}
	counts, err := OpCounts(members...)
	if err != nil {
		c.t.Fatal(err)
	}
	return counts
}

// OpCounts sums the members' requests answered by operation name.
func OpCounts(members ...*keeper.Member) (map[string]uint64, error) {
	counts := map[string]uint64{}
	for _, m := range members {
		reg := prometheus.NewRegistry()
		if err := reg.Register(m.Server.Latency()); err != nil {
			return nil, err
		}
		families, err := reg.Gather()
		if err != nil {
			return nil, err
		}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "op" {
						counts[l.GetValue()] += s.GetHistogram().GetSampleCount()
					}
				}
			}
		}
	}
	return counts, nil
}
