package keeper_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// rawReply sends one request on a fresh ZooKeeper session opened over nc
// (already past any magic) and returns the reply's code; closed tells
// whether the server then closed the connection.
func rawReply(t *testing.T, nc net.Conn, op proto.OpCode, req proto.Record) (code proto.Code, closed bool) {
	t.Helper()
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	_, err := nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, 16)}))
	require.NoError(t, err)
	_, err = proto.ReadFrame(br, 1<<20)
	require.NoError(t, err, "handshake")
	_, err = nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: 7, OpCode: op}, req))
	require.NoError(t, err)
	frame, err := proto.ReadFrame(br, 1<<20)
	if err != nil {
		return proto.ErrConnectionLoss, true
	}
	h, _ := decodeReply(t, frame)
	_, err = io.ReadAll(br)
	return h.Err, err == nil
}

// secretACL lets only alice write /secret; anyone may read it.
func secretACL() []proto.ACL {
	return []proto.ACL{
		{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: fsm.DigestID("alice:wonderland")}},
		{Perms: proto.PermRead, ID: proto.ID{Scheme: "world", ID: "anyone"}},
	}
}

// forgedMessages are the cross-shard protocol's member-only messages as an
// attacker would send them: alice's and super's identities, its own
// coordinator and the id of transaction id.
func forgedMessages(id, shard string) map[proto.OpCode]proto.Record {
	ops := []proto.ShardOps{{Shard: shard, Ops: proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpSetData, Req: &proto.SetDataRequest{Path: "/secret", Data: []byte("owned"), Version: -1}},
	}}}}
	idReq := &proto.XIDRequest{ID: id}
	return map[proto.OpCode]proto.Record{
		proto.OpXPrepare: &proto.XPrepareRequest{ID: id, Coordinator: shard, Self: shard, Shards: []string{shard},
			Deadline: 1 << 60, Ops: ops, IDs: []proto.ID{{Scheme: "digest", ID: fsm.DigestID("alice:wonderland")}, {Scheme: "super"}}},
		proto.OpXCommit: idReq, proto.OpXFail: idReq, proto.OpXCommitDelete: idReq, proto.OpXDelete: idReq,
		proto.OpXStatus: &proto.XStatusRequest{ID: id, Coordinator: shard, Deadline: 0},
	}
}

func assertSecretIntact(t *testing.T, c *testenv.Cluster, shard string) {
	t.Helper()
	for _, m := range c.Shard(shard).Members {
		c.Member(m.ID).Replica.View(func(st *fsm.State) {
			assert.Empty(t, st.XRecords(), "member %s holds transaction records", m.ID)
		})
	}
	cl := connect(t, c.Servers(shard))
	data, _, err := cl.Get(t.Context(), "/secret")
	require.NoError(t, err)
	assert.Equal(t, "alice's", string(data))
}

