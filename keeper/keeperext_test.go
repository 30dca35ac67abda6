package keeper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// extClient connects a client of the project's own to shard a of c.
func extClient(t *testing.T, c *testenv.Cluster, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, c.Servers("a"), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// nextEvent waits for the next event of a watch, failing after a deadline.
func nextEvent(t *testing.T, ch <-chan client.Event) client.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
		return client.Event{}
	}
}

// TestKeeperExtensionsOnTheWire is the differential of ClickHouse Keeper's
// requests against ClickHouse Keeper's documented answers, sent over the
// wire to a 3-member shard: its system nodes, each extension's success
// and error codes, the watches they set and fire, and the per-op
// counters that show them used.
func TestKeeperExtensionsOnTheWire(t *testing.T) {
	c := testenv.StartShard(t, 3)
	cl := extClient(t, c)
	ctx := t.Context()
	open := proto.WorldACL(proto.PermAll)
	do := func(op proto.OpCode, req, resp proto.Record) error {
		_, err := cl.Do(ctx, op, req, resp)
		return err
	}

	var flags proto.GetDataResponse
	require.NoError(t, do(proto.OpGetData, &proto.PathWatchRequest{Path: proto.KeeperFeatureFlagsPath}, &flags))
	for _, f := range []proto.FeatureFlag{proto.FeatureFilteredList, proto.FeatureMultiRead, proto.FeatureCheckNotExists,
		proto.FeatureCreateIfNotExists, proto.FeatureRemoveRecursive, proto.FeatureMultiWatches, proto.FeatureCreateWithStats,
		proto.FeatureTryRemove, proto.FeatureListWithStatAndData, proto.FeatureCheckStat} {
		assert.True(t, proto.FeatureEnabled(flags.Data, f), "flag %d advertised", f)
	}
	data, _, err := cl.Get(ctx, proto.KeeperAPIVersionPath)
	require.NoError(t, err)
	assert.Equal(t, "3", string(data))
	_, err = cl.Create(ctx, "/keeper/mine", nil, 0, open)
	assert.Equal(t, proto.ErrBadArguments, err, "system nodes are read-only")
	_, err = cl.Set(ctx, proto.KeeperFeatureFlagsPath, []byte{0xff}, -1)
	assert.Equal(t, proto.ErrBadArguments, err)
	kids, err := cl.GetChildren(ctx, "/")
	require.NoError(t, err)
	assert.Equal(t, []string{"zookeeper"}, kids, "the root lists no /keeper, as ZooKeeper's")

	for _, p := range []string{"/t", "/t/a", "/t/b", "/t/b/c"} {
		_, err := cl.Create(ctx, p, []byte("x"), 0, open)
		require.NoError(t, err)
	}
	_, err = cl.Create(ctx, "/t/e", nil, proto.FlagEphemeral, open)
	require.NoError(t, err)

	var list proto.ChildrenResponse
	list.WithStat = true
	require.NoError(t, do(proto.OpFilteredList, proto.FilteredList("/t", false, proto.ListPersistentOnly), &list))
	assert.Equal(t, []string{"a", "b"}, list.Children)
	assert.Equal(t, int32(3), list.Stat.NumChildren)
	require.NoError(t, do(proto.OpFilteredList, proto.FilteredList("/t", false, proto.ListEphemeralOnly), &list))
	assert.Equal(t, []string{"e"}, list.Children)
	assert.Equal(t, proto.ErrNoNode, do(proto.OpFilteredList, proto.FilteredList("/none", false, proto.ListAll), nil))

	var reads proto.MultiResponse
	require.NoError(t, do(proto.OpMultiRead, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: "/t/a"}},
		{Op: proto.OpExists, Req: &proto.PathWatchRequest{Path: "/none"}},
		{Op: proto.OpFilteredList, Req: proto.FilteredList("/t", false, proto.ListPersistentOnly)},
		{Op: proto.OpGetChildren, Req: &proto.PathWatchRequest{Path: "/t/b"}},
	}}, &reads))
	require.Len(t, reads.Results, 4)
	assert.Equal(t, "x", string(reads.Results[0].Resp.(*proto.GetDataResponse).Data))
	assert.Equal(t, proto.ErrNoNode, reads.Results[1].Err, "each read answered on its own")
	assert.Equal(t, proto.OpExists, reads.Results[1].Op,
		"a client that read /keeper's nodes, as ClickHouse's does, is answered in ClickHouse Keeper's form")
	var zkReads proto.MultiResponse
	_, err = extClient(t, c).Do(ctx, proto.OpMultiRead, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: "/none"}}}}, &zkReads)
	require.NoError(t, err)
	assert.Equal(t, []proto.MultiResult{{Op: proto.OpError, Err: proto.ErrNoNode}}, zkReads.Results,
		"any other client is answered in ZooKeeper's form")
	assert.Equal(t, []string{"a", "b"}, reads.Results[2].Resp.(*proto.ChildrenResponse).Children)
	assert.Equal(t, []string{"c"}, reads.Results[3].Resp.(*proto.ChildrenResponse).Children)

	var made proto.PathRequest
	require.NoError(t, do(proto.OpCreateIfNotExists, &proto.CreateRequest{Path: "/t/a", Data: []byte("y"), ACL: open}, &made))
	assert.Equal(t, "/t/a", made.Path)
	got, _, err := cl.Get(ctx, "/t/a")
	require.NoError(t, err)
	assert.Equal(t, "x", string(got), "an existing node is left as it is")
	assert.Equal(t, proto.ErrNodeExists, do(proto.OpCheckNotExists, &proto.PathVersionRequest{Path: "/t/a", Version: -1}, nil))
	assert.NoError(t, do(proto.OpCheckNotExists, &proto.PathVersionRequest{Path: "/t/z", Version: -1}, nil))
	assert.NoError(t, do(proto.OpTryRemove, &proto.PathVersionRequest{Path: "/t/b", Version: -1}, nil), "not empty: ZOK")
	assert.NoError(t, do(proto.OpTryRemove, &proto.PathVersionRequest{Path: "/t/z", Version: -1}, nil), "missing: ZOK")
	assert.Equal(t, proto.ErrNotEmpty, do(proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: "/t", Limit: 4}, nil))
	_, _, err = cl.Get(ctx, "/t/b/c")
	require.NoError(t, err, "a refused removeRecursive removes nothing")

	// The watches the equivalent deletes would fire.
	_, _, deep, err := cl.GetW(ctx, "/t/b/c")
	require.NoError(t, err)
	_, _, root, err := cl.ChildrenW(ctx, "/")
	require.NoError(t, err)
	require.NoError(t, do(proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: "/t", Limit: 5}, nil))
	ev := nextEvent(t, deep)
	assert.Equal(t, proto.EventNodeDeleted, ev.Type)
	assert.Equal(t, "/t/b/c", ev.Path)
	ev = nextEvent(t, root)
	assert.Equal(t, proto.EventNodeChildrenChanged, ev.Type)
	ok, _, err := cl.Exists(ctx, "/t")
	require.NoError(t, err)
	assert.False(t, ok)

	var multi proto.MultiResponse
	require.NoError(t, do(proto.OpMulti, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpCreateIfNotExists, Req: &proto.CreateRequest{Path: "/m", ACL: open}},
		{Op: proto.OpCheckNotExists, Req: &proto.PathVersionRequest{Path: "/m/x", Version: -1}},
		{Op: proto.OpRemoveRecursive, Req: &proto.RemoveRecursiveRequest{Path: "/m", Limit: 1}},
	}}, &multi))
	assert.Equal(t, []proto.OpCode{proto.OpCreateIfNotExists, proto.OpCheckNotExists, proto.OpRemoveRecursive},
		[]proto.OpCode{multi.Results[0].Op, multi.Results[1].Op, multi.Results[2].Op})

	// checkStat: every field given must be the node's; a mismatch is
	// ZBADVERSION, and in a multi it undoes the writes it guards.
	_, err = cl.Create(ctx, "/s", []byte("abc"), 0, open)
	require.NoError(t, err)
	_, stat, err := cl.Get(ctx, "/s")
	require.NoError(t, err)
	checkStat := func(path string, version int32, s proto.Stat) *proto.CheckStatRequest {
		return &proto.CheckStatRequest{Path: path, Version: version, Stat: s}
	}
	assert.NoError(t, do(proto.OpCheckStat, checkStat("/s", stat.Version, *stat), nil))
	assert.NoError(t, do(proto.OpCheckStat, checkStat("/s", -1, proto.AnyStat()), nil))
	wrong := proto.AnyStat()
	wrong.Mzxid = stat.Mzxid + 1
	assert.Equal(t, proto.ErrBadVersion, do(proto.OpCheckStat, checkStat("/s", -1, wrong), nil))
	assert.Equal(t, proto.ErrNoNode, do(proto.OpCheckStat, checkStat("/none", -1, proto.AnyStat()), nil))
	var guarded proto.MultiResponse
	require.NoError(t, do(proto.OpMulti, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/s/new", ACL: open}},
		{Op: proto.OpCheckStat, Req: checkStat("/s", -1, wrong)},
	}}, &guarded))
	assert.Equal(t, proto.FailedMulti(2, 1, proto.ErrBadVersion).Results, guarded.Results)
	ok, _, err = cl.Exists(ctx, "/s/new")
	require.NoError(t, err)
	assert.False(t, ok, "the create it guards is undone")
	require.NoError(t, do(proto.OpMulti, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpCheckStat, Req: checkStat("/s", -1, *stat)},
		{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/s/new", ACL: open}},
	}}, &guarded))
	assert.Equal(t, []proto.OpCode{proto.OpCheckStat, proto.OpCreate}, []proto.OpCode{guarded.Results[0].Op, guarded.Results[1].Op})
	_, err = cl.Do(ctx, proto.OpCheckStat, &proto.PathVersionRequest{Path: "/s", Version: -1}, nil)
	assert.Equal(t, proto.ErrMarshallingError, err, "a checkStat without its stat does not decode; the connection stays")
	_, _, err = cl.Get(ctx, "/s")
	assert.NoError(t, err)

	counts := c.OpCounts("a")
	for _, op := range []string{"filteredList", "multiRead", "createIfNotExists", "checkNotExists", "tryRemove", "removeRecursive", "checkStat"} {
		assert.NotZero(t, counts[op], "%s counted by name", op)
	}
}

