package keeper_test

// The differential table of ClickHouse Keeper's dialect: every extension
// request xkeeper serves (and the ZooKeeper requests ClickHouse's flags
// switch on: addWatch for PERSISTENT_WATCHES; a multiRead's watches for
// MULTI_WATCHES; create2 alone and in a multi for CREATE_WITH_STATS),
// against what ClickHouse Keeper answers for it
// (src/Coordination/KeeperStorage.cpp): success, each error code, the
// tree after it and the watches it sets or fires. The same table runs on
// the state machine in-process and over the wire through a node's
// endpoint.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// dialectCase is one row of the table: nodes made first, watches set,
// then the request and what ClickHouse Keeper answers.
type dialectCase struct {
	name    string
	nodes   []string // "path" or "path FLAG": FLAG eph (ephemeral), nodelete or noread (world's ACL without it)
	watches []string // "data path" (getData, or exists where missing) or "child path", set before the request
	op      proto.OpCode
	req     proto.Record
	code    proto.Code
	resp    func() proto.Record                  // the reply's record to decode, nil if it has none
	check   func(t *testing.T, got proto.Record) // what the reply must say
	events  []string                             // notifications the request fires ("deleted /p", "children /p"...)
	gone    []string                             // nodes it removed
	there   []string                             // nodes it must leave
}

// dialectTarget is where the table runs: do answers a request of the
// table's session; read reads a node's data (nil if missing); heard
// returns the notifications fired since the last call.
type dialectTarget interface {
	do(t *testing.T, op proto.OpCode, req proto.Record) (proto.Code, []byte)
	exists(t *testing.T, path string) bool
	heard(t *testing.T, paths []string) []string
}

var (
	dialectOpen     = proto.WorldACL(proto.PermAll)
	dialectNoDelete = proto.WorldACL(proto.PermAll &^ proto.PermDelete)
	dialectNoRead   = proto.WorldACL(proto.PermAll &^ proto.PermRead)
)

func childrenResp() proto.Record { return &proto.ChildrenResponse{WithStat: true} }
func multiResp() proto.Record    { return &proto.MultiResponse{} }
func pathResp() proto.Record     { return &proto.PathRequest{} }
func create2Resp() proto.Record  { return &proto.Create2Response{} }
func getDataResp() proto.Record  { return &proto.GetDataResponse{} }

// checkStatOf is a checkStat of path's version and of the fields set sets,
// the others wildcards.
func checkStatOf(path string, version int32, set func(*proto.Stat)) *proto.CheckStatRequest {
	r := &proto.CheckStatRequest{Path: path, Version: version, Stat: proto.AnyStat()}
	set(&r.Stat)
	return r
}
func dialectRead(op proto.OpCode, path string) proto.MultiOp {
	return proto.MultiOp{Op: op, Req: &proto.PathWatchRequest{Path: path}}
}
func dialectWatch(op proto.OpCode, path string) proto.MultiOp {
	return proto.MultiOp{Op: op, Req: &proto.PathWatchRequest{Path: path, Watch: true}}
}

// children asserts a filteredList's (getChildren2's) names.
func children(names ...string) func(*testing.T, proto.Record) {
	return func(t *testing.T, got proto.Record) {
		assert.ElementsMatch(t, names, got.(*proto.ChildrenResponse).Children)
	}
}

// results asserts a multi's result ops and codes.
func results(want ...proto.MultiResult) func(*testing.T, proto.Record) {
	return func(t *testing.T, got proto.Record) {
		var ops []proto.MultiResult
		for _, r := range got.(*proto.MultiResponse).Results {
			ops = append(ops, proto.MultiResult{Op: r.Op, Err: r.Err})
		}
		assert.Equal(t, want, ops)
	}
}

