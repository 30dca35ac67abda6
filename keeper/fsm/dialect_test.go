package fsm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestMultiReadLeavesTheWatchesItsReadsAsk (MULTI_WATCHES): MultiRead
// returns, for each read whose flag asks, the watch that read alone
// leaves: on success, exists on a missing node too, none where the read
// is refused (missing, no READ); ReadBounded, as ZooKeeper 3.8, none.
func TestMultiReadLeavesTheWatchesItsReadsAsk(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	noRead := []proto.ACL{{Perms: proto.PermAll &^ proto.PermRead, ID: proto.ID{Scheme: "world", ID: "anyone"}}}
	h.ok(c.create("/w", nil, 0))
	h.ok(c.create("/w/a", []byte("a"), 0))
	h.ok(c.createACL("/w/secret", noRead, 0))
	read := func(op proto.OpCode, path string, watch bool) proto.MultiOp {
		return proto.MultiOp{Op: op, Req: pathWatch(path, watch)}
	}
	ops := []proto.MultiOp{
		read(proto.OpGetData, "/w/a", true),
		read(proto.OpGetData, "/w/none", true),
		read(proto.OpExists, "/w/none", true),
		read(proto.OpExists, "/w/a", true),
		read(proto.OpGetChildren, "/w", true),
		read(proto.OpGetChildren2, "/w/a", false),
		{Op: proto.OpFilteredList, Req: proto.FilteredList("/w/a", true, proto.ListPersistentOnly)},
		read(proto.OpGetData, "/w/secret", true),
		read(proto.OpGetChildren2, "/w/secret", true),
		read(proto.OpExists, "/w/secret", true),
	}
	var alone []ReadWatch
	for _, op := range ops {
		if _, _, kind := h.read(op.Op, op.Req); kind != WatchNone {
			alone = append(alone, ReadWatch{Path: proto.Paths(op.Req)[0], Kind: kind})
		}
	}
	require.Equal(t, []ReadWatch{{"/w/a", WatchData}, {"/w/none", WatchData}, {"/w/a", WatchData}, {"/w", WatchChild},
		{"/w/a", WatchChild}, {"/w/secret", WatchData}}, alone, "what each read alone leaves")

	m := &proto.MultiRequest{Ops: ops}
	resp, code, watches := h.s.MultiRead(m, nil, 0)
	require.Equal(t, proto.ErrOK, code)
	assert.Len(t, resp.(*proto.MultiResponse).Results, len(ops))
	assert.Equal(t, alone, watches, "a multiRead's reads leave what each alone leaves")

	_, _, kind := h.read(proto.OpMultiRead, m)
	assert.Equal(t, WatchNone, kind, "Read leaves none, as ZooKeeper 3.8")
	_, code, watches = h.s.MultiRead(m, nil, 100)
	assert.Equal(t, proto.ErrMarshallingError, code, "past the reply bound")
	assert.Empty(t, watches, "a refused multiRead leaves none")
}

// TestPrepareOfACreate2FixesItsStat (CREATE_WITH_STATS): a cross-shard
// prepare whose ops hold a create2 is written as entry version 13, and
// the results its record keeps answer the create2 with the new node's
// stat; one applied as version 12 keeps a create's, the path alone, as
// every member of version 12 does.
func TestPrepareOfACreate2FixesItsStat(t *testing.T) {
	prepare := func(id string, ops ...proto.MultiOp) Request {
		return Request{ID: 7, Member: m1, Op: proto.OpXPrepare, Body: proto.Marshal(&proto.XPrepareRequest{
			ID: id, Coordinator: "b", Self: "a", Shards: []string{"a", "b"}, Deadline: startWall + 3_600_000,
			Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: ops}}}, FixResults: true, Patient: true})}
	}
	assert.Equal(t, entryPatient, EncodeEntry(nil, 1, []Request{prepare("tx", opCreate("/x", 0))})[1],
		"a prepare without create2 is what it was")
	for _, version := range []byte{entryCommitStamps, entryCreateStats} {
		h := newHarness(t)
		h.wall += 10
		entry := EncodeEntry(nil, h.wall, []Request{prepare("tx", opCreate2("/x", []byte("abc")), opCreate("/y", 0))})
		require.Equal(t, entryCreateStats, entry[1], "a prepare with a create2 is of version 13")
		entry[1] = version
		res, _, err := h.s.Apply(entry)
		require.NoError(t, err)
		rec := res[0].Resp.(*proto.XRecord)
		require.Equal(t, proto.XPending, rec.Status)
		z := res[0].Zxid
		want := []proto.MultiResult{
			{Op: proto.OpCreate2, Resp: &proto.Create2Response{Path: "/x", Stat: createdStat(z, h.s.Time(), 0, []byte("abc"))}},
			{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: "/y"}},
		}
		if version < entryCreateStats {
			want[0] = proto.MultiResult{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: "/x"}}
		}
		assert.Equal(t, want, rec.Results.Results, "version %d", version)
		h.decide("tx", true)
		assert.Equal(t, want, h.s.XRecords()[0].Results.Results, "version %d: the commit keeps them", version)
	}
}
