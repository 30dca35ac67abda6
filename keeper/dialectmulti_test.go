package keeper_test

// ClickHouse Keeper's MULTI_WATCHES and CREATE_WITH_STATS over the wire:
// a multiRead's reads set the watches their flags ask for, and a multi
// answers a create2 with the new node's stat, on a connection in
// ClickHouse Keeper's dialect (one that read /keeper first, as
// ClickHouse's client does), on one shard and through a node's endpoint
// with a mount; a connection in ZooKeeper's dialect gets what ZooKeeper
// 3.8 answers, which the ZooKeeper subtests show.

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// dialectConn opens a raw session on addr; in ClickHouse Keeper's dialect
// it first reads /keeper/feature_flags, as ClickHouse's client does.
func dialectConn(t *testing.T, addr string, clickhouse bool) *watchConn {
	w := dialWatch(t, addr, 0, nil)
	if clickhouse {
		require.Equal(t, proto.ErrOK, w.code(proto.OpGetData, &proto.PathWatchRequest{Path: proto.KeeperFeatureFlagsPath}))
	}
	return w
}

// mustCreate creates each path with world's acl (and data "x").
func (w *watchConn) mustCreate(acl []proto.ACL, paths ...string) {
	w.t.Helper()
	for _, p := range paths {
		require.Equal(w.t, proto.ErrOK, w.code(proto.OpCreate, &proto.CreateRequest{Path: p, Data: []byte("x"), ACL: acl}), "create %s", p)
	}
}

// mustSet sets the data of each path.
func (w *watchConn) mustSet(paths ...string) {
	w.t.Helper()
	for _, p := range paths {
		require.Equal(w.t, proto.ErrOK, w.code(proto.OpSetData, &proto.SetDataRequest{Path: p, Data: []byte("y"), Version: -1}), "set %s", p)
	}
}

// multiWatchReads is a multiRead under /mw whose reads ask for watches
// (one does not): on success a data or child watch each, on /mw/none an
// exists watch (getData's fails and sets none), on /mw/secret (no READ)
// none but exists's. /mw/m is mounted on another shard through the
// endpoint.
func multiWatchReads() *proto.MultiRequest {
	read := func(op proto.OpCode, path string, watch bool) proto.MultiOp {
		return proto.MultiOp{Op: op, Req: &proto.PathWatchRequest{Path: path, Watch: watch}}
	}
	return &proto.MultiRequest{Ops: []proto.MultiOp{
		read(proto.OpGetData, "/mw/a", true),
		read(proto.OpExists, "/mw/none", true),
		read(proto.OpGetData, "/mw/none", true),
		read(proto.OpGetChildren, "/mw", true),
		{Op: proto.OpFilteredList, Req: proto.FilteredList("/mw/m", true, proto.ListAll)},
		read(proto.OpGetData, "/mw/m/x", true),
		read(proto.OpGetChildren2, "/mw/m/x", false),
		read(proto.OpGetData, "/mw/secret", true),
		read(proto.OpGetChildren, "/mw/secret", true),
	}}
}

