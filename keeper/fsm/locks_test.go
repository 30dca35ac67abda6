package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// prepare applies a participant's prepare of ops on this shard ("a", of a
// transaction over a and b) and returns its record.
func (h *harness) prepare(id string, ops ...proto.MultiOp) *proto.XRecord {
	h.t.Helper()
	p := &proto.XPrepareRequest{ID: id, Coordinator: "b", Self: "a", Shards: []string{"a", "b"},
		Deadline: h.wall + 3_600_000, Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: ops}}}}
	res, _ := h.do(Request{Member: "m1", Op: proto.OpXPrepare, Body: proto.Marshal(p)})
	require.Equal(h.t, proto.ErrOK, res.Err)
	return res.Resp.(*proto.XRecord)
}

// decide commits (or fails) a prepared transaction on this shard.
func (h *harness) decide(id string, commit bool) {
	h.t.Helper()
	op := proto.OpXFail
	if commit {
		op = proto.OpXCommit
	}
	res, _ := h.do(Request{Member: "m1", Op: op, Body: proto.Marshal(&proto.XIDRequest{ID: id})})
	require.Equal(h.t, proto.ErrOK, res.Err)
}

const (
	txA = "0f3c2a8e-0000-4c3b-9d1e-00000000000a"
	txB = "0f3c2a8e-0000-4c3b-9d1e-00000000000b"
	txC = "0f3c2a8e-0000-4c3b-9d1e-00000000000c"
	txD = "0f3c2a8e-0000-4c3b-9d1e-00000000000d"
)

// TestSiblingCreatesShareTheParent: pending creates and deletes of
// siblings by different transactions hold their parent together, and
// plain sibling creates and deletes go on; everything else on the parent
// (its children, its stat, its data and ACL, deleting it, a pending
// sequential create) waits until every one has ended.
func TestSiblingCreatesShareTheParent(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	h.ok(c.create("/dir", []byte("d"), 0))
	h.ok(c.create("/dir/old", nil, 0))

	require.Equal(t, proto.XPending, h.prepare(txA, opCreate("/dir/a", 0)).Status)
	require.Equal(t, proto.XPending, h.prepare(txB, opCreate("/dir/b", 0), opDelete("/dir/old", -1)).Status)

	// The same name, and a sequential create under the parent, conflict.
	rec := h.prepare(txC, opCreate("/dir/a", 0))
	assert.Equal(t, proto.XRejected, rec.Status)
	assert.Equal(t, proto.ErrLocked, rec.Err)
	rec = h.prepare(txC, opCreate("/dir/s-", proto.FlagSequential))
	assert.Equal(t, proto.ErrLocked, rec.Err, "a pending sequential create needs the parent's children still")

	// Plain requests.
	for _, tc := range []struct {
		name string
		req  Request
		want proto.Code
	}{
		{"sibling create", c.create("/dir/plain", nil, 0), proto.ErrOK},
		{"sibling sequential create", c.create("/dir/seq-", nil, proto.FlagSequential), proto.ErrOK},
		{"sibling delete", c.delete("/dir/plain", -1), proto.ErrOK},
		{"setData of the parent", c.setData("/dir", []byte("d2"), -1), proto.ErrLocked},
		{"create of a pending name", c.create("/dir/a", nil, 0), proto.ErrLocked},
		{"delete of a pending delete", c.delete("/dir/old", -1), proto.ErrLocked},
		{"delete of the parent", c.delete("/dir", -1), proto.ErrLocked},
		{"setACL of the parent", c.setACL("/dir", openACL, -1), proto.ErrLocked},
	} {
		res, _ := h.do(tc.req)
		assert.Equal(t, tc.want, res.Err, tc.name)
	}
	for _, op := range []proto.OpCode{proto.OpGetChildren, proto.OpGetChildren2, proto.OpGetData, proto.OpExists} {
		_, code, _ := h.read(op, pathWatch("/dir", false))
		assert.Equal(t, proto.ErrLocked, code, "%v of the parent shows no undecided child", op)
	}
	assert.True(t, h.s.Blocked(proto.OpGetChildren, pathWatch("/dir", false)))
	assert.False(t, h.s.Blocked(proto.OpCreate, &proto.CreateRequest{Path: "/dir/other"}))

	// The locks survive a snapshot as they were.
	restored, err := Restore(bytes.NewReader(snapshotBytes(t, h.s)))
	require.NoError(t, err)
	assert.Equal(t, h.s.LockCount(), restored.LockCount())
	assert.Equal(t, h.s.x.locks, restored.x.locks)

	h.decide(txA, true)
	_, code, _ := h.read(proto.OpGetChildren, pathWatch("/dir", false))
	assert.Equal(t, proto.ErrLocked, code, "txB still holds the parent")
	h.decide(txB, true)
	resp, code, _ := h.read(proto.OpGetChildren, pathWatch("/dir", false))
	require.Equal(t, proto.ErrOK, code)
	assert.ElementsMatch(t, []string{"a", "b", "seq-0000000002"}, resp.(*proto.ChildrenResponse).Children)
	assert.Zero(t, h.s.LockCount(), "every lock is released")
	h.ok(c.setACL("/dir", openACL, -1))
}

