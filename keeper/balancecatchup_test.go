package keeper_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// TestBalancerWaitsForTheTargetsState: the leader balancer hands a
// leadership only to a member whose state machine has applied nearly all
// the leader committed, not one that raft has merely handed the entries
// to. Three shards on three nodes; n1 is cut off and loses its
// leaderships; its members' state machines are held while each shard
// commits 200 entries (more than the 64 the balancer allows); the cut
// heals and raft hands n1's members every entry. For many balancing
// rounds n1 is given no leadership; once its state machines run again it
// leads one shard.
func TestBalancerWaitsForTheTargetsState(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3})
	c.WaitBalanced()
	_, onN1, err := c.Config.Node("n1")
	require.NoError(t, err)
	ledFromN1 := func() int {
		n := 0
		for _, id := range onN1 {
			if c.Member(id).Replica.IsLeader() {
				n++
			}
		}
		return n
	}
	c.IsolateNode("n1", true)
	waitFor(t, 30*time.Second, "every shard led from n2 or n3", func() bool {
		for _, sh := range c.Config.Shards {
			if id := c.Leader(sh.Name); id == "" || slices.Contains(onN1, id) {
				return false
			}
		}
		return true
	})
	var resumes []func()
	defer func() {
		for _, resume := range resumes {
			resume()
		}
	}()
	for _, id := range onN1 {
		resumes = append(resumes, testenv.StallState(c.Member(id).Replica))
	}
	for _, sh := range c.Config.Shards {
		conn := connectZK(t, []string{c.Member(c.Leader(sh.Name)).Server.Addr()}, 10*time.Second)
		for i := range 200 {
			_, err := conn.Create(fmt.Sprintf("/b%03d", i), nil, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
		}
		conn.Close()
	}
	c.IsolateNode("n1", false)
	waitFor(t, 30*time.Second, "raft to hand n1's members every committed entry", func() bool {
		for _, id := range onN1 {
			r := c.Member(id).Replica
			leader := c.Leader(r.Status().Shard)
			if leader == "" {
				return false
			}
			raftApplied, _ := strconv.ParseUint(r.Stats()["applied_index"], 10, 64)
			if raftApplied < c.Member(leader).Replica.Status().CommitIndex {
				return false
			}
		}
		return true
	})

	// The balancers run every 500 ms in testenv: 4 s is 8 rounds.
	throughout(t, 4*time.Second, func() string {
		if n := ledFromN1(); n > 0 {
			return fmt.Sprintf("%d leaderships handed to members whose state machines have applied none of 200 entries", n)
		}
		return ""
	})
	for _, id := range onN1 {
		require.Less(t, c.Member(id).Replica.StateApplied()+64, c.Member(id).Replica.Status().CommitIndex, "member %s was held throughout", id)
	}

	for _, resume := range resumes {
		resume()
	}
	waitFor(t, 30*time.Second, "n1 to lead a shard once its state machines ran again", func() bool { return ledFromN1() == 1 })
}
