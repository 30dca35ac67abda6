package fsm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// numberedHarness applies each session's writes numbered, as a member
// sends them, so that they apply under the newest entry version.
type numberedHarness struct {
	*harness
	seq map[int64]uint64
}

func newNumbered(t *testing.T) *numberedHarness {
	return &numberedHarness{harness: newHarness(t), seq: map[int64]uint64{}}
}

// write applies r as the session's next numbered write.
func (h *numberedHarness) write(r Request) (Result, []Event) {
	h.t.Helper()
	h.seq[r.Session]++
	r.Conn, r.Seq = 1, h.seq[r.Session]
	return h.do(r)
}

// Requests of ClickHouse Keeper.

func removeRecursive(path string, limit uint32) (proto.OpCode, proto.Record) {
	return proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: path, Limit: limit}
}

func pathVersion(op proto.OpCode, path string, version int32) (proto.OpCode, proto.Record) {
	return op, &proto.PathVersionRequest{Path: path, Version: version}
}

func createIfNotExists(path string, flags int32) (proto.OpCode, proto.Record) {
	return proto.OpCreateIfNotExists, &proto.CreateRequest{Path: path, Data: []byte("new"), ACL: openACL, Flags: flags}
}

// TestKeeperExtensionWrites is the differential of ClickHouse Keeper's
// writes against what ClickHouse Keeper answers (KeeperStorage.cpp): each
// success and each error code, the tree after it and the watch events it
// fires.
func TestKeeperExtensionWrites(t *testing.T) {
	deleted := func(paths ...string) []Event {
		var ev []Event
		for _, p := range paths {
			ev = append(ev, Event{Type: proto.EventNodeDeleted, Path: p}, Event{Type: proto.EventNodeChildrenChanged, Path: parentOf(p)})
		}
		return ev
	}
	noDelete := []proto.ACL{{Perms: proto.PermAll &^ proto.PermDelete, ID: proto.ID{Scheme: "world", ID: "anyone"}}}
	cases := []struct {
		name   string
		op     proto.OpCode
		req    proto.Record
		code   proto.Code
		resp   proto.Record
		events []Event
		gone   []string // nodes the request removed
		there  []string // nodes that must still be there
	}{
		{name: "removeRecursive deletes the subtree, children first", op: proto.OpRemoveRecursive,
			req:    &proto.RemoveRecursiveRequest{Path: "/t", Limit: 4},
			events: deleted("/t/b/c", "/t/b", "/t/a", "/t"), gone: []string{"/t", "/t/a", "/t/b", "/t/b/c"}, there: []string{"/u"}},
		{name: "removeRecursive over its limit removes nothing", op: proto.OpRemoveRecursive,
			req: &proto.RemoveRecursiveRequest{Path: "/t", Limit: 3}, code: proto.ErrNotEmpty, there: []string{"/t/b/c"}},
		{name: "removeRecursive of a leaf passes a limit of 0", op: proto.OpRemoveRecursive,
			req: &proto.RemoveRecursiveRequest{Path: "/u", Limit: 0}, events: deleted("/u"), gone: []string{"/u"}},
		{name: "removeRecursive of a missing node is ZOK", op: proto.OpRemoveRecursive,
			req: &proto.RemoveRecursiveRequest{Path: "/missing/x", Limit: 10}},
		{name: "removeRecursive needs DELETE on every node", op: proto.OpRemoveRecursive,
			req: &proto.RemoveRecursiveRequest{Path: "/guarded", Limit: 10}, code: proto.ErrNoAuth, there: []string{"/guarded/leaf"}},
		{name: "removeRecursive needs DELETE on a leaf too, unlike the deletes it stands for", op: proto.OpRemoveRecursive,
			req: &proto.RemoveRecursiveRequest{Path: "/gl", Limit: 10}, code: proto.ErrNoAuth, there: []string{"/gl/leaf"}},
		{name: "removeRecursive of the root is refused", op: proto.OpRemoveRecursive,
			req: &proto.RemoveRecursiveRequest{Path: "/", Limit: 100}, code: proto.ErrBadArguments},
		{name: "removeRecursive under /keeper is refused", op: proto.OpRemoveRecursive,
			req: &proto.RemoveRecursiveRequest{Path: "/keeper", Limit: 100}, code: proto.ErrBadArguments},
		{name: "createIfNotExists creates", op: proto.OpCreateIfNotExists,
			req: &proto.CreateRequest{Path: "/n", Data: []byte("x"), ACL: openACL}, resp: &proto.PathRequest{Path: "/n"},
			events: []Event{{Type: proto.EventNodeCreated, Path: "/n"}, {Type: proto.EventNodeChildrenChanged, Path: "/"}}, there: []string{"/n"}},
		{name: "createIfNotExists of an existing node is ZOK and changes nothing", op: proto.OpCreateIfNotExists,
			req: &proto.CreateRequest{Path: "/u", Data: []byte("other"), ACL: openACL}, resp: &proto.PathRequest{Path: "/u"}, there: []string{"/u"}},
		{name: "createIfNotExists sequential is refused", op: proto.OpCreateIfNotExists,
			req: &proto.CreateRequest{Path: "/s-", ACL: openACL, Flags: proto.FlagSequential}, code: proto.ErrBadArguments},
		{name: "createIfNotExists without a parent", op: proto.OpCreateIfNotExists,
			req: &proto.CreateRequest{Path: "/missing/x", ACL: openACL}, code: proto.ErrNoNode},
		{name: "createIfNotExists under /keeper is refused", op: proto.OpCreateIfNotExists,
			req: &proto.CreateRequest{Path: "/keeper/x", ACL: openACL}, code: proto.ErrBadArguments},
		{name: "checkNotExists of a missing node", op: proto.OpCheckNotExists, req: &proto.PathVersionRequest{Path: "/missing", Version: -1}},
		{name: "checkNotExists of an existing node", op: proto.OpCheckNotExists,
			req: &proto.PathVersionRequest{Path: "/u", Version: -1}, code: proto.ErrNodeExists},
		{name: "checkNotExists of its version", op: proto.OpCheckNotExists,
			req: &proto.PathVersionRequest{Path: "/u", Version: 0}, code: proto.ErrNodeExists},
		{name: "checkNotExists of another version", op: proto.OpCheckNotExists, req: &proto.PathVersionRequest{Path: "/u", Version: 7}},
		{name: "checkNotExists of an unreadable node", op: proto.OpCheckNotExists,
			req: &proto.PathVersionRequest{Path: "/secret", Version: -1}, code: proto.ErrNoAuth},
		{name: "checkNotExists under /keeper is refused", op: proto.OpCheckNotExists,
			req: &proto.PathVersionRequest{Path: "/keeper/api_version", Version: -1}, code: proto.ErrBadArguments},
		{name: "tryRemove removes", op: proto.OpTryRemove, req: &proto.PathVersionRequest{Path: "/u", Version: -1},
			events: deleted("/u"), gone: []string{"/u"}},
		{name: "tryRemove of a missing node is ZOK", op: proto.OpTryRemove, req: &proto.PathVersionRequest{Path: "/missing", Version: -1}},
		{name: "tryRemove of another version is ZOK and removes nothing", op: proto.OpTryRemove,
			req: &proto.PathVersionRequest{Path: "/u", Version: 3}, there: []string{"/u"}},
		{name: "tryRemove of a parent is ZOK and removes nothing", op: proto.OpTryRemove,
			req: &proto.PathVersionRequest{Path: "/t", Version: -1}, there: []string{"/t"}},
		{name: "tryRemove without DELETE on the parent", op: proto.OpTryRemove,
			req: &proto.PathVersionRequest{Path: "/guarded/leaf/x", Version: -1}, code: proto.ErrNoAuth, there: []string{"/guarded/leaf/x"}},
		{name: "setData under /keeper is refused", op: proto.OpSetData,
			req: &proto.SetDataRequest{Path: "/keeper/feature_flags", Version: -1}, code: proto.ErrBadArguments},
		{name: "create of /keeper is refused", op: proto.OpCreate,
			req: &proto.CreateRequest{Path: "/keeper", ACL: openACL}, code: proto.ErrBadArguments},
		{name: "a sequential create named /keeper is not under it", op: proto.OpCreate,
			req:    &proto.CreateRequest{Path: "/keeper", ACL: openACL, Flags: proto.FlagSequential},
			resp:   &proto.PathRequest{Path: "/keeper0000000005"},
			events: []Event{{Type: proto.EventNodeCreated, Path: "/keeper0000000005"}, {Type: proto.EventNodeChildrenChanged, Path: "/"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newNumbered(t)
			c := h.session(m1)
			for _, p := range []string{"/t", "/t/a", "/t/b", "/t/b/c", "/u"} {
				h.ok(c.create(p, nil, 0))
			}
			h.ok(c.createACL("/guarded", openACL, 0))
			h.ok(c.createACL("/guarded/leaf", noDelete, 0))
			h.ok(c.create("/guarded/leaf/x", nil, 0))
			h.ok(c.create("/gl", nil, 0))
			h.ok(c.createACL("/gl/leaf", noDelete, 0))
			h.ok(c.createACL("/secret", aliceAll, 0))
			res, events := h.write(c.req(tc.op, tc.req))
			require.Equal(t, tc.code, res.Err)
			assert.Equal(t, tc.resp, res.Resp)
			events = withoutACLs(events)
			for i := range events {
				events[i].Zxid = 0
			}
			assert.Equal(t, tc.events, events)
			for _, p := range tc.gone {
				assert.Nil(t, h.s.Node(p), "%s is gone", p)
			}
			for _, p := range tc.there {
				assert.NotNil(t, h.s.Node(p), "%s is there", p)
			}
			checkInvariants(t, h.s)
		})
	}
}

// TestKeeperExtensionsInMulti: ClickHouse Keeper's writes in a multi apply
// in order on the staged tree and fail it as any op does.
func TestKeeperExtensionsInMulti(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	h.ok(c.create("/d", nil, 0))
	h.ok(c.create("/d/x", nil, 0))
	op := func(op proto.OpCode, req proto.Record) proto.MultiOp { return proto.MultiOp{Op: op, Req: req} }
	res, _ := h.write(c.multi(
		op(createIfNotExists("/d", 0)),
		op(pathVersion(proto.OpCheckNotExists, "/e", -1)),
		op(createIfNotExists("/e", 0)),
		op(removeRecursive("/d", 10)),
		op(pathVersion(proto.OpTryRemove, "/d", -1)),
	))
	require.Equal(t, proto.ErrOK, res.Err)
	assert.Equal(t, &proto.MultiResponse{Results: []proto.MultiResult{
		{Op: proto.OpCreateIfNotExists, Resp: &proto.PathRequest{Path: "/d"}},
		{Op: proto.OpCheckNotExists},
		{Op: proto.OpCreateIfNotExists, Resp: &proto.PathRequest{Path: "/e"}},
		{Op: proto.OpRemoveRecursive},
		{Op: proto.OpTryRemove},
	}}, res.Resp)
	assert.Nil(t, h.s.Node("/d"))
	assert.NotNil(t, h.s.Node("/e"))

	// A failed checkNotExists fails the multi: the removeRecursive before it
	// is undone.
	h.ok(c.create("/f", nil, 0))
	h.ok(c.create("/f/y", nil, 0))
	res, events := h.write(c.multi(op(removeRecursive("/f", 10)), op(pathVersion(proto.OpCheckNotExists, "/e", -1))))
	require.Equal(t, proto.ErrOK, res.Err)
	assert.Equal(t, proto.FailedMulti(2, 1, proto.ErrNodeExists), res.Resp)
	assert.Empty(t, events)
	assert.NotNil(t, h.s.Node("/f/y"))
	checkInvariants(t, h.s)
}

// TestKeeperExtensionsNeedEntryVersion10: in an entry older than version
// 10, ClickHouse Keeper's writes are unknown and /keeper is an ordinary
// path, as they were when such entries were written, so an old log
// replays to the state it made.
func TestKeeperExtensionsNeedEntryVersion10(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	old := func(r Request) Result {
		res, _, err := h.s.Apply(encodeEntry(nil, startWall+100, []Request{r}, entryFenced))
		require.NoError(t, err)
		return res[0]
	}
	assert.Equal(t, proto.ErrUnimplemented, old(c.req(removeRecursive("/x", 1))).Err)
	assert.Equal(t, proto.ErrMarshallingError, old(c.multi(proto.MultiOp{Op: proto.OpCheckNotExists,
		Req: &proto.PathVersionRequest{Path: "/x", Version: -1}})).Err)
	assert.Equal(t, proto.ErrOK, old(c.create("/keeper", nil, 0)).Err, "an old entry creates /keeper")
	assert.Equal(t, entryExtensions, EncodeEntry(nil, 1, []Request{c.req(removeRecursive("/x", 1))})[1])
	assert.Equal(t, entryExtensions, EncodeEntry(nil, 1, numbered(c.create("/y", nil, 0)))[1])
}

// TestRemoveRecursiveMeetsLocks: a subtree holding a node locked by a
// pending cross-shard transaction is refused as a delete of it is.
func TestRemoveRecursiveMeetsLocks(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	h.ok(c.create("/p", nil, 0))
	h.ok(c.create("/p/q", nil, 0))
	h.ok(c.create("/p/q/r", nil, 0))
	h.s.x.lock("/p/q/r", exclusive, "tx1")
	op, req := removeRecursive("/p", 10)
	assert.True(t, h.s.Blocked(op, req), "the lock below stops it")
	res, _ := h.write(c.req(op, req))
	assert.Equal(t, proto.ErrLocked, res.Err)
	res, _ = h.write(c.req(removeRecursive("/p", 1)))
	assert.Equal(t, proto.ErrLocked, res.Err, "the lock is met before the subtree is walked")
	res, _ = h.write(c.delete("/p/q/r", -1))
	assert.Equal(t, proto.ErrLocked, res.Err, "as a plain delete")
	assert.NotNil(t, h.s.Node("/p/q/r"))
	h.s.x.unlock("tx1")
	res, _ = h.write(c.req(op, req))
	assert.Equal(t, proto.ErrOK, res.Err)
}

// TestSystemNodes: /keeper, its api_version and feature_flags are served
// read-only on any shard, without being in the tree.
func TestSystemNodes(t *testing.T) {
	h := newHarness(t)
	resp, code, _ := h.read(proto.OpGetData, pathWatch(proto.KeeperFeatureFlagsPath, false))
	require.Equal(t, proto.ErrOK, code)
	flags := resp.(*proto.GetDataResponse).Data
	assert.Equal(t, []byte{0xff, 0xe0}, flags, "filtered list, multi read, check not exists, create if not exists, remove recursive, "+
		"multi watches, check stat, persistent watches, create with stats, try remove, list with stat and data")
	resp, code, _ = h.read(proto.OpGetData, pathWatch(proto.KeeperAPIVersionPath, false))
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, "3", string(resp.(*proto.GetDataResponse).Data))
	resp, code, w := h.read(proto.OpGetChildren2, pathWatch(proto.KeeperSystemPath, true))
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, []string{"api_version", "feature_flags"}, resp.(*proto.ChildrenResponse).Children)
	assert.Equal(t, WatchChild, w)
	resp, _, _ = h.read(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: proto.KeeperSystemPath})
	assert.Equal(t, &proto.CountResponse{Count: 2}, resp)
	resp, _, _ = h.read(proto.OpGetChildren, pathWatch("/", false))
	assert.Equal(t, []string{"zookeeper"}, resp.(*proto.ChildrenResponse).Children, "the root does not list /keeper")
	assert.Nil(t, h.s.Node(proto.KeeperSystemPath))
	assert.Equal(t, 4, h.s.NodeCount())
}