// dialectCases is the table. Each row works under its own top-level
// path, so rows do not meet.
var dialectCases = []dialectCase{
	// filteredList (FILTERED_LIST)
	{name: "filteredList of persistent children", nodes: []string{"/fl", "/fl/p", "/fl/e eph"},
		op: proto.OpFilteredList, req: proto.FilteredList("/fl", false, proto.ListPersistentOnly),
		resp: childrenResp, check: children("p")},
	{name: "filteredList of ephemeral children", nodes: []string{"/fe", "/fe/p", "/fe/e eph"},
		op: proto.OpFilteredList, req: proto.FilteredList("/fe", false, proto.ListEphemeralOnly),
		resp: childrenResp, check: children("e")},
	{name: "filteredList of all children", nodes: []string{"/fa", "/fa/p", "/fa/e eph"},
		op: proto.OpFilteredList, req: proto.FilteredList("/fa", false, proto.ListAll),
		resp: childrenResp, check: children("p", "e")},
	{name: "filteredList of a missing node is ZNONODE", op: proto.OpFilteredList,
		req: proto.FilteredList("/fm", false, proto.ListAll), code: proto.ErrNoNode},
	{name: "filteredList needs READ on the node", nodes: []string{"/fr noread"}, op: proto.OpFilteredList,
		req: proto.FilteredList("/fr", false, proto.ListAll), code: proto.ErrNoAuth},
	{name: "filteredList by kind needs READ on every child", nodes: []string{"/fc", "/fc/x noread"},
		op: proto.OpFilteredList, req: proto.FilteredList("/fc", false, proto.ListPersistentOnly), code: proto.ErrNoAuth},
	{name: "filteredList with a watch sets a child watch", nodes: []string{"/fw", "/fw/a"},
		op: proto.OpFilteredList, req: proto.FilteredList("/fw", true, proto.ListAll), resp: childrenResp,
		check: children("a")},
	// multiRead (MULTI_READ)
	{name: "multiRead answers each read on its own, a failed one by its own op", nodes: []string{"/mr", "/mr/a"},
		op: proto.OpMultiRead, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			dialectRead(proto.OpGetData, "/mr/a"), dialectRead(proto.OpExists, "/mr/none"),
			dialectRead(proto.OpGetChildren, "/mr"), dialectRead(proto.OpGetData, "/mr/none"), dialectRead(proto.OpExists, "/fm"),
			{Op: proto.OpFilteredList, Req: proto.FilteredList("/mr", false, proto.ListEphemeralOnly)}}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpGetData}, proto.MultiResult{Op: proto.OpExists, Err: proto.ErrNoNode},
			proto.MultiResult{Op: proto.OpGetChildren}, proto.MultiResult{Op: proto.OpGetData, Err: proto.ErrNoNode},
			proto.MultiResult{Op: proto.OpExists, Err: proto.ErrNoNode},
			proto.MultiResult{Op: proto.OpGetChildren2})},
	{name: "multiRead's reads set the watches they ask for (MULTI_WATCHES)", nodes: []string{"/mx", "/mx/a"},
		op: proto.OpMultiRead, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			dialectWatch(proto.OpGetData, "/mx/a"), dialectWatch(proto.OpGetChildren, "/mx"), dialectWatch(proto.OpExists, "/mxn"),
			dialectWatch(proto.OpGetData, "/mxn/none")}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpGetData}, proto.MultiResult{Op: proto.OpGetChildren},
			proto.MultiResult{Op: proto.OpExists, Err: proto.ErrNoNode}, proto.MultiResult{Op: proto.OpGetData, Err: proto.ErrNoNode})},
	{name: "multiRead's read of a node it may not read is ZNOAUTH", nodes: []string{"/ma noread"},
		op: proto.OpMultiRead, req: &proto.MultiRequest{Ops: []proto.MultiOp{dialectRead(proto.OpGetData, "/ma")}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpGetData, Err: proto.ErrNoAuth})},
	// checkNotExists (CHECK_NOT_EXISTS)
	{name: "checkNotExists of a missing node", op: proto.OpCheckNotExists,
		req: &proto.PathVersionRequest{Path: "/cn", Version: -1}},
	{name: "checkNotExists of a node is ZNODEEXISTS", nodes: []string{"/ce"}, op: proto.OpCheckNotExists,
		req: &proto.PathVersionRequest{Path: "/ce", Version: -1}, code: proto.ErrNodeExists},
	{name: "checkNotExists of another version passes", nodes: []string{"/cv"}, op: proto.OpCheckNotExists,
		req: &proto.PathVersionRequest{Path: "/cv", Version: 3}},
	{name: "checkNotExists of a node it may not read is ZNOAUTH", nodes: []string{"/ca noread"},
		op: proto.OpCheckNotExists, req: &proto.PathVersionRequest{Path: "/ca", Version: -1}, code: proto.ErrNoAuth},
	// createIfNotExists (CREATE_IF_NOT_EXISTS)
	{name: "createIfNotExists creates", nodes: []string{"/ci"}, watches: []string{"child /ci", "data /ci/n"},
		op: proto.OpCreateIfNotExists, req: &proto.CreateRequest{Path: "/ci/n", ACL: dialectOpen}, resp: pathResp,
		check:  func(t *testing.T, got proto.Record) { assert.Equal(t, "/ci/n", got.(*proto.PathRequest).Path) },
		events: []string{"created /ci/n", "children /ci"}, there: []string{"/ci/n"}},
	{name: "createIfNotExists of a node is ZOK and changes nothing", nodes: []string{"/cx"}, watches: []string{"data /cx"},
		op: proto.OpCreateIfNotExists, req: &proto.CreateRequest{Path: "/cx", Data: []byte("new"), ACL: dialectOpen}, resp: pathResp,
		check: func(t *testing.T, got proto.Record) { assert.Equal(t, "/cx", got.(*proto.PathRequest).Path) }},
	{name: "createIfNotExists without a parent is ZNONODE", op: proto.OpCreateIfNotExists,
		req: &proto.CreateRequest{Path: "/cp/n", ACL: dialectOpen}, code: proto.ErrNoNode},
	{name: "createIfNotExists sequential is ZBADARGUMENTS", nodes: []string{"/cs"}, op: proto.OpCreateIfNotExists,
		req: &proto.CreateRequest{Path: "/cs/n", ACL: dialectOpen, Flags: proto.FlagSequential}, code: proto.ErrBadArguments},
	{name: "createIfNotExists under /keeper is ZBADARGUMENTS", op: proto.OpCreateIfNotExists,
		req: &proto.CreateRequest{Path: "/keeper/mine", ACL: dialectOpen}, code: proto.ErrBadArguments},
	// tryRemove (TRY_REMOVE)
	{name: "tryRemove removes", nodes: []string{"/tr", "/tr/n"}, watches: []string{"data /tr/n", "child /tr"},
		op: proto.OpTryRemove, req: &proto.PathVersionRequest{Path: "/tr/n", Version: -1},
		events: []string{"deleted /tr/n", "children /tr"}, gone: []string{"/tr/n"}},
	{name: "tryRemove of a missing node is ZOK", op: proto.OpTryRemove,
		req: &proto.PathVersionRequest{Path: "/tm", Version: -1}},
	{name: "tryRemove of another version is ZOK and removes nothing", nodes: []string{"/tv"}, op: proto.OpTryRemove,
		req: &proto.PathVersionRequest{Path: "/tv", Version: 5}, there: []string{"/tv"}},
	{name: "tryRemove of a node with children is ZOK and removes nothing", nodes: []string{"/tc", "/tc/k"},
		op: proto.OpTryRemove, req: &proto.PathVersionRequest{Path: "/tc", Version: -1}, there: []string{"/tc", "/tc/k"}},
	{name: "tryRemove without DELETE on the parent is ZNOAUTH", nodes: []string{"/ta nodelete", "/ta/k"},
		op: proto.OpTryRemove, req: &proto.PathVersionRequest{Path: "/ta/k", Version: -1}, code: proto.ErrNoAuth, there: []string{"/ta/k"}},
	// removeRecursive (REMOVE_RECURSIVE)
	{name: "removeRecursive removes the subtree, firing the deletes' watches", nodes: []string{"/rr", "/rr/a", "/rr/a/b"},
		watches: []string{"data /rr/a/b", "child /rr/a"}, op: proto.OpRemoveRecursive,
		req:    &proto.RemoveRecursiveRequest{Path: "/rr", Limit: 3},
		events: []string{"deleted /rr/a/b", "children /rr/a"}, gone: []string{"/rr", "/rr/a", "/rr/a/b"}},
	{name: "removeRecursive over its limit is ZNOTEMPTY and removes nothing", nodes: []string{"/rl", "/rl/a", "/rl/a/b"},
		op: proto.OpRemoveRecursive, req: &proto.RemoveRecursiveRequest{Path: "/rl", Limit: 2}, code: proto.ErrNotEmpty,
		there: []string{"/rl", "/rl/a", "/rl/a/b"}},
	{name: "removeRecursive of a missing node is ZOK", op: proto.OpRemoveRecursive,
		req: &proto.RemoveRecursiveRequest{Path: "/rm/x", Limit: 10}},
	{name: "removeRecursive needs DELETE on every node", nodes: []string{"/ra", "/ra/a nodelete", "/ra/a/b"},
		op: proto.OpRemoveRecursive, req: &proto.RemoveRecursiveRequest{Path: "/ra", Limit: 10}, code: proto.ErrNoAuth,
		there: []string{"/ra/a/b"}},
	{name: "removeRecursive of /keeper is ZBADARGUMENTS", op: proto.OpRemoveRecursive,
		req: &proto.RemoveRecursiveRequest{Path: "/keeper", Limit: 10}, code: proto.ErrBadArguments},
	// create2 (CREATE_WITH_STATS: ClickHouse sends create2, alone and in multis, and reads the stat)
	{name: "create2 answers the path and the new node's stat", nodes: []string{"/c2"}, watches: []string{"child /c2"},
		op: proto.OpCreate2, req: &proto.CreateRequest{Path: "/c2/n", Data: []byte("abc"), ACL: dialectOpen}, resp: create2Resp,
		check: func(t *testing.T, got proto.Record) {
			r := got.(*proto.Create2Response)
			assert.Equal(t, "/c2/n", r.Path)
			assert.Equal(t, int32(3), r.Stat.DataLength)
			assert.Equal(t, r.Stat.Czxid, r.Stat.Mzxid)
		},
		events: []string{"children /c2"}, there: []string{"/c2/n"}},
	{name: "create2 of a node is ZNODEEXISTS", nodes: []string{"/c3"}, op: proto.OpCreate2,
		req: &proto.CreateRequest{Path: "/c3", ACL: dialectOpen}, code: proto.ErrNodeExists},
	{name: "a multi's create2 answers the path and the new node's stat", nodes: []string{"/m2"}, watches: []string{"child /m2"},
		op: proto.OpMulti, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCreate2, Req: &proto.CreateRequest{Path: "/m2/n", Data: []byte("abc"), ACL: dialectOpen}},
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/m2/o", ACL: dialectOpen}}}},
		resp: multiResp, check: func(t *testing.T, got proto.Record) {
			rs := got.(*proto.MultiResponse).Results
			require.Len(t, rs, 2)
			require.Equal(t, proto.OpCreate2, rs[0].Op)
			r := rs[0].Resp.(*proto.Create2Response)
			assert.Equal(t, "/m2/n", r.Path)
			assert.Equal(t, int32(3), r.Stat.DataLength)
			assert.Equal(t, r.Stat.Czxid, r.Stat.Mzxid)
			assert.Equal(t, proto.MultiResult{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: "/m2/o"}}, rs[1])
		},
		events: []string{"children /m2"}, there: []string{"/m2/n", "/m2/o"}},
	// the writes in a multi, as ClickHouse sends them
	{name: "a multi of ClickHouse Keeper's writes", nodes: []string{"/mw", "/mw/old", "/mw/old/k"}, watches: []string{"child /mw"},
		op: proto.OpMulti, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCreateIfNotExists, Req: &proto.CreateRequest{Path: "/mw/old", ACL: dialectOpen}},
			{Op: proto.OpCheckNotExists, Req: &proto.PathVersionRequest{Path: "/mw/new", Version: -1}},
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/mw/new", ACL: dialectOpen}},
			{Op: proto.OpTryRemove, Req: &proto.PathVersionRequest{Path: "/mw/none", Version: -1}},
			{Op: proto.OpRemoveRecursive, Req: &proto.RemoveRecursiveRequest{Path: "/mw/old", Limit: 2}}}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpCreateIfNotExists}, proto.MultiResult{Op: proto.OpCheckNotExists},
			proto.MultiResult{Op: proto.OpCreate}, proto.MultiResult{Op: proto.OpTryRemove}, proto.MultiResult{Op: proto.OpRemoveRecursive}),
		events: []string{"children /mw"}, gone: []string{"/mw/old", "/mw/old/k"}, there: []string{"/mw/new"}},
	{name: "a multi whose checkNotExists fails does nothing", nodes: []string{"/mf", "/mf/x"},
		op: proto.OpMulti, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/mf/y", ACL: dialectOpen}},
			{Op: proto.OpCheckNotExists, Req: &proto.PathVersionRequest{Path: "/mf/x", Version: -1}}}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpError}, proto.MultiResult{Op: proto.OpError, Err: proto.ErrNodeExists}),
		there: []string{"/mf/x"}, gone: []string{"/mf/y"}},
	// checkStat (CHECK_STAT): each node made with data "x", so version 0,
	// dataLength 1
	{name: "checkStat of the fields given, the others wildcards", nodes: []string{"/ks", "/ks/a"},
		op: proto.OpCheckStat, req: checkStatOf("/ks", 0, func(s *proto.Stat) {
			s.Version, s.Cversion, s.Aversion, s.EphemeralOwner, s.DataLength, s.NumChildren = 0, 1, 0, 0, 1, 1
		})},
	{name: "checkStat of wildcards alone", nodes: []string{"/kw"}, op: proto.OpCheckStat,
		req: checkStatOf("/kw", -1, func(*proto.Stat) {})},
	{name: "checkStat with a field that differs is ZBADVERSION", nodes: []string{"/kb"}, op: proto.OpCheckStat,
		req: checkStatOf("/kb", -1, func(s *proto.Stat) { s.DataLength = 2 }), code: proto.ErrBadVersion},
	{name: "checkStat of another version is ZBADVERSION", nodes: []string{"/kv"}, op: proto.OpCheckStat,
		req: checkStatOf("/kv", 3, func(*proto.Stat) {}), code: proto.ErrBadVersion},
	{name: "checkStat of a missing node is ZNONODE", op: proto.OpCheckStat,
		req: checkStatOf("/kn", -1, func(*proto.Stat) {}), code: proto.ErrNoNode},
	{name: "checkStat of a node it may not read is ZNOAUTH", nodes: []string{"/ka noread"}, op: proto.OpCheckStat,
		req: checkStatOf("/ka", -1, func(*proto.Stat) {}), code: proto.ErrNoAuth},
	{name: "a multi whose checkStat fails does nothing", nodes: []string{"/km", "/km/x"},
		op: proto.OpMulti, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/km/y", ACL: dialectOpen}},
			{Op: proto.OpCheckStat, Req: checkStatOf("/km", -1, func(s *proto.Stat) { s.NumChildren = 5 })}}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpError}, proto.MultiResult{Op: proto.OpError, Err: proto.ErrBadVersion}),
		there: []string{"/km/x"}, gone: []string{"/km/y"}},
	{name: "a multi guarded by a checkStat that passes", nodes: []string{"/kp"}, watches: []string{"child /kp"},
		op: proto.OpMulti, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCheckStat, Req: checkStatOf("/kp", 0, func(s *proto.Stat) { s.NumChildren, s.DataLength = 0, 1 })},
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/kp/y", ACL: dialectOpen}}}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpCheckStat}, proto.MultiResult{Op: proto.OpCreate}),
		events: []string{"children /kp"}, there: []string{"/kp/y"}},
	{name: "a checkStat guards a create in a multi across mounts", nodes: []string{"/kx", "/ky"},
		op: proto.OpMulti, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCheckStat, Req: checkStatOf("/kx", 0, func(s *proto.Stat) { s.DataLength = 1 })},
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/ky/n", ACL: dialectOpen}}}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpCheckStat}, proto.MultiResult{Op: proto.OpCreate}),
		there: []string{"/ky/n"}},
	{name: "a checkStat that fails in a multi across mounts does nothing", nodes: []string{"/kf", "/kg"},
		op: proto.OpMulti, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/kg/n", ACL: dialectOpen}},
			{Op: proto.OpCheckStat, Req: checkStatOf("/kf", -1, func(s *proto.Stat) { s.DataLength = 7 })}}},
		resp: multiResp, check: results(proto.MultiResult{Op: proto.OpError}, proto.MultiResult{Op: proto.OpError, Err: proto.ErrBadVersion}),
		gone: []string{"/kg/n"}},
	// the system nodes
	{name: "the feature flags name what xkeeper serves", op: proto.OpGetData,
		req: &proto.PathWatchRequest{Path: proto.KeeperFeatureFlagsPath}, resp: getDataResp,
		check: func(t *testing.T, got proto.Record) {
			data := got.(*proto.GetDataResponse).Data
			for _, f := range proto.Features {
				assert.True(t, proto.FeatureEnabled(data, f), "flag %d", f)
			}
			assert.True(t, proto.FeatureEnabled(data, proto.FeaturePersistentWatches), "PERSISTENT_WATCHES: addWatch")
			assert.True(t, proto.FeatureEnabled(data, proto.FeatureMultiWatches), "MULTI_WATCHES")
			assert.True(t, proto.FeatureEnabled(data, proto.FeatureCreateWithStats), "CREATE_WITH_STATS")
			assert.True(t, proto.FeatureEnabled(data, proto.FeatureListWithStatAndData), "LIST_WITH_STAT_AND_DATA")
			assert.True(t, proto.FeatureEnabled(data, proto.FeatureCheckStat), "CHECK_STAT")
		}},
	{name: "no availability zone where none is configured", op: proto.OpGetData,
		req: &proto.PathWatchRequest{Path: proto.KeeperAvailabilityZonePath}, code: proto.ErrNoNode},
}

