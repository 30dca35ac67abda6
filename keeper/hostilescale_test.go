package keeper_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// The hostile-scale suite (issue 37): each case is a client with nothing
// but the ZooKeeper protocol and no credentials sending what a member once
// could not store, read back or apply in time. While it runs, another
// client's writes are timed against their quiet figure; after it, every
// member is killed and restarted and each serves the tree it held. Below
// it, a seeded generator of legal requests at the bounds
// (TestLegalButLargeRequests).

// startHostileCluster starts shard a of three members, the shard under
// attack, and shard b of one, the other side of cross-shard transactions,
// with production's Raft timings: megabytes of entries under the race
// detector otherwise cost a leader its lease now and then.
func startHostileCluster(t *testing.T) *testenv.Cluster {
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 2, 3)
	cfg.Shards[1].Members = cfg.Shards[1].Members[:1]
	k := &cfg.Keeper
	k.HeartbeatTimeout, k.ElectionTimeout, k.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	return testenv.StartConfig(t, cfg, testenv.ClusterOptions{})
}

// leaderAddr returns the client address of shard's leader.
func leaderAddr(c *testenv.Cluster, shard string) string {
	leader := c.WaitLeader(shard)
	for _, m := range c.Shard(shard).Members {
		if m.ID == leader {
			return m.ClientAddr
		}
	}
	return ""
}

// memberAt returns the member of shard a whose client address is addr.
func memberAt(c *testenv.Cluster, addr string) *keeper.Member {
	for _, m := range c.Shard("a").Members {
		if m.ClientAddr == addr {
			return c.Member(m.ID)
		}
	}
	return nil
}

// probeWrites times writes of /probe through conn, one after another,
// until stop is closed and least are done, or most are done, or within
// has passed.
func probeWrites(conn *zk.Conn, stop <-chan struct{}, least, most int, within time.Duration) ([]time.Duration, error) {
	var took []time.Duration
	end := time.Now().Add(within)
	for len(took) < most && time.Now().Before(end) {
		if len(took) >= least {
			select {
			case <-stop:
				return took, nil
			default:
			}
		}
		start := time.Now()
		if _, err := conn.Set("/probe", []byte(strconv.Itoa(len(took))), -1); err != nil {
			return took, fmt.Errorf("probe write %d: %w", len(took), err)
		}
		took = append(took, time.Since(start))
	}
	return took, nil
}

// p99 returns the 99th percentile of took.
func p99(took []time.Duration) time.Duration {
	s := slices.Clone(took)
	slices.Sort(s)
	return s[max(0, (len(s)*99+99)/100-1)]
}

// latencyFloor is the slack allowed above the quiet p99 beside 3x it. A
// write's quiet p99 is a few milliseconds, 3x of which is below what one
// legal request at the bounds costs the writes queued behind it: applied
// by the leader (twice for a transaction: a dry run, then the commit)
// and by each of three members sharing the test's two cores with other
// test processes, at issue 37's goal of 200 ms for the worst legal apply
// that is up to a second. Measured here, without the race detector: a
// multi of 13,000 creates and deletes of ephemerals 1.0 s, issue 37's
// transaction 0.76 s, 1 MiB writes one after another 0.3 s. The race
// detector slows all of it about five times. What the suite catches
// stalls past that: applies of 11.5 s (an ACL), of 1.4 s on every member
// with 1.7 GB of garbage (ephemerals), lock holds of seconds (watch
// walks), a transaction that never ends, a shard lost at restart. The
// suites run without the race detector (skipOnRace).
func latencyFloor() time.Duration { return time.Second }

// skipOnRace skips a hostile-scale suite under the race detector, which
// slows every apply about five times: at issue 37's sizes the applies
// then pass a client's read timeout, and at smaller ones they say little.
// scripts/test.sh runs the suites in its pass without it.
func skipOnRace(t *testing.T) {
	if raceEnabled {
		t.Skip("runs without the race detector (scripts/test.sh's second pass): it slows the applies at issue 37's sizes past a client's timeout")
	}
}

// latencyBound is what the p99 during an attack may reach.
func latencyBound(quiet time.Duration) time.Duration {
	return max(3*quiet, quiet+latencyFloor())
}