// runMultiWatches sets watches through multiWatchReads on a session in
// each dialect, changes every node read, twice, and checks what each
// session hears: in ClickHouse Keeper's dialect each watch's event once,
// of its kind; in ZooKeeper's nothing.
func runMultiWatches(t *testing.T, addr string) {
	writer := dialectConn(t, addr, false)
	writer.mustCreate(dialectOpen, "/mw", "/mw/a", "/mw/m", "/mw/m/x")
	writer.mustCreate(dialectNoRead, "/mw/secret")
	ch, zk := dialectConn(t, addr, true), dialectConn(t, addr, false)
	for _, w := range []*watchConn{ch, zk} {
		code, body, closed := w.call(proto.OpMultiRead, multiWatchReads())
		require.False(t, closed)
		require.Equal(t, proto.ErrOK, code)
		var got proto.MultiResponse
		require.NoError(t, proto.Unmarshal(body, &got))
		require.Len(t, got.Results, len(multiWatchReads().Ops))
	}
	changes := func() {
		writer.mustSet("/mw/a", "/mw/m/x", "/mw/secret")
		writer.mustCreate(dialectOpen, "/mw/m/x/k", "/mw/secret/k")
		require.Equal(t, proto.ErrOK, writer.code(proto.OpDelete, &proto.PathVersionRequest{Path: "/mw/m/x/k", Version: -1}))
		require.Equal(t, proto.ErrOK, writer.code(proto.OpDelete, &proto.PathVersionRequest{Path: "/mw/secret/k", Version: -1}))
	}
	changes()
	writer.mustCreate(dialectOpen, "/mw/none", "/mw/m/y")
	syncs := []string{"/mw", "/mw/m"}
	assert.ElementsMatch(t, []string{"changed /mw/a", "created /mw/none", "children /mw", "children /mw/m", "changed /mw/m/x"},
		ch.heard(syncs...), "ClickHouse Keeper's dialect: each watch fires once, of its kind")
	assert.Empty(t, zk.heard(syncs...), "ZooKeeper's dialect: a multiRead sets no watch, as ZooKeeper 3.8")
	changes()
	require.Equal(t, proto.ErrOK, writer.code(proto.OpDelete, &proto.PathVersionRequest{Path: "/mw/none", Version: -1}))
	writer.mustCreate(dialectOpen, "/mw/m/z")
	assert.Empty(t, ch.heard(syncs...), "one-shot: fired once")
}

// TestMultiWatches (MULTI_WATCHES): on one shard and through a node's
// endpoint whose mount puts /mw/m on another shard, and ZooKeeper 3.8's
// answer to the same multiRead (it sets no watch).
func TestMultiWatches(t *testing.T) {
	t.Run("Shard", func(t *testing.T) {
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 1})
		runMultiWatches(t, c.Servers("a")[0])
	})
	t.Run("EndpointWithAMount", func(t *testing.T) {
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1, Mounts: []config.Mount{{Path: "/mw/m", Shard: "b"}}})
		runMultiWatches(t, c.Endpoint(c.Config.Nodes[0].Name))
	})
	t.Run("ZooKeeper", func(t *testing.T) {
		z := testenv.StartZooKeeper(t, 1)
		w := dialectConn(t, z.Servers()[0], false)
		w.mustCreate(dialectOpen, "/mw", "/mw/a")
		m := &proto.MultiRequest{Ops: []proto.MultiOp{ // ZooKeeper 3.8's multiRead takes getData and getChildren
			{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: "/mw/a", Watch: true}},
			{Op: proto.OpGetChildren, Req: &proto.PathWatchRequest{Path: "/mw", Watch: true}}}}
		require.Equal(t, proto.ErrOK, w.code(proto.OpMultiRead, m))
		w.mustSet("/mw/a")
		w.mustCreate(dialectOpen, "/mw/b")
		assert.Empty(t, w.heard("/mw"), "ZooKeeper 3.8 sets no watch for a multiRead's reads")
	})
}

// create2Multi is a multi of a create2 (with data "abc") and a create.
func create2Multi(create2, create string) *proto.MultiRequest {
	return &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpCreate2, Req: &proto.CreateRequest{Path: create2, Data: []byte("abc"), ACL: dialectOpen}},
		{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: create, ACL: dialectOpen}}}}
}

// multiResults sends m and returns its results.
func (w *watchConn) multiResults(m *proto.MultiRequest) []proto.MultiResult {
	w.t.Helper()
	code, body, closed := w.call(proto.OpMulti, m)
	require.False(w.t, closed)
	require.Equal(w.t, proto.ErrOK, code)
	var got proto.MultiResponse
	require.NoError(w.t, proto.Unmarshal(body, &got))
	require.Len(w.t, got.Results, len(m.Ops))
	return got.Results
}

// stat returns path's stat, read with exists.
func (w *watchConn) stat(path string) proto.Stat {
	w.t.Helper()
	code, body, closed := w.call(proto.OpExists, &proto.PathWatchRequest{Path: path})
	require.False(w.t, closed)
	require.Equal(w.t, proto.ErrOK, code, "exists %s", path)
	var s proto.StatResponse
	require.NoError(w.t, proto.Unmarshal(body, &s))
	return s.Stat
}

