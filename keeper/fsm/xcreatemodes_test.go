package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// prepareEntry is the log entry of a prepare of ops on shard a, with its
// version set to version (the entry EncodeEntry writes, otherwise).
func (h *harness) prepareEntry(id string, version byte, ops ...proto.MultiOp) []byte {
	p := &proto.XPrepareRequest{ID: id, Coordinator: "b", Self: "a", Shards: []string{"a", "b"},
		Deadline: h.wall + 3_600_000, Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: ops}}}}
	h.wall += 10
	entry := EncodeEntry(nil, h.wall, []Request{{ID: 97, Member: "m1", Op: proto.OpXPrepare, Body: proto.Marshal(p)}})
	if version != 0 {
		entry[1] = version
	}
	return entry
}

// TestCrossShardPrepareTakesContainersFromVersion16 (issue 38): a
// cross-shard transaction takes createContainer (and createTTL, which
// fails as TTL nodes are off, with ZooKeeper's code) in an entry of
// version 16, which EncodeEntry writes for such a prepare; the commit
// makes a container, also from a snapshot taken while it was pending.
// An entry of version 12 refuses them as it did
// (BadArguments), so an old log replays as it applied.
func TestCrossShardPrepareTakesContainersFromVersion16(t *testing.T) {
	container := proto.MultiOp{Op: proto.OpCreateContainer, Req: &proto.CreateRequest{Path: "/box", ACL: openACL, Flags: proto.FlagContainer}}
	ttl := proto.MultiOp{Op: proto.OpCreateTTL, Req: &proto.CreateTTLRequest{
		CreateRequest: proto.CreateRequest{Path: "/ttl", ACL: openACL, Flags: proto.ModePersistentTTL}, TTL: 60000}}
	ttlMode := opCreate("/ttl", proto.ModePersistentTTL)
	ephemeralContainer := proto.MultiOp{Op: proto.OpCreateContainer, Req: &proto.CreateRequest{Path: "/e", ACL: openACL, Flags: proto.FlagEphemeral}}

	apply := func(h *harness, entry []byte) *proto.XRecord {
		t.Helper()
		res, _, err := h.s.Apply(entry)
		require.NoError(t, err)
		require.Equal(t, proto.ErrOK, res[0].Err)
		return res[0].Resp.(*proto.XRecord)
	}

	h := newHarness(t)
	entry := h.prepareEntry(txA, 0, opCreate("/x", 0), container)
	require.Equal(t, entryXCreateModes, entry[1], "a prepare with a createContainer is written as version 16")
	rec := apply(h, entry)
	require.Equal(t, proto.XPending, rec.Status, "err %v at op %d", rec.Err, rec.FailedOp)
	var snap bytes.Buffer
	require.NoError(t, h.s.Snapshot().Write(&snap))
	h.s = mustRestore(t, snap.Bytes()) // the pending record, its container op included, from a snapshot
	h.decide(txA, true)
	box := h.s.Node("/box")
	require.NotNil(t, box, "the commit made the container")
	assert.Equal(t, ContainerOwner, box.Owner, "a container, owned by no session")
	require.NotNil(t, h.s.Node("/x"))

	for i, op := range []proto.MultiOp{ttl, ttlMode} {
		rec = apply(h, h.prepareEntry([]string{txB, txC}[i], 0, op))
		assert.Equal(t, proto.XRejected, rec.Status, "%v", op.Op)
		assert.Equal(t, proto.ErrUnimplemented, rec.Err, "%v: a TTL mode fails as in one multi (TTL nodes are off)", op.Op)
	}
	rec = apply(h, h.prepareEntry(txD, 0, ephemeralContainer))
	assert.Equal(t, proto.XRejected, rec.Status)
	assert.Equal(t, proto.ErrBadArguments, rec.Err, "in a multi the flags pick the kind: an ephemeral, which no transaction takes")
	assert.Nil(t, h.s.Node("/e"))

	old := newHarness(t)
	for i, op := range []proto.MultiOp{container, ttl, ttlMode} {
		id := []string{txA, txB, txC}[i]
		rec = apply(old, old.prepareEntry(id, entryCommitStamps, opCreate("/y", 0), op))
		assert.Equal(t, proto.XRejected, rec.Status, "version 12: %v refused as before", op.Op)
		assert.Equal(t, proto.ErrBadArguments, rec.Err, "version 12: %v", op.Op)
		assert.EqualValues(t, 1, rec.FailedOp, "version 12: %v", op.Op)
	}
	assert.Nil(t, old.s.Node("/y"))
}