// probeResult is what a probe running beside an attack found.
type probeResult struct {
	took []time.Duration
	err  error
}

// underAttack runs prepare against the client address of shard a's
// leader, then times another client's writes there, quiet and then while
// the attack prepare returned runs, and requires the p99 during the attack
// within latencyBound of the quiet one; then every member of both shards
// is killed and restarted, and each serves the tree it held.
func underAttack(t *testing.T, c *testenv.Cluster, prepare func(t *testing.T, addr string) (attack func())) {
	addr := leaderAddr(c, "a")
	attack := prepare(t, addr)
	other := connectZK(t, []string{addr}, 10*time.Second)
	if _, err := other.Create("/probe", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		require.ErrorIs(t, err, zk.ErrNodeExists)
	}
	quietTook, err := probeWrites(other, nil, 100, 100, time.Minute)
	require.NoError(t, err, "quiet")
	quiet := p99(quietTook)

	stop, done := make(chan struct{}), make(chan probeResult, 1)
	go func() {
		took, err := probeWrites(other, stop, 30, 50_000, 2*time.Minute)
		done <- probeResult{took, err}
	}()
	func() {
		defer close(stop)
		attack()
	}()
	during := <-done
	require.NoError(t, during.err, "another client's write during the attack")
	t.Logf("p99 of %d writes quiet %v, of %d during the attack %v (bound %v)",
		len(quietTook), quiet, len(during.took), p99(during.took), latencyBound(quiet))
	assert.LessOrEqual(t, p99(during.took), latencyBound(quiet), "another client's p99 during the attack")
	restartEveryMember(t, c)
}

// restartEveryMember kills every member of the cluster, restarts them,
// and requires each to serve the tree it held.
func restartEveryMember(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	var all []string
	for _, sh := range c.Config.Shards {
		for _, m := range sh.Members {
			all = append(all, m.ID)
		}
	}
	restartMembers(t, c, all...)
}

// restartMembers kills the members ids, restarts them, and requires the
// members of each shard to serve the tree they held.
func restartMembers(t *testing.T, c *testenv.Cluster, ids ...string) {
	t.Helper()
	before := agreedTrees(t, c, nil)
	for _, id := range ids {
		c.Kill(id)
	}
	for _, id := range ids {
		c.Restart(id)
	}
	after := agreedTrees(t, c, before)
	for shard, tree := range before {
		diff := treeDiff(tree.znodes, after[shard].znodes)
		assert.Empty(t, diff[:min(len(diff), 10)], "shard %s's tree after %v restarted: %d of %d znodes differ",
			shard, ids, len(diff), len(tree.znodes))
	}
}

// shardTree is the tree the members of a shard agree on, and the zxid
// they hold it at.
type shardTree struct {
	zxid   int64
	znodes map[string]string
}

// agreedTrees waits until the members of each shard hold one tree, at
// least at the zxid of the shard's tree in since if there is one, and
// returns it, by shard.
func agreedTrees(t *testing.T, c *testenv.Cluster, since map[string]shardTree) map[string]shardTree {
	t.Helper()
	trees := map[string]shardTree{}
	for _, sh := range c.Config.Shards {
		c.WaitLeader(sh.Name)
		var diff []string
		for end := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			first := memberTree(c.Member(sh.Members[0].ID))
			diff = nil
			for _, m := range sh.Members[1:] {
				other := memberTree(c.Member(m.ID))
				if other.zxid != first.zxid {
					diff = append(diff, fmt.Sprintf("%s at zxid %d, %s at %d", sh.Members[0].ID, first.zxid, m.ID, other.zxid))
				}
				diff = append(diff, treeDiff(first.znodes, other.znodes)...)
			}
			if first.zxid < since[sh.Name].zxid {
				diff = append(diff, fmt.Sprintf("zxid %d, before %d", first.zxid, since[sh.Name].zxid))
			}
			if len(diff) == 0 {
				trees[sh.Name] = first
				break
			}
			require.True(t, time.Now().Before(end), "shard %s's members hold different trees: %v", sh.Name, diff[:min(len(diff), 5)])
		}
	}
	return trees
}

// superIDs read every znode whatever its ACL.
var superIDs = []proto.ID{{Scheme: "super"}}

