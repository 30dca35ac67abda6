package keeper_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// endpointMounts places /m1 on shard b and /m2 on shard c; the rest of the
// tree is shard a's.
var endpointMounts = []config.Mount{{Path: "/m1", Shard: "b"}, {Path: "/m2", Shard: "c"}}

// startEndpointCluster runs 3 shards on 3 nodes with endpointMounts and
// returns it with the nodes' client endpoints.
func startEndpointCluster(t *testing.T) (*testenv.Cluster, []string) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3, Mounts: endpointMounts})
	t.Cleanup(c.Stop)
	var eps []string
	for _, n := range c.Config.Nodes {
		eps = append(eps, c.Endpoint(n.Name))
	}
	return c, eps
}

// createMountPoints creates /m1 and /m2 through an endpoint.
func createMountPoints(t *testing.T, ep string) {
	conn := connectZK(t, []string{ep}, 5*time.Second)
	defer conn.Close()
	for _, p := range []string{"/m1", "/m2"} {
		_, err := conn.Create(p, nil, 0, world)
		require.NoError(t, err)
	}
}

// existsOn reports whether path exists on a shard, asked on its own
// members' client ports.
func existsOn(t *testing.T, c *testenv.Cluster, shard, path string) bool {
	conn := connectZK(t, c.Servers(shard), 5*time.Second)
	defer conn.Close()
	_, err := conn.Sync("/")
	require.NoError(t, err)
	ok, _, err := conn.Exists(path)
	require.NoError(t, err)
	return ok
}

// rootShardCases run on the root shard's /m0 through the endpoint: they
// compare a multi's header zxid with the stats of the znodes it wrote, and
// the endpoint's header zxids are always the root shard's (the one a
// client offers when it reconnects; DESIGN-NOTES, "One endpoint").
// TestEndpointHeaderZxidsAreTheRootShards shows that rule.
var rootShardCases = []string{"multi-ok", "multi-fail"}

// TestCompatZooKeeperThroughOneEndpoint runs the differential table
// through the nodes' endpoints, the cases spread over /m0 (the root
// shard's), /m1 and /m2 (mounted on shards b and c), against ZooKeeper 3.8
// with the same three directories.
func TestCompatZooKeeperThroughOneEndpoint(t *testing.T) {
	zkEnsemble := testenv.StartZooKeeper(t, 3)
	c, eps := startCompatEndpoints(t, zkEnsemble.Servers(), nil)
	cases := append(slices.Clone(compatCases), mountCases...)
	runCompatCases(t, c, eps, zkEnsemble.Servers(), cases, func(i int, name string) string {
		if slices.Contains(rootShardCases, name) {
			i = 0
		}
		return fmt.Sprintf("/m%d/compat-%s", i%3, name)
	})
}

// startCompatEndpoints runs 3 shards on 3 nodes with endpointMounts and
// the extra mounts (every 4-letter word allowed, keeper tunables adjusted
// by keeper unless nil) and creates /m0, /m1 and /m2 through their
// endpoints and on the ZooKeeper ensemble at zkServers; it returns the
// cluster and its endpoints.
func startCompatEndpoints(t *testing.T, zkServers []string, keeper func(*config.Keeper), extra ...config.Mount) (*testenv.Cluster, []string) {
	mounts := slices.Concat(endpointMounts, extra)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3, Mounts: mounts, Keeper: keeper,
		Security: func(s *config.Security) { s.FourLetterWords = []string{"*"} }})
	t.Cleanup(c.Stop)
	var eps []string
	for _, n := range c.Config.Nodes {
		eps = append(eps, c.Endpoint(n.Name))
	}
	for _, servers := range [][]string{eps, zkServers} {
		conn := connectZK(t, servers, 5*time.Second)
		for _, dir := range []string{"/m0", "/m1", "/m2"} {
			_, err := conn.Create(dir, nil, 0, world)
			require.NoError(t, err)
		}
		conn.Close()
	}
	return c, eps
}

