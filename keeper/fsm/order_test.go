package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestConnectionWritesApplyInOrder: from entry version 8 on, a session's
// numbered writes apply only as a prefix of what each connection sent: a
// write after a gap is refused (ErrOutOfOrder, nothing applied), and so is
// every later one; a repeat never applies twice; a new connection starts
// at its first write and cuts off the older one; the rule follows the
// session to another member; snapshots keep it; older entries are not
// checked.
func TestConnectionWritesApplyInOrder(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	send := func(r Request, conn, seq uint64) proto.Code {
		t.Helper()
		r.Conn, r.Seq = conn, seq
		res, _ := h.do(r)
		return res.Err
	}
	assert.Equal(t, proto.ErrOK, send(c.create("/a", nil, 0), 5, 1))
	assert.Equal(t, ErrOutOfOrder, send(c.create("/c", nil, 0), 5, 3), "write 2 never applied: 3 must not")
	assert.Nil(t, h.s.Node("/c"))
	assert.Equal(t, ErrOutOfOrder, send(c.create("/d", nil, 0), 5, 4), "nor any later one")
	assert.Equal(t, proto.ErrOK, send(c.create("/b", nil, 0), 5, 2), "the next write applies")
	assert.Equal(t, ErrOutOfOrder, send(c.setData("/b", []byte("again"), -1), 5, 2), "a repeat does not apply twice")
	assert.Empty(t, h.s.Node("/b").Data())
	assert.Equal(t, proto.ErrNodeExists, send(c.create("/a", nil, 0), 5, 3), "a failed write takes its place in the order")
	assert.Equal(t, proto.ErrOK, send(c.create("/e", nil, 0), 5, 4))

	assert.Equal(t, ErrOutOfOrder, send(c.create("/f", nil, 0), 9, 2), "a new connection starts at its first write")
	assert.Equal(t, proto.ErrOK, send(c.create("/f", nil, 0), 9, 1))
	assert.Equal(t, ErrOutOfOrder, send(c.create("/g", nil, 0), 5, 5), "the older connection is cut off")
	assert.Equal(t, ErrOutOfOrder, send(c.create("/g", nil, 0), 4, 1), "even at its first write")
	assert.Equal(t, proto.ErrSessionMoved, send(c.on("m2").create("/g", nil, 0), 1, 7), "another member's write is not the owner's")

	restored, err := Restore(bytes.NewReader(snapshotBytes(t, h.s)))
	require.NoError(t, err)
	assert.Equal(t, writeRef{9, 1}, restored.Session(c.sess).last, "a snapshot keeps the last write")

	h.ok(Request{Session: c.sess, Member: "m2", Op: OpSessionOwner})
	m2 := c.on("m2")
	assert.Equal(t, ErrOutOfOrder, send(m2.create("/h", nil, 0), 2, 3), "on the new owner too")
	assert.Equal(t, proto.ErrOK, send(m2.create("/h", nil, 0), 2, 1), "its connection ids are its own")
	assert.Equal(t, proto.ErrSessionMoved, send(c.create("/i", nil, 0), 9, 2))

	h.s.Session(c.sess).last = unnumbered // restored from a snapshot that did not keep it
	assert.Equal(t, proto.ErrOK, send(m2.create("/j", nil, 0), 2, 40), "unknown: the next write is taken as it comes")
	assert.Equal(t, ErrOutOfOrder, send(m2.create("/k", nil, 0), 2, 42))

	old := func(r Request, conn, seq uint64) Result {
		t.Helper()
		h.nextID++
		r.ID, r.Conn, r.Seq = h.nextID, conn, seq
		h.wall += 10
		entry := EncodeEntry(nil, h.wall, []Request{r})
		require.GreaterOrEqual(t, entry[1], entrySequenced, "a batch with a numbered write or a new session is of version 8 or newer")
		entry[1] = entryPatient
		res, _, err := h.s.Apply(entry)
		require.NoError(t, err)
		return res[0]
	}
	assert.Equal(t, proto.ErrOK, send(m2.create("/k", nil, 0), 2, 41))
	assert.Equal(t, proto.ErrOK, old(m2.create("/m", nil, 0), 2, 45).Err, "an older entry applies as it did")
	assert.Equal(t, unnumbered, h.s.Session(c.sess).last, "and leaves the order unknown, as a snapshot of its time would")
	res := old(openSession("m1", 30000, []byte("p")), 0, 0)
	require.Equal(t, proto.ErrOK, res.Err)
	assert.Equal(t, unnumbered, h.s.Session(res.Session).last, "a session an older entry created")
	assert.Equal(t, writeRef{}, h.s.Session(h.session("m1").sess).last, "one a version 8 entry created has no write yet")

	// An older entry answers a write that does not decode before it looks
	// at holds, as the binaries of its time did: the hold stays.
	h.s.Session(c.sess).hold = writeRef{2, 50}
	bad := m2.create("/n", nil, 0)
	bad.Op, bad.Body = proto.OpMulti, []byte{0xff}
	assert.Equal(t, proto.ErrMarshallingError, old(bad, 3, 1).Err)
	assert.Equal(t, writeRef{2, 50}, h.s.Session(c.sess).hold)
	checkInvariants(t, h.s)
}

// TestNumberedWrites: the writes a connection numbers are those the state
// machine orders per session.
func TestNumberedWrites(t *testing.T) {
	for _, op := range []proto.OpCode{proto.OpCreate, proto.OpSetData, proto.OpDelete, proto.OpMulti, proto.OpCloseSession, proto.OpCheck} {
		assert.True(t, Numbered(op), op.String())
	}
	for _, op := range []proto.OpCode{proto.OpSync, proto.OpXPrepare, proto.OpXCommit, proto.OpGetData, proto.OpExists} {
		assert.False(t, Numbered(op), op.String())
	}
}

// TestForwardedRequestsAreOfVersion7: requests forwarded to the leader are
// encoded as version 7 at most, which a leader of the binary before version 8
// decodes, and decode to what was sent; the leader's entry decides the
// version they apply under.
func TestForwardedRequestsAreOfVersion7(t *testing.T) {
	plain := Request{ID: 2, Session: 9, Member: "m1", Op: proto.OpCreate, Body: []byte{1}}
	assert.Equal(t, entryVersion, EncodeForwarded([]Request{plain})[1], "what an older leader took before")
	reqs := []Request{{ID: 3, Session: 9, Member: "m1", Op: proto.OpCreate, Conn: 4, Seq: 2, Body: []byte{1, 2}}}
	b := EncodeForwarded(reqs)
	assert.Equal(t, entryPatient, b[1])
	_, got, err := DecodeEntry(b)
	require.NoError(t, err)
	assert.Equal(t, reqs, got)
	assert.GreaterOrEqual(t, EncodeEntry(nil, 1, got)[1], entryFenced, "a numbered create meets part fences")
}