// memberTree returns every znode a member holds outside /zookeeper, by
// path (its data, stat and ACL), and the zxid it holds them at.
func memberTree(m *keeper.Member) shardTree {
	tree := shardTree{znodes: map[string]string{}}
	m.Replica.View(func(st *fsm.State) {
		tree.zxid = st.Zxid()
		var walk func(p string)
		walk = func(p string) {
			data, _, _ := st.Read(proto.OpGetData, &proto.PathWatchRequest{Path: p}, 0, superIDs)
			acl, _, _ := st.Read(proto.OpGetACL, &proto.PathWatchRequest{Path: p}, 0, superIDs)
			tree.znodes[p] = fmt.Sprintf("%+v %+v", data, acl)
			kids, _, _ := st.Read(proto.OpGetChildren, &proto.PathWatchRequest{Path: p}, 0, superIDs)
			if kids == nil {
				return
			}
			for _, k := range kids.(*proto.ChildrenResponse).Children {
				if child := path.Join(p, k); child != "/zookeeper" {
					walk(child)
				}
			}
		}
		walk("/")
	})
	return tree
}

// treeDiff names the znodes of a and b that differ.
func treeDiff(a, b map[string]string) []string {
	var diff []string
	for p, z := range a {
		if bz, ok := b[p]; !ok || bz != z {
			diff = append(diff, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			diff = append(diff, p)
		}
	}
	slices.Sort(diff)
	return diff
}

// sendAll sends reqs on s at once, numbered from 1.
func (s *rawSession) sendAll(op proto.OpCode, reqs ...proto.Record) {
	var frames []byte
	for i, r := range reqs {
		frames = proto.AppendFrame(frames, &proto.RequestHeader{Xid: int32(i + 1), OpCode: op}, r)
	}
	_, err := s.nc.Write(frames)
	require.NoError(s.t, err)
}

// each sends reqs on s one after another, each once the one before is
// answered, and returns the code each is answered with.
func (s *rawSession) each(op proto.OpCode, reqs ...proto.Record) []proto.Code {
	codes := make([]proto.Code, len(reqs))
	for i, r := range reqs {
		s.send(int32(i+1), op, r)
		s.nc.SetReadDeadline(time.Now().Add(time.Minute))
		h, _ := readReply(s.t, s.nc)
		require.Equal(s.t, int32(i+1), h.Xid)
		codes[i] = h.Err
	}
	return codes
}

// shortPath returns the i-th of a set of distinct paths under parent, as
// short as they go.
func shortPath(parent string, i int) string {
	return parent + "/" + strconv.FormatInt(int64(i), 36)
}

// mostThatFit returns the largest n for which the request mk(n) still
// fits a packet of proto.DefaultMaxPacket bytes.
func mostThatFit(mk func(n int) proto.Record) int {
	return testenv.Largest(func(n int) bool {
		return len(proto.AppendFrame(nil, &proto.RequestHeader{Xid: 1, OpCode: proto.OpMulti}, mk(n))) <= proto.DefaultMaxPacket
	})
}

// answeredAll returns an attack that sends reqs from a new session on
// addr, one after another, and asserts that each is answered want.
func answeredAll(t *testing.T, addr string, want proto.Code, op proto.OpCode, reqs ...proto.Record) func() {
	hostile := dialSession(t, addr, 0, nil)
	return func() {
		for i, code := range hostile.each(op, reqs...) {
			assert.Equal(t, want, code, "request %d of %d", i, len(reqs))
		}
	}
}

// digestACL returns n distinct digest entries with ids of pad bytes past
// their number, tagged so that two tags never share an entry.
func digestACL(tag string, n, pad int) []proto.ACL {
	acl := make([]proto.ACL, n)
	tail := strings.Repeat("x", pad)
	for i := range acl {
		acl[i] = proto.ACL{Perms: proto.PermRead, ID: proto.ID{Scheme: "digest", ID: tag + strconv.FormatInt(int64(i), 36) + ":" + tail}}
	}
	return acl
}

// txLeft counts the cross-shard records and locks every member of shard
// holds.
func txLeft(c *testenv.Cluster, shard string) int {
	n := 0
	for _, m := range c.Shard(shard).Members {
		c.Member(m.ID).Replica.View(func(st *fsm.State) { n += len(st.XRecords()) + st.LockCount() })
	}
	return n
}

// waitTxDrained requires every transaction record and lock gone from
// both shards within d.
func waitTxDrained(t *testing.T, c *testenv.Cluster, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); txLeft(c, "a")+txLeft(c, "b") != 0; time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "transaction records or locks left after %v", d)
	}
}

