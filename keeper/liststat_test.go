package keeper_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

func listStatResp() proto.Record { return &proto.ListWithStatsAndDataResponse{} }

// listed asserts a list with stat and data's names and data, and that
// its stats (if want asks for them) are the nodes': each made with data
// "x" and no children.
func listed(names []string, data []string, withStat bool) func(*testing.T, proto.Record) {
	return func(t *testing.T, got proto.Record) {
		r := got.(*proto.ListWithStatsAndDataResponse)
		assert.Equal(t, names, r.Children)
		var gotData []string
		for _, d := range r.Data {
			gotData = append(gotData, string(d))
		}
		assert.Equal(t, data, gotData)
		if !withStat {
			assert.Empty(t, r.Stats)
			return
		}
		require.Len(t, r.Stats, len(names))
		for i, st := range r.Stats {
			assert.Equal(t, int32(1), st.DataLength, "%s's own stat", names[i])
			assert.NotZero(t, st.Czxid, "%s's own stat", names[i])
		}
	}
}

// listStatCases are the rows of the differential table for the list with
// stat and data: what ClickHouse Keeper answers (names, the parent's
// stat, then stats and data as asked, one per name; READ on the parent,
// and on every child once more than names is shown).
var listStatCases = []dialectCase{
	{name: "list with stat and data: every child's, a mount point's its own", nodes: []string{"/ls", "/ls/p", "/ls/m"},
		op: proto.OpFilteredListWithStatsAndData, req: proto.ListWithStatsAndData("/ls", false, proto.ListAll, true, true),
		resp: listStatResp, check: listed([]string{"m", "p"}, []string{"x", "x"}, true)},
	{name: "list with data alone, of persistent children", nodes: []string{"/lk", "/lk/p", "/lk/e eph"},
		op: proto.OpFilteredListWithStatsAndData, req: proto.ListWithStatsAndData("/lk", false, proto.ListPersistentOnly, false, true),
		resp: listStatResp, check: listed([]string{"p"}, []string{"x"}, false)},
	{name: "list with stat alone, of ephemeral children", nodes: []string{"/le", "/le/p", "/le/e eph"},
		op: proto.OpFilteredListWithStatsAndData, req: proto.ListWithStatsAndData("/le", false, proto.ListEphemeralOnly, true, false),
		resp: listStatResp, check: listed([]string{"e"}, nil, true)},
	{name: "list with stat and data of a missing node is ZNONODE", op: proto.OpFilteredListWithStatsAndData,
		req: proto.ListWithStatsAndData("/lx", false, proto.ListAll, true, true), code: proto.ErrNoNode},
	{name: "list with data needs READ on every child, a mount point too", nodes: []string{"/lr", "/lr/m noread"},
		op: proto.OpFilteredListWithStatsAndData, req: proto.ListWithStatsAndData("/lr", false, proto.ListAll, false, true), code: proto.ErrNoAuth},
	{name: "list of names alone needs READ on the node only", nodes: []string{"/ln", "/ln/m noread"},
		op: proto.OpFilteredListWithStatsAndData, req: proto.ListWithStatsAndData("/ln", false, proto.ListAll, false, false),
		resp: listStatResp, check: listed([]string{"m"}, nil, false)},
	{name: "list with stat and data of the system nodes", op: proto.OpFilteredListWithStatsAndData,
		req: proto.ListWithStatsAndData(proto.KeeperSystemPath, false, proto.ListAll, false, true), resp: listStatResp,
		check: func(t *testing.T, got proto.Record) {
			r := got.(*proto.ListWithStatsAndDataResponse)
			assert.Equal(t, []string{"api_version", "feature_flags"}, r.Children)
			assert.Equal(t, [][]byte{[]byte("3"), proto.FeatureBitmap(proto.Features...)}, r.Data)
		}},
	{name: "list with data and a watch sets a child watch", nodes: []string{"/lw", "/lw/a"},
		op: proto.OpFilteredListWithStatsAndData, req: proto.ListWithStatsAndData("/lw", true, proto.ListAll, false, true),
		resp: listStatResp, check: listed([]string{"a"}, []string{"x"}, false)},
	{name: "multiRead of lists with data, across a mount point", nodes: []string{"/lq", "/lq/a", "/lq/m"},
		op: proto.OpMultiRead, req: &proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData("/lq", false, proto.ListAll, false, true)},
			{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData("/lx", false, proto.ListAll, false, true)},
			{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData("/lq/m", false, proto.ListAll, true, true)}}},
		resp: multiResp, check: func(t *testing.T, got proto.Record) {
			res := got.(*proto.MultiResponse).Results
			require.Len(t, res, 3)
			assert.Equal(t, proto.OpFilteredListWithStatsAndData, res[0].Op)
			listed([]string{"a", "m"}, []string{"x", "x"}, false)(t, res[0].Resp)
			assert.Equal(t, proto.ErrNoNode, res[1].Err)
			listed([]string{}, nil, true)(t, res[2].Resp)
		}},
}

// TestListWithStatsAndDataTable runs listStatCases on the state machine
// and through a node's endpoint whose mount table puts some of the listed
// children (and one listed parent) on another shard.
func TestListWithStatsAndDataTable(t *testing.T) {
	run := func(t *testing.T, target dialectTarget) {
		runDialectCases(t, target, listStatCases)
		t.Run("the list's watch fires on a new child", func(t *testing.T) {
			code, _ := target.do(t, proto.OpCreate, &proto.CreateRequest{Path: "/lw/b", ACL: dialectOpen})
			require.Equal(t, proto.ErrOK, code)
			assert.Equal(t, []string{"children /lw"}, target.heard(t, []string{"/lw"}))
		})
	}
	t.Run("StateMachine", func(t *testing.T) { run(t, newFSMTarget(t)) })
	t.Run("Endpoint", func(t *testing.T) {
		var mounts []config.Mount
		for _, p := range []string{"/ls/m", "/lr/m", "/ln/m", "/lq/m", "/le", "/lw"} {
			mounts = append(mounts, config.Mount{Path: p, Shard: "b"})
		}
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 1, Mounts: mounts})
		run(t, newWireTarget(t, c.Endpoint(c.Config.Nodes[0].Name)))
	})
}