// heard waits up to within for one event on a watch channel and checks
// it.
func heard(t *testing.T, ch <-chan zk.Event, typ zk.EventType, path string, within time.Duration) {
	t.Helper()
	select {
	case ev := <-ch:
		assert.Equal(t, typ, ev.Type, "event on %s", path)
		assert.Equal(t, path, ev.Path)
	case <-time.After(within):
		t.Fatalf("no event on %s within %v", path, within)
	}
}

func TestEndpointRoutesByMount(t *testing.T) {
	c, eps := startEndpointCluster(t)
	conn := connectZK(t, eps[:1], 5*time.Second)

	// A mount point is the clients' to create, under a parent that exists.
	_, err := conn.Create("/m1/x", nil, 0, world)
	assert.ErrorIs(t, err, zk.ErrNoNode)
	for _, p := range []string{"/m1", "/m2", "/top", "/m1/x", "/m2/y", "/m1/x/deep"} {
		_, err := conn.Create(p, []byte(p), 0, world)
		require.NoError(t, err, p)
	}
	_, err = conn.Create("/m1", nil, 0, world)
	assert.ErrorIs(t, err, zk.ErrNodeExists)
	for _, want := range []struct {
		shard, path string
		on          bool
	}{{"a", "/top", true}, {"b", "/top", false}, {"b", "/m1/x/deep", true}, {"a", "/m1/x", false},
		{"c", "/m2/y", true}, {"b", "/m2/y", false}, {"a", "/m1", true}, {"b", "/m1", true}} {
		assert.Equal(t, want.on, existsOn(t, c, want.shard, want.path), "%s on shard %s", want.path, want.shard)
	}

	// The tree reads as one: the mount points are children of /.
	kids, _, err := conn.Children("/")
	require.NoError(t, err)
	slices.Sort(kids)
	// (xkeeper-sessions: the endpoint's record of which shards a session
	// has touched.)
	assert.Equal(t, []string{"m1", "m2", "top", "xkeeper-sessions", "zookeeper"}, kids)
	kids, _, err = conn.Children("/m1")
	require.NoError(t, err)
	assert.Equal(t, []string{"x"}, kids)
	data, st, err := conn.Get("/m1")
	require.NoError(t, err)
	assert.Equal(t, "/m1", string(data))
	assert.Equal(t, int32(1), st.NumChildren)

	// Deleting a mount point deletes it everywhere, once it is empty. A
	// child watch on / (above the mount points) hears of it, and an exists
	// watch on the mount point hears it come back.
	assert.ErrorIs(t, conn.Delete("/m2", -1), zk.ErrNotEmpty)
	require.NoError(t, conn.Delete("/m2/y", -1))
	_, _, rootWatch, err := conn.ChildrenW("/")
	require.NoError(t, err)
	require.NoError(t, conn.Delete("/m2", -1))
	heard(t, rootWatch, zk.EventNodeChildrenChanged, "/", 10*time.Second)
	kids, _, err = conn.Children("/")
	require.NoError(t, err)
	assert.NotContains(t, kids, "m2")
	assert.False(t, existsOn(t, c, "a", "/m2"))
	_, _, back, err := conn.ExistsW("/m2")
	require.NoError(t, err)
	_, err = conn.Create("/m2", nil, 0, world)
	require.NoError(t, err)
	heard(t, back, zk.EventNodeCreated, "/m2", 10*time.Second)

	// The endpoint's own records are no client's business, on the
	// endpoint or on a member's port.
	_, _, err = conn.Children("/xkeeper-sessions")
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	direct := connectZK(t, c.Servers("a"), 5*time.Second)
	_, _, err = direct.Children("/xkeeper-sessions")
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = direct.Create("/xkeeper-sessions/forged", nil, 0, world)
	assert.ErrorIs(t, err, zk.ErrNoAuth)
}

