package fsm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestProtocolRepliesCarryNoOps: the record a shard answers a protocol
// message or xOutcome with holds what the coordinator needs (status,
// results, the caller's identities), not the ops, which only the shard
// needs and keeps; xList lists every record as a client may see it. With
// the ops, a participant's reply to a prepare that fits a member link
// outgrew the link.
func TestProtocolRepliesCarryNoOps(t *testing.T) {
	h := newHarness(t)
	ids := []proto.ID{{Scheme: "digest", ID: "user:hash"}}
	p := &proto.XPrepareRequest{ID: txA, Coordinator: "b", Self: "a", Shards: []string{"a", "b"}, FixResults: true,
		Deadline: h.wall + 3_600_000, IDs: ids, Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: []proto.MultiOp{opCreate("/x", 0)}}}}}
	reply := func(op proto.OpCode, req proto.Record) *proto.XRecord {
		t.Helper()
		res, _ := h.do(Request{Member: "m1", Op: op, Body: proto.Marshal(req)})
		require.Equal(t, proto.ErrOK, res.Err)
		return res.Resp.(*proto.XRecord)
	}
	brief := func(rec *proto.XRecord, status proto.XStatus) {
		t.Helper()
		assert.Equal(t, status, rec.Status)
		assert.Empty(t, rec.Ops)
		assert.Equal(t, ids, rec.IDs)
		assert.Len(t, rec.Results.Results, 1)
	}
	brief(reply(proto.OpXPrepare, p), proto.XPending)
	brief(reply(proto.OpXPrepare, p), proto.XPending) // a prepare sent again
	require.Len(t, h.s.XRecord(txA).Ops, 1, "the shard keeps its ops")
	out, _, _ := h.s.Read(proto.OpXOutcome, &proto.XIDRequest{ID: txA}, 0, nil)
	brief(out.(*proto.XRecord), proto.XPending)
	list, _, _ := h.s.Read(proto.OpXList, proto.Empty{}, 0, nil)
	require.Len(t, list.(*proto.XListResponse).Records, 1)
	assert.Equal(t, h.s.XRecord(txA).Redacted(), list.(*proto.XListResponse).Records[0])
	brief(reply(proto.OpXCommit, &proto.XIDRequest{ID: txA}), proto.XCommitted)
	brief(reply(proto.OpXStatus, &proto.XStatusRequest{ID: txA, Coordinator: "b"}), proto.XCommitted)
}
