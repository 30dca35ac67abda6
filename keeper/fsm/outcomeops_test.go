package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// applyXAt applies one protocol message in an entry of the given
// version (0: the version EncodeEntry writes) and returns its reply.
func (h *harness) applyXAt(version byte, op proto.OpCode, body proto.Record) *proto.XRecord {
	h.t.Helper()
	h.wall += 10
	entry := EncodeEntry(nil, h.wall, []Request{{Member: "m1", Op: op, Body: proto.Marshal(body)}})
	if version != 0 {
		entry[1] = version
	}
	res, _, err := h.s.Apply(entry)
	require.NoError(h.t, err)
	require.Equal(h.t, proto.ErrOK, res[0].Err)
	return res[0].Resp.(*proto.XRecord)
}

// coordinatorPrepare is the coordinator's prepare ("a", of a transaction
// over a and b) of transaction id, creating path on a and on b.
func coordinatorPrepare(id, path string) *proto.XPrepareRequest {
	ops := func(sh string) proto.ShardOps {
		return proto.ShardOps{Shard: sh, Ops: proto.MultiRequest{Ops: []proto.MultiOp{
			{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)}}}}}
	}
	return &proto.XPrepareRequest{ID: id, Coordinator: "a", Self: "a", Shards: []string{"a", "b"},
		Deadline: startWall + 3_600_000, Ops: []proto.ShardOps{ops("a"), ops("b")}, FixResults: true}
}

// TestRetryWithOtherOpsOfAFinishedTransaction (issue 38, item 8): once a
// shard deleted a transaction's record in an entry of version 14 (every
// delete's), a prepare of its id with the same ops answers the
// remembered outcome, and one with other ops is refused
// (OtherOpsRefusal) and records nothing, also after a snapshot. A record
// deleted by an older entry remembers no digest: a prepare of its id
// answers the remembered outcome, whatever its ops, as before (a retry
// with other ops was told "committed").
func TestRetryWithOtherOpsOfAFinishedTransaction(t *testing.T) {
	require.Equal(t, entryOutcomeOps, EncodeEntry(nil, 1, []Request{{Op: proto.OpXDelete, Body: proto.Marshal(&proto.XIDRequest{ID: txA})}})[1])
	committed := func(t *testing.T, deleteVersion byte) *harness {
		h := newHarness(t)
		rec := h.applyXAt(0, proto.OpXPrepare, coordinatorPrepare(txA, "/x"))
		require.Equal(t, proto.XPending, rec.Status)
		h.applyXAt(deleteVersion, proto.OpXCommitDelete, &proto.XIDRequest{ID: txA})
		require.Nil(t, h.s.XRecord(txA), "deleted")
		return h
	}

	t.Run("version 14", func(t *testing.T) {
		h := committed(t, 0)
		same := h.applyXAt(0, proto.OpXPrepare, coordinatorPrepare(txA, "/x"))
		assert.Equal(t, proto.XCommitted, same.Status, "the same ops: the remembered outcome")
		assert.Empty(t, same.Shards)
		other := h.applyXAt(0, proto.OpXPrepare, coordinatorPrepare(txA, "/other"))
		assert.Equal(t, OtherOpsRefusal(txA), other, "other ops: refused")
		assert.Nil(t, h.s.XRecord(txA), "the refusal records nothing")
		st, ok := h.s.Outcome(txA)
		assert.True(t, ok)
		assert.Equal(t, proto.XCommitted, st)

		var buf bytes.Buffer
		require.NoError(t, h.s.Snapshot().Write(&buf))
		restored, err := Restore(&buf)
		require.NoError(t, err)
		h.s = restored
		assert.Equal(t, OtherOpsRefusal(txA), h.applyXAt(0, proto.OpXPrepare, coordinatorPrepare(txA, "/other")),
			"the digest survives a snapshot")
	})
	t.Run("version 12", func(t *testing.T) {
		h := committed(t, entryCommitStamps)
		other := h.applyXAt(0, proto.OpXPrepare, coordinatorPrepare(txA, "/other"))
		assert.Equal(t, proto.XCommitted, other.Status, "the old rule: the remembered outcome")
		assert.Empty(t, other.Shards)
	})
	t.Run("no ops", func(t *testing.T) {
		assert.Zero(t, opsDigest(&proto.XRecord{Coordinator: "a", Shards: []string{"a", "b"}, Ops: []proto.ShardOps{{Shard: "a"}}}),
			"a record the coordinator made to fail a transaction it never saw prepared")
	})
}