// TestAvailabilityZoneNode: a member with an availability zone serves it
// read-only at /keeper/availability_zone, listed and counted under
// /keeper; one without serves no such node; snapshots do not hold it, so
// a state restored from one (a backup, another member's snapshot) serves
// only the zone its own member sets.
func TestAvailabilityZoneNode(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	_, code, _ := h.read(proto.OpGetData, pathWatch(proto.KeeperAvailabilityZonePath, false))
	assert.Equal(t, proto.ErrNoNode, code, "no zone configured, no node")

	h.s.SetAvailabilityZone("eu-west-1a")
	resp, code, _ := h.read(proto.OpGetData, pathWatch(proto.KeeperAvailabilityZonePath, false))
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, "eu-west-1a", string(resp.(*proto.GetDataResponse).Data))
	assert.Equal(t, int32(len("eu-west-1a")), resp.(*proto.GetDataResponse).Stat.DataLength)
	resp, _, _ = h.read(proto.OpGetChildren, pathWatch(proto.KeeperSystemPath, false))
	assert.Equal(t, []string{"api_version", "feature_flags", "availability_zone"}, resp.(*proto.ChildrenResponse).Children)
	resp, _, _ = h.read(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: proto.KeeperSystemPath})
	assert.Equal(t, &proto.CountResponse{Count: 3}, resp)
	resp, _, _ = h.read(proto.OpGetChildren, pathWatch(proto.KeeperFeatureFlagsPath, false))
	assert.Empty(t, resp.(*proto.ChildrenResponse).Children, "the zone does not change the other nodes")
	res, _ := h.write(c.setData(proto.KeeperAvailabilityZonePath, []byte("elsewhere"), -1))
	assert.Equal(t, proto.ErrBadArguments, res.Err, "read-only")
	res, _ = h.write(c.delete(proto.KeeperAvailabilityZonePath, -1))
	assert.Equal(t, proto.ErrBadArguments, res.Err, "read-only")

	restored := mustRestore(t, snapshotBytes(t, h.s))
	_, code, _ = restored.Read(proto.OpGetData, pathWatch(proto.KeeperAvailabilityZonePath, false), 0, nil)
	assert.Equal(t, proto.ErrNoNode, code, "a snapshot does not carry the zone")
	resp, _, _ = restored.Read(proto.OpGetChildren, pathWatch(proto.KeeperSystemPath, false), 0, nil)
	assert.Equal(t, []string{"api_version", "feature_flags"}, resp.(*proto.ChildrenResponse).Children)
	assert.Equal(t, 4, restored.NodeCount(), "nor does the tree")
}