func TestEndpointMultiAcrossMounts(t *testing.T) {
	c, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	conn := connectZK(t, eps[1:2], 5*time.Second)

	res, err := conn.Multi(
		&zk.CreateRequest{Path: "/t", Data: []byte("a"), Acl: world},
		&zk.CreateRequest{Path: "/m1/t", Data: []byte("b"), Acl: world},
		&zk.SetDataRequest{Path: "/m1/t", Data: []byte("b2"), Version: 0},
		&zk.CreateRequest{Path: "/m2/t", Data: []byte("c"), Acl: world},
	)
	require.NoError(t, err)
	require.Len(t, res, 4)
	assert.Equal(t, "/t", res[0].String)
	assert.Equal(t, "/m1/t", res[1].String)
	assert.Equal(t, int32(1), res[2].Stat.Version)
	assert.Equal(t, "/m2/t", res[3].String)
	assert.True(t, existsOn(t, c, "b", "/m1/t"))
	assert.True(t, existsOn(t, c, "c", "/m2/t"))

	// All or nothing: the op that fails is named, the others are not done.
	res, err = conn.Multi(
		&zk.CreateRequest{Path: "/m2/t/new", Acl: world},
		&zk.CreateRequest{Path: "/m1/t", Acl: world},
		&zk.CreateRequest{Path: "/t/new", Acl: world},
	)
	require.ErrorIs(t, err, zk.ErrNodeExists)
	require.Len(t, res, 3)
	assert.NoError(t, res[0].Error)
	assert.ErrorIs(t, res[1].Error, zk.ErrNodeExists)
	assert.Error(t, res[2].Error)
	for _, p := range []string{"/m2/t/new", "/t/new"} {
		ok, _, err := conn.Exists(p)
		require.NoError(t, err)
		assert.False(t, ok, p)
	}
	// A check across mounts holds the whole multi back.
	_, err = conn.Multi(
		&zk.CheckVersionRequest{Path: "/m1/t", Version: 0},
		&zk.SetDataRequest{Path: "/m2/t", Data: []byte("no"), Version: -1},
	)
	require.ErrorIs(t, err, zk.ErrBadVersion)
	data, _, err := conn.Get("/m2/t")
	require.NoError(t, err)
	assert.Equal(t, "c", string(data))
}

func TestEndpointSessionSpansShards(t *testing.T) {
	c, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	conn := connectZK(t, eps, 4*time.Second)
	ephemerals := []string{"/e", "/m1/e", "/m2/e"}
	for _, p := range ephemerals {
		_, err := conn.Create(p, nil, zk.FlagEphemeral, world)
		require.NoError(t, err, p)
	}
	id := conn.SessionID()

	// The node the session is on goes away: the client moves to another
	// node, keeps its session and, on every shard, its ephemerals.
	var on string
	var others []string
	for i, ep := range eps {
		if ep == conn.Server() {
			on = c.Config.Nodes[i].Name
		} else {
			others = append(others, ep)
		}
	}
	require.NotEmpty(t, on, "connected to %s", conn.Server())
	c.KillNode(on)
	watcher := connectZK(t, others, 5*time.Second)
	for _, s := range []string{"a", "b", "c"} {
		c.WaitLeader(s)
	}
	// Requests in flight when the node went fail with a connection loss,
	// as on ZooKeeper; the client retries.
	retryLost(t, func() error {
		_, err := conn.Create("/m1/after", nil, zk.FlagEphemeral, world)
		return err
	})
	ephemerals = append(ephemerals, "/m1/after")
	assert.Equal(t, id, conn.SessionID())
	for _, p := range ephemerals {
		_, st, err := watcher.Exists(p)
		require.NoError(t, err)
		require.NotNil(t, st, p)
		assert.Equal(t, id, st.EphemeralOwner, p)
	}

	// Closing the session removes its ephemerals on every shard.
	conn.Close()
	for _, p := range ephemerals {
		_, err := watcher.Sync(p) // on the shard of p
		require.NoError(t, err)
		ok, _, err := watcher.Exists(p)
		require.NoError(t, err)
		assert.False(t, ok, p)
	}
}