// TestKeeperDialectTable runs dialectCases on the state machine, as a
// member applies and reads, and through a node's endpoint whose mount
// table puts half the rows' paths on another shard.
func TestKeeperDialectTable(t *testing.T) {
	t.Run("StateMachine", func(t *testing.T) { runDialectTable(t, newFSMTarget(t)) })
	t.Run("Endpoint", func(t *testing.T) {
		var mounts []config.Mount
		for _, p := range []string{"/fl", "/fe", "/mr", "/mx", "/ce", "/ci", "/tr", "/c2", "/m2", "/mw", "/pw", "/ks", "/kb", "/km", "/kx", "/kf"} {
			mounts = append(mounts, config.Mount{Path: p, Shard: "b"})
		}
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1, Mounts: mounts})
		runDialectTable(t, newWireTarget(t, c.Endpoint(c.Config.Nodes[0].Name)))
	})
}

// runDialectTable makes each row's nodes and watches, sends its request
// and checks the answer, the tree and the notifications.
func runDialectTable(t *testing.T, target dialectTarget) {
	runDialectCases(t, target, dialectCases)
	t.Run("multiRead's watches fire on their changes, once", func(t *testing.T) {
		for _, w := range []struct {
			op  proto.OpCode
			req proto.Record
		}{{proto.OpSetData, &proto.SetDataRequest{Path: "/mx/a", Data: []byte("y"), Version: -1}},
			{proto.OpCreate, &proto.CreateRequest{Path: "/mx/b", ACL: dialectOpen}},
			{proto.OpCreate, &proto.CreateRequest{Path: "/mxn", ACL: dialectOpen}},
			{proto.OpCreate, &proto.CreateRequest{Path: "/mxn/none", ACL: dialectOpen}},
			{proto.OpCreate, &proto.CreateRequest{Path: "/mx/c", ACL: dialectOpen}}} {
			code, _ := target.do(t, w.op, w.req)
			require.Equal(t, proto.ErrOK, code)
		}
		assert.ElementsMatch(t, []string{"changed /mx/a", "children /mx", "created /mxn"}, target.heard(t, []string{"/mx", "/mxn"}))
	})
	t.Run("filteredList's watch fires on a new child", func(t *testing.T) {
		code, _ := target.do(t, proto.OpCreate, &proto.CreateRequest{Path: "/fw/b", ACL: dialectOpen})
		require.Equal(t, proto.ErrOK, code)
		assert.Equal(t, []string{"children /fw"}, target.heard(t, []string{"/fw"}))
	})
	if wire, ok := target.(*wireTarget); ok { // persistent watches live in the member's server
		t.Run("a persistent recursive watch sees each node removeRecursive removes", func(t *testing.T) {
			wire.persistentRecursive(t)
		})
	}
}