// createWith is a multi's create of path with data, of flags.
func createWith(path string, data []byte, flags int32) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, Data: data, ACL: proto.WorldACL(proto.PermAll), Flags: flags}}
}

// watchPaths returns n distinct paths of three characters under the
// root, none of which the suite creates: a setWatches of 100,001 of them
// fits a packet.
func watchPaths(n int) []string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&()*+,-=@^_"
	const k = len(alphabet)
	paths := make([]string, n)
	for i := range paths {
		paths[i] = string([]byte{'/', alphabet[i/k/k%k], alphabet[i/k%k], alphabet[i%k]})
	}
	return paths
}

// startIPv6Member starts a shard of one member whose client port listens
// on every address, IPv6 ones too.
func startIPv6Member(t *testing.T) *testenv.Cluster {
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 1)
	m := &cfg.Shards[0].Members[0]
	_, port, err := net.SplitHostPort(m.ClientAddr)
	require.NoError(t, err)
	m.ClientAddr = net.JoinHostPort("::", port)
	return testenv.StartConfig(t, cfg, testenv.ClusterOptions{})
}

// ipv6FreeBind is Linux's IPV6_FREEBIND: a socket may bind an address
// that is local only by a route (AnyIP), not by an interface.
const ipv6FreeBind = 78

// dialFrom opens a session on addr from the local address from, and
// reports whether the member took it.
func dialFrom(t *testing.T, from, addr string) bool {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second,
		Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_IPV6, ipv6FreeBind, 1) })
			return err
		}}
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)}))
	if err != nil {
		return false
	}
	var resp proto.ConnectResponse
	frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	return err == nil && proto.Unmarshal(frame, &resp) == nil && resp.SessionID != 0
}