// TestAnOwnerExcludesChildIntents: a pending setData of a znode and
// pending creates of its children exclude each other, whichever came
// first, and the path is free once both ended.
func TestAnOwnerExcludesChildIntents(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	h.ok(c.create("/x", []byte("0"), 0))
	h.ok(c.create("/y", []byte("0"), 0))
	require.Equal(t, proto.XPending, h.prepare(txA, opSetData("/x", []byte("1"), 0), opCreate("/y/kid", 0)).Status)
	rec := h.prepare(txB, opCreate("/x/kid", 0))
	assert.Equal(t, proto.ErrLocked, rec.Err, "a child create waits for the owner of its parent")
	rec = h.prepare(txC, opSetData("/y", []byte("1"), 0))
	assert.Equal(t, proto.ErrLocked, rec.Err, "a data writer waits for the child intents")
	assert.Equal(t, txA, h.s.LockedBy("/x"))
	assert.Equal(t, txA, h.s.LockedBy("/y"))
	h.decide(txA, false)
	assert.Zero(t, h.s.LockCount())
	require.Equal(t, proto.XPending, h.prepare(txD, opCreate("/x/kid", 0)).Status)
	h.decide(txD, true)
	assert.NotNil(t, h.s.Node("/x/kid"))
	assert.Nil(t, h.s.Node("/y/kid"))
	assert.Zero(t, h.s.LockCount())
}

// TestDelayedWritesApplyInTheirOrder: a write sent with Wait that meets a
// lock is held back (ErrDelayed, nothing applied) with every later write
// of its connection, until it comes again; sent without Wait once its
// wait is over, it meets ErrLocked and the hold ends; a newer connection
// ends the hold, a stale older one goes ahead past it; snapshots keep it.
func TestDelayedWritesApplyInTheirOrder(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	h.ok(c.create("/x", []byte("0"), 0))
	send := func(r Request, conn, seq uint64, wait bool) proto.Code {
		t.Helper()
		r.Conn, r.Seq, r.Wait = conn, seq, wait
		res, _ := h.do(r)
		return res.Err
	}
	require.Equal(t, proto.XPending, h.prepare(txA, opSetData("/x", []byte("tx"), 0)).Status)
	assert.Equal(t, ErrDelayed, send(c.setData("/x", []byte("1"), -1), 7, 1, true), "a locked write is held back")
	assert.Equal(t, ErrDelayed, send(c.create("/y", nil, 0), 7, 2, true), "a later write of its connection waits behind it")
	assert.Nil(t, h.s.Node("/y"))
	restored, err := Restore(bytes.NewReader(snapshotBytes(t, h.s)))
	require.NoError(t, err)
	assert.Equal(t, writeRef{7, 1}, restored.Session(c.sess).hold, "a snapshot keeps the hold")
	assert.Equal(t, ErrOutOfOrder, send(c.create("/stale", nil, 0), 6, 9, true), "a stale older connection does not wait; it is out of order")
	assert.Equal(t, proto.ErrLocked, send(c.setData("/x", []byte("r"), -1), 0, 0, false), "reject mode is unchanged")

	h.decide(txA, true)
	assert.Equal(t, proto.ErrOK, send(c.setData("/x", []byte("1"), -1), 7, 1, true), "sent again after the unlock")
	assert.Equal(t, proto.ErrOK, send(c.create("/y", nil, 0), 7, 2, true))
	assert.Equal(t, "1", string(h.s.Node("/x").Data()))
	assert.Equal(t, int32(2), h.s.Node("/x").Version, "after the transaction's write")

	require.Equal(t, proto.XPending, h.prepare(txB, opSetData("/x", []byte("tx"), 2)).Status)
	assert.Equal(t, ErrDelayed, send(c.setData("/x", []byte("2"), -1), 7, 3, true))
	assert.Equal(t, proto.ErrLocked, send(c.setData("/x", []byte("2"), -1), 7, 3, false), "its wait over, it meets the lock")
	assert.Equal(t, proto.ErrOK, send(c.create("/w", nil, 0), 7, 4, true), "and the hold is over")
	assert.Equal(t, ErrDelayed, send(c.setData("/x", []byte("3"), -1), 7, 5, true))
	assert.Equal(t, proto.ErrOK, send(c.create("/v", nil, 0), 8, 1, true), "a newer connection ends the hold")
	assert.Equal(t, writeRef{}, h.s.Session(c.sess).hold)
}