// runDialectCases runs each of cases as a subtest.
func runDialectCases(t *testing.T, target dialectTarget, cases []dialectCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runDialectCase(t, target, tc) })
	}
}

// runDialectCase makes a row's nodes and watches, sends its request and
// checks the answer, the tree and the notifications.
func runDialectCase(t *testing.T, target dialectTarget, tc dialectCase) {
	for _, spec := range tc.nodes {
		path, flag, _ := strings.Cut(spec, " ")
		req := &proto.CreateRequest{Path: path, Data: []byte("x"), ACL: dialectOpen}
		switch flag {
		case "eph":
			req.Flags = proto.FlagEphemeral
		case "nodelete":
			req.ACL = dialectNoDelete
		case "noread":
			req.ACL = dialectNoRead
		}
		code, _ := target.do(t, proto.OpCreate, req)
		require.Equal(t, proto.ErrOK, code, "create %s", spec)
	}
	var synced []string
	for _, w := range tc.watches {
		kind, path, _ := strings.Cut(w, " ")
		op := map[string]proto.OpCode{"data": proto.OpExists, "child": proto.OpGetChildren}[kind]
		code, _ := target.do(t, op, &proto.PathWatchRequest{Path: path, Watch: true})
		require.Contains(t, []proto.Code{proto.ErrOK, proto.ErrNoNode}, code, "watch %s", w)
		synced = append(synced, path)
	}
	require.Empty(t, target.heard(t, synced), "nothing fired before the request")
	code, body := target.do(t, tc.op, tc.req)
	require.Equal(t, tc.code, code, "the answer's code")
	if tc.resp != nil && code == proto.ErrOK {
		got := tc.resp()
		require.NoError(t, proto.Unmarshal(body, got))
		tc.check(t, got)
	}
	assert.ElementsMatch(t, tc.events, target.heard(t, synced), "the notifications it fired")
	for _, p := range tc.gone {
		assert.False(t, target.exists(t, p), "%s is gone", p)
	}
	for _, p := range tc.there {
		assert.True(t, target.exists(t, p), "%s is there", p)
	}
}