// TestKeeperExtensionsBadInput: an opcode of a flag xkeeper does not
// advertise, and a multiRead larger than max_packet_bytes, each end their
// own connection (as ClickHouse Keeper ends one whose request it cannot
// read); the shard serves the others on.
func TestKeeperExtensionsBadInput(t *testing.T) {
	c := testenv.StartShard(t, 3)
	other := extClient(t, c)
	// A multiRead past the limit. Every op's encoding has the same length:
	// marshalling the whole multi again for each op was quadratic (minutes
	// under -race).
	tooLarge := &proto.MultiRequest{}
	op := func(i int) proto.MultiOp {
		return proto.MultiOp{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: fmt.Sprintf("/%0200d", i)}}
	}
	tooLarge.Ops = append(tooLarge.Ops, op(0))
	one := len(proto.Marshal(tooLarge))
	tooLarge.Ops = append(tooLarge.Ops, op(1))
	each := len(proto.Marshal(tooLarge)) - one
	for size := one + each; size <= proto.DefaultMaxPacket; size += each {
		tooLarge.Ops = append(tooLarge.Ops, op(len(tooLarge.Ops)))
	}
	require.Greater(t, len(proto.Marshal(tooLarge)), proto.DefaultMaxPacket)
	for name, send := range map[string]func(*client.Client) error{
		"listRecursive": func(cl *client.Client) error {
			_, err := cl.Do(t.Context(), proto.OpListRecursive, &proto.PathRequest{Path: "/"}, nil)
			return err
		},
		"multiRead past max_packet_bytes": func(cl *client.Client) error {
			_, err := cl.Do(t.Context(), proto.OpMultiRead, tooLarge, &proto.MultiResponse{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			cl := extClient(t, c, client.WithMaxPacket(4<<20))
			err := send(cl)
			require.Error(t, err)
			var code proto.Code
			if errors.As(err, &code) {
				assert.Contains(t, []proto.Code{proto.ErrUnimplemented, proto.ErrConnectionLoss}, code)
			}
			_, _, err = other.Get(t.Context(), "/zookeeper")
			assert.NoError(t, err, "the other connection is served")
		})
	}
}

