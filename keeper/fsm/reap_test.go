package fsm

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// fillEphemerals creates n ephemerals of c under /e/a and /e/b (half
// each, /e/a's first in path order), in multis of 1,000, and returns
// their paths in path order.
func fillEphemerals(h *harness, c testClient, n int) []string {
	h.t.Helper()
	for _, p := range []string{"/e", "/e/a", "/e/b"} {
		h.ok(c.create(p, nil, 0))
	}
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/e/%c/%06d", "ab"[i*2/n], i)
	}
	for from := 0; from < n; from += 1000 {
		var ops []proto.MultiOp
		for _, p := range paths[from:min(from+1000, n)] {
			ops = append(ops, opCreate(p, eph))
		}
		h.ok(c.multi(ops...))
	}
	return paths
}

// reapOf is the leader's OpReap of closed session id.
func reapOf(id int64) Request { return Request{Member: m1, Op: OpReap, Session: id} }

// deletedIn returns the paths of the NodeDeleted events of one apply,
// and requires each to be followed by its parent's NodeChildrenChanged at
// the same zxid.
func deletedIn(t *testing.T, events []Event) []string {
	var deleted []string
	for i, ev := range events {
		if ev.Type != proto.EventNodeDeleted {
			continue
		}
		deleted = append(deleted, ev.Path)
		require.Less(t, i+1, len(events), "the delete of %s fires its parent's watches", ev.Path)
		next := events[i+1]
		require.Equal(t, Event{Type: proto.EventNodeChildrenChanged, Path: parentOf(ev.Path), Zxid: ev.Zxid}, Event{Type: next.Type, Path: next.Path, Zxid: next.Zxid})
	}
	return deleted
}

// TestCloseReapsInChunks (issue 37): a session holding 3 × ReapChunk + 1
// ephemerals closes in four applies: the close removes the session and
// deletes the first ReapChunk in path order, three OpReaps the rest; each
// ephemeral is deleted once, its events in path order, its parent's
// pzxid the zxid of the apply that deleted its last child. A snapshot
// taken mid-reap restores to a state that goes on to the same end.
func TestCloseReapsInChunks(t *testing.T) {
	h := newHarness(t)
	c, other := h.session(m1), h.session(m1)
	paths := fillEphemerals(h, c, 3*ReapChunk+1)
	h.ok(other.create("/e/a/other", nil, eph))
	h.ok(other.create("/e/b/kept", nil, 0))
	require.Equal(t, 3*ReapChunk+2, h.s.EphemeralCount())

	closed, events := h.do(c.close())
	require.Equal(t, proto.ErrOK, closed.Err)
	assert.Nil(t, h.s.Session(c.sess), "the session is gone at once")
	assert.Equal(t, []int64{c.sess}, h.s.Reaping())
	assert.Equal(t, 2*ReapChunk+1, h.s.ReapingEphemerals(c.sess))
	assert.Equal(t, 2*ReapChunk+2, h.s.EphemeralCount(), "ephemerals left to reap still count")
	res, _ := h.do(c.create("/e/c", nil, 0))
	assert.Equal(t, proto.ErrSessionExpired, res.Err, "no request of a closed session applies")
	perApply := [][]string{deletedIn(t, events)}
	checkInvariants(t, h.s)

	var restored *State
	for applies := 1; len(h.s.Reaping()) > 0; applies++ {
		require.Less(t, applies, 8, "the reap never ends")
		if applies == 2 { // mid-reap: a snapshot, restored, goes on beside it
			var err error
			restored, err = Restore(bytes.NewReader(snapshotBytes(t, h.s)))
			require.NoError(t, err)
			require.Equal(t, dumpState(h.s), dumpState(restored))
			require.Equal(t, h.s.Reaping(), restored.Reaping())
			require.Equal(t, h.s.ReapingEphemerals(c.sess), restored.ReapingEphemerals(c.sess))
		}
		entry := h.entryOf(reapOf(c.sess))
		res, events, err := h.s.Apply(entry)
		require.NoError(t, err)
		require.Equal(t, proto.ErrOK, res[0].Err)
		perApply = append(perApply, deletedIn(t, events))
		if restored != nil {
			again, againEvents, err := restored.Apply(entry)
			require.NoError(t, err)
			require.Equal(t, res, again)
			require.Equal(t, events, againEvents)
		}
		checkInvariants(t, h.s)
	}
	counts := make([]int, len(perApply))
	for i, d := range perApply {
		counts[i] = len(d)
	}
	assert.Equal(t, []int{ReapChunk, ReapChunk, ReapChunk, 1}, counts, "ephemerals deleted per apply")
	assert.Equal(t, paths, slices.Concat(perApply...), "every ephemeral deleted once, in path order")
	require.NotNil(t, restored)
	assert.Empty(t, diffDumps(dumpState(restored), dumpState(h.s)), "the restored state reaped to the same end")
	assert.Empty(t, restored.Reaping())

	assert.Equal(t, 1, h.s.EphemeralCount())
	assert.NotNil(t, h.s.Node("/e/a/other"))
	assert.NotNil(t, h.s.Node("/e/b/kept"))
	a, b := h.stat("/e/a"), h.stat("/e/b")
	assert.Equal(t, []int32{1, 1}, []int32{a.NumChildren, b.NumChildren})
	assert.Equal(t, h.s.Zxid(), b.Pzxid, "/e/b's last ephemeral went with the last reap")
	res, _ = h.do(reapOf(c.sess))
	assert.Equal(t, proto.ErrNoNode, res.Err, "nothing is left to reap")
}