func TestEndpointSessionExpiryRemovesEveryEphemeral(t *testing.T) {
	_, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	watcher := connectZK(t, eps[:1], 5*time.Second)
	ephemerals := []string{"/e", "/m1/e", "/m2/e"}
	raw := rawEphemerals(t, eps[1], 2000, ephemerals)
	var gone []<-chan zk.Event
	for _, p := range ephemerals {
		_, err := watcher.Sync(p) // another node's member may not have applied it yet
		require.NoError(t, err)
		ok, _, ch, err := watcher.ExistsW(p)
		require.NoError(t, err)
		require.True(t, ok)
		gone = append(gone, ch)
	}
	// The client vanishes without closing: every shard's session expires.
	raw.nc.Close()
	for i, ch := range gone {
		heard(t, ch, zk.EventNodeDeleted, ephemerals[i], 20*time.Second) // else it outlived its session
	}
}

// rawEphemerals opens a session of timeout ms at addr and creates an
// ephemeral at each path, by hand, so that the caller can drop the
// connection without closing the session (or use it as a busy client that
// never pings).
func rawEphemerals(t *testing.T, addr string, timeout int32, paths []string) *rawEndpoint {
	nc, _ := handshake(t, addr, proto.ConnectRequest{Timeout: timeout, Passwd: make([]byte, proto.PasswordLen)})
	r := &rawEndpoint{t: t, nc: nc}
	for _, p := range paths {
		h, _ := r.do(proto.OpCreate, &proto.CreateRequest{Path: p, ACL: proto.WorldACL(proto.PermAll), Flags: proto.FlagEphemeral})
		require.Equal(t, proto.ErrOK, h.Err, p)
	}
	return r
}

// retryLost runs op until it does not fail for a lost connection, for at
// most 30 s, and requires it then to succeed (a create retried after a
// loss may find its own znode).
func retryLost(t *testing.T, op func() error, msgAndArgs ...any) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := op()
		if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) || time.Now().After(deadline) {
			if !errors.Is(err, zk.ErrNodeExists) {
				require.NoError(t, err, msgAndArgs...)
			}
			return
		}
	}
}

// mountCases are differential cases whose sessions span the mounts: on
// ZooKeeper /m0, /m1 and /m2 are plain directories. They record no zxids
// (a stat's are its shard's, a reply header's the root shard's).
var mountCases = []compatCase{
	{"multi-across-mounts", caseMultiAcrossMounts},
	{"ephemerals-across-mounts", caseEphemeralsAcrossMounts},
	{"expiry-across-mounts", caseExpiryAcrossMounts},
}

// mountDirs makes the case's directory under each of /m0, /m1 and /m2 and
// returns them.
func mountDirs(d *driver) []string {
	name := d.prefix[strings.LastIndexByte(d.prefix, '/'):]
	var dirs []string
	for k := range 3 {
		dir := fmt.Sprintf("/m%d%s", k, name)
		if dir != d.prefix {
			if _, err := d.zk.Create(dir, nil, 0, world); err != nil {
				d.fatalf("create %s: %v", dir, err)
			}
		}
		dirs = append(dirs, dir)
	}
	return dirs
}

// recMulti records a multi's outcome without zxids.
func (d *driver) recMulti(what string, res []zk.MultiResponse, err error) {
	var outs []string
	for _, r := range res {
		out := errStr(r.Error)
		if r.String != "" {
			out += " " + r.String
		}
		if r.Stat != nil {
			out += fmt.Sprintf(" version=%d", r.Stat.Version)
		}
		outs = append(outs, out)
	}
	d.rec("%s: %s [%s]", what, errStr(err), strings.Join(outs, "; "))
}