// TestKeeperExtensionsThroughTheEndpoint: through a node endpoint, a
// client that read /keeper's nodes gets multiReads in ClickHouse Keeper's
// form, on one shard and across a mount, any other client ZooKeeper's;
// and a removeRecursive that would remove a mount point, or a subtree
// with one in it, is refused with nothing removed (no shard can remove it
// whole), while one under the mount point goes through.
func TestKeeperExtensionsThroughTheEndpoint(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1,
		Mounts: []config.Mount{{Path: "/p/m", Shard: "b"}}})
	endpoint := func() *client.Client {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		cl, err := client.Connect(ctx, []string{c.Endpoint(c.Config.Nodes[0].Name)})
		require.NoError(t, err)
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	ctx := t.Context()
	cl := endpoint()
	open := proto.WorldACL(proto.PermAll)
	for _, p := range []string{"/p", "/p/m", "/p/m/x", "/p/m/x/y", "/p/o"} {
		_, err := cl.Create(ctx, p, nil, 0, open)
		require.NoError(t, err)
	}
	reads := &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: "/p/none"}},
		{Op: proto.OpExists, Req: &proto.PathWatchRequest{Path: "/p/m/none"}},
		{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: "/p/m/x"}},
	}}
	oneShard := &proto.MultiRequest{Ops: reads.Ops[:1]}
	for _, m := range []*proto.MultiRequest{reads, oneShard} {
		var got proto.MultiResponse
		_, err := cl.Do(ctx, proto.OpMultiRead, m, &got)
		require.NoError(t, err)
		assert.Equal(t, proto.MultiResult{Op: proto.OpError, Err: proto.ErrNoNode}, got.Results[0], "ZooKeeper's form")
	}
	_, _, err := cl.Get(ctx, proto.KeeperFeatureFlagsPath)
	require.NoError(t, err)
	for _, m := range []*proto.MultiRequest{reads, oneShard} {
		var got proto.MultiResponse
		_, err := cl.Do(ctx, proto.OpMultiRead, m, &got)
		require.NoError(t, err)
		assert.Equal(t, proto.MultiResult{Op: proto.OpGetData, Err: proto.ErrNoNode}, got.Results[0], "ClickHouse Keeper's form")
		if len(got.Results) == 3 {
			assert.Equal(t, proto.MultiResult{Op: proto.OpExists, Err: proto.ErrNoNode}, got.Results[1])
			assert.Equal(t, proto.OpGetData, got.Results[2].Op)
		}
	}

	for _, p := range []string{"/p", "/p/m"} {
		_, err := cl.Do(ctx, proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: p, Limit: 100}, nil)
		assert.Equal(t, proto.ErrBadArguments, err, "removeRecursive of %s", p)
		_, err = cl.Do(ctx, proto.OpMulti, &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpRemoveRecursive, Req: &proto.RemoveRecursiveRequest{Path: p, Limit: 100}}}}, &proto.MultiResponse{})
		assert.Equal(t, proto.ErrBadArguments, err, "a multi's removeRecursive of %s", p)
	}
	for _, p := range []string{"/p", "/p/m", "/p/m/x/y", "/p/o"} {
		_, _, err := cl.Get(ctx, p)
		assert.NoError(t, err, "%s is still there", p)
	}
	kids, err := cl.GetChildren(ctx, "/p")
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"m", "o"}, kids)
	_, err = cl.Do(ctx, proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: "/p/m/x", Limit: 100}, nil)
	require.NoError(t, err)
	_, _, err = cl.Get(ctx, "/p/m/x")
	assert.Equal(t, proto.ErrNoNode, err)
}

