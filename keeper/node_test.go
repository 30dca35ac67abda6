package keeper_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// TestNodesShareOnePeerPort: two shards whose members three nodes host,
// each node with one peer port. Both shards elect; a follower's write
// reaches its leader through the shared port; a cross-shard transaction
// sent over the peer ports alone commits; killing the node that leads a shard leaves both shards serving
// on the other two; the restarted node catches up on both.
func TestNodesShareOnePeerPort(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3})
	for i, n := range c.Config.Nodes {
		_, ids, err := c.Config.Node(n.Name)
		require.NoError(t, err)
		assert.Equal(t, []string{fmt.Sprintf("a%d", i+1), fmt.Sprintf("b%d", i+1)}, ids)
		for _, id := range ids {
			_, m, err := c.Config.Member(id)
			require.NoError(t, err)
			assert.Equal(t, n.PeerAddr, m.RaftAddr, "member %s's raft address", id)
		}
	}
	// A follower forwards its clients' writes to the leader.
	write := func(shard, path string) {
		t.Helper()
		leader := c.WaitLeader(shard)
		for _, m := range c.Shard(shard).Members {
			if m.ID != leader && c.Member(m.ID) != nil {
				conn := connectZK(t, []string{m.ClientAddr}, 10*time.Second)
				_, err := conn.Create(path, []byte(m.ID), 0, zk.WorldACL(zk.PermAll))
				require.NoError(t, err, "create %s through follower %s", path, m.ID)
				return
			}
		}
		t.Fatalf("shard %s has no running follower", shard)
	}
	write("a", "/on-a")
	write("b", "/on-b")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The cross-shard protocol travels on the peer ports: a router that
	// knows no member's client port still reaches both shards.
	auth, err := keeper.PeerAuth(c.Config, testenv.TestLogger(t))
	require.NoError(t, err)
	r := keeper.MemberRouter(peersOnly(t, c.Config), auth, testenv.TestLogger(t))
	defer r.Close()
	_, err = xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{createOp("/tx-a")}},
		{Shard: "b", Requests: []proto.MultiOp{createOp("/tx-b")}},
	}, xshard.Options{})
	require.NoError(t, err)

	leader := c.WaitLeader("a")
	_, m, err := c.Config.Member(leader)
	require.NoError(t, err)
	c.KillNode(m.Node)
	assert.NotEqual(t, leader, c.WaitLeader("a"))
	c.WaitLeader("b")
	write("a", "/after-a")
	write("b", "/after-b")

	c.RestartNode(m.Node)
	_, back, err := c.Config.Node(m.Node)
	require.NoError(t, err)
	for _, id := range back {
		shard := id[:1]
		waitFor(t, 20*time.Second, id+" to catch up", func() bool {
			km := c.Member(id)
			found := 0
			km.Replica.View(func(st *fsm.State) {
				for _, p := range []string{"/on-", "/tx-", "/after-"} {
					if st.Node(p+shard) != nil {
						found++
					}
				}
			})
			return found == 3
		})
	}
}

// peersOnly returns the cluster as a router that may use peer ports only
// sees it: every member's client address is one that nothing listens on.
func peersOnly(t *testing.T, c *config.Cluster) *config.Cluster {
	cp := *c
	cp.Shards = slices.Clone(c.Shards)
	var members int
	for _, sh := range cp.Shards {
		members += len(sh.Members)
	}
	dead := testenv.FreePorts(t, members)
	for i := range cp.Shards {
		ms := slices.Clone(cp.Shards[i].Members)
		for j := range ms {
			ms[j].ClientAddr, dead = fmt.Sprintf("127.0.0.1:%d", dead[0]), dead[1:]
		}
		cp.Shards[i].Members = ms
	}
	return &cp
}