func caseMultiAcrossMounts(d *driver) {
	z, m := d.zk, mountDirs(d)
	res, err := z.Multi(
		&zk.CreateRequest{Path: m[0] + "/x", Data: []byte("0"), Acl: world},
		&zk.CreateRequest{Path: m[1] + "/x", Data: []byte("1"), Acl: world},
		&zk.SetDataRequest{Path: m[1] + "/x", Data: []byte("1b"), Version: 0},
		&zk.CreateRequest{Path: m[2] + "/x", Acl: world, Flags: zk.FlagSequence},
		&zk.CheckVersionRequest{Path: m[0] + "/x", Version: 0},
	)
	d.recMulti("create on three mounts", res, err)
	res, err = z.Multi(
		&zk.CreateRequest{Path: m[2] + "/y", Acl: world},
		&zk.SetDataRequest{Path: m[0] + "/x", Data: []byte("no"), Version: 0},
		&zk.CreateRequest{Path: m[1] + "/x", Acl: world},
		&zk.DeleteRequest{Path: m[0] + "/x", Version: -1},
	)
	d.recMulti("fails at the third op", res, err)
	res, err = z.Multi(
		&zk.CheckVersionRequest{Path: m[1] + "/x", Version: 0},
		&zk.DeleteRequest{Path: m[0] + "/x", Version: -1},
	)
	d.recMulti("a check on one mount holds a delete on another", res, err)
	res, err = z.Multi(
		&zk.DeleteRequest{Path: m[1] + "/x", Version: 1},
		&zk.DeleteRequest{Path: m[0] + "/x", Version: 0},
		&zk.CreateRequest{Path: m[2] + "/z", Data: []byte("z"), Acl: world},
	)
	d.recMulti("delete on two mounts, create on a third", res, err)
	for _, dir := range m {
		kids, _, err := z.Children(dir)
		d.rec("children of %s: %v %s", dir, sorted(kids), errStr(err))
		for _, k := range sorted(kids) {
			data, st, err := z.Get(dir + "/" + k)
			d.rec("  %s: %q version=%d %s", k, data, st.Version, errStr(err))
		}
	}
	// One stat only: its zxids rank alike on both.
	d.multi(d.raw("raw"), "multiRead on three mounts", proto.OpMultiRead,
		mRead(proto.OpGetData, m[2]+"/z"), mRead(proto.OpGetChildren, m[1]), mRead(proto.OpGetData, m[0]+"/none"))
}

func caseEphemeralsAcrossMounts(d *driver) {
	m := mountDirs(d)
	z2 := d.connect("s2")
	var chs []<-chan zk.Event
	for _, dir := range m {
		_, err := z2.Create(dir+"/e", []byte("x"), zk.FlagEphemeral, world)
		d.rec("create ephemeral in %s: %s", dir, errStr(err))
		ok, st, ch, err := d.zk.ExistsW(dir + "/e")
		d.rec("seen from another session: %v owner=%s %s", ok, d.session(st.EphemeralOwner), errStr(err))
		chs = append(chs, ch)
	}
	z2.Close()
	for i, ch := range chs {
		d.event("after close "+m[i], ch)
	}
	for _, dir := range m {
		d.waitGone(dir+"/e", 10*time.Second)
	}
}

func caseExpiryAcrossMounts(d *driver) {
	m := mountDirs(d)
	rc := d.rawSession("raw", 4000)
	for _, dir := range m {
		d.rec("create ephemeral in %s: %s", dir, rc.create(dir+"/e", nil, proto.FlagEphemeral))
	}
	rc.nc.Close() // no closeSession: the session must expire everywhere
	for _, dir := range m {
		d.waitGone(dir+"/e", 20*time.Second)
	}
	ok, _, err := d.zk.Exists(m[1] + "/e")
	d.rec("after expiry: %v %s", ok, errStr(err))
}

// rawEndpoint is a session opened by hand on an endpoint.
type rawEndpoint struct {
	t   *testing.T
	nc  net.Conn
	xid int32
}