func connect(t *testing.T, servers []string, opts ...client.Option) *client.Client {
	t.Helper()
	cl, err := client.Connect(t.Context(), servers, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

func createSecret(t *testing.T, c *testenv.Cluster, shard string) {
	alice := connect(t, c.Servers(shard), client.WithAuth("digest", []byte("alice:wonderland")))
	_, err := alice.Create(t.Context(), "/secret", []byte("alice's"), 0, secretACL())
	require.NoError(t, err)
}

// TestPrivateOpcodesRefusedOnClientPorts sends every member-only message,
// with forged identities, coordinators and ids, on the client port of every
// member: each is answered as an unknown opcode and the connection closed,
// nothing changes, and the shard serves everyone else.
func TestPrivateOpcodesRefusedOnClientPorts(t *testing.T) {
	c := testenv.StartShard(t, 3)
	createSecret(t, c, "a")
	for _, addr := range c.Servers("a") {
		for op, req := range forgedMessages("forged-tx", "a") {
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			code, closed := rawReply(t, nc, op, req)
			assert.Equal(t, proto.ErrUnimplemented, code, "%v on %s", op, addr)
			assert.True(t, closed, "%v on %s: connection left open", op, addr)
		}
	}
	assertSecretIntact(t, c, "a")
}

// TestForgedMessagesDoNotTearATransaction holds a real transaction between
// prepare and decision while an attacker, who read its id from xList,
// sends commit, fail and delete for it to both shards' members: the
// messages are refused and the transaction ends with one outcome.
func TestForgedMessagesDoNotTearATransaction(t *testing.T) {
	hook, reached, release := holdFirst(xshard.StepAllPrepared)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, XHook: hook})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	t.Cleanup(r.Close)
	done := make(chan error, 1)
	go func() {
		_, err := xshard.CrossShardTransaction(context.Background(), r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/x", ACL: proto.WorldACL(proto.PermAll)}}}},
			{Shard: "b", Requests: []proto.MultiOp{{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/y", ACL: proto.WorldACL(proto.PermAll)}}}},
		})
		done <- err
	}()
	<-reached
	var list proto.XListResponse
	cl := connect(t, c.Servers("a"))
	_, err := cl.Do(t.Context(), proto.OpXList, proto.Empty{}, &list)
	require.NoError(t, err)
	require.Len(t, list.Records, 1)
	id := list.Records[0].ID
	assert.Empty(t, list.Records[0].IDs, "xList shows a client other callers' identities")
	assert.Empty(t, list.Records[0].Ops, "xList shows a client other callers' ops")
	for _, shard := range []string{"a", "b"} {
		for _, addr := range c.Servers(shard) {
			for _, op := range []proto.OpCode{proto.OpXFail, proto.OpXDelete, proto.OpXCommit, proto.OpXCommitDelete} {
				nc, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				code, _ := rawReply(t, nc, op, forgedMessages(id, shard)[op])
				assert.Equal(t, proto.ErrUnimplemented, code)
			}
		}
	}
	close(release)
	require.NoError(t, <-done)
	// The answer comes once every shard holds the transaction pending: a
	// member may apply its commit later, so read behind a sync.
	for shard, path := range map[string]string{"a": "/x", "b": "/y"} {
		assert.True(t, existsOn(t, c, shard, path), "%s missing on %s: the transaction was torn", path, shard)
	}
	waitDrained(t, c, "a", "b")
}

// TestForeignCallerCannotTakeOverATransaction: while alice's transaction
// over shards a and b waits between prepare and decision, a stranger sends
// a transaction with the same id over shards a and c, whose op on c fails.
// His run must not decide alice's transaction: alice's commits on both
// shards and the stranger is refused.
func TestForeignCallerCannotTakeOverATransaction(t *testing.T) {
	hook, reached, release := holdFirst(xshard.StepAllPrepared)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Members: 3, XHook: hook})
	alice := xshard.NewRouter(c.Config, testenv.TestLogger(t), client.WithAuth("digest", []byte("alice:wonderland")))
	t.Cleanup(alice.Close)
	stranger := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	t.Cleanup(stranger.Close)
	const id = "5b9f3c1e-2d4a-4e6b-8c7d-0a1b2c3d4e5f"
	mk := func(path string) []proto.MultiOp {
		return []proto.MultiOp{{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)}}}
	}
	done := make(chan error, 1)
	go func() {
		_, err := xshard.CrossShardTransaction(context.Background(), alice,
			[]xshard.MultiRequestForShard{{Shard: "a", Requests: mk("/va")}, {Shard: "b", Requests: mk("/vb")}},
			xshard.Options{ID: id, Coordinator: "a"})
		done <- err
	}()
	<-reached
	_, err := xshard.CrossShardTransaction(t.Context(), stranger, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: mk("/stolen")},
		{Shard: "c", Requests: []proto.MultiOp{{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: "/missing", Version: -1}}}},
	}, xshard.Options{ID: id, Coordinator: "c"})
	assert.ErrorIs(t, err, proto.ErrNoAuth, "a stranger drove alice's transaction")
	close(release)
	require.NoError(t, <-done)
	for shard, path := range map[string]string{"a": "/va", "b": "/vb"} { // behind a sync, as above
		assert.True(t, existsOn(t, c, shard, path), "%s missing on %s: alice's transaction was torn", path, shard)
	}
	assert.False(t, existsOn(t, c, "a", "/stolen"))
	waitDrained(t, c, "a", "b", "c")
}

// holdFirst returns a driver hook that holds the first driver to reach
// step until release is closed; every other driver passes.
func holdFirst(step string) (hook xshard.Hook, reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	hook = func(s, _, _ string) error {
		if s == step && first.CompareAndSwap(false, true) {
			close(reached)
			<-release
		}
		return nil
	}
	return hook, reached, release
}