// persistentRecursive checks PERSISTENT_WATCHES with ClickHouse Keeper's
// writes: addWatch answers ZooKeeper's reply (one int32, which ClickHouse
// 26.7 reads), and the watch, not one-shot, sees every node a
// removeRecursive and a createIfNotExists change below it.
func (o *wireTarget) persistentRecursive(t *testing.T) {
	o.w.t = t
	for _, p := range []string{"/pw", "/pw/a", "/pw/a/b"} {
		code, _ := o.do(t, proto.OpCreate, &proto.CreateRequest{Path: p, ACL: dialectOpen})
		require.Equal(t, proto.ErrOK, code)
	}
	o.w.addWatch("/pw", proto.AddWatchPersistentRecursive)
	code, _ := o.do(t, proto.OpRemoveRecursive, &proto.RemoveRecursiveRequest{Path: "/pw/a", Limit: 2})
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, []string{"deleted /pw/a/b", "deleted /pw/a"}, o.w.heard("/pw"))
	code, _ = o.do(t, proto.OpCreateIfNotExists, &proto.CreateRequest{Path: "/pw/c", ACL: dialectOpen})
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, []string{"created /pw/c"}, o.w.heard("/pw"), "still there after firing")
}

// fsmTarget runs the table on a state machine: writes applied as
// numbered writes of one session, reads as a member reads, watches
// registered and fired as the member's server does with what the state
// machine returns.
type fsmTarget struct {
	s       *fsm.State
	session int64
	entries uint64                   // entries applied
	writes  uint64                   // the session's numbered writes
	watches map[string]fsm.WatchKind // by path, one-shot
	fired   []string
}

