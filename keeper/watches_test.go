package keeper_test

// Persistent and persistent-recursive watches (addWatch), their removal
// (removeWatches, checkWatches) and their re-registration (setWatches2),
// on one shard and through a node's endpoint with a mount below the
// watched path. What ZooKeeper 3.8 answers for the same is in the
// differential (compat_test.go).

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// watchConn is a raw ZooKeeper session that sends any request and keeps
// the watch notifications it receives, in order.
type watchConn struct {
	t      *testing.T
	nc     net.Conn
	xid    int32
	resp   proto.ConnectResponse
	events []string
}

// dialWatch opens a session on addr, or takes over session (with its
// password) when it is not 0.
func dialWatch(t *testing.T, addr string, session int64, passwd []byte) *watchConn {
	if passwd == nil {
		passwd = make([]byte, proto.PasswordLen)
	}
	nc, resp := handshake(t, addr, proto.ConnectRequest{Timeout: 10000, SessionID: session, Passwd: passwd})
	require.NotZero(t, resp.SessionID, "session refused")
	return &watchConn{t: t, nc: nc, resp: resp}
}

// call sends a request and returns its reply's code and body; closed
// tells whether the connection ended instead.
func (w *watchConn) call(op proto.OpCode, req proto.Record) (code proto.Code, body []byte, closed bool) {
	w.t.Helper()
	w.xid++
	recs := []proto.Record{&proto.RequestHeader{Xid: w.xid, OpCode: op}}
	if req != nil {
		recs = append(recs, req)
	}
	w.nc.SetDeadline(time.Now().Add(15 * time.Second))
	_, err := w.nc.Write(proto.AppendFrame(nil, recs...))
	for err == nil {
		var frame []byte
		if frame, err = proto.ReadFrame(w.nc, proto.DefaultMaxPacket); err != nil {
			break
		}
		h, rest := decodeReply(w.t, frame)
		if h.Xid != proto.XidNotification {
			require.Equal(w.t, w.xid, h.Xid, "reply out of order")
			return h.Err, rest, false
		}
		var ev proto.WatcherEvent
		require.NoError(w.t, proto.Unmarshal(rest, &ev))
		w.events = append(w.events, eventName(ev.Type)+" "+ev.Path)
	}
	return proto.ErrConnectionLoss, nil, true
}

// code sends a request that must be answered and returns the answer's code.
func (w *watchConn) code(op proto.OpCode, req proto.Record) proto.Code {
	w.t.Helper()
	code, _, closed := w.call(op, req)
	require.False(w.t, closed, "%v closed the connection", op)
	return code
}

// addWatch adds a persistent (or recursive) watch and checks ZooKeeper's
// answer: ok with a body of one zero int.
func (w *watchConn) addWatch(path string, mode int32) {
	w.t.Helper()
	code, body, closed := w.call(proto.OpAddWatch, &proto.AddWatchRequest{Path: path, Mode: mode})
	require.False(w.t, closed, "addWatch closed the connection")
	require.Equal(w.t, proto.ErrOK, code, "addWatch %s", path)
	require.Equal(w.t, []byte{0, 0, 0, 0}, body, "addWatch's body")
}

// heard returns the notifications received since the last call, after a
// sync of each path's shard: every event of a write applied before the
// syncs has arrived.
func (w *watchConn) heard(syncs ...string) []string {
	w.t.Helper()
	for _, p := range syncs {
		require.Equal(w.t, proto.ErrOK, w.code(proto.OpSync, &proto.PathRequest{Path: p}))
	}
	out := w.events
	w.events = nil
	return out
}

func eventName(t proto.EventType) string {
	switch t {
	case proto.EventNodeCreated:
		return "created"
	case proto.EventNodeDeleted:
		return "deleted"
	case proto.EventNodeDataChanged:
		return "changed"
	case proto.EventNodeChildrenChanged:
		return "children"
	}
	return fmt.Sprintf("event(%d)", t)
}

// watchWrites is a session that makes the changes the watches see.
type watchWrites struct {
	t *testing.T
	z *zk.Conn
}

func (o watchWrites) create(paths ...string) {
	for _, p := range paths {
		_, err := o.z.Create(p, nil, 0, world)
		require.NoError(o.t, err, "create %s", p)
	}
}

func (o watchWrites) set(p string) {
	_, err := o.z.Set(p, []byte("x"), -1)
	require.NoError(o.t, err, "set %s", p)
}

func (o watchWrites) delete(p string) { require.NoError(o.t, o.z.Delete(p, -1), "delete %s", p) }