// TestNodeProcessesHostEveryShard: `xkeeper serve --node` processes, one
// per node, each hosting a member of both shards on one peer port. Both
// shards take writes; after SIGKILL of the node that leads shard a, both
// elect on the other nodes and take writes; the restarted node serves
// what was written while it was down on both shards.
func TestNodeProcessesHostEveryShard(t *testing.T) {
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3, Fsync: true})
	write := func(path string) { t.Helper(); createOnShards(t, pc, path, "a", "b") }
	write("/before")
	_, leader, err := pc.Config.Member(pc.WaitLeader("a"))
	require.NoError(t, err)
	pc.Kill(leader.Node)
	<-pc.Process(leader.Node).Done()
	pc.WaitLeader("a")
	pc.WaitLeader("b")
	write("/while-down")

	pc.Start(leader.Node)
	_, back, err := pc.Config.Node(leader.Node)
	require.NoError(t, err)
	for _, id := range back {
		waitServes(t, pc, id, "/while-down")
	}
}

// TestNodesBalanceLeaders: three shards on three nodes end with one
// leader per node, from whatever the elections gave; with a node down
// the other two lead all three; back, it leads one again.
func TestNodesBalanceLeaders(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3})
	leadsPerNode := func() map[string]int {
		leads := map[string]int{}
		for _, sh := range c.Config.Shards {
			id := c.Leader(sh.Name)
			if id == "" {
				return nil
			}
			_, m, err := c.Config.Member(id)
			require.NoError(t, err)
			leads[m.Node]++
		}
		return leads
	}
	balanced := func() bool {
		l := leadsPerNode()
		return len(l) == 3 && l["n1"] == 1 && l["n2"] == 1 && l["n3"] == 1
	}
	waitFor(t, 30*time.Second, "one leader per node", balanced)

	c.KillNode("n1")
	for _, sh := range c.Config.Shards {
		c.WaitLeader(sh.Name)
	}
	l := leadsPerNode()
	assert.Equal(t, 3, l["n2"]+l["n3"], "the other two nodes lead every shard: %v", l)
	c.RestartNode("n1")
	waitFor(t, 30*time.Second, "one leader per node after n1 came back", balanced)
}

// TestNodesUnderNetworkFaults runs three node processes, each in a network
// namespace of its own, hosting both shards. The node that leads shard a
// is cut off from everyone by dropping every packet of its link: both
// shards go on writing on the other two nodes, and once the link is back
// the node serves what they wrote. Then two nodes lose each other (each
// still reaches the third), and writes through the third succeed on both
// shards; then one node's link drops 10% of its packets, and writes
// succeed on both shards; then every node's packets to the others are held
// back 40 ms (testenv's delay line: this kernel has no tc netem), and
// writes succeed on both shards, each commit taking at least that.
func TestNodesUnderNetworkFaults(t *testing.T) {
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3, Fsync: true, NetNS: true})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range pc.Config.Nodes {
				t.Logf("node %s:\n%s", n.Name, pc.Process(n.Name).LogTail(120))
			}
		}
	})
	write := func(path string) { t.Helper(); createOnShards(t, pc, path, "a", "b") }
	write("/before")
	_, leader, err := pc.Config.Member(pc.WaitLeader("a"))
	require.NoError(t, err)
	cut := leader.Node
	pc.Net.Isolate(cut, true)
	waitFor(t, 30*time.Second, "shard a to elect a leader away from "+cut, func() bool {
		id := pc.Leader("a")
		_, m, err := pc.Config.Member(id)
		return err == nil && m.Node != cut
	})
	write("/while-cut")
	pc.Net.Isolate(cut, false)
	_, back, err := pc.Config.Node(cut)
	require.NoError(t, err)
	for _, id := range back {
		waitServes(t, pc, id, "/while-cut")
	}

	// n1 and n2 lose each other: each shard's leader keeps a quorum with
	// n3, and n3's members, which reach everyone, take writes. (A member
	// cut off from its leader fails new sessions after leaderWait, so a
	// client that tried it first would spend that long before moving on.)
	pc.Net.Partition("n1", "n2")
	for _, shard := range []string{"a", "b"} {
		_, m, err := pc.Config.Member(shard + "3")
		require.NoError(t, err)
		conn := connectZK(t, []string{m.ClientAddr}, 20*time.Second)
		_, err = conn.Create("/while-partitioned", nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err, "create on shard %s through n3 while n1 and n2 are apart", shard)
		conn.Close()
	}
	pc.Net.Heal()
	pc.Net.Lossy("n3", 10)
	write("/while-lossy")
	pc.Net.Heal()

	const delay = 40 * time.Millisecond
	for _, from := range pc.Config.Nodes {
		for _, to := range pc.Config.Nodes {
			if from.Name != to.Name {
				pc.Net.Delay(from.Name, to.Name, delay)
			}
		}
	}
	began := time.Now()
	write("/while-slow")
	require.GreaterOrEqual(t, time.Since(began), 2*delay, "two commits, each a leader's append held back on its way")
	pc.Net.Heal()
	write("/after-slow")
}