// waitDrained polls until no member of the shards holds a record.
func waitDrained(t *testing.T, c *testenv.Cluster, shards ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, sh := range shards {
			for _, m := range c.Shard(sh).Members {
				n := 0
				c.Member(m.ID).Replica.View(func(st *fsm.State) { n = len(st.XRecords()) })
				if n > 0 {
					return false
				}
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "transaction records never drained")
}

// TestUnauthenticatedPeerLinksRefused tries the member links without the
// cluster's secret: a forwarding link carrying a forged write, a member
// session with the wrong secret (on the client port and on the raft port),
// one that skips the proof, and Raft
// messages (a vote request with a huge term, entries to append) from a
// stranger. Every one is closed; nothing changes and the leader stays.
func TestUnauthenticatedPeerLinksRefused(t *testing.T) {
	c := testenv.StartShard(t, 3)
	createSecret(t, c, "a")
	leader := c.WaitLeader("a")
	term := c.Member(leader).Replica.Stats()["term"]
	var leaderAddr, raftAddr string
	for _, m := range c.Shard("a").Members {
		if m.ID == leader {
			leaderAddr, raftAddr = m.ClientAddr, m.RaftAddr
		}
	}
	forged := fsm.Request{ID: 1, Session: 0, Member: leader, Op: proto.OpSetData,
		IDs: []proto.ID{{Scheme: "super"}}, Body: proto.Marshal(&proto.SetDataRequest{Path: "/secret", Data: []byte("owned"), Version: -1})}

	t.Run("forwarding link without a proof", func(t *testing.T) {
		nc, err := net.Dial("tcp", raftAddr)
		require.NoError(t, err)
		defer nc.Close()
		frame := fsm.EncodeEntry(nil, 0, []fsm.Request{forged})
		msg := append([]byte{0, 0, 0, 0, 1}, frame...)
		msg[3] = byte(len(frame) + 1)
		msg[2] = byte((len(frame) + 1) >> 8)
		nc.Write(msg)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadAll(nc)
		var ne net.Error
		assert.False(t, errors.As(err, &ne) && ne.Timeout(), "the link was not closed: %v", err)
	})
	t.Run("member session with the wrong secret", func(t *testing.T) {
		wrong, err := peerlink.New(peerlink.Config{Secret: "not-the-cluster-secret"}, nil)
		require.NoError(t, err)
		_, err = wrong.DialMember(t.Context(), leaderAddr, peerlink.SessionMagic)
		assert.ErrorIs(t, err, peerlink.ErrRefused)
	})
	t.Run("member session on the raft port with the wrong secret", func(t *testing.T) {
		wrong, err := peerlink.New(peerlink.Config{Secret: "not-the-cluster-secret"}, nil)
		require.NoError(t, err)
		_, err = replica.DialSession(t.Context(), wrong, raftAddr, "a")
		assert.ErrorIs(t, err, peerlink.ErrRefused)
	})
	t.Run("member session that skips the proof", func(t *testing.T) {
		nc, err := net.Dial("tcp", leaderAddr)
		require.NoError(t, err)
		nc.Write([]byte(peerlink.SessionMagic))
		// A ZooKeeper handshake where the proof should be is not a hello.
		nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, 16)}))
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(nc)
		assert.NoError(t, err)
		assert.Empty(t, b)
		nc.Close()
	})
	t.Run("raft messages from a stranger", func(t *testing.T) {
		trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
		require.NoError(t, err)
		defer trans.Close()
		var vote raft.RequestVoteResponse
		err = trans.RequestVote(raft.ServerID(leader), raft.ServerAddress(raftAddr),
			&raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("x"), Addr: []byte("x")}, Term: 1 << 40, LastLogIndex: 1 << 40, LastLogTerm: 1 << 40}, &vote)
		assert.Error(t, err)
		var app raft.AppendEntriesResponse
		err = trans.AppendEntries(raft.ServerID(leader), raft.ServerAddress(raftAddr),
			&raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("x"), Addr: []byte("x")}, Term: 1 << 40}, &app)
		assert.Error(t, err)
	})
	t.Run("membership and backup links without the secret", func(t *testing.T) {
		wrong, err := peerlink.New(peerlink.Config{Secret: "not-the-cluster-secret-either-0000"}, nil)
		require.NoError(t, err)
		for _, magic := range []string{replica.AdminMagic, replica.BackupMagic} {
			_, err = wrong.DialMember(t.Context(), leaderAddr, magic)
			assert.ErrorIs(t, err, peerlink.ErrRefused, magic)
			// The request where the proof should be gets no answer.
			nc, err := net.Dial("tcp", leaderAddr)
			require.NoError(t, err)
			nc.Write([]byte(magic + `{"op":"remove","id":"` + leader + `"}` + "\n"))
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(nc)
			nc.Close()
			assert.NotContains(t, string(b), "status", "%s answered a stranger", magic)
		}
		members, err := c.Member(leader).Replica.Members()
		require.NoError(t, err)
		assert.Len(t, members, 3, "a stranger removed a member")
	})
	assert.Equal(t, leader, c.WaitLeader("a"))
	assert.Equal(t, term, c.Member(leader).Replica.Stats()["term"], "a stranger changed the term")
	assertSecretIntact(t, c, "a")
}