func dialEndpoint(t *testing.T, addr string) *rawEndpoint {
	nc, resp := handshake(t, addr, proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)})
	require.NotZero(t, resp.SessionID)
	return &rawEndpoint{t: t, nc: nc}
}

// handshake connects to addr and sends req, and returns the connection
// (closed when the test ends) and the answer.
func handshake(t *testing.T, addr string, req proto.ConnectRequest) (net.Conn, proto.ConnectResponse) {
	nc, resp, err := tryHandshake(t, addr, req)
	require.NoError(t, err)
	return nc, resp
}

// tryHandshake is handshake returning its error.
func tryHandshake(t *testing.T, addr string, req proto.ConnectRequest) (net.Conn, proto.ConnectResponse, error) {
	var resp proto.ConnectResponse
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { nc.Close() })
	if _, err = nc.Write(proto.AppendFrame(nil, &req)); err != nil {
		return nil, resp, err
	}
	frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	if err != nil {
		return nil, resp, err
	}
	return nc, resp, proto.Unmarshal(frame, &resp)
}

// do sends a request and returns its reply's header and body.
func (r *rawEndpoint) do(op proto.OpCode, req proto.Record) (proto.ReplyHeader, []byte) {
	r.xid++
	recs := []proto.Record{&proto.RequestHeader{Xid: r.xid, OpCode: op}}
	if req != nil {
		recs = append(recs, req)
	}
	_, err := r.nc.Write(proto.AppendFrame(nil, recs...))
	require.NoError(r.t, err)
	h, body := readReply(r.t, r.nc)
	require.Equal(r.t, r.xid, h.Xid)
	return h, body
}

// TestEndpointEphemeralsLeaveOutTheSessionRecord: a session that has
// touched a mounted shard has a record among its ephemerals on the root
// shard (/xkeeper-sessions/ID); getEphemerals lists the client's own
// ephemerals on every shard, never the record.
func TestEndpointEphemeralsLeaveOutTheSessionRecord(t *testing.T) {
	_, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	r := dialEndpoint(t, eps[0])
	for _, p := range []string{"/m1/e", "/top-e"} {
		h, _ := r.do(proto.OpCreate, &proto.CreateRequest{Path: p, ACL: proto.WorldACL(proto.PermAll), Flags: proto.FlagEphemeral})
		require.Equal(t, proto.ErrOK, h.Err, p)
	}
	h, body := r.do(proto.OpGetEphemerals, &proto.PathRequest{Path: "/"})
	require.Equal(t, proto.ErrOK, h.Err)
	var got proto.ChildrenResponse
	require.NoError(t, proto.Unmarshal(body, &got))
	assert.ElementsMatch(t, []string{"/m1/e", "/top-e"}, got.Children)
}

func (r *rawEndpoint) create(path string) int64 {
	h, _ := r.do(proto.OpCreate, &proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)})
	require.Equal(r.t, proto.ErrOK, h.Err, path)
	return h.Zxid
}

// TestEndpointHeaderZxidsAreTheRootShards: every reply's header zxid is the
// root shard's latest the session saw, also for requests another shard
// answered, so that the zxid a client offers when it reconnects is one the
// root shard knows; a znode's stat keeps its own shard's zxids.
func TestEndpointHeaderZxidsAreTheRootShards(t *testing.T) {
	_, eps := startEndpointCluster(t)
	r := dialEndpoint(t, eps[0])
	r.create("/m1") // also records that the session has shard b
	z1 := r.create("/r1")
	assert.Equal(t, z1, r.create("/m1/x"), "a write on shard b answers with the root shard's zxid")
	h, body := r.do(proto.OpGetData, &proto.PathWatchRequest{Path: "/m1/x"})
	require.Equal(t, proto.ErrOK, h.Err)
	assert.Equal(t, z1, h.Zxid)
	var got proto.GetDataResponse
	require.NoError(t, proto.Unmarshal(body, &got))
	assert.NotZero(t, got.Stat.Mzxid)
	assert.Greater(t, r.create("/r2"), z1)
}