// TestRemoveRecursiveIsBoundedWhereItEnters (issue 37): a removeRecursive
// asking for a limit above proto.MaxRemoveRecursive, alone or in a multi,
// is lowered to it by the member it enters: a subtree of one node more is
// refused (ErrNotEmpty) and left whole, one of exactly the bound goes.
// Before, the state machine took limits up to 1,048,576 nodes, whose
// apply cost every member 5 s and 1.1 GB.
func TestRemoveRecursiveIsBoundedWhereItEnters(t *testing.T) {
	c := testenv.StartShard(t, 3)
	cl := extClient(t, c)
	ctx := t.Context()
	open := proto.WorldACL(proto.PermAll)
	_, err := cl.Create(ctx, "/big", nil, 0, open)
	require.NoError(t, err)
	var ops []proto.MultiOp
	flush := func() {
		_, err := cl.Do(ctx, proto.OpMulti, &proto.MultiRequest{Ops: ops}, &proto.MultiResponse{})
		require.NoError(t, err)
		ops = ops[:0]
	}
	for i := range proto.MaxRemoveRecursive { // /big and its children: one node over the bound
		ops = append(ops, proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: fmt.Sprintf("/big/%05d", i), ACL: open}})
		if len(ops) == 2000 {
			flush()
		}
	}
	flush()
	do := func(op proto.OpCode, req proto.Record) error {
		_, err := cl.Do(ctx, op, req, nil)
		return err
	}
	huge := uint32(1 << 20)
	assert.Equal(t, proto.ErrNotEmpty, do(proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: "/big", Limit: huge}))
	var multi proto.MultiResponse
	_, err = cl.Do(ctx, proto.OpMulti, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpRemoveRecursive, Req: &proto.RemoveRecursiveRequest{Path: "/big", Limit: huge}}}}, &multi)
	if err == nil {
		require.Len(t, multi.Results, 1)
		err = multi.Results[0].Err
	}
	assert.Equal(t, proto.ErrNotEmpty, err, "in a multi too")
	_, stat, err := cl.Get(ctx, "/big")
	require.NoError(t, err)
	assert.Equal(t, int32(proto.MaxRemoveRecursive), stat.NumChildren, "refused whole")

	require.NoError(t, cl.Delete(ctx, "/big/00000", -1))
	require.NoError(t, do(proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: "/big", Limit: huge}),
		"a subtree of the bound goes")
	exists, _, err := cl.Exists(ctx, "/big")
	require.NoError(t, err)
	assert.False(t, exists)
}
