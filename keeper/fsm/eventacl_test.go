package fsm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestEventsCarryTheACLWatchersNeedReadOn: ZooKeeper 3.8 delivers a watch
// event only to a connection with READ on the node's ACL (the parent's,
// for children changed). Each event of create, setData, delete and a
// session's close carries that ACL; alice's node is hers to hear of, its
// world-readable parent's change anyone's.
func TestEventsCarryTheACLWatchersNeedReadOn(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1).as(aliceID)
	h.ok(c.create("/p", nil, 0))
	anyone, alice := []proto.ID{localIP}, []proto.ID{localIP, aliceID}
	check := func(what string, events []Event) {
		t.Helper()
		require.NotEmpty(t, events, what)
		for _, ev := range events {
			own := ev.Type != proto.EventNodeChildrenChanged
			assert.Equal(t, !own, ev.ReadableBy(anyone), "%s: %v %s readable by anyone", what, ev.Type, ev.Path)
			assert.True(t, ev.ReadableBy(alice), "%s: %v %s readable by alice", what, ev.Type, ev.Path)
			assert.True(t, ev.ReadableBy([]proto.ID{superID}), "%s: super reads everything", what)
		}
	}
	_, events := h.ok(c.createACL("/p/n", aliceAll, 0))
	check("create", events)
	_, events = h.ok(c.setData("/p/n", []byte("x"), -1))
	check("setData", events)
	_, events = h.ok(c.delete("/p/n", -1))
	check("delete", events)
	_, events = h.ok(c.createACL("/p/e", aliceAll, eph))
	check("create ephemeral", events)
	_, events = h.ok(c.close())
	check("close", events)
	_, events = h.ok(h.session(m1).create("/p/w", nil, 0))
	for _, ev := range events {
		assert.True(t, ev.ReadableBy(anyone), "world's node: %v %s", ev.Type, ev.Path)
	}
}