// TestMismatchedSecretsNeverFormAQuorum starts three members that each
// know a different secret: none can win an election. Then two of them are
// given the right one and form the shard, and the odd one never joins it.
func TestMismatchedSecretsNeverFormAQuorum(t *testing.T) {
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	identity := replica.NewIdentity() // they cannot ask each other for it
	start := func(id, secret string) *keeper.Member {
		own := *cfg
		own.Security.ClusterSecret = secret
		m, err := keeper.Start(&own, id, keeper.Options{Logger: testenv.TestLogger(t), Bootstrap: true, Identity: identity})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		return m
	}
	ids := []string{"a1", "a2", "a3"}
	var ms []*keeper.Member
	for i, id := range ids {
		ms = append(ms, start(id, config.NewClusterSecret()[:32+i]))
	}
	// Ten election timeouts: far more than three members that can talk
	// need to elect a leader.
	assert.Never(t, func() bool {
		for _, m := range ms {
			if m.Replica.Leader() != "" {
				return true
			}
		}
		return false
	}, 10*cfg.Keeper.ElectionTimeout, 20*time.Millisecond, "members with different secrets elected a leader")
	for _, m := range ms[:2] {
		require.NoError(t, m.Close())
	}
	good := config.NewClusterSecret()
	m1, m2 := start("a1", good), start("a2", good)
	require.Eventually(t, func() bool { l := m1.Replica.Leader(); return l == "a1" || l == "a2" && m2.Replica.Leader() == l },
		20*time.Second, 20*time.Millisecond, "the two members that share a secret elected no leader")
	cl := connect(t, []string{cfg.Shards[0].Members[0].ClientAddr})
	_, err := cl.Create(t.Context(), "/quorum", nil, 0, proto.WorldACL(proto.PermAll))
	require.NoError(t, err)
	assert.Never(t, func() bool {
		var zxid int64
		ms[2].Replica.View(func(st *fsm.State) { zxid = st.Zxid() })
		return ms[2].Replica.Leader() != "" || zxid > 0
	}, 5*cfg.Keeper.ElectionTimeout, 20*time.Millisecond, "the member with the wrong secret joined the shard")
}

// syncBuffer is a log destination tests read while members write to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// TestOperatorControls: the default 4-letter-word whitelist refuses the
// words that list clients or reset counters, as ZooKeeper words it; the
// connection cap per IP refuses a flood of silent connections with a log
// line while clients from another address are served, and admits again
// once the flood is gone.
func TestOperatorControls(t *testing.T) {
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 1)
	cfg.Security.MaxConnectionsPerIP = 5
	var logs syncBuffer
	m, err := keeper.Start(cfg, "a1", keeper.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Bootstrap: true})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	addr := cfg.Shards[0].Members[0].ClientAddr

	for _, word := range []string{"cons", "srst", "crst"} {
		out, err := testenv.FourLetterWord(t.Context(), addr, word)
		require.NoError(t, err)
		assert.Equal(t, word+" is not executed because it is not in the whitelist.\n", out)
	}
	out, err := testenv.FourLetterWord(t.Context(), addr, "ruok")
	require.NoError(t, err)
	assert.Equal(t, "imok", out)

	var flood []net.Conn
	for range 5 {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		flood = append(flood, nc)
	}
	// Accepted connections are counted when accepted: one more is refused.
	require.Eventually(t, func() bool {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer nc.Close()
		nc.Write([]byte("ruok"))
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(nc)
		return len(b) == 0
	}, 10*time.Second, 20*time.Millisecond, "a connection over the cap was served")
	assert.Contains(t, logs.String(), "too many connections from one address")

	other := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	cl := connect(t, []string{addr}, client.WithDialer(other.DialContext))
	_, err = cl.Create(t.Context(), "/served", nil, 0, proto.WorldACL(proto.PermAll))
	require.NoError(t, err, "a client from another address was not served during the flood")

	for _, nc := range flood {
		nc.Close()
	}
	require.Eventually(t, func() bool {
		out, err := testenv.FourLetterWord(t.Context(), addr, "ruok")
		return err == nil && out == "imok"
	}, 10*time.Second, 20*time.Millisecond, "the cap still refuses after the flood left")
}