// commitAt applies a commit of transaction id in an entry of the given
// version.
func (h *harness) commitAt(id string, version byte) (Result, []Event) {
	h.t.Helper()
	h.wall += 10
	reqs := []Request{{ID: 98, Member: "m1", Op: proto.OpXCommit, Body: proto.Marshal(&proto.XIDRequest{ID: id})}}
	entry := EncodeEntry(nil, h.wall, reqs)
	require.Equal(h.t, entryCommitStamps, entry[1], "a commit's entry is of version 12")
	if version < entryIdentities {
		entry = encodeEntry(nil, h.wall, reqs, version) // without the identity table
	} else {
		entry[1] = version
	}
	res, events, err := h.s.Apply(entry)
	require.NoError(h.t, err)
	return res[0], events
}

// TestPrepareFixesResults: a prepare with FixResults returns the results
// the commit gives, zxids and times included, however many entries come
// between; in an entry before version 12 the commit applies at the
// prepare's zxid and time, while the parent's pzxid and the watch events
// carry the commit's. A failed transaction drops the results it fixed.
// Only entries that hold such a prepare are of version 5, and the fixed
// zxid survives a snapshot.
func TestPrepareFixesResults(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	h.ok(c.create("/dir", nil, 0))
	h.ok(c.create("/dir/v", []byte("0"), 0))
	h.ok(c.create("/seq", nil, 0))

	fixed := func(id string, ops ...proto.MultiOp) (*proto.XRecord, int64, int64) {
		t.Helper()
		p := &proto.XPrepareRequest{ID: id, Coordinator: "b", Self: "a", Shards: []string{"a", "b"}, FixResults: true,
			Deadline: h.wall + 3_600_000, Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: ops}}}}
		req := Request{Member: "m1", Op: proto.OpXPrepare, Body: proto.Marshal(p)}
		require.Equal(t, entryFixedResults, EncodeEntry(nil, 1, []Request{req})[1])
		res, _ := h.do(req)
		require.Equal(t, proto.ErrOK, res.Err)
		return res.Resp.(*proto.XRecord), res.Zxid, h.s.Time()
	}
	rec, zxid, at := fixed(txA, opSetData("/dir/v", []byte("1"), 0), opCreate("/dir/n", 0),
		opCreate("/seq/s-", proto.FlagSequential))
	require.Equal(t, proto.XPending, rec.Status)
	require.Len(t, rec.Results.Results, 3)
	assert.Equal(t, zxid, rec.Results.Results[0].Resp.(*proto.StatResponse).Stat.Mzxid)
	assert.Equal(t, "/dir/n", rec.Results.Results[1].Resp.(*proto.PathRequest).Path)
	assert.Equal(t, "/seq/s-0000000000", rec.Results.Results[2].Resp.(*proto.PathRequest).Path)

	// Other work between the prepare and the commit, a sibling create
	// under the intent-locked parent among it, and a snapshot.
	h.ok(c.create("/dir/other", nil, 0))
	h.ok(c.create("/elsewhere", nil, 0))
	var buf bytes.Buffer
	require.NoError(t, h.s.Snapshot().Write(&buf))
	h.s = mustRestore(t, buf.Bytes())

	res, events := h.commitAt(txA, entryExtensions)
	require.Equal(t, proto.ErrOK, res.Err)
	committed := res.Resp.(*proto.XRecord)
	assert.Equal(t, rec.Results, committed.Results, "the commit gives the results the prepare fixed")
	assert.Equal(t, zxid, h.stat("/dir/v").Mzxid)
	assert.Equal(t, at, h.stat("/dir/n").Ctime)
	assert.Equal(t, res.Zxid, h.stat("/dir").Pzxid, "the parent's pzxid is the commit's")
	require.NotEmpty(t, events)
	for _, e := range events {
		assert.Equal(t, res.Zxid, e.Zxid, "events carry the commit's zxid")
	}

	// A parent this transaction holds whole: its stat, among the results,
	// has the prepare's pzxid, as the commit writes it.
	h.ok(c.create("/p2", nil, 0))
	rec, _, _ = fixed(txC, opCreate("/p2/c", 0), opSetData("/p2", []byte("x"), -1))
	h.ok(c.create("/elsewhere2", nil, 0))
	res, _ = h.commitAt(txC, entryExtensions)
	assert.Equal(t, rec.Results, res.Resp.(*proto.XRecord).Results)
	assert.Equal(t, rec.Results.Results[1].Resp.(*proto.StatResponse).Stat, h.stat("/p2"))

	// An ephemeral node is out of a transaction's reach: its session may end
	// before the commit.
	h.ok(c.create("/eph", nil, eph))
	for i, op := range []proto.MultiOp{opSetData("/eph", nil, -1), opCheck("/eph", -1), opDelete("/eph", -1)} {
		rec, _, _ = fixed(txD+string(rune('0'+i)), op)
		assert.Equal(t, proto.XRejected, rec.Status)
		assert.Equal(t, proto.ErrBadArguments, rec.Err)
	}

	// Failed: the fixed results go.
	rec, _, _ = fixed(txB, opSetData("/dir/v", []byte("2"), -1))
	require.Len(t, rec.Results.Results, 1)
	h.decide(txB, false)
	assert.Empty(t, h.s.XRecord(txB).Results.Results)
	assert.Equal(t, []byte("1"), h.s.Node("/dir/v").Data())
}

