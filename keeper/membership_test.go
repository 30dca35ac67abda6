package keeper_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/testenv"
)

// voters returns the voters of the shard's configuration, as its leader
// knows it, sorted.
func voters(t *testing.T, c *testenv.Cluster) []string {
	var ids []string
	members, err := c.Member(c.WaitLeader("a")).Replica.Members()
	require.NoError(t, err)
	for _, m := range members {
		if m.Voter {
			ids = append(ids, m.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// running returns the client addresses of the running members.
func running(c *testenv.Cluster) []string {
	var addrs []string
	for _, m := range c.Shard("a").Members {
		if c.Member(m.ID) != nil {
			addrs = append(addrs, m.ClientAddr)
		}
	}
	return addrs
}

// TestMembershipGrowShrinkAndReplace grows a shard from 3 members to 5 and
// shrinks it back to 3 (its leader among those removed) while clients
// write, then replaces a killed member with a new one on other ports: no
// acknowledged write is lost, every member converges, and the differential
// cases against ZooKeeper 3.8 pass on the changed shard.
func TestMembershipGrowShrinkAndReplace(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3,
		Security: func(s *config.Security) { s.FourLetterWords = []string{"*"} }}) // as the differential cases expect
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := testenv.TestLogger(t)
	setup := connectZK(t, c.Servers("a"), 10*time.Second)
	_, err := setup.Create("/m", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		load  sync.WaitGroup
	)
	for i := range 4 {
		conn := connectZK(t, c.Servers("a"), 10*time.Second)
		load.Go(func() {
			// Bounded by the test's deadline and a count no run nears: a
			// budget of 5,000 creates each ran out before the last change
			// in about half the runs, and the test then waited for writes
			// nobody made.
			for k := 0; k < 1_000_000; k++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				p := fmt.Sprintf("/m/w-%d-%d", i, k)
				if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err == nil {
					mu.Lock()
					acked = append(acked, p)
					mu.Unlock()
				}
			}
		})
	}
	writes := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	more := func(what string) {
		n := writes()
		waitFor(t, 30*time.Second, "writes "+what, func() bool { return writes() >= n+100 })
	}
	more("before any change")

	grow := func() string {
		id := c.Grow("a")
		c.Join(id)
		_, err := keeper.AddMember(ctx, c.Config, id, log)
		require.NoError(t, err, "add %s", id)
		more("after adding " + id)
		return id
	}
	a4, a5 := grow(), grow()
	assert.Equal(t, []string{"a1", "a2", "a3", a4, a5}, voters(t, c))

	remove := func(id string) {
		_, err := keeper.RemoveMember(ctx, c.Config, "a", id, log)
		require.NoError(t, err, "remove %s", id)
		c.Kill(id)
		more("after removing " + id)
	}
	remove(a5)
	leader := c.WaitLeader("a")
	remove(leader)
	assert.Len(t, voters(t, c), 3)
	assert.NotContains(t, voters(t, c), leader)

	// Replace a dead member: remove it, add a new one on other ports.
	dead := ""
	for _, id := range voters(t, c) {
		if id != c.WaitLeader("a") {
			dead = id
		}
	}
	c.Kill(dead)
	more("with " + dead + " dead")
	remove(dead)
	replacement := grow()
	assert.Len(t, voters(t, c), 3)
	assert.Contains(t, voters(t, c), replacement)

	ms, err := keeper.ListMembers(ctx, c.Config, "a", log)
	require.NoError(t, err)
	assert.NotEmpty(t, ms.Disagreements, "the cluster file still lists the removed members")
	for _, id := range []string{a5, leader, dead} {
		assert.True(t, slices.ContainsFunc(ms.Disagreements, func(d string) bool {
			return d == fmt.Sprintf("member %s is in the cluster file but not in the replicated configuration", id)
		}), "%s: %v", id, ms.Disagreements)
	}

	close(stop)
	load.Wait()
	waitConverged(t, c, "a")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acknowledged writes through 5 membership changes", len(acked))
	for _, m := range c.Shard("a").Members {
		km := c.Member(m.ID)
		if km == nil {
			continue
		}
		km.Replica.View(func(st *fsm.State) {
			for _, p := range acked {
				if st.Node(p) == nil {
					t.Errorf("member %s lost acknowledged write %s", m.ID, p)
				}
			}
		})
	}
	runCompatCases(t, c, running(c), testenv.StartZooKeeper(t, 3).Servers(), compatCases, compatPrefix)
}

// TestJoiningMemberNeverBootstraps: a member started with Join waits for
// the leader to add it; restarted without Join before that, it still
// does not bootstrap a shard of its own.
func TestJoiningMemberNeverBootstraps(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3})
	id := c.Grow("a")
	c.Join(id)
	c.Kill(id)
	c.Restart(id) // no Join: the marker in its data directory holds
	m := c.Member(id)
	members, err := m.Replica.Members()
	require.NoError(t, err)
	assert.Empty(t, members, "it has no configuration until the leader adds it")
	assert.False(t, m.Replica.IsLeader())
	_, err = keeper.AddMember(context.Background(), c.Config, id, testenv.TestLogger(t))
	require.NoError(t, err)
	self := replica.Member{ID: id, RaftAddr: c.Shard("a").Members[3].RaftAddr, Voter: true}
	waitFor(t, 20*time.Second, "the new member to know itself a voter of its shard", func() bool {
		members, _ := m.Replica.Members()
		return len(members) == 4 && slices.Contains(members, self) && m.Replica.Leader() != ""
	})
}

// TestAddRefusesAMemberOfAnotherShard: a new member started without Join
// bootstraps a shard of its own; adding it is refused before anything
// changes, with the reason.
func TestAddRefusesAMemberOfAnotherShard(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3})
	id := c.Grow("a")
	c.Restart(id) // not Join
	_, err := keeper.AddMember(context.Background(), c.Config, id, testenv.TestLogger(t))
	require.ErrorIs(t, err, keeper.ErrOtherShard)
	assert.Contains(t, err.Error(), "--join")
	c.Kill(id) // it follows no leader of the shard
	assert.Equal(t, []string{"a1", "a2", "a3"}, voters(t, c))
	members, err := c.Member(c.WaitLeader("a")).Replica.Members()
	require.NoError(t, err)
	assert.Len(t, members, 3, "no non-voter left behind")
}
