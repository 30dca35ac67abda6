package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestWritesAfterALostOneAreRefused: once a write of a client connection
// is answered with connection loss, the connection's later writes are
// refused the same way and never apply (a connection's writes apply as a
// prefix of what it sent); other connections go on.
func TestWritesAfterALostOneAreRefused(t *testing.T) {
	r := newSoloMember(t).mustOpen(LogStoreWAL)
	sess := session(t, r)
	const conn = 7
	lost := make(chan fsm.Result, 1)
	r.addWaiter(1, waiter{conn: conn, done: func(res fsm.Result) { lost <- res }})
	r.failOne(1)
	require.Equal(t, proto.ErrConnectionLoss, (<-lost).Err)

	write := func(conn, seq uint64, path string) fsm.Result {
		return r.Do(fsm.Request{Session: sess, Member: r.ID(), Op: proto.OpCreate, Conn: conn, Seq: seq,
			Body: proto.Marshal(&proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)})})
	}
	assert.Equal(t, proto.ErrConnectionLoss, write(conn, 2, "/after").Err, "a write after the lost one")
	assert.Equal(t, proto.ErrOK, write(conn+1, 1, "/other").Err, "another connection's write")
	_, code := r.Barrier()
	require.Equal(t, proto.ErrOK, code)
	r.View(func(st *fsm.State) {
		assert.Nil(t, st.Node("/after"), "the refused write applied")
		assert.NotNil(t, st.Node("/other"))
	})
}

// TestStateMachineRefusesAWriteAfterAGap: a write whose connection's
// earlier write never reached the log, though this member did not see it
// lost (it went by another leader that changed meanwhile), is refused by
// the state machine with connection loss and does not apply.
func TestStateMachineRefusesAWriteAfterAGap(t *testing.T) {
	r := newSoloMember(t).mustOpen(LogStoreWAL)
	sess := session(t, r)
	write := func(seq uint64, path string) fsm.Result {
		return r.Do(fsm.Request{Session: sess, Member: r.ID(), Op: proto.OpCreate, Conn: 7, Seq: seq,
			Body: proto.Marshal(&proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)})})
	}
	require.Equal(t, proto.ErrOK, write(1, "/first").Err)
	assert.Equal(t, proto.ErrConnectionLoss, write(3, "/third").Err, "write 2 never applied")
	assert.False(t, r.broken.has(r.ID(), 7), "the member did not know")
	r.View(func(st *fsm.State) { assert.Nil(t, st.Node("/third"), "the refused write applied") })
}

// TestDropBrokenFailsOnlyBrokenConnections: the leader's group commit
// leaves out, and fails, the waiting requests of broken connections (its
// own, or a follower's whose write it failed), and keeps the rest in order.
func TestDropBrokenFailsOnlyBrokenConnections(t *testing.T) {
	r := &Replica{cfg: Config{ID: "m1"}}
	r.broken.add("m1", 5)
	r.broken.add("m2", 6)
	var failed []uint64
	fail := func(id uint64) { failed = append(failed, id) }
	batch := []proposal{
		{req: fsm.Request{ID: 1, Member: "m1", Conn: 4}, fail: fail},
		{req: fsm.Request{ID: 2, Member: "m1", Conn: 5}, fail: fail},
		{req: fsm.Request{ID: 3, Member: "m2", Conn: 5}, fail: fail}, // another member's connection 5
		{req: fsm.Request{ID: 4, Member: "m1"}, fail: fail},          // not a client's
		{req: fsm.Request{ID: 5, Member: "m1", Conn: 5}, fail: fail},
		{req: fsm.Request{ID: 6, Member: "m2", Conn: 6}, fail: fail}, // a follower's broken connection
	}
	var kept []uint64
	for _, p := range r.dropBroken(batch) {
		kept = append(kept, p.req.ID)
	}
	assert.Equal(t, []uint64{1, 3, 4}, kept)
	assert.Equal(t, []uint64{2, 5, 6}, failed)
}

// TestBrokenConnectionsAreForgotten: a broken connection is remembered for
// brokenFor; once every one is older, the set empties, so later writes
// take the path that reads no map.
func TestBrokenConnectionsAreForgotten(t *testing.T) {
	var b brokenConns
	b.add("m1", 5)
	assert.True(t, b.has("m1", 5))
	assert.False(t, b.has("m2", 5), "another member's connection 5")
	long := time.Now().Add(-2 * brokenFor)
	b.at[connKey{"m1", 5}], b.latest = long, long
	assert.False(t, b.has("m1", 5), "remembered past brokenFor")
	assert.Zero(t, b.n.Load(), "the set did not empty")
}