// TestCommitStampsItsOwnZxid (issue 38, item 6): from entry version 12 a
// commit stamps what it changes with its own zxid and time, the parent's
// pzxid too, even where the transaction holds the parent whole, so that
// watches re-registered with a zxid between the prepare and the commit
// fire. The names and versions are the ones the prepare fixed, and the
// record keeps the results the client was answered.
func TestCommitStampsItsOwnZxid(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	h.ok(c.create("/p", []byte("0"), 0))
	p := &proto.XPrepareRequest{ID: txA, Coordinator: "b", Self: "a", Shards: []string{"a", "b"}, FixResults: true,
		Deadline: h.wall + 3_600_000, Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: []proto.MultiOp{
			opSetData("/p", []byte("1"), 0), opCreate("/p/s-", proto.FlagSequential)}}}}}
	prep, _ := h.do(Request{Member: "m1", Op: proto.OpXPrepare, Body: proto.Marshal(p)})
	rec := prep.Resp.(*proto.XRecord)
	require.Equal(t, proto.XPending, rec.Status)
	seen, _ := h.ok(c.create("/elsewhere", nil, 0)) // a client's last zxid, past the prepare's

	res, events := h.do(Request{Member: "m1", Op: proto.OpXCommit, Body: proto.Marshal(&proto.XIDRequest{ID: txA})})
	require.Equal(t, proto.ErrOK, res.Err)
	require.Greater(t, res.Zxid, seen.Zxid)
	st := h.stat("/p")
	assert.Equal(t, []int64{res.Zxid, res.Zxid, h.s.Time()}, []int64{st.Mzxid, st.Pzxid, st.Mtime}, "the parent is stamped by the commit")
	assert.Equal(t, int32(1), st.Version)
	kid := h.stat("/p/s-0000000000")
	assert.Equal(t, []int64{res.Zxid, h.s.Time()}, []int64{kid.Czxid, kid.Ctime}, "the created node has the name the prepare fixed and the commit's stamp")
	assert.Equal(t, rec.Results, res.Resp.(*proto.XRecord).Results, "the record keeps the results the client was answered")
	for _, e := range events {
		assert.Equal(t, res.Zxid, e.Zxid)
	}
	fire := map[WatchKind]proto.EventType{}
	for _, w := range h.s.ResolveWatches(&proto.SetWatchesRequest{RelativeZxid: seen.Zxid, DataWatches: []string{"/p"}, ChildWatches: []string{"/p"}}) {
		fire[w.Kind] = w.Fire
	}
	assert.Equal(t, map[WatchKind]proto.EventType{WatchData: proto.EventNodeDataChanged, WatchChild: proto.EventNodeChildrenChanged}, fire,
		"watches re-registered with a zxid between the prepare and the commit fire")
}