func newFSMTarget(t *testing.T) *fsmTarget {
	f := &fsmTarget{s: fsm.New(), watches: map[string]fsm.WatchKind{}}
	res := f.apply(t, fsm.Request{Member: "m1", Op: proto.OpCreateSession,
		Body: proto.Marshal(&fsm.CreateSession{Timeout: 30000, Passwd: make([]byte, proto.PasswordLen)})})
	require.Equal(t, proto.ErrOK, res.Err)
	f.session = res.Session
	return f
}

func (f *fsmTarget) apply(t *testing.T, r fsm.Request) fsm.Result {
	f.entries++
	r.ID = f.entries
	res, events, err := f.s.Apply(fsm.EncodeEntry(nil, int64(f.entries)*10, []fsm.Request{r}))
	require.NoError(t, err)
	require.Len(t, res, 1)
	for _, ev := range events {
		f.fire(ev)
	}
	return res[0]
}

// fire fires the watches ev meets: a data watch on its path for any
// change of the node, a child watch on its path for a change of its
// children or its delete, each once.
func (f *fsmTarget) fire(ev fsm.Event) {
	k, ok := f.watches[ev.Path]
	hits := ok && (k == fsm.WatchData && ev.Type != proto.EventNodeChildrenChanged ||
		k == fsm.WatchChild && (ev.Type == proto.EventNodeChildrenChanged || ev.Type == proto.EventNodeDeleted))
	if hits {
		delete(f.watches, ev.Path)
		f.fired = append(f.fired, eventName(ev.Type)+" "+ev.Path)
	}
}