// TestEndpointRefusesBadInput: what is not a request closes that client's
// connection alone, with ZooKeeper's answers where ZooKeeper has one; the
// endpoint serves everyone else throughout.
func TestEndpointRefusesBadInput(t *testing.T) {
	_, eps := startEndpointCluster(t)
	good := connectZK(t, eps[:1], 5*time.Second)
	closed := func(nc net.Conn) bool {
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.ReadAll(nc)
		return err == nil // EOF: the endpoint closed it
	}

	// A frame over the packet limit.
	r := dialEndpoint(t, eps[0])
	_, err := r.nc.Write([]byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1})
	require.NoError(t, err)
	assert.True(t, closed(r.nc), "oversized frame")

	// A request that does not decode, then an opcode nobody knows:
	// ZooKeeper's unimplemented, then the close.
	r = dialEndpoint(t, eps[0])
	_, err = r.nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: 1, OpCode: 4242}))
	require.NoError(t, err)
	frame, err := proto.ReadFrame(r.nc, proto.DefaultMaxPacket)
	require.NoError(t, err)
	var h proto.ReplyHeader
	h.Decode(proto.NewDecoder(frame))
	assert.Equal(t, proto.ErrUnimplemented, h.Err)
	assert.True(t, closed(r.nc), "unknown opcode")

	// Bytes that are neither a handshake nor a 4-letter word.
	nc, err := net.Dial("tcp", eps[0])
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write([]byte("\xff\xfe\xfd\xfcgarbage"))
	require.NoError(t, err)
	assert.True(t, closed(nc), "garbage")

	// A 4-letter word reaches the root shard's member.
	nc, err = net.Dial("tcp", eps[0])
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write([]byte("ruok"))
	require.NoError(t, err)
	out, _ := io.ReadAll(nc)
	assert.Equal(t, "imok", string(out))

	_, err = good.Create("/still-serving", nil, 0, world)
	require.NoError(t, err)
}

// TestEndpointOverTLS: a node's endpoint has a TLS twin; a client with a
// certificate of the cluster's CA gets a session spanning the shards
// there, a client without one gets none.
func TestEndpointOverTLS(t *testing.T) {
	c, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	ca := testenv.NewCA(t)
	ca.SecureClientPorts(t, c, "required")
	var secure []string
	for _, n := range c.Config.Nodes {
		c.Endpoint(n.Name) // ready again
		secure = append(secure, n.SecureClientAddr)
	}
	cert, key := ca.Issue(t, "client")
	cfg, err := config.ClientConfig(ca.File(), cert, key)
	require.NoError(t, err)
	cl := connect(t, secure, client.WithTLS(cfg))
	for _, p := range []string{"/m1/tls", "/m2/tls", "/tls"} {
		_, err := cl.Create(t.Context(), p, []byte("over tls"), proto.FlagEphemeral, proto.WorldACL(proto.PermAll))
		require.NoError(t, err, p)
	}
	assert.True(t, existsOn(t, c, "c", "/m2/tls"))

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	bad, err := client.Connect(ctx, secure, client.WithLogger(testenv.TestLogger(t)))
	if err == nil {
		bad.Close()
	}
	assert.Error(t, err, "a session without TLS on the secure endpoint")
}