// createOnShards creates path on each of shards of pc, through any member.
// A lost connection is retried, as a client does: the balancer may move a
// leadership while the create is forwarded, and the member then drops the
// client (the outcome is unknown to it), as ZooKeeper does.
func createOnShards(t *testing.T, pc *testenv.ProcessCluster, path string, shards ...string) {
	t.Helper()
	for _, shard := range shards {
		conn := connectZK(t, pc.Servers(shard), 20*time.Second)
		retryLost(t, func() error {
			_, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll))
			return err
		}, "create %s on shard %s", path, shard)
		conn.Close()
	}
}

// waitServes polls until member id of pc answers, through its own client
// port after a sync, that path exists. A request may fail on the way: the
// member may just have started, or gain a leadership by a transfer.
func waitServes(t *testing.T, pc *testenv.ProcessCluster, id, path string) {
	t.Helper()
	_, m, err := pc.Config.Member(id)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, id+" to serve "+path, func() bool {
		conn, _, err := zk.Connect([]string{m.ClientAddr}, 5*time.Second, zk.WithLogInfo(false))
		if err != nil {
			return false
		}
		defer conn.Close()
		if _, err := conn.Sync("/"); err != nil {
			return false
		}
		ok, _, err := conn.Exists(path)
		return err == nil && ok
	})
}