// TestMalformedProtocolRecordsOnMemberLinks sends truncated and oversized
// frames of the cross-shard protocol's records on an authenticated member
// session: a record that does not decode is answered with a marshalling
// error (a write, as ZooKeeper answers one), a frame over the packet limit
// closes the connection; nothing is recorded, and the shard serves
// everyone else.
func TestMalformedProtocolRecordsOnMemberLinks(t *testing.T) {
	c := testenv.StartShard(t, 3)
	createSecret(t, c, "a")
	auth, err := keeper.PeerAuth(c.Config, testenv.TestLogger(t))
	require.NoError(t, err)
	leader := c.WaitLeader("a")
	var addr string
	for _, m := range c.Shard("a").Members {
		if m.ID == leader {
			addr = m.ClientAddr
		}
	}
	prep := proto.Marshal(forgedMessages("t", "a")[proto.OpXPrepare])
	header := func(op proto.OpCode, body []byte, claimed int) []byte {
		b := proto.AppendFrame(nil, &proto.RequestHeader{Xid: 1, OpCode: op})
		frame := append(b[4:], body...)
		return append([]byte{byte(claimed >> 24), byte(claimed >> 16), byte(claimed >> 8), byte(claimed)}, frame...)
	}
	cases := map[string][]byte{
		"xPrepare cut short":      header(proto.OpXPrepare, prep[:len(prep)/2], 8+len(prep)/2),
		"xPrepare frame too long": header(proto.OpXPrepare, prep, 1<<30),
		"xStatus with no body":    header(proto.OpXStatus, nil, 8),
		"xCommit with a bad id":   header(proto.OpXCommit, []byte{0x7f, 0xff, 0xff, 0xff}, 12),
	}
	for name, frame := range cases {
		tooLong := strings.Contains(name, "too long")
		t.Run(name, func(t *testing.T) {
			nc, err := auth.DialMember(t.Context(), addr, peerlink.SessionMagic)
			require.NoError(t, err)
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, 16)}))
			require.NoError(t, err)
			br := bufio.NewReader(nc)
			_, err = proto.ReadFrame(br, 1<<20)
			require.NoError(t, err, "handshake on the member link")
			nc.Write(frame)
			if tooLong {
				_, err = io.ReadAll(br)
				assert.NoError(t, err, "the connection was not closed")
				return
			}
			reply, err := proto.ReadFrame(br, 1<<20)
			require.NoError(t, err)
			var h proto.ReplyHeader
			h.Decode(proto.NewDecoder(reply))
			assert.Equal(t, proto.ErrMarshallingError, h.Err)
		})
	}
	assertSecretIntact(t, c, "a")
}

// TestMismatchedCertificatesNeverFormAQuorum: members whose certificates
// different CAs signed never elect a leader; given certificates of one
// CA, the same members form the shard.
func TestMismatchedCertificatesNeverFormAQuorum(t *testing.T) {
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	identity := replica.NewIdentity() // they cannot ask each other for it
	start := func(id string, ca *testenv.CA) *keeper.Member {
		own := *cfg
		cert, key := ca.Issue(t, id)
		own.Security = config.Security{PeerTLS: config.TLS{CAFile: ca.File(), CertFile: cert, KeyFile: key}}
		m, err := keeper.Start(&own, id, keeper.Options{Logger: testenv.TestLogger(t), Bootstrap: true, Identity: identity})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		return m
	}
	var ms []*keeper.Member
	for _, id := range []string{"a1", "a2", "a3"} {
		ms = append(ms, start(id, testenv.NewCA(t)))
	}
	assert.Never(t, func() bool {
		for _, m := range ms {
			if m.Replica.Leader() != "" {
				return true
			}
		}
		return false
	}, 10*cfg.Keeper.ElectionTimeout, 20*time.Millisecond, "members with certificates of different CAs elected a leader")
	for _, m := range ms {
		require.NoError(t, m.Close())
	}
	ca := testenv.NewCA(t)
	ms = ms[:0]
	for _, id := range []string{"a1", "a2", "a3"} {
		ms = append(ms, start(id, ca))
	}
	require.Eventually(t, func() bool {
		l := ms[0].Replica.Leader()
		return l != "" && ms[1].Replica.Leader() == l && ms[2].Replica.Leader() == l
	}, 20*time.Second, 20*time.Millisecond, "members with certificates of one CA elected no leader")
}