// TestHostileScale runs each hostile client of issue 37 against a shard
// of three members (see underAttack). A hostile client sends each request
// once the one before is answered: pipelined megabytes delay everyone's
// writes behind them (the log is one queue, as ZooKeeper's is), which is
// load, not what the suite looks for. It runs without the race detector
// (skipOnRace).
func TestHostileScale(t *testing.T) {
	skipOnRace(t)
	c := startHostileCluster(t)
	admin := connectZK(t, c.Servers("a"), 10*time.Second)
	for _, p := range []string{"/tree", "/e", "/acl", "/big"} {
		_, err := admin.Create(p, []byte(p), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}

	// 80 identities of 900 KB then failing deletes: each write carried
	// them all, a 72 MB entry that no member could read back at its next
	// start. The first is refused; identities to the bounds and failing
	// deletes of the largest packet are served.
	t.Run("identities", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, addr string) func() {
			return func() {
				hostile := dialSession(t, addr, 0, nil)
				refused := -1
				for i := 0; i < 80 && refused < 0; i++ {
					code, closed := hostile.addAuth(fmt.Sprintf("%s%02d:pw", strings.Repeat("u", 900<<10), i))
					if code != proto.ErrOK {
						assert.Equal(t, proto.ErrAuthFailed, code, "a 900 KB identity")
						assert.True(t, closed, "a refused addAuth left the connection open")
						refused = i
					}
				}
				assert.Zero(t, refused, "the first 900 KB identity refused (-1: none)")
				if refused < 0 {
					hostile.failingDeletes(1, 64) // a write carrying all 80
				}
				ids := boundedIdentities()
				hostile = dialSession(t, addr, 0, nil)
				for _, id := range ids[:len(ids)-1] {
					code, _ := hostile.addAuth(id)
					require.Equal(t, proto.ErrOK, code, "an identity within the bounds")
				}
				for range 20 {
					hostile.failingDeletes(1, proto.DefaultMaxPacket-64)
				}
			}
		})
	})

	// One create on b (the coordinator) and 15,001 on a (3,001 under the
	// race detector): a's prepare reply
	// once outgrew the member link, which was retried for ever; the
	// transaction never ended and kept its znodes locked.
	t.Run("cross-shard transaction of 15,001 creates", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, _ string) func() {
			ops := []proto.MultiOp{createOp("/k")}
			for i := range 15_000 {
				ops = append(ops, createWith(fmt.Sprintf("/k/%05d", i), []byte("x"), 0))
			}
			tx := &proto.XTransactionRequest{ID: uuid.NewString(), Coordinator: "b", TimeoutMs: 15_000, Shards: []proto.ShardOps{
				{Shard: "b", Ops: proto.MultiRequest{Ops: []proto.MultiOp{createOp("/k")}}},
				{Shard: "a", Ops: proto.MultiRequest{Ops: ops}},
			}}
			hostile := dialSession(t, c.Servers("b")[0], 0, nil)
			return func() {
				code := hostile.each(proto.OpXTransaction, tx)[0]
				assert.Contains(t, []proto.Code{proto.ErrOK, proto.ErrTooLarge, proto.ErrOperationTimeout}, code, "the transaction's answer")
				waitTxDrained(t, c, 40*time.Second)
			}
		})
	})

	// Creates of /missing/x with the most distinct digest entries a packet
	// holds (40,000): the quadratic duplicate removal took 11.5 s of every
	// member's apply for each; now refused ZINVALIDACL past 1024 entries.
	t.Run("ACL of 40,000 entries", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, addr string) func() {
			n := mostThatFit(func(n int) proto.Record {
				return &proto.CreateRequest{Path: "/missing/x", ACL: digestACL("a", n, 0)}
			})
			require.Greater(t, n, 35_000)
			var reqs []proto.Record
			for i := range 10 {
				reqs = append(reqs, &proto.CreateRequest{Path: "/missing/x", ACL: digestACL(fmt.Sprintf("%c", 'a'+i), n, 0)})
			}
			return answeredAll(t, addr, proto.ErrInvalidACL, proto.OpCreate, reqs...)
		})
	})

	// A multi that creates as many ephemerals as a packet holds (a fifth
	// of that under the race detector) and deletes them: 1.37 s of apply
	// and 1.7 GB of garbage on every member for 14,000; now linear, and
	// served.
	t.Run("multi creating and deleting ephemerals", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, addr string) func() {
			churn := func(n int) proto.Record {
				m := &proto.MultiRequest{}
				for i := range n {
					m.Ops = append(m.Ops, createWith(shortPath("/e", i), nil, proto.FlagEphemeral))
				}
				for i := range n {
					m.Ops = append(m.Ops, proto.MultiOp{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: shortPath("/e", i), Version: -1}})
				}
				return m
			}
			n := mostThatFit(churn)
			require.Greater(t, n, 10_000)
			return answeredAll(t, addr, proto.ErrOK, proto.OpMulti, churn(n))
		})
	})

	// 40 setACL of 1024 distinct entries, 0.85 MB: the ACL table kept
	// every list any znode ever had (67 MB for these); served.
	t.Run("40 setACL of 0.85 MB", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, addr string) func() {
			var reqs []proto.Record
			for i := range 40 {
				acl := append(digestACL(fmt.Sprintf("%02d-", i), fsm.MaxACLEntries-1, 800), proto.WorldACL(proto.PermAll)...)
				reqs = append(reqs, &proto.SetACLRequest{Path: "/acl", ACL: acl, Version: -1})
			}
			return answeredAll(t, addr, proto.ErrOK, proto.OpSetACL, reqs...)
		})
	})

	// 200 sessions made beside writes of the largest packet: each
	// session's password pinned the whole batch it came in; served.
	t.Run("200 sessions beside 1 MiB writes", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, addr string) func() {
			writer := dialSession(t, addr, 0, nil)
			writes := 25
			return func() {
				wrote := make(chan []proto.Code, 1)
				go func() { // beside the sessions made below; the test's goroutine checks the codes
					var codes []proto.Code
					defer func() { wrote <- codes }()
					for i := range writes {
						req := &proto.SetDataRequest{Path: "/big", Data: []byte(strings.Repeat(strconv.Itoa(i%10), proto.DefaultMaxPacket-100)), Version: -1}
						if _, err := writer.nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: int32(i + 1), OpCode: proto.OpSetData}, req)); err != nil {
							return
						}
						writer.nc.SetReadDeadline(time.Now().Add(time.Minute))
						frame, err := proto.ReadFrame(writer.nc, proto.DefaultMaxPacket)
						if err != nil {
							return
						}
						h, _, _ := parseReply(frame)
						codes = append(codes, h.Err)
					}
				}()
				for range 200 {
					nc, resp := handshake(t, addr, proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)})
					assert.NotZero(t, resp.SessionID, "no session")
					nc.Close()
				}
				assert.Equal(t, slices.Repeat([]proto.Code{proto.ErrOK}, writes), <-wrote, "the writes' answers")
			}
		})
	})

	// Connections holding the most watches a session may, then closed:
	// each close walked every watch of the member under a lock the apply
	// needs (2.9 s for 5M), then half a second for each connection's own
	// 100,000 (now dropped a chunk at a time). One watch past the
	// session's bound is refused, ZQUOTAEXCEEDED.
	t.Run("closing connections of 100,000 watches", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, addr string) func() {
			conns := 6
			paths := watchPaths(100_001)
			over := dialSession(t, addr, 0, nil)
			over.send(proto.XidSetWatches, proto.OpSetWatches, &proto.SetWatchesRequest{ExistWatches: paths})
			h, _ := readReply(t, over.nc)
			assert.Equal(t, proto.ErrQuotaExceeded, h.Err, "a session's 100,001 watches")
			var held []net.Conn
			for range conns {
				s := dialSession(t, addr, 0, nil)
				s.send(proto.XidSetWatches, proto.OpSetWatches, &proto.SetWatchesRequest{ExistWatches: paths[:len(paths)-1]})
				h, _ := readReply(t, s.nc)
				require.Equal(t, proto.ErrOK, h.Err, "100,000 watches")
				held = append(held, s.nc)
			}
			return func() {
				for _, nc := range held {
					nc.Close()
				}
				waitFor := time.Now().Add(30 * time.Second)
				for memberAt(c, addr).Server.Counters().Watches != 0 {
					require.True(t, time.Now().Before(waitFor), "the closed connections' watches are still held")
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	})

	// Connections from 100 addresses of one IPv6 /64, as one host holding
	// the /64 may open them: the per-IP cap compared exact addresses; it
	// counts a /64 as one (security.max_connections_per_ip, 60 by
	// default). Loopback has one IPv6 address: this needs a /64 routed to
	// it (testenv.LoopbackIPv6Prefix), and a member of its own, listening
	// on IPv6 too.
	t.Run("connections from one IPv6 /64", func(t *testing.T) {
		prefix := testenv.LoopbackIPv6Prefix(t)
		six := startIPv6Member(t)
		underAttack(t, six, func(t *testing.T, addr string) func() {
			_, port, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			target := net.JoinHostPort(prefix+"::1", port)
			return func() {
				taken := 0
				for i := range 100 {
					if dialFrom(t, fmt.Sprintf("%s::%x", prefix, i+2), target) {
						taken++
					}
				}
				assert.Equal(t, config.DefaultMaxConnectionsPerIP, taken, "connections taken from one /64")
			}
		})
	})

	// One connection pipelining 300 cross-shard transactions: each once
	// started two goroutines, with no bound. Every one is answered.
	t.Run("xTransaction flood", func(t *testing.T) {
		underAttack(t, c, func(t *testing.T, addr string) func() {
			var reqs []proto.Record
			for i := range 300 {
				reqs = append(reqs, &proto.XTransactionRequest{ID: uuid.NewString(), Coordinator: "a", TimeoutMs: 30_000, Shards: []proto.ShardOps{
					{Shard: "a", Ops: proto.MultiRequest{Ops: []proto.MultiOp{createOp(fmt.Sprintf("/tree/xa%03d", i))}}},
					{Shard: "b", Ops: proto.MultiRequest{Ops: []proto.MultiOp{createOp(fmt.Sprintf("/xb%03d", i))}}},
				}})
			}
			hostile := dialSession(t, addr, 0, nil)
			return func() {
				hostile.sendAll(proto.OpXTransaction, reqs...)
				answered := map[int32]proto.Code{}
				hostile.nc.SetReadDeadline(time.Now().Add(2 * time.Minute))
				for range reqs {
					h, _ := readReply(t, hostile.nc)
					answered[h.Xid] = h.Err
				}
				assert.Len(t, answered, len(reqs), "every transaction answered once")
				for xid, code := range answered {
					assert.Contains(t, []proto.Code{proto.ErrOK, proto.ErrOperationTimeout}, code, "transaction %d", xid)
				}
				waitTxDrained(t, c, 40*time.Second)
			}
		})
	})
}