// TestCloseSessionWaitsForALockedParent (issue 38, item 9): a session
// closes while a pending transaction holds the parent of one of its
// ephemerals whole (a sequential create and a setData of the parent). From
// entry version 12 the close is refused (ErrLocked: the leader's expiry
// sweep sends it again, a client's close leaves the session to expire),
// so nothing the transaction fixed moves: its sequential name and its
// parent's stat are what the client was answered, and the parent's pzxid
// never goes back. Once the transaction is decided the close applies.
func TestCloseSessionWaitsForALockedParent(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	owner := h.session("m1")
	h.ok(c.create("/p", []byte("0"), 0))
	h.ok(owner.create("/p/e", nil, eph))
	p := &proto.XPrepareRequest{ID: txA, Coordinator: "b", Self: "a", Shards: []string{"a", "b"}, FixResults: true,
		Deadline: h.wall + 3_600_000, Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: []proto.MultiOp{
			opCreate("/p/s-", proto.FlagSequential), opSetData("/p", []byte("1"), 0)}}}}}
	prep, _ := h.do(Request{Member: "m1", Op: proto.OpXPrepare, Body: proto.Marshal(p)})
	rec := prep.Resp.(*proto.XRecord)
	require.Equal(t, proto.XPending, rec.Status)
	name := rec.Results.Results[0].Resp.(*proto.PathRequest).Path
	answered := rec.Results.Results[1].Resp.(*proto.StatResponse).Stat

	require.GreaterOrEqual(t, EncodeEntry(nil, 1, []Request{owner.close()})[1], entryCommitStamps, "a close's entry is of version 12 or later")
	closed, _ := h.do(owner.close())
	assert.Equal(t, proto.ErrLocked, closed.Err, "the close waits for the lock")
	assert.NotNil(t, h.s.Session(owner.sess))
	assert.NotNil(t, h.s.Node("/p/e"))

	res, _ := h.do(Request{Member: "m1", Op: proto.OpXCommit, Body: proto.Marshal(&proto.XIDRequest{ID: txA})})
	require.Equal(t, proto.ErrOK, res.Err)
	assert.NotNil(t, h.s.Node(name), "the name the prepare fixed is the node's")
	st := h.stat("/p")
	assert.Equal(t, []int32{answered.NumChildren, answered.Cversion, answered.Version}, []int32{st.NumChildren, st.Cversion, st.Version},
		"the parent's stat is the one answered")
	pzxid := st.Pzxid

	closed, _ = h.do(owner.close())
	require.Equal(t, proto.ErrOK, closed.Err, "the lock gone, the close applies")
	assert.Nil(t, h.s.Session(owner.sess))
	assert.Nil(t, h.s.Node("/p/e"))
	assert.Greater(t, h.stat("/p").Pzxid, pzxid, "the parent's pzxid never goes back")
}

// TestPatientPrepareMeetingALockRecordsNothing: a patient prepare that
// meets a lock as it applies (taken after its member looked) is answered
// ErrLocked and leaves no record, so that its sender sends it again; in an
// entry older than version 7 it is refused and recorded as before.
func TestPatientPrepareMeetingALockRecordsNothing(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	h.ok(c.create("/x", nil, 0))
	h.prepare(txA, opSetData("/x", []byte("1"), -1))
	apply := func(id string, version byte) Result {
		t.Helper()
		p := &proto.XPrepareRequest{ID: id, Coordinator: "b", Self: "a", Shards: []string{"a", "b"}, Deadline: h.wall + 3_600_000,
			FixResults: true, Patient: true, Ops: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: []proto.MultiOp{opSetData("/x", []byte("2"), -1)}}}}}
		h.wall += 10
		entry := EncodeEntry(nil, h.wall, []Request{{ID: 99, Member: "m1", Op: proto.OpXPrepare, Body: proto.Marshal(p)}})
		require.Equal(t, entryPatient, entry[1])
		entry[1] = version
		res, _, err := h.s.Apply(entry)
		require.NoError(t, err)
		return res[0]
	}
	res := apply(txB, entryPatient)
	assert.Equal(t, proto.ErrLocked, res.Err)
	assert.Equal(t, proto.XUnknown, h.s.xOutcome(txB).Status, "nothing recorded")
	res = apply(txC, entryFixedResults)
	require.Equal(t, proto.ErrOK, res.Err)
	rec := res.Resp.(*proto.XRecord)
	assert.Equal(t, []any{proto.XRejected, proto.ErrLocked}, []any{rec.Status, rec.Err}, "an older entry records the refusal")
	h.decide(txA, true)
	res = apply(txB, entryPatient)
	require.Equal(t, proto.ErrOK, res.Err)
	assert.Equal(t, proto.XPending, res.Resp.(*proto.XRecord).Status, "once the lock is gone it prepares")
}

