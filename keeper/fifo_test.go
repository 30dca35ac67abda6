package keeper_test

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestConnectionWritesApplyAsAPrefixAcrossLeaderLoss pipelines creates of
// numbered znodes on one connection to a follower and kills the leader
// meanwhile. The follower loses the writes it had forwarded to the dead
// leader, answers them with connection loss and closes the connection;
// whatever the connection sent after them must not apply at the new
// leader, so the znodes that exist are a prefix of the numbers sent, as
// ZooKeeper's client order guarantees (without the member's refusal of a
// broken connection's later writes, 5 runs in 6 found a gap). The same
// through a node's one endpoint, the leader's node killed; that path
// showed no gap even without the refusal, and guards the property there.
func TestConnectionWritesApplyAsAPrefixAcrossLeaderLoss(t *testing.T) {
	t.Run("members", func(t *testing.T) {
		c := testenv.StartShard(t, 3)
		leader := c.WaitLeader("a")
		addr := c.Follower("a").ClientAddr
		pipelineAcrossLeaderLoss(t, addr, func() { c.Kill(leader) }, func() { c.WaitLeader("a") })
	})
	t.Run("nodes", func(t *testing.T) {
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3})
		c.WaitBalanced()
		leader := c.WaitLeader("a")
		var leaderNode, other string
		for _, m := range c.Shard("a").Members {
			if m.ID == leader {
				leaderNode = m.Node
			} else {
				other = m.Node
			}
		}
		pipelineAcrossLeaderLoss(t, c.Endpoint(other), func() { c.KillNode(leaderNode) }, func() { c.WaitLeader("a") })
	})
}

// pipelineAcrossLeaderLoss pipelines numbered creates on one connection to
// addr, calls kill after 300 answers, reads until the connection closes,
// then, once recovered has returned, checks that what applied is a prefix.
func pipelineAcrossLeaderLoss(t *testing.T, addr string, kill, recovered func()) {
	nc := openFIFO(t, addr, "/fifo")
	deadline := time.Now().Add(30 * time.Second)
	go writeNumbered(nc, "/fifo", 50_000, deadline)
	nc.SetReadDeadline(deadline)
	answered, killed := 0, false
	for {
		frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
		if err != nil {
			break
		}
		h, _ := decodeReply(t, frame)
		require.Equal(t, proto.ErrOK, h.Err, "reply to xid %d", h.Xid)
		if answered++; answered == 300 {
			kill()
			killed = true
		}
	}
	require.True(t, killed, "the connection closed before the leader was killed")
	require.True(t, time.Now().Before(deadline), "the connection was not closed after the leader died")
	t.Logf("%d creates answered before the connection closed", answered)

	recovered()
	nums := numbered(t, addr, "/fifo")
	require.GreaterOrEqual(t, len(nums), answered, "an answered create is missing")
	for i, n := range nums {
		if !assert.Equal(t, i, n, "the creates that applied are not a prefix of those sent: %d is missing", i) {
			break
		}
	}
}

// openFIFO opens a raw session on addr and creates parent, the parent of
// the numbered znodes.
func openFIFO(t *testing.T, addr, parent string) net.Conn {
	nc, resp := handshake(t, addr, proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)})
	require.NotZero(t, resp.SessionID)
	_, err := nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: 1, OpCode: proto.OpCreate},
		&proto.CreateRequest{Path: parent, ACL: proto.WorldACL(proto.PermAll)}))
	require.NoError(t, err)
	h, _ := readReply(t, nc)
	require.Equal(t, proto.ErrOK, h.Err)
	return nc
}

// writeNumbered creates parent/0, parent/1, … up to n on nc, pipelined in
// bursts of 100 (xid = number + 2), until the connection closes or the
// deadline passes.
func writeNumbered(nc net.Conn, parent string, n int, deadline time.Time) {
	for k := 0; k < n && time.Now().Before(deadline); k += 100 {
		var burst []byte
		for i := k; i < min(k+100, n); i++ {
			burst = proto.AppendFrame(burst, &proto.RequestHeader{Xid: int32(i + 2), OpCode: proto.OpCreate},
				&proto.CreateRequest{Path: fmt.Sprint(parent, "/", i), ACL: proto.WorldACL(proto.PermAll)})
		}
		if _, err := nc.Write(burst); err != nil {
			return
		}
	}
}

// numbered returns the numbers of parent's children, in order, read
// through a new session on addr after a sync.
func numbered(t *testing.T, addr, parent string) []int {
	zc, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	defer zc.Close()
	_, err = zc.Sync(parent)
	require.NoError(t, err)
	names, _, err := zc.Children(parent)
	require.NoError(t, err)
	nums := make([]int, len(names))
	for i, n := range names {
		nums[i], err = strconv.Atoi(n)
		require.NoError(t, err)
	}
	slices.Sort(nums)
	return nums
}