// largeGen makes legal requests at the bounds (issue 37) from one seeded
// source, each under a directory of its batch.
type largeGen struct {
	t   *testing.T
	rng *rand.Rand
	c   *testenv.Cluster
	dir string // the batch's directory on shard a, /gen/bN
	n   int    // requests made so far, to name their znodes
}

// name returns a path under the batch's directory no request used.
func (g *largeGen) name(kind string) string {
	g.n++
	return fmt.Sprintf("%s/%s%d", g.dir, kind, g.n)
}

// near returns a count between 90% of most and most, most itself half of
// the time.
func (g *largeGen) near(most int) int {
	if g.rng.IntN(2) == 0 {
		return most
	}
	return most - g.rng.IntN(most/10+1)
}

// largeRequest sends one legal request at a bound to the client address
// of shard a's leader and checks its answer.
type largeRequest struct {
	kind string
	send func(g *largeGen, addr string)
}

// largeRequests are the kinds of legal-but-large requests: sizes at each
// bound a client meets.
var largeRequests = []largeRequest{
	{"identities", func(g *largeGen, addr string) {
		s := dialSession(g.t, addr, 0, nil)
		ids := boundedIdentities()
		for _, id := range ids[:g.near(len(ids)-1)] {
			code, _ := s.addAuth(id)
			require.Equal(g.t, proto.ErrOK, code, "an identity within the bounds")
		}
		created := s.each(proto.OpCreate, &proto.CreateRequest{Path: g.name("ids"), ACL: proto.WorldACL(proto.PermAll)})
		deleted := s.each(proto.OpDelete, &proto.PathVersionRequest{Path: g.dir + "/missing", Version: -1})
		assert.Equal(g.t, []proto.Code{proto.ErrOK, proto.ErrNoNode}, append(created, deleted...), "writes carrying the identities")
	}},
	{"acl", func(g *largeGen, addr string) {
		pad := g.rng.IntN(900)
		acl := append(digestACL(strconv.Itoa(g.n)+"-", fsm.MaxACLEntries-1, pad), proto.WorldACL(proto.PermAll)...)
		path := g.name("acl")
		s := dialSession(g.t, addr, 0, nil)
		codes := s.each(proto.OpCreate, &proto.CreateRequest{Path: path, ACL: acl})
		assert.Equal(g.t, proto.ErrOK, codes[0], "a create with %d ACL entries of %d bytes past their names", len(acl), pad)
		codes = s.each(proto.OpSetACL, &proto.SetACLRequest{Path: path, ACL: acl[:g.near(len(acl)-1)], Version: -1})
		assert.Equal(g.t, proto.ErrOK, codes[0], "a setACL")
	}},
	{"data", func(g *largeGen, addr string) {
		path := g.name("data")
		create := func(n int) proto.Record {
			return &proto.CreateRequest{Path: path, Data: []byte(strings.Repeat("d", n)), ACL: proto.WorldACL(proto.PermAll)}
		}
		n := g.near(mostThatFit(create))
		s := dialSession(g.t, addr, 0, nil)
		codes := s.each(proto.OpCreate, create(n))
		assert.Equal(g.t, proto.ErrOK, codes[0], "a create of %d bytes", n)
	}},
	{"multi", func(g *largeGen, addr string) {
		parent := g.name("multi")
		creates := func(n int) proto.Record {
			m := &proto.MultiRequest{Ops: []proto.MultiOp{createOp(parent)}}
			for i := range n {
				m.Ops = append(m.Ops, createWith(shortPath(parent, i), nil, 0))
			}
			return m
		}
		n := g.near(mostThatFit(creates))
		s := dialSession(g.t, addr, 0, nil)
		codes := s.each(proto.OpMulti, creates(n))
		assert.Equal(g.t, proto.ErrOK, codes[0], "a multi of %d creates", n+1)
	}},
	{"watches", func(g *largeGen, addr string) {
		s := dialSession(g.t, addr, 0, nil)
		n := g.near(config100k)
		s.send(proto.XidSetWatches, proto.OpSetWatches, &proto.SetWatchesRequest{ExistWatches: watchPaths(n)})
		h, _ := readReply(g.t, s.nc)
		assert.Equal(g.t, proto.ErrOK, h.Err, "a setWatches of %d", n)
		codes := s.each(proto.OpCreate, &proto.CreateRequest{Path: g.name("watched"), ACL: proto.WorldACL(proto.PermAll)})
		assert.Equal(g.t, proto.ErrOK, codes[0], "a write beside %d watches", n)
		s.nc.Close()
	}},
	{"transaction", func(g *largeGen, _ string) {
		parent := g.name("tx")
		tx := func(n int) *proto.XTransactionRequest {
			ops := []proto.MultiOp{createOp(parent)}
			for i := range n {
				ops = append(ops, createWith(shortPath(parent, i), []byte("x"), 0))
			}
			return &proto.XTransactionRequest{ID: uuid.NewString(), Coordinator: "b", TimeoutMs: 20_000, Shards: []proto.ShardOps{
				{Shard: "b", Ops: proto.MultiRequest{Ops: []proto.MultiOp{createOp(parent)}}},
				{Shard: "a", Ops: proto.MultiRequest{Ops: ops}},
			}}
		}
		n := g.near(testenv.Largest(func(n int) bool { return tx(n).Fit(loopbackIDs, proto.DefaultMaxPacket) == nil }))
		s := dialSession(g.t, g.c.Servers("b")[0], 0, nil)
		code := s.each(proto.OpXTransaction, tx(n))[0]
		assert.Contains(g.t, []proto.Code{proto.ErrOK, proto.ErrOperationTimeout}, code, "a transaction of %d creates", n+1)
		waitTxDrained(g.t, g.c, 60*time.Second)
	}},
}

