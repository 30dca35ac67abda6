package fsm

import (
	"fmt"
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
