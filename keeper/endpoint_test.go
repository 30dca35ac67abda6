package keeper_test

import (
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
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

func TestEndpointRoutesByMount(t *testing.T) {
	c, eps := startEndpointCluster(t)
	conn := connectZK(t, eps[:1], 5*time.Second)

	for _, p := range []string{"/top", "/m1/x", "/m2/y", "/m1/x/deep"} {
		_, err := conn.Create(p, []byte(p), 0, world)
		require.NoError(t, err, p)
	}
	for _, want := range []struct {
		shard, path string
		on          bool
	}{{"a", "/top", true}, {"b", "/top", false}, {"b", "/m1/x/deep", true}, {"a", "/m1/x", false},
		{"c", "/m2/y", true}, {"b", "/m2/y", false}} {
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
	data, _, err := conn.Get("/m1/x/deep")
	require.NoError(t, err)
	assert.Equal(t, "/m1/x/deep", string(data))

	// A mount point is part of the layout: it cannot be deleted.
	assert.ErrorIs(t, conn.Delete("/m2", -1), zk.ErrNotEmpty)
	require.NoError(t, conn.Delete("/m2/y", -1))
	assert.ErrorIs(t, conn.Delete("/m2", -1), zk.ErrNotEmpty)

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
	watcher := connectZK(t, eps[2:], 5*time.Second)
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
	for i, ep := range eps {
		if ep == conn.Server() {
			on = c.Config.Nodes[i].Name
		}
	}
	require.NotEmpty(t, on, "connected to %s", conn.Server())
	c.KillNode(on)
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
	watcher := connectZK(t, eps[:1], 5*time.Second)
	ephemerals := []string{"/e", "/m1/e", "/m2/e"}
	nc := rawEphemerals(t, eps[1], 2000, ephemerals)
	var gone []<-chan zk.Event
	for _, p := range ephemerals {
		ok, _, ch, err := watcher.ExistsW(p)
		require.NoError(t, err)
		require.True(t, ok)
		gone = append(gone, ch)
	}
	// The client vanishes without closing: every shard's session expires.
	nc.Close()
	for i, ch := range gone {
		select {
		case ev := <-ch:
			assert.Equal(t, zk.EventNodeDeleted, ev.Type, ephemerals[i])
		case <-time.After(20 * time.Second):
			t.Fatalf("%s outlived its session", ephemerals[i])
		}
	}
}

// rawEphemerals opens a session of timeout ms at addr and creates an
// ephemeral at each path, by hand, so that the caller can drop the
// connection without closing the session.
func rawEphemerals(t *testing.T, addr string, timeout int32, paths []string) net.Conn {
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	_, err = nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: timeout, Passwd: make([]byte, proto.PasswordLen)}))
	require.NoError(t, err)
	_, err = proto.ReadFrame(nc, proto.DefaultMaxPacket)
	require.NoError(t, err)
	for i, p := range paths {
		_, err := nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: int32(i + 1), OpCode: proto.OpCreate},
			&proto.CreateRequest{Path: p, ACL: proto.WorldACL(proto.PermAll), Flags: proto.FlagEphemeral}))
		require.NoError(t, err)
		frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
		require.NoError(t, err)
		var h proto.ReplyHeader
		h.Decode(proto.NewDecoder(frame))
		require.Equal(t, proto.ErrOK, h.Err, p)
	}
	return nc
}

// retryLost runs op until it does not fail for a lost connection, for at
// most 30 s, and requires it then to succeed (a create retried after a
// loss may find its own znode).
func retryLost(t *testing.T, op func() error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := op()
		if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) || time.Now().After(deadline) {
			if !errors.Is(err, zk.ErrNodeExists) {
				require.NoError(t, err)
			}
			return
		}
	}
}