// TestPruneNodeLogDropsWhatNoMemberNames moves shard b's member off node
// n1 (removed from the shard, from the cluster file and from the disk):
// its entries stay in n1's node log until `node prune` drops them, which
// only a stopped node allows and only with commit; the group of the
// member that stays is listed with its directory and never touched, and
// the node serves from it after the prune.
func TestPruneNodeLogDropsWhatNoMemberNames(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3})
	var moved, stays config.Member
	for _, sh := range c.Config.Shards {
		for _, m := range sh.Members {
			if m.Node == "n1" && sh.Name == "b" {
				moved = m
			} else if m.Node == "n1" {
				stays = m
			}
		}
	}
	for _, shard := range []string{"a", "b"} {
		conn := connectZK(t, c.Servers(shard), 10*time.Second)
		_, err := conn.Create("/kept-"+shard, []byte("x"), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		conn.Close()
	}

	_, err := keeper.PruneNodeLog(c.Config, "n1", true, testenv.TestLogger(t))
	require.ErrorIs(t, err, nodelog.ErrInUse, "a running node's log is not pruned")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = keeper.RemoveMember(ctx, c.Config, "b", moved.ID, testenv.TestLogger(t))
	require.NoError(t, err)
	c.KillNode("n1")
	smaller := *c.Config
	smaller.Shards = slices.Clone(c.Config.Shards)
	for i := range smaller.Shards {
		smaller.Shards[i].Members = slices.DeleteFunc(slices.Clone(smaller.Shards[i].Members), func(m config.Member) bool { return m.ID == moved.ID })
	}
	require.NoError(t, smaller.Validate())
	c.Config = &smaller

	groups, err := keeper.PruneNodeLog(c.Config, "n1", false, testenv.TestLogger(t))
	require.NoError(t, err)
	require.Len(t, groups, 2, "with its directory still there, the moved member's group is named: %+v", groups)
	for _, g := range groups {
		assert.NotEmpty(t, g.DataDir, "group %s", g.Group)
	}

	require.NoError(t, os.RemoveAll(moved.DataDir))
	groups, err = keeper.PruneNodeLog(c.Config, "n1", false, testenv.TestLogger(t))
	require.NoError(t, err)
	orphan := byDir(t, groups, "")
	assert.Positive(t, orphan.Last, "the moved member's entries are still there")
	assert.False(t, orphan.Dropped, "without commit nothing is dropped")
	assert.Equal(t, stays.DataDir, byDir(t, groups, stays.DataDir).DataDir)

	unmounted := stays.DataDir + ".unmounted"
	require.NoError(t, os.Rename(stays.DataDir, unmounted))
	_, err = keeper.PruneNodeLog(c.Config, "n1", true, testenv.TestLogger(t))
	require.ErrorContains(t, err, stays.ID, "a configured member whose directory is missing stops the prune")
	require.NoError(t, os.Rename(unmounted, stays.DataDir))
	groups, err = keeper.PruneNodeLog(c.Config, "n1", false, testenv.TestLogger(t))
	require.NoError(t, err)
	require.Len(t, groups, 2, "the refused prune dropped nothing: %+v", groups)

	groups, err = keeper.PruneNodeLog(c.Config, "n1", true, testenv.TestLogger(t))
	require.NoError(t, err)
	assert.True(t, byDir(t, groups, "").Dropped)
	groups, err = keeper.PruneNodeLog(c.Config, "n1", false, testenv.TestLogger(t))
	require.NoError(t, err)
	require.Len(t, groups, 1, "only the staying member's group is left: %+v", groups)
	assert.Equal(t, stays.DataDir, groups[0].DataDir)

	c.RestartNode("n1")
	c.WaitLeader("a")
	waitFor(t, 20*time.Second, stays.ID+" to hold shard a's znode again", func() bool {
		found := false
		c.Member(stays.ID).Replica.View(func(st *fsm.State) { found = st.Node("/kept-a") != nil })
		return found
	})
}

// byMember returns the member of dir in members.
func byMember(members []keeper.MemberLog, dir string) keeper.MemberLog {
	for _, m := range members {
		if m.DataDir == dir {
			return m
		}
	}
	return keeper.MemberLog{}
}

// byDir returns the one group named by dir ("" for none).
func byDir(t *testing.T, groups []keeper.NodeLogGroup, dir string) keeper.NodeLogGroup {
	i := slices.IndexFunc(groups, func(g keeper.NodeLogGroup) bool { return g.DataDir == dir })
	require.GreaterOrEqual(t, i, 0, "a group named by %q in %+v", dir, groups)
	return groups[i]
}