// startWatchShard runs one single-member shard and returns its client
// address and a session writing to it.
func startWatchShard(t *testing.T) (string, watchWrites) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 1})
	t.Cleanup(c.Stop)
	addr := c.Servers("a")[0]
	return addr, watchWrites{t, connectZK(t, []string{addr}, 5*time.Second)}
}

// TestPersistentWatchOnOneShard: a persistent watch fires created,
// deleted, data-changed and children-changed on its own node, stays
// through them all (the node's delete included), and goes when removed;
// removing its child part leaves its data part.
func TestPersistentWatchOnOneShard(t *testing.T) {
	addr, o := startWatchShard(t)
	w := dialWatch(t, addr, 0, nil)
	w.addWatch("/pw", proto.AddWatchPersistent)
	o.create("/pw", "/pw/k")
	o.set("/pw")
	o.set("/pw/k")
	o.delete("/pw/k")
	o.delete("/pw")
	o.create("/pw")
	assert.Equal(t, []string{"created /pw", "children /pw", "changed /pw", "children /pw", "deleted /pw", "created /pw"}, w.heard("/"))

	for _, typ := range []int32{proto.WatcherChildren, proto.WatcherData, proto.WatcherAny, proto.WatcherPersistent} {
		assert.Equal(t, proto.ErrOK, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/pw", Type: typ}), "check type %d", typ)
	}
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/pw", Type: proto.WatcherPersistentRecursive}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/pw/k", Type: proto.WatcherAny}))

	// As in ZooKeeper 3.8, removing the children watcher takes the
	// watch's child part only.
	require.Equal(t, proto.ErrOK, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/pw", Type: proto.WatcherChildren}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/pw", Type: proto.WatcherChildren}))
	o.create("/pw/k2")
	o.set("/pw")
	assert.Equal(t, []string{"changed /pw"}, w.heard("/"))

	require.Equal(t, proto.ErrOK, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/pw", Type: proto.WatcherAny}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/pw", Type: proto.WatcherAny}))
	o.set("/pw")
	o.delete("/pw/k2")
	assert.Empty(t, w.heard("/"))
}

// TestRecursiveWatchOnOneShard: a recursive watch fires for its node and
// every descendant, never children-changed; a one-shot watch the session
// also holds on a descendant does not make a second event; the watch is
// removed by its type (PersistentRecursive, ZooKeeper 3.9's), and an
// unknown type is a marshalling error.
func TestRecursiveWatchOnOneShard(t *testing.T) {
	addr, o := startWatchShard(t)
	w := dialWatch(t, addr, 0, nil)
	w.addWatch("/rw", proto.AddWatchPersistentRecursive)
	o.create("/rw", "/rw/x", "/rw/x/y")
	o.set("/rw/x/y")
	o.set("/rw")
	o.delete("/rw/x/y")
	assert.Equal(t, []string{"created /rw", "created /rw/x", "created /rw/x/y", "changed /rw/x/y", "changed /rw", "deleted /rw/x/y"}, w.heard("/"))

	require.Equal(t, proto.ErrOK, w.code(proto.OpGetData, &proto.PathWatchRequest{Path: "/rw/x", Watch: true}))
	o.set("/rw/x")
	o.set("/rw/x")
	assert.Equal(t, []string{"changed /rw/x", "changed /rw/x"}, w.heard("/"))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/rw/x", Type: proto.WatcherAny}),
		"a recursive watch is its own path's")
	assert.Equal(t, proto.ErrOK, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/rw", Type: proto.WatcherPersistentRecursive}))

	assert.Equal(t, proto.ErrMarshallingError, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/rw", Type: 9}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/rw", Type: proto.WatcherPersistent}))
	require.Equal(t, proto.ErrOK, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/rw", Type: proto.WatcherPersistentRecursive}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/rw", Type: proto.WatcherAny}))
	o.create("/rw/z")
	o.set("/rw")
	assert.Empty(t, w.heard("/"))
	assert.Equal(t, proto.ErrMarshallingError, w.code(proto.OpAddWatch, &proto.AddWatchRequest{Path: "/rw", Mode: 2}))
}