// config100k is keeper.max_watches_per_session's default.
const config100k = 100_000

// loopbackIDs are the identities a member gives a connection from the
// loopback address without auth.
var loopbackIDs = []proto.ID{{Scheme: "ip", ID: "127.0.0.1"}}

// TestLegalButLargeRequests sends batches of legal requests at the bounds
// (identities, ACL entries, data, ops per multi, watches, ops per
// cross-shard transaction), drawn from a printed seed (XKEEPER_SEED
// repeats it), to a shard of three members; between batches one member
// or all are killed and restarted. Every request is answered as it
// should be, no member dies, and the members agree on the tree. CI runs
// two batches of four requests, without the race detector (skipOnRace);
// XKEEPER_SOAK=1 runs 20.
func TestLegalButLargeRequests(t *testing.T) {
	skipOnRace(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("XKEEPER_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "XKEEPER_SEED")
		seed = v
	}
	t.Logf("seed %d (XKEEPER_SEED=%d repeats it)", seed, seed)
	batches, perBatch := 2, 4
	if os.Getenv("XKEEPER_SOAK") == "1" {
		batches = 20
	}
	g := &largeGen{t: t, rng: rand.New(rand.NewPCG(seed, seed)), c: startHostileCluster(t)}
	admin := connectZK(t, g.c.Servers("a"), 10*time.Second)
	_, err := admin.Create("/gen", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	for b := range batches {
		g.dir = fmt.Sprintf("/gen/b%d", b)
		_, err := admin.Create(g.dir, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		addr := leaderAddr(g.c, "a")
		for range perBatch {
			r := largeRequests[g.rng.IntN(len(largeRequests))]
			t.Logf("batch %d: %s", b, r.kind)
			r.send(g, addr)
		}
		if g.rng.IntN(2) == 0 {
			restartEveryMember(t, g.c)
		} else {
			restartMembers(t, g.c, g.c.Shard("a").Members[g.rng.IntN(3)].ID)
		}
		for _, sh := range g.c.Config.Shards {
			for _, m := range sh.Members {
				require.NoError(t, g.c.Member(m.ID).Replica.LogFailed(), "member %s", m.ID)
			}
		}
		if t.Failed() {
			return
		}
	}
}