// TestAdoptMemberLogsMovesLogsIntoTheNodeLog: members that kept raft-wal
// logs on a node (keeper.log_store: wal) are moved into the node log while
// the node is stopped; the node comes back on it, its members hold what
// they held and catch up on what was written meanwhile. A running node is
// refused, and so is a move the configured log store would undo.
func TestAdoptMemberLogsMovesLogsIntoTheNodeLog(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3,
		Keeper: func(k *config.Keeper) { k.LogStore = replica.LogStoreWAL }})
	for _, shard := range []string{"a", "b"} {
		conn := connectZK(t, c.Servers(shard), 10*time.Second)
		_, err := conn.Create("/kept-"+shard, []byte("x"), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		conn.Close()
	}
	_, err := keeper.AdoptMemberLogs(c.Config, "n1", false, testenv.TestLogger(t))
	require.ErrorIs(t, err, replica.ErrMemberRunning)

	applied := map[string]uint64{} // data directory → what its member had applied
	_, ids, err := c.Config.Node("n1")
	require.NoError(t, err)
	for _, id := range ids {
		_, m, err := c.Config.Member(id)
		require.NoError(t, err)
		applied[m.DataDir] = c.Member(id).Replica.Status().AppliedIndex
	}
	c.KillNode("n1")
	conn := connectZK(t, c.Servers("a"), 10*time.Second)
	_, err = conn.Create("/while-down", []byte("x"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	conn.Close()
	_, err = keeper.AdoptMemberLogs(c.Config, "n1", true, testenv.TestLogger(t))
	require.ErrorContains(t, err, "keeper.log_store", "members would refuse the node log they were moved to")

	c.Config.Keeper.LogStore = ""
	before, err := keeper.AdoptMemberLogs(c.Config, "n1", false, testenv.TestLogger(t))
	require.NoError(t, err)
	require.Len(t, before, 2)
	for _, m := range before {
		assert.Equal(t, replica.LogStoreWAL, m.Store, "member %s", m.Member)
		assert.Positive(t, m.Entries, "member %s", m.Member)
		assert.False(t, m.Moved, "without commit nothing moves")
	}
	after, err := keeper.AdoptMemberLogs(c.Config, "n1", true, testenv.TestLogger(t))
	require.NoError(t, err)
	for i, m := range after {
		assert.True(t, m.Moved, "member %s", m.Member)
		assert.Equal(t, before[i].Entries, m.Entries, "member %s: every entry moved", m.Member)
		_, err := os.Stat(filepath.Join(m.DataDir, "wal"))
		assert.ErrorIs(t, err, os.ErrNotExist, "member %s's raft-wal log is gone", m.Member)
	}
	again, err := keeper.AdoptMemberLogs(c.Config, "n1", true, testenv.TestLogger(t))
	require.NoError(t, err)
	for _, m := range again {
		assert.Equal(t, replica.LogStoreNode, m.Store)
		assert.False(t, m.Moved, "a second run moves nothing")
	}
	groups, err := keeper.PruneNodeLog(c.Config, "n1", false, testenv.TestLogger(t))
	require.NoError(t, err)
	require.Len(t, groups, 2, "each member's log is a group of the node log: %+v", groups)
	for _, g := range groups {
		assert.GreaterOrEqual(t, g.Last, applied[g.DataDir], "%s's group holds every entry its member had applied", g.DataDir)
		assert.Equal(t, g.Last-g.First+1, byMember(after, g.DataDir).Entries)
	}

	c.RestartNode("n1")
	for _, m := range after {
		waitFor(t, 20*time.Second, m.Member+" to hold what it held and what was written while it was down", func() bool {
			ok := false
			c.Member(m.Member).Replica.View(func(st *fsm.State) {
				ok = st.Node("/kept-a") != nil || st.Node("/kept-b") != nil
				if m.Member[0] == 'a' {
					ok = ok && st.Node("/while-down") != nil
				}
			})
			return ok
		})
	}
}

// TestLateFirstNodeIsStillAdopted: a new cluster's third node starts
// after the other two have run for a while. The leader balancer keeps
// every shard's leadership on its first member meanwhile (its first
// members take the shard's identity only from it, and only while no other
// member has led), so the late node's members are adopted and vote;
// before, n1 handed its leaderships to n2 within a round and n3's first
// start was refused as a wiped member's.
func TestLateFirstNodeIsStillAdopted(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3, Only: []string{"n1", "n2"}})
	balanceRounds := 8 * c.Config.Keeper.LeaderBalanceInterval
	deadline := time.Now().Add(balanceRounds)
	for time.Now().Before(deadline) {
		for _, sh := range c.Config.Shards {
			if leader := c.Leader(sh.Name); leader != "" {
				require.Equal(t, sh.Members[0].ID, leader, "shard %s's leadership stays with its first member while n3 has not started", sh.Name)
			}
		}
		time.Sleep(c.Config.Keeper.LeaderBalanceInterval / 4) // sampling the leaders, not waiting for an event
	}
	c.RestartNode("n3") // its first start: fails the test if a member is refused
	for _, sh := range c.Config.Shards {
		waitFor(t, 30*time.Second, "shard "+sh.Name+" has three voters", func() bool {
			members, err := c.Member(sh.Members[0].ID).Replica.Members()
			voters := 0
			for _, m := range members {
				if m.Voter {
					voters++
				}
			}
			return err == nil && voters == 3
		})
	}
}