func (f *fsmTarget) do(t *testing.T, op proto.OpCode, req proto.Record) (proto.Code, []byte) {
	if m, ok := req.(*proto.MultiRequest); ok && op == proto.OpMultiRead { // as to a client that read /keeper
		resp, code, watches := f.s.MultiRead(m, nil, 0)
		for _, w := range watches {
			f.watches[w.Path] = w.Kind
		}
		return code, proto.Marshal(resp.(*proto.MultiResponse).ClickHouseKeeperForm(m.Ops))
	}
	if !proto.IsWrite(op) {
		resp, code, kind := f.s.Read(op, req, f.session, nil)
		if kind != fsm.WatchNone {
			f.watches[proto.Paths(req)[0]] = kind
		}
		if resp == nil {
			return code, nil
		}
		return code, proto.Marshal(resp)
	}
	f.writes++
	res := f.apply(t, fsm.Request{Session: f.session, Member: "m1", Op: op, Body: proto.Marshal(req), Conn: 1, Seq: f.writes})
	if res.Resp == nil {
		return res.Err, nil
	}
	return res.Err, proto.Marshal(res.Resp)
}

func (f *fsmTarget) exists(_ *testing.T, path string) bool { return f.s.Node(path) != nil }

func (f *fsmTarget) heard(*testing.T, []string) []string {
	out := f.fired
	f.fired = nil
	return out
}

// wireTarget runs the table over one raw ZooKeeper session that first
// reads /keeper/feature_flags, as ClickHouse's client does.
type wireTarget struct{ w *watchConn }

func newWireTarget(t *testing.T, addr string) *wireTarget {
	w := dialWatch(t, addr, 0, nil)
	require.Equal(t, proto.ErrOK, w.code(proto.OpGetData, &proto.PathWatchRequest{Path: proto.KeeperFeatureFlagsPath}))
	return &wireTarget{w: w}
}