// TestFilteredListAndMultiRead: filteredList of each kind, and multiRead of
// every read ClickHouse sends in one, each answered on its own.
func TestFilteredListAndMultiRead(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	h.ok(c.create("/l", []byte("L"), 0))
	h.ok(c.create("/l/p", nil, 0))
	h.ok(c.create("/l/e", nil, proto.FlagEphemeral))
	list := func(typ uint8, ids ...proto.ID) (proto.Record, proto.Code) {
		resp, code, _ := h.read(proto.OpFilteredList, proto.FilteredList("/l", false, typ), ids...)
		return resp, code
	}
	for typ, want := range map[uint8][]string{proto.ListAll: {"e", "p"}, proto.ListPersistentOnly: {"p"}, proto.ListEphemeralOnly: {"e"}, 9: {"e", "p"}} {
		resp, code := list(typ)
		require.Equal(t, proto.ErrOK, code)
		assert.Equal(t, want, resp.(*proto.ChildrenResponse).Children, "kind %d", typ)
		assert.Equal(t, int32(2), resp.(*proto.ChildrenResponse).Stat.NumChildren, "the parent's stat")
	}
	m := &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpGetData, Req: pathWatch("/l", false)},
		{Op: proto.OpExists, Req: pathWatch("/missing", false)},
		{Op: proto.OpGetChildren, Req: pathWatch("/l/p", false)},
		{Op: proto.OpFilteredList, Req: proto.FilteredList("/l", false, proto.ListEphemeralOnly)},
		{Op: proto.OpExists, Req: pathWatch(proto.KeeperFeatureFlagsPath, false)},
	}}
	resp, code, w := h.read(proto.OpMultiRead, m)
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, WatchNone, w)
	res := resp.(*proto.MultiResponse).Results
	require.Len(t, res, 5)
	assert.Equal(t, "L", string(res[0].Resp.(*proto.GetDataResponse).Data))
	assert.Equal(t, proto.MultiResult{Op: proto.OpError, Err: proto.ErrNoNode}, res[1])
	assert.Equal(t, proto.OpGetChildren, res[2].Op)
	assert.Equal(t, proto.OpGetChildren2, res[3].Op, "a filteredList is answered with a list's record")
	assert.Equal(t, []string{"e"}, res[3].Resp.(*proto.ChildrenResponse).Children)
	assert.Equal(t, int32(2), res[4].Resp.(*proto.StatResponse).Stat.DataLength)

	h.ok(c.createACL("/l/s", aliceAll, 0))
	_, code = list(proto.ListPersistentOnly)
	assert.Equal(t, proto.ErrNoAuth, code, "a filter shows a child's kind: it needs READ on each")
	_, code = list(proto.ListAll)
	assert.Equal(t, proto.ErrOK, code)

	_, code, _ = h.s.ReadBounded(proto.OpMultiRead, m, 0, nil, 100)
	assert.Equal(t, proto.ErrMarshallingError, code, "an answer past the bound is refused")
	_, code, _ = h.s.ReadBounded(proto.OpMultiRead, m, 0, nil, 1000)
	assert.Equal(t, proto.ErrOK, code)
}
