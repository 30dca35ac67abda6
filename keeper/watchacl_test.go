package keeper_test

import (
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestWatchEventsNeedRead: as in ZooKeeper 3.8, a watcher hears of a
// change only with READ on the node (on the parent, for children
// changed), and a one-shot watch is used up by an event it does not hear.
// TestRandomDifferential found the difference (an anonymous exists watch
// heard the create of a node only bob could read); the differential's
// watch-acl case compares the same with ZooKeeper.
func TestWatchEventsNeedRead(t *testing.T) {
	addr, o := startWatchShard(t)
	require.NoError(t, o.z.AddAuth("digest", []byte("alice:secret")))
	anon, alice := dialWatch(t, addr, 0, nil), dialWatch(t, addr, 0, nil)
	require.Equal(t, proto.ErrOK, alice.code(proto.OpAuth, &proto.AuthPacket{Scheme: "digest", Auth: []byte("alice:secret")}))
	watch := func(path string) {
		t.Helper()
		for _, w := range []*watchConn{anon, alice} {
			w.code(proto.OpExists, &proto.PathWatchRequest{Path: path, Watch: true})
		}
	}
	o.create("/wa")
	watch("/wa/n")
	for _, w := range []*watchConn{anon, alice} {
		require.Equal(t, proto.ErrOK, w.code(proto.OpGetChildren, &proto.PathWatchRequest{Path: "/wa", Watch: true}))
	}
	_, err := o.z.Create("/wa/n", nil, 0, zk.DigestACL(zk.PermAll, "alice", "secret"))
	require.NoError(t, err)
	assert.Equal(t, []string{"children /wa"}, anon.heard("/"), "anyone reads /wa, not /wa/n")
	assert.ElementsMatch(t, []string{"created /wa/n", "children /wa"}, alice.heard("/"))

	watch("/wa/n")
	o.set("/wa/n")
	assert.Empty(t, anon.heard("/"))
	assert.Equal(t, []string{"changed /wa/n"}, alice.heard("/"))

	// The anonymous watch went with the event it did not hear.
	_, err = o.z.SetACL("/wa/n", world, -1)
	require.NoError(t, err)
	o.set("/wa/n")
	assert.Empty(t, anon.heard("/"), "a one-shot watch is used up unheard")
	assert.Empty(t, alice.heard("/"))

	watch("/wa/n")
	o.delete("/wa/n")
	assert.Equal(t, []string{"deleted /wa/n"}, anon.heard("/"))
	assert.Equal(t, []string{"deleted /wa/n"}, alice.heard("/"))
}