// TestRemoveWatchesKeepsTheConnection: removeWatches and checkWatches
// are answered (NoWatcher when there is nothing to remove) and the
// connection goes on; a removed one-shot watch does not fire.
func TestRemoveWatchesKeepsTheConnection(t *testing.T) {
	addr, o := startWatchShard(t)
	w := dialWatch(t, addr, 0, nil)
	code, _, closed := w.call(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/none", Type: proto.WatcherAny})
	require.False(t, closed, "removeWatches closed the connection")
	assert.Equal(t, proto.ErrNoWatcher, code)
	code, _, closed = w.call(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/none", Type: proto.WatcherData})
	require.False(t, closed, "checkWatches closed the connection")
	assert.Equal(t, proto.ErrNoWatcher, code)

	assert.Equal(t, proto.ErrNoNode, w.code(proto.OpExists, &proto.PathWatchRequest{Path: "/gone", Watch: true}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/gone", Type: proto.WatcherChildren}))
	assert.Equal(t, proto.ErrOK, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/gone", Type: proto.WatcherData}))
	assert.Equal(t, proto.ErrOK, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/gone", Type: proto.WatcherData}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/gone", Type: proto.WatcherData}))
	o.create("/gone")
	assert.Empty(t, w.heard("/"))
	assert.Equal(t, proto.ErrOK, w.code(proto.OpPing, nil))
}

// TestSetWatches2RestoresPersistentWatches: a session that reattaches on
// a new connection re-sends its persistent and recursive watches in
// setWatches2, and they fire again, without an event for what changed
// while it was away (as in ZooKeeper).
func TestSetWatches2RestoresPersistentWatches(t *testing.T) {
	addr, o := startWatchShard(t)
	w := dialWatch(t, addr, 0, nil)
	w.addWatch("/sp", proto.AddWatchPersistent)
	w.addWatch("/sr", proto.AddWatchPersistentRecursive)
	w.nc.Close()
	o.create("/sr")

	w = dialWatch(t, addr, w.resp.SessionID, w.resp.Passwd)
	require.Equal(t, proto.ErrOK, w.code(proto.OpSetWatches2, &proto.SetWatchesRequest{V2: true, RelativeZxid: 1,
		PersistentWatches: []string{"/sp"}, PersistentRecursiveWatches: []string{"/sr"}}))
	o.create("/sp", "/sr/x")
	o.set("/sp")
	assert.Equal(t, []string{"created /sp", "created /sr/x", "changed /sp"}, w.heard("/"))
}

// TestEndpointRecursiveWatchAboveAMount: through a node's endpoint, a
// recursive watch above a mount point hears of the mounted shard's
// changes as of the root shard's, once each (the mount point's
// placeholder on the root shard adds nothing), and never of the
// endpoint's own bookkeeping; removing it removes it on every shard;
// after a reconnect, setWatches2 restores it on every shard.
func TestEndpointRecursiveWatchAboveAMount(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1,
		Mounts: []config.Mount{{Path: "/p/m", Shard: "b"}}})
	t.Cleanup(c.Stop)
	ep := c.Endpoint(c.Config.Nodes[0].Name)
	all := dialWatch(t, ep, 0, nil)
	all.addWatch("/", proto.AddWatchPersistentRecursive)
	w := dialWatch(t, ep, 0, nil)
	w.addWatch("/p", proto.AddWatchPersistentRecursive)
	o := watchWrites{t, connectZK(t, []string{ep}, 5*time.Second)}

	steps := []struct {
		write func()
		want  []string
	}{
		{func() { o.create("/p") }, []string{"created /p"}},
		{func() { o.create("/p/m") }, []string{"created /p/m"}},
		{func() { o.create("/p/m/x") }, []string{"created /p/m/x"}},
		{func() { o.set("/p/m/x") }, []string{"changed /p/m/x"}},
		{func() { o.create("/p/other") }, []string{"created /p/other"}},
		{func() { o.set("/p") }, []string{"changed /p"}},
		{func() { o.delete("/p/m/x") }, []string{"deleted /p/m/x"}},
	}
	for i, s := range steps {
		s.write()
		assert.Equal(t, s.want, all.heard("/", "/p/m"), "step %d, watch on /", i)
		assert.Equal(t, s.want, w.heard("/p", "/p/m"), "step %d, watch on /p", i)
	}

	assert.Equal(t, proto.ErrOK, w.code(proto.OpCheckWatches, &proto.WatchesRequest{Path: "/p", Type: proto.WatcherAny}))
	require.Equal(t, proto.ErrOK, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/p", Type: proto.WatcherAny}))
	assert.Equal(t, proto.ErrNoWatcher, w.code(proto.OpRemoveWatches, &proto.WatchesRequest{Path: "/p", Type: proto.WatcherAny}))
	o.create("/p/m/y", "/p/o2")
	assert.Empty(t, w.heard("/p", "/p/m"), "removed on every shard")

	all.nc.Close()
	all = dialWatch(t, ep, all.resp.SessionID, all.resp.Passwd)
	require.Equal(t, proto.ErrOK, all.code(proto.OpSetWatches2, &proto.SetWatchesRequest{V2: true,
		RelativeZxid: 1, PersistentRecursiveWatches: []string{"/"}}))
	for _, p := range []string{"/p/m/y", "/p/o2"} {
		o.set(p)
		assert.Equal(t, []string{"changed " + p}, all.heard("/", "/p/m"), "after setWatches2")
	}
}