// zooKeeperCreates is what ZooKeeper 3.8 answers for create2Multi: two
// creates, each its path alone.
func zooKeeperCreates(create2, create string) []proto.MultiResult {
	return []proto.MultiResult{{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: create2}},
		{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: create}}}
}

// runCreate2InAMulti sends create2Multi in each dialect, under parent
// (on one shard), and, if across is set, with the create2 under across
// (another shard's, through an endpoint: a cross-shard transaction).
// ClickHouse Keeper's dialect gets create2's result, with the stat the
// node has (the zxids and times of the transaction's prepare across
// shards); ZooKeeper's gets ZooKeeper 3.8's.
func runCreate2InAMulti(t *testing.T, addr, parent, across string) {
	ch, zk := dialectConn(t, addr, true), dialectConn(t, addr, false)
	ch.mustCreate(dialectOpen, parent)
	if across != "" {
		ch.mustCreate(dialectOpen, across)
	}
	type run struct{ create2, create string }
	runs := []run{{parent + "/a", parent + "/b"}}
	if across != "" {
		runs = append(runs, run{across + "/a", parent + "/c"})
	}
	for _, r := range runs {
		got := ch.multiResults(create2Multi(r.create2, r.create))
		require.Equal(t, proto.OpCreate2, got[0].Op, "%s: create2's result", r.create2)
		stat := ch.stat(r.create2)
		c2 := got[0].Resp.(*proto.Create2Response)
		assert.Equal(t, r.create2, c2.Path)
		if r.create2 == parent+"/a" {
			assert.Equal(t, stat, c2.Stat, "the stat the node has")
		} else { // fixed by the prepare (DESIGN-NOTES, cross-shard transactions)
			stat.Czxid, stat.Mzxid, stat.Pzxid, stat.Ctime, stat.Mtime = c2.Stat.Czxid, c2.Stat.Mzxid, c2.Stat.Pzxid, c2.Stat.Ctime, c2.Stat.Mtime
			assert.Equal(t, stat, c2.Stat, "the stat the node has, but the zxids and times of the prepare")
			assert.Equal(t, c2.Stat.Czxid, c2.Stat.Mzxid)
		}
		assert.Equal(t, int32(3), c2.Stat.DataLength)
		assert.Equal(t, proto.MultiResult{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: r.create}}, got[1])

		zr := run{r.create2 + "z", r.create + "z"}
		assert.Equal(t, zooKeeperCreates(zr.create2, zr.create), zk.multiResults(create2Multi(zr.create2, zr.create)),
			"ZooKeeper's dialect: ZooKeeper 3.8's answer")
	}
}

// TestCreate2InAMulti (CREATE_WITH_STATS): on each member of a shard,
// through a node's endpoint with a mount (one shard's multi, and one across
// shards), and ZooKeeper 3.8's answer, which ZooKeeper's dialect gives.
func TestCreate2InAMulti(t *testing.T) {
	t.Run("Shard", func(t *testing.T) {
		// On each member of three: a follower answers early, with the
		// leader's result (keeper.early_replies).
		c := testenv.StartShard(t, 3)
		for i, addr := range c.Servers("a") {
			runCreate2InAMulti(t, addr, fmt.Sprintf("/c%d", i), "")
		}
	})
	t.Run("EndpointWithAMount", func(t *testing.T) {
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1, Mounts: []config.Mount{{Path: "/cm", Shard: "b"}}})
		runCreate2InAMulti(t, c.Endpoint(c.Config.Nodes[0].Name), "/c", "/cm")
	})
	t.Run("ZooKeeper", func(t *testing.T) {
		z := testenv.StartZooKeeper(t, 1)
		w := dialectConn(t, z.Servers()[0], false)
		w.mustCreate(dialectOpen, "/c")
		assert.Equal(t, zooKeeperCreates("/c/a", "/c/b"), w.multiResults(create2Multi("/c/a", "/c/b")),
			"ZooKeeper 3.8 answers a create2 in a multi as a create")
	})
}
