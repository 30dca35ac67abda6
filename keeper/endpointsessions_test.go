package keeper_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestEndpointSessionDiesOnEveryShardTogether (issue 38, item 10): a
// client with ephemerals on three shards falls silent without closing its
// connection. Its session lives the timeout after it was last heard from,
// on every shard, and no longer: the endpoint kept pinging the shards for
// another timeout, so they expired a third to two thirds of a timeout
// late, each at its own time.
func TestEndpointSessionDiesOnEveryShardTogether(t *testing.T) {
	_, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	watcher := connectZK(t, eps[:1], 5*time.Second)
	const timeout = 9 * time.Second
	ephemerals := []string{"/e", "/m1/e", "/m2/e"}
	before := time.Now()
	rawEphemerals(t, eps[1], int32(timeout.Milliseconds()), ephemerals) // then silent, its connection open
	after := time.Now()
	gone := make(chan time.Time, len(ephemerals))
	for _, p := range ephemerals {
		_, err := watcher.Sync(p)
		require.NoError(t, err)
		ok, _, ch, err := watcher.ExistsW(p)
		require.NoError(t, err)
		require.True(t, ok, p)
		go func() {
			if ev := <-ch; ev.Type == zk.EventNodeDeleted {
				gone <- time.Now()
			}
		}()
	}
	var first, last time.Time
	for range ephemerals {
		select {
		case at := <-gone:
			if first.IsZero() {
				first = at
			}
			last = at
		case <-time.After(3 * timeout):
			require.Fail(t, "an ephemeral outlived its session by two timeouts")
		}
	}
	t.Logf("the ephemerals went %v to %v after the client's last request", first.Sub(after).Round(time.Millisecond), last.Sub(after).Round(time.Millisecond))
	assert.GreaterOrEqual(t, first.Sub(before), timeout-250*time.Millisecond, "no shard's session ends before the timeout")
	assert.LessOrEqual(t, last.Sub(after), timeout+2*time.Second, "every shard's session ends at the timeout")
	assert.LessOrEqual(t, last.Sub(first), 1500*time.Millisecond, "the shards' sessions end together")
}

// TestEndpointRetakesAShardUnreachableAtReconnect (issue 38, item 10): a
// client reconnects to another node while that node's member of shard b
// is cut off, so the endpoint cannot take the session's session on b over
// then. The member comes back within the timeout, and the client, which
// pings throughout, keeps its ephemeral on b: the endpoint takes the
// session over as soon as it can, and pings it from then on (it tried
// again only when the client used the shard, and the ephemeral went with
// the timeout).
func TestEndpointRetakesAShardUnreachableAtReconnect(t *testing.T) {
	c, eps := startEndpointCluster(t)
	createMountPoints(t, eps[0])
	const timeout = 4 * time.Second
	nc, session := handshake(t, eps[0], proto.ConnectRequest{Timeout: int32(timeout.Milliseconds()), Passwd: make([]byte, proto.PasswordLen)})
	client := &rawEndpoint{t: t, nc: nc}
	for _, p := range []string{"/e", "/m1/e"} {
		h, _ := client.do(proto.OpCreate, &proto.CreateRequest{Path: p, ACL: proto.WorldACL(proto.PermAll), Flags: proto.FlagEphemeral})
		require.Equal(t, proto.ErrOK, h.Err, p)
	}
	var cut string
	for _, m := range c.Shard("b").Members {
		if c.Endpoint(m.Node) == eps[1] {
			cut = m.ID
		}
	}
	require.NotEmpty(t, cut)
	c.Isolate(cut, true)
	t.Cleanup(func() { c.Isolate(cut, false) })

	dropped := time.Now()
	nc.Close()
	back, resp := handshake(t, eps[1], proto.ConnectRequest{Timeout: int32(timeout.Milliseconds()), SessionID: session.SessionID, Passwd: session.Passwd})
	require.Equal(t, session.SessionID, resp.SessionID, "the session lives on")
	client = &rawEndpoint{t: t, nc: back}
	healed := false
	for time.Since(dropped) < 3*timeout {
		if !healed && time.Since(dropped) > timeout/2 {
			c.Isolate(cut, false)
			healed = true
		}
		h, _ := client.do(proto.OpExists, &proto.PathWatchRequest{Path: "/e"})
		require.Equal(t, proto.ErrOK, h.Err, "the client's session answers")
		time.Sleep(timeout / 8) // the client's pace, not a synchronisation
	}
	assert.True(t, existsOn(t, c, "b", "/m1/e"), "the ephemeral on the shard that was unreachable at the reconnect")
}