// TestCloseBoundsEveryApply: a close and each reap delete at most
// ReapChunk ephemerals, however many the session holds (issue 37's
// bound on one apply), and ReapChunk is small enough for it.
func TestCloseBoundsEveryApply(t *testing.T) {
	require.LessOrEqual(t, ReapChunk, 4096)
	h := newHarness(t)
	c := h.session(m1)
	fillEphemerals(h, c, 2*ReapChunk+10)
	_, events := h.ok(c.close())
	assert.Equal(t, ReapChunk, len(deletedIn(t, events)), "deleted by the close")
	for range 2 {
		_, events = h.ok(reapOf(c.sess))
		assert.LessOrEqual(t, len(deletedIn(t, events)), ReapChunk)
	}
	assert.Empty(t, h.s.Reaping())
	assert.Zero(t, h.s.EphemeralCount())
}

// TestCloseBeforeVersion15DeletesEverything: a close in an entry of
// version 12 deletes every ephemeral in one apply, as it always did.
func TestCloseBeforeVersion15DeletesEverything(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	paths := fillEphemerals(h, c, ReapChunk+5)
	entry := h.entryOf(c.close())
	require.Equal(t, entryReap, entry[1])
	entry[1] = entryCommitStamps
	res, events, err := h.s.Apply(entry)
	require.NoError(t, err)
	require.Equal(t, proto.ErrOK, res[0].Err)
	assert.Equal(t, paths, deletedIn(t, events))
	assert.Empty(t, h.s.Reaping())
	assert.Zero(t, h.s.EphemeralCount())
	checkInvariants(t, h.s)
}

// TestReapMeetsClientsAndLocks: while a closed session's ephemerals are
// reaped, a client re-creating one of its paths meets NodeExists until it
// is reaped, then succeeds; one deleted and re-created by another session
// is that session's, and the reap leaves it; a pending transaction's lock
// on the parent of the next chunk holds the reap back (ErrLocked, nothing
// changes) until it is decided; a new session cannot take the id.
func TestReapMeetsClientsAndLocks(t *testing.T) {
	h := newHarness(t)
	c, other := h.session(m1), h.session(m1)
	paths := fillEphemerals(h, c, 2*ReapChunk+1)
	h.ok(c.close())
	reaped, next := paths[0], paths[ReapChunk]

	res, _ := h.do(other.create(next, nil, eph))
	assert.Equal(t, proto.ErrNodeExists, res.Err, "not reaped yet")
	h.ok(other.create(reaped, nil, 0))
	h.ok(other.delete(paths[len(paths)-1], -1))
	h.ok(other.create(paths[len(paths)-1], nil, eph))
	checkInvariants(t, h.s)

	given := Request{Member: m1, Op: proto.OpCreateSession, Body: proto.Marshal(&CreateSession{Timeout: 30000, Passwd: []byte("p"), ID: c.sess})}
	res, _ = h.do(given)
	assert.Equal(t, proto.ErrNodeExists, res.Err, "the closed session's id is taken while it reaps")

	require.Equal(t, proto.XPending, h.prepare(txA, opSetData("/e/b", []byte("x"), -1)).Status)
	before := dumpState(h.s)
	res, _ = h.do(reapOf(c.sess))
	assert.Equal(t, proto.ErrLocked, res.Err, "the next chunk's parent /e/b is locked")
	assert.Equal(t, before.Nodes, dumpState(h.s).Nodes, "a locked reap changes nothing")
	assert.Equal(t, ReapChunk, h.s.ReapingEphemerals(c.sess), "less the one another session deleted")
	h.decide(txA, true)

	h.ok(reapOf(c.sess))
	assert.Empty(t, h.s.Reaping())
	assert.NotNil(t, h.s.Node(paths[len(paths)-1]), "the re-created ephemeral is the other session's")
	assert.Equal(t, other.sess, h.s.Node(paths[len(paths)-1]).Owner)
	h.ok(other.create(next, nil, eph))
	checkInvariants(t, h.s)
}

