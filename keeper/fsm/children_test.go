package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestChildListsKeptWhileValid: getChildren of a parent of many children
// answers from the kept list, encoded once, and after every kind of change
// of the children (create, delete, a multi that does both, a failed multi,
// a session's ephemerals going) answers the new list, equal to a walk of
// the tree.
func TestChildListsKeptWhileValid(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/p", nil, 0))
	var want []string
	for i := range cachedChildrenMin + 1 {
		h.ok(c.create(fmt.Sprintf("/p/c%03d", i), nil, 0))
		want = append(want, fmt.Sprintf("c%03d", i))
	}
	list := func(op proto.OpCode) *proto.ChildrenResponse {
		t.Helper()
		resp, code, _ := h.read(op, &proto.PathWatchRequest{Path: "/p"})
		require.Equal(t, proto.ErrOK, code)
		r := resp.(*proto.ChildrenResponse)
		assert.Equal(t, h.s.tree.children("/p", 0), r.Children, "the list is the tree's")
		e := proto.NewEncoder(nil)
		e.Strings(r.Children)
		assert.Equal(t, e.Bytes(), r.Vector, "the vector encodes the list")
		return r
	}
	first := list(proto.OpGetChildren)
	assert.Equal(t, want, first.Children)
	again := list(proto.OpGetChildren2)
	assert.Same(t, &first.Vector[0], &again.Vector[0], "the second read is answered from the kept list")
	assert.Equal(t, h.stat("/p"), again.Stat)

	check := func(what string, want []string) {
		t.Helper()
		r := list(proto.OpGetChildren)
		assert.Equal(t, want, r.Children, what)
		assert.NotSame(t, &first.Vector[0], &r.Vector[0], "%s: a new list", what)
		first = r
	}
	h.ok(c.create("/p/new", nil, 0))
	want = append(want, "new")
	check("after a create", want)

	h.ok(c.delete("/p/c000", -1))
	want = want[1:]
	check("after a delete", want)

	h.ok(c.multi(opDelete("/p/c001", -1), opCreate("/p/c001x", 0)))
	want = slices.Insert(want[1:], 0, "c001x")
	check("after a multi that deletes one and creates one", want)

	applyFailing(t, h, c.multi(opCreate("/p/z", 0), opCheck("/p", 99)))
	r := list(proto.OpGetChildren)
	assert.Equal(t, want, r.Children, "a failed multi changes nothing")
	assert.Same(t, &first.Vector[0], &r.Vector[0], "and the kept list stays valid")

	e := h.session(m1)
	h.ok(e.create("/p/eph", nil, eph))
	check("after an ephemeral", append(slices.Clone(want[:len(want)-1]), "eph", want[len(want)-1]))
	h.ok(e.close())
	check("after its session closed", want)
}

// TestChildCacheBounded: the kept lists never take more than
// childCacheBytes together, and a list too big to keep is built each time.
func TestChildCacheBounded(t *testing.T) {
	var c childCache
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("child-%08d", i)
	}
	for i := range 2000 {
		c.put(fmt.Sprint(i), newChildList(slices.Clone(names), childStamp{pzxid: int64(i)}))
		require.LessOrEqual(t, c.bytes, childCacheBytes)
	}
	assert.NotNil(t, c.get("1999", childStamp{pzxid: 1999}))
	assert.Nil(t, c.get("1999", childStamp{pzxid: 2000}), "another stamp")
	huge := make([]string, childCacheBytes/64)
	for i := range huge {
		huge[i] = fmt.Sprintf("%032d", i)
	}
	c.put("huge", newChildList(huge, childStamp{}))
	assert.Nil(t, c.get("huge", childStamp{}))
}

// TestRandomMultis applies random multis (creates, ephemeral creates,
// deletes, setData and checks with random versions, so that many fail
// midway) over a small tree with one parent of many children, and after
// each: a failed multi left the state exactly as it was (its changes were
// undone, newest first), the tree's invariants hold, every getChildren
// answers what a walk of the tree gives (the kept lists stay valid), and
// at the end a snapshot restores the same state.
func TestRandomMultis(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	h := newHarness(t)
	c, e := h.session(m1), h.session(m2)
	h.ok(c.create("/r", nil, 0))
	h.ok(c.create("/r/many", nil, 0))
	for i := range cachedChildrenMin + 6 {
		h.ok(c.create(fmt.Sprintf("/r/many/k%02d", i), nil, 0))
	}
	paths := []string{"/r/a", "/r/a/x", "/r/a/x/y", "/r/b", "/r/b/z"}
	for i := range cachedChildrenMin + 16 {
		paths = append(paths, fmt.Sprintf("/r/many/k%02d", i))
	}
	parents := []string{"/", "/r", "/r/a", "/r/a/x", "/r/b", "/r/many"}
	version := func() int32 { return int32(rng.IntN(4)) - 1 }
	failed := 0
	for step := range 3000 {
		ops := make([]proto.MultiOp, 1+rng.IntN(6))
		for i := range ops {
			p := paths[rng.IntN(len(paths))]
			switch rng.IntN(5) {
			case 0:
				ops[i] = opCreate(p, 0)
			case 1:
				ops[i] = opCreate(p, eph)
			case 2:
				ops[i] = opDelete(p, version())
			case 3:
				ops[i] = opSetData(p, []byte(fmt.Sprint(step)), version())
			default:
				ops[i] = opCheck(p, version())
			}
		}
		who := c
		if rng.IntN(3) == 0 {
			who = e
		}
		before := dumpState(h.s)
		res, _ := h.do(who.multi(ops...))
		require.Equal(t, proto.ErrOK, res.Err)
		if r := res.Resp.(*proto.MultiResponse).Results; r[len(r)-1].Op == proto.OpError {
			failed++
			after := dumpState(h.s)
			after.Zxid, after.Time = before.Zxid, before.Time
			require.Empty(t, diffDumps(after, before), "step %d: a failed multi changed the state", step)
		}
		if rng.IntN(200) == 0 { // the ephemerals' session ends, another begins
			h.ok(e.close())
			e = h.session(m2)
		}
		checkInvariants(t, h.s)
		for _, p := range parents {
			if h.s.Node(p) == nil {
				continue
			}
			resp, code, _ := h.read(proto.OpGetChildren, &proto.PathWatchRequest{Path: p})
			require.Equal(t, proto.ErrOK, code)
			require.Equal(t, h.s.tree.children(p, 0), resp.(*proto.ChildrenResponse).Children, "step %d: children of %s", step, p)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	assert.Greater(t, failed, 1000, "most multis failed somewhere")
	assert.Less(t, failed, 2900, "and some went through")
	var buf bytes.Buffer
	require.NoError(t, h.s.Snapshot().Write(&buf))
	assert.Empty(t, diffDumps(dumpState(mustRestore(t, buf.Bytes())), dumpState(h.s)))
}