// TestLeadershipHandoverLosesNoWrite pipelines numbered creates on one
// connection to each member of a shard and hands the leadership on
// meanwhile, as a node's leader balancer does. The leader stops proposing,
// lets the entries in flight commit, hands on, and relays what waited, its
// clients' and its followers', to the new leader in order; a follower that
// relinks first waits for what it sent the old leader, and the new leader
// sends its clients' writes after what it forwarded before, until that has
// come back relayed. Every create is answered without error, in order, and
// applies in order (before, raft refused the
// writes that came during the handover, the old leader answered those in
// flight with connection loss, and the connections closed).
//
// Production Raft timings: the test is about a planned handover, and the
// tests' short heartbeat timeout (500 ms) let a loaded CI machine start an
// unplanned election in the middle of it (DESIGN-NOTES, "A transfer loses
// no write": what an unplanned election does to pipelined writes).
func TestLeadershipHandoverLosesNoWrite(t *testing.T) {
	t.Run("members", func(t *testing.T) {
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3, Keeper: testenv.ProductionRaft})
		handoverLosesNoWrite(t, c, func(m config.Member) string { return m.ClientAddr })
	})
	t.Run("nodes", func(t *testing.T) { // one shard: the balancer has nothing to move back
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Nodes: 3, Keeper: testenv.ProductionRaft})
		c.WaitBalanced()
		handoverLosesNoWrite(t, c, func(m config.Member) string { return c.Endpoint(m.Node) })
	})
}

// handoverLosesNoWrite writes on a connection to each member of shard a
// (at the address addr gives), hands a's leadership on after 300 answers,
// and checks every write's answer and apply order.
func handoverLosesNoWrite(t *testing.T, c *testenv.Cluster, addr func(config.Member) string) {
	leader := c.WaitLeader("a")
	addrs := map[string]string{}
	var to config.Member
	for _, m := range c.Shard("a").Members {
		switch {
		case m.ID == leader:
			addrs["/leader"] = addr(m)
		case to.ID == "":
			to = m
			addrs["/successor"] = addr(m)
		default:
			addrs["/follower"] = addr(m)
		}
	}
	const n = 3000
	deadline := time.Now().Add(time.Minute)
	type outcome struct {
		parent   string
		answered int
		err      error
	}
	outcomes, started := make(chan outcome, len(addrs)), make(chan struct{}, len(addrs))
	for parent, addr := range addrs {
		nc := openFIFO(t, addr, parent)
		nc.SetReadDeadline(deadline)
		go writeNumbered(nc, parent, n, deadline)
		go func() {
			answered, err := readNumbered(nc, n, func() { started <- struct{}{} })
			outcomes <- outcome{parent, answered, err}
		}()
	}
	for range addrs {
		<-started
	}
	require.NoError(t, c.Member(leader).Replica.TransferLeadership(to.ID, to.RaftAddr))
	for range addrs {
		o := <-outcomes
		assert.NoError(t, o.err, "connection writing %s", o.parent)
		assert.Equal(t, n, o.answered, "creates of %s answered", o.parent)
	}
	require.Equal(t, to.ID, c.WaitLeader("a"))
	for parent, addr := range addrs {
		assert.Equal(t, n, len(numbered(t, addr, parent)), "creates of %s applied", parent)
		assertAppliedInOrder(t, addr, parent, n)
	}
}

// assertAppliedInOrder checks that parent/0 … parent/n-1 were created in
// the order of their numbers (their czxids grow).
func assertAppliedInOrder(t *testing.T, addr, parent string, n int) {
	zc, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	defer zc.Close()
	var last int64
	for i := range n {
		_, st, err := zc.Exists(fmt.Sprint(parent, "/", i))
		require.NoError(t, err)
		if !assert.Greater(t, st.Czxid, last, "%s/%d applied before %s/%d", parent, i, parent, i-1) {
			return
		}
		last = st.Czxid
	}
}

// readNumbered reads the replies to writeNumbered's n creates, each to be
// without error and in order; it calls started after 300.
func readNumbered(nc net.Conn, n int, started func()) (int, error) {
	for answered := 0; answered < n; answered++ {
		frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
		if err != nil {
			return answered, err
		}
		h, _, err := parseReply(frame)
		switch {
		case err != nil:
			return answered, err
		case h.Err != proto.ErrOK || h.Xid != int32(answered+2):
			return answered, fmt.Errorf("reply %d: xid %d, %v", answered, h.Xid, h.Err)
		}
		if answered == 300 {
			started()
		}
	}
	return n, nil
}