// TestEndpointSessionsStayOutOfReach: the record of a session's sessions
// on other shards cannot be reached by a client in any form: not by a
// cross-shard transaction, through the endpoint or on a member's own port,
// nor by a connection the endpoint hands on as it came (a handshake padded
// past the endpoint's connect size).
func TestEndpointSessionsStayOutOfReach(t *testing.T) {
	c, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	r := dialEndpoint(t, eps[0])
	r.create("/m1/x") // the session now has a record
	forge := &proto.XTransactionRequest{ID: "forged", Coordinator: "a", Shards: []proto.ShardOps{{Shard: "a",
		Ops: proto.MultiRequest{Ops: []proto.MultiOp{{Op: proto.OpCreate, Req: &proto.CreateRequest{
			Path: proto.EndpointSessions + "/forged", ACL: proto.WorldACL(proto.PermAll)}}}}}}}
	h, _ := r.do(proto.OpXTransaction, forge)
	assert.Equal(t, proto.ErrNoAuth, h.Err, "a transaction through the endpoint")
	direct := dialEndpoint(t, c.Servers("a")[0])
	h, _ = direct.do(proto.OpXTransaction, forge)
	assert.Equal(t, proto.ErrNoAuth, h.Err, "a transaction on a member's port")

	nc, err := net.Dial("tcp", eps[0])
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, 5000)}))
	require.NoError(t, err)
	if _, err := proto.ReadFrame(nc, proto.DefaultMaxPacket); err == nil {
		padded := &rawEndpoint{t: t, nc: nc}
		h, _ = padded.do(proto.OpGetChildren, &proto.PathWatchRequest{Path: proto.EndpointSessions})
		assert.Equal(t, proto.ErrNoAuth, h.Err, "a padded handshake")
	}
}

// TestEndpointKeepsIdleShardsAlive: a client busy on one shard sends no
// pings, and its session on another shard, which it does not use, still
// lives (the endpoint pings it).
func TestEndpointKeepsIdleShardsAlive(t *testing.T) {
	c, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	busy := rawEphemerals(t, eps[0], 1000, []string{"/m1/e"})
	deadline := time.Now().Add(4 * time.Second) // four session timeouts
	for time.Now().Before(deadline) {
		h, _ := busy.do(proto.OpExists, &proto.PathWatchRequest{Path: "/"})
		require.Equal(t, proto.ErrOK, h.Err)
	}
	assert.True(t, existsOn(t, c, "b", "/m1/e"), "the ephemeral on the shard the client left alone")
}

// TestEndpointSlowMultiKeepsTheSession: a cross-shard multi whose outcome
// stays unknown past the session timeout (its transaction held after the
// prepares) ends the client's connection, not its session: meanwhile the
// endpoint keeps every shard's session alive, and the client reattaches.
func TestEndpointSlowMultiKeepsTheSession(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed atomic.Bool // not the mount points' own transactions
	hook := func(step, id, shard string) error {
		if step == xshard.StepAllPrepared && armed.Load() {
			once.Do(func() {
				close(held)
				<-release
			})
		}
		return nil
	}
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3, Mounts: endpointMounts, XHook: hook})
	t.Cleanup(c.Stop)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	ep := c.Endpoint("n1")
	createMountPoints(t, ep)

	nc, session := handshake(t, ep, proto.ConnectRequest{Timeout: 2000, Passwd: make([]byte, proto.PasswordLen)})
	r := &rawEndpoint{t: t, nc: nc}
	r.create("/m2/x") // a session on shard c too
	armed.Store(true)

	start := time.Now()
	_, err := nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: 99, OpCode: proto.OpMulti}, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/m2/x/y", ACL: proto.WorldACL(proto.PermAll)}},
		{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/y", ACL: proto.WorldACL(proto.PermAll)}}}}))
	require.NoError(t, err)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the transaction never prepared")
	}
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.ReadAll(nc)
	require.NoError(t, err, "the endpoint ends the connection")
	assert.GreaterOrEqual(t, time.Since(start), 1900*time.Millisecond, "not before the session timeout")

	// A client whose connection closes without an answer (a shard between
	// leaders) connects again, as this one does.
	var back proto.ConnectResponse
	require.Eventually(t, func() bool {
		_, resp, err := tryHandshake(t, c.Endpoint("n2"), proto.ConnectRequest{Timeout: 2000, SessionID: session.SessionID, Passwd: session.Passwd})
		back = resp
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "no answer to the reconnect")
	assert.Equal(t, session.SessionID, back.SessionID, "the session outlived the slow multi")
	close(release)
}