// TestCountBelowAPendingCreateWaits: getAllChildrenNumber of any ancestor
// of a pending create is locked (a member waits for it) until the
// transaction ends, so nobody counts the subtree as it was before a
// transaction whose client may already have its answer; a count elsewhere
// goes on.
func TestCountBelowAPendingCreateWaits(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	for _, p := range []string{"/d", "/d/e", "/other"} {
		h.ok(c.create(p, nil, 0))
	}
	count := func(path string) (int32, proto.Code) {
		resp, code, _ := h.read(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: path})
		if code != proto.ErrOK {
			return 0, code
		}
		return resp.(*proto.CountResponse).Count, code
	}
	require.Equal(t, proto.XPending, h.prepare(txA, opCreate("/d/e/f", 0)).Status)
	for _, p := range []string{"/", "", "/d", "/d/e"} {
		_, code := count(p)
		assert.Equal(t, proto.ErrLocked, code, "count of %q", p)
		assert.True(t, h.s.Blocked(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: p}), "a member waits on %q", p)
	}
	n, code := count("/other")
	assert.Equal(t, proto.ErrOK, code)
	assert.Zero(t, n)
	h.decide(txA, true)
	n, code = count("/d")
	assert.Equal(t, proto.ErrOK, code)
	assert.Equal(t, int32(2), n, "the committed create counts")
}

// TestStoppersNameTheTransactionsInTheWay: for a request that pending
// transactions stop, Stoppers names them and the prepare time of the
// newest (a member waits for those to end, until that one's takeover); a
// request nothing stops has none; a decided transaction is no longer
// pending.
func TestStoppersNameTheTransactionsInTheWay(t *testing.T) {
	h := newHarness(t)
	c := h.session("m1")
	for _, p := range []string{"/d", "/d/x", "/free"} {
		h.ok(c.create(p, nil, 0))
	}
	older := h.prepare(txA, opCreate("/d/a", 0))
	h.wall += 5_000
	newer := h.prepare(txB, opSetData("/d/x", []byte("1"), -1))
	require.Greater(t, newer.Created, older.Created)

	ids, since := h.s.Stoppers(proto.OpGetData, &proto.PathWatchRequest{Path: "/d/x"})
	assert.Equal(t, []string{txB}, ids, "only txB holds /d/x")
	assert.Equal(t, newer.Created, since)
	ids, since = h.s.Stoppers(proto.OpGetChildren, &proto.PathWatchRequest{Path: "/d"})
	assert.Equal(t, []string{txA}, ids, "txA's create holds /d's child list")
	assert.Equal(t, older.Created, since)
	ids, since = h.s.Stoppers(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: "/"})
	assert.ElementsMatch(t, []string{txA, txB}, ids, "a count of / waits for both")
	assert.Equal(t, newer.Created, since)
	ids, _ = h.s.Stoppers(proto.OpGetData, &proto.PathWatchRequest{Path: "/free"})
	assert.Empty(t, ids)
	assert.True(t, h.s.Pending(txB))
	h.decide(txB, true)
	assert.False(t, h.s.Pending(txB), "decided")
	ids, _ = h.s.Stoppers(proto.OpGetData, &proto.PathWatchRequest{Path: "/d/x"})
	assert.Empty(t, ids, "released by the commit")
}

// TestEmptyPathMeetsTheRootsLocks: reads take "" for the root, so a read
// of "" meets the locks a pending transaction holds on "/" (before, it
// passed them and read the root's unsettled stat and children).
func TestEmptyPathMeetsTheRootsLocks(t *testing.T) {
	h := newHarness(t)
	require.Equal(t, proto.XPending, h.prepare(txA, opSetData("/", []byte("r"), -1), opCreate("/new", 0)).Status)
	for _, op := range []proto.OpCode{proto.OpExists, proto.OpGetData, proto.OpGetChildren, proto.OpGetChildren2} {
		for _, path := range []string{"/", ""} {
			_, code, _ := h.read(op, pathWatch(path, false))
			assert.Equal(t, proto.ErrLocked, code, "%v of %q", op, path)
		}
	}
	for _, op := range []proto.OpCode{proto.OpGetACL, proto.OpGetAllChildrenNumber} {
		_, code, _ := h.read(op, &proto.PathRequest{Path: ""})
		assert.Equal(t, proto.ErrLocked, code, "%v of the root as \"\"", op)
	}
}