// TestVersion04SnapshotRestores: a snapshot of the format before closed
// sessions' reaping was recorded (written by the previous binary: a
// session holding 5,000 ephemerals under /e) restores, and the session's
// close then reaps in chunks.
func TestVersion04SnapshotRestores(t *testing.T) {
	f, err := os.Open("testdata/snapshot-v04.bin.gz")
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	st, err := Restore(zr)
	require.NoError(t, err)
	require.Len(t, st.Sessions(), 1)
	sess := st.Sessions()[0]
	assert.Equal(t, 5000, st.EphemeralCount())
	assert.Len(t, sess.Ephemerals(), 5000)
	assert.Empty(t, st.Reaping())
	h := &harness{t: t, s: st, wall: st.Time(), nextID: 100}
	c := testClient{sess: sess.ID, member: m1}
	_, events := h.ok(c.close())
	assert.Equal(t, ReapChunk, len(deletedIn(t, events)))
	assert.Equal(t, 5000-ReapChunk, st.ReapingEphemerals(sess.ID))
	_, events = h.ok(reapOf(sess.ID))
	assert.Equal(t, 5000-ReapChunk, len(deletedIn(t, events)))
	assert.Empty(t, st.Reaping())
	assert.Zero(t, st.EphemeralCount())
	checkInvariants(t, st)
}

// TestManyClosesInOneEntryShareItsBound (issue 37): closes that land in
// one entry (a mass expiry, many clients closing at once) delete at most
// ReapChunk ephemerals together, not ReapChunk each; every session goes
// at once, and the reaps delete the rest, each ephemeral once. A reap in
// an entry whose closes used the bound deletes none, and is sent again.
func TestManyClosesInOneEntryShareItsBound(t *testing.T) {
	h := newHarness(t)
	const sessions, each = 3, ReapChunk/2 + 100
	var closes []Request
	var all []string
	for i := range sessions {
		c := h.session(m1)
		dir := fmt.Sprintf("/m%d", i)
		h.ok(c.create(dir, nil, 0))
		for from := 0; from < each; from += 1000 {
			var ops []proto.MultiOp
			for j := from; j < min(from+1000, each); j++ {
				p := fmt.Sprintf("%s/%06d", dir, j)
				ops = append(ops, opCreate(p, eph))
				all = append(all, p)
			}
			h.ok(c.multi(ops...))
		}
		closes = append(closes, c.close())
	}
	ids := make([]int64, len(closes))
	for i, c := range closes {
		ids[i] = c.Session
	}
	res, events, err := h.s.Apply(h.entryOf(append(closes, reapOf(ids[len(ids)-1]))...))
	require.NoError(t, err)
	for _, r := range res {
		require.Equal(t, proto.ErrOK, r.Err)
	}
	deleted := deletedIn(t, events)
	assert.Len(t, deleted, ReapChunk, "the entry's closes and its reap delete ReapChunk together")
	for _, id := range ids {
		assert.Nil(t, h.s.Session(id), "every closed session goes at once")
	}
	checkInvariants(t, h.s)
	for applies := 0; len(h.s.Reaping()) > 0; applies++ {
		require.Less(t, applies, 10, "the reap never ends")
		_, events := h.ok(reapOf(h.s.Reaping()[0]))
		d := deletedIn(t, events)
		assert.LessOrEqual(t, len(d), ReapChunk)
		deleted = append(deleted, d...)
	}
	slices.Sort(deleted)
	assert.Equal(t, all, deleted, "every ephemeral deleted once")
	assert.Zero(t, h.s.EphemeralCount())
	checkInvariants(t, h.s)
}