func (o *wireTarget) do(t *testing.T, op proto.OpCode, req proto.Record) (proto.Code, []byte) {
	o.w.t = t
	code, body, closed := o.w.call(op, req)
	require.False(t, closed, "%v closed the connection", op)
	return code, body
}

func (o *wireTarget) exists(t *testing.T, path string) bool {
	code, _ := o.do(t, proto.OpExists, &proto.PathWatchRequest{Path: path})
	require.Contains(t, []proto.Code{proto.ErrOK, proto.ErrNoNode}, code)
	return code == proto.ErrOK
}

func (o *wireTarget) heard(t *testing.T, paths []string) []string {
	o.w.t = t
	return o.w.heard(slices.Compact(slices.Sorted(slices.Values(paths)))...)
}

// TestAvailabilityZoneOnTheWire: keeper.availability_zone is served
// read-only at /keeper/availability_zone by every member and through a
// node's endpoint, listed under /keeper; a write there is refused
// (ZBADARGUMENTS) and the session goes on.
func TestAvailabilityZoneOnTheWire(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1,
		Mounts: []config.Mount{{Path: "/m", Shard: "b"}},
		Keeper: func(k *config.Keeper) { k.AvailabilityZone = "zone-a" }})
	addrs := []string{c.Endpoint(c.Config.Nodes[0].Name)}
	for _, sh := range c.Config.Shards {
		for _, m := range sh.Members {
			addrs = append(addrs, m.ClientAddr)
		}
	}
	require.Len(t, addrs, 3, "the endpoint and a member of each shard")
	for _, addr := range addrs {
		w := dialWatch(t, addr, 0, nil)
		code, body, closed := w.call(proto.OpGetData, &proto.PathWatchRequest{Path: proto.KeeperAvailabilityZonePath})
		require.False(t, closed)
		require.Equal(t, proto.ErrOK, code, "at %s", addr)
		var data proto.GetDataResponse
		require.NoError(t, proto.Unmarshal(body, &data))
		assert.Equal(t, "zone-a", string(data.Data), "at %s", addr)
		code, body, _ = w.call(proto.OpGetChildren, &proto.PathWatchRequest{Path: proto.KeeperSystemPath})
		require.Equal(t, proto.ErrOK, code)
		var kids proto.ChildrenResponse
		require.NoError(t, proto.Unmarshal(body, &kids))
		assert.Contains(t, kids.Children, "availability_zone", "at %s", addr)
		assert.Equal(t, proto.ErrBadArguments, w.code(proto.OpSetData,
			&proto.SetDataRequest{Path: proto.KeeperAvailabilityZonePath, Data: []byte("zone-b"), Version: -1}), "at %s", addr)
		assert.Equal(t, proto.ErrOK, w.code(proto.OpExists, &proto.PathWatchRequest{Path: "/"}), "the session goes on")
	}
}

// TestAvailabilityZoneAfterSnapshotRestore: a member that restarts from
// its own snapshot (its state replaced by the snapshot's, which holds no
// zone) serves its zone still.
func TestAvailabilityZoneAfterSnapshotRestore(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Keeper: func(k *config.Keeper) {
		k.AvailabilityZone = "zone-a"
		k.SnapshotThreshold = 10
		k.SnapshotInterval = 50 * time.Millisecond
	}})
	member := c.Follower("a")
	w := dialWatch(t, c.Servers("a")[0], 0, nil)
	for i := range 20 {
		require.Equal(t, proto.ErrOK, w.code(proto.OpCreate, &proto.CreateRequest{Path: fmt.Sprintf("/n%02d", i), ACL: dialectOpen}))
	}
	waitConverged(t, c, "a")
	require.Eventually(t, func() bool {
		err := c.Member(member.ID).Replica.Snapshot()
		return err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot)
	}, 10*time.Second, 10*time.Millisecond, "a snapshot on %s", member.ID)
	c.Kill(member.ID)
	c.Restart(member.ID)
	restarted := c.Member(member.ID).Replica
	assert.Equal(t, 1.0, counter(t, restarted, "xkeeper_snapshot_restores_total"), "the member restored its snapshot")
	var zone []byte
	restarted.View(func(st *fsm.State) {
		resp, code, _ := st.Read(proto.OpGetData, &proto.PathWatchRequest{Path: proto.KeeperAvailabilityZonePath}, 0, nil)
		if code == proto.ErrOK {
			zone = resp.(*proto.GetDataResponse).Data
		}
	})
	assert.Equal(t, "zone-a", string(zone))
}
