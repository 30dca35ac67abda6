package keeper_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// others returns the client addresses of shard a's members but m.
func others(c *testenv.Cluster, m config.Member) []string {
	var out []string
	for _, o := range c.Shard("a").Members {
		if o.ID != m.ID {
			out = append(out, o.ClientAddr)
		}
	}
	return out
}

// TestCutOffFollowerStopsVouching: a client connected to one follower alone
// holds an ephemeral; the follower's Raft traffic is cut, the majority
// expires the session, and from the moment another client sees the
// ephemeral gone the cut-off follower never again says it exists (it
// closes the connection of a session it can no longer answer for).
func TestCutOffFollowerStopsVouching(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3})
	f := c.Follower("a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := client.Connect(ctx, []string{f.ClientAddr}, client.WithSessionTimeout(4*time.Second), client.WithLogger(testenv.TestLogger(t)))
	require.NoError(t, err)
	defer held.Close()
	_, err = held.Create(ctx, "/iso-lock", nil, proto.FlagEphemeral, proto.WorldACL(proto.PermAll))
	require.NoError(t, err)
	other, err := client.Connect(ctx, others(c, f), client.WithLogger(testenv.TestLogger(t)))
	require.NoError(t, err)
	defer other.Close()

	c.Isolate(f.ID, true)
	defer c.Isolate(f.ID, false)
	require.Eventually(t, func() bool {
		ok, _, err := other.Exists(ctx, "/iso-lock")
		return err == nil && !ok
	}, 20*time.Second, 50*time.Millisecond, "the majority expires the session")
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		ok, _, err := held.Exists(rctx, "/iso-lock")
		rcancel()
		require.False(t, err == nil && ok, "the cut-off follower answers for an expired session's ephemeral")
	}
}

// TestRemovedMemberClosesItsClientPort: a follower removed from the shard
// while running closes its clients' connections and its client port.
func TestRemovedMemberClosesItsClientPort(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3})
	f := c.Follower("a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := net.Dial("tcp", f.ClientAddr)
	require.NoError(t, err)
	defer nc.Close()
	_, err = keeper.RemoveMember(ctx, c.Config, "a", f.ID, testenv.TestLogger(t))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := net.DialTimeout("tcp", f.ClientAddr, time.Second)
		if err == nil {
			d.Close()
		}
		return err != nil
	}, 10*time.Second, 50*time.Millisecond, "the removed member's client port closes")
	assert.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = nc.Read(make([]byte, 1))
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "its connection is closed, not left open: %v", err)
}
