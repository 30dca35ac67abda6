package keeper_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/testenv"
)

// follower returns a member of shard a that does not lead.
func follower(t *testing.T, c *testenv.Cluster) (string, *keeper.Member) {
	t.Helper()
	m := c.Follower("a")
	return m.ClientAddr, c.Member(m.ID)
}

// A session on a follower whose writes are answered with the leader's
// result still reads its own writes at once, in every session at a time.
func TestFollowerAnswersWritesEarlyAndReadsSeeThem(t *testing.T) {
	c := testenv.StartShard(t, 3)
	addr, m := follower(t, c)
	before := m.Replica.EarlyReplies()
	const sessions, iterations = 4, 100
	var wg sync.WaitGroup
	for s := range sessions {
		conn := connectZK(t, []string{addr}, 10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/s%d", s)
			_, err := conn.Create(path, []byte("0"), 0, zk.WorldACL(zk.PermAll))
			if !assert.NoError(t, err) {
				return
			}
			for i := 1; i <= iterations; i++ {
				want := fmt.Sprint(i)
				st, err := conn.Set(path, []byte(want), -1)
				if !assert.NoError(t, err) {
					return
				}
				data, st2, err := conn.Get(path)
				if !assert.NoError(t, err) || !assert.Equal(t, want, string(data), "session %d, write %d", s, i) {
					return
				}
				assert.GreaterOrEqual(t, st2.Mzxid, st.Mzxid)
				kid := fmt.Sprintf("%s/k%d", path, i)
				_, err = conn.Create(kid, nil, 0, zk.WorldACL(zk.PermAll))
				if !assert.NoError(t, err) {
					return
				}
				ok, _, err := conn.Exists(kid)
				if !assert.NoError(t, err) || !assert.True(t, ok, "session %d: %s", s, kid) {
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Greater(t, m.Replica.EarlyReplies()-before, int64(sessions*iterations),
		"the follower answered its writes from the leader's results")
}

// A watch the session holds on a path its write fires reaches the client
// before the write's reply (so that write waits for the follower's own
// apply); a session holding any watch waits for the local apply even for
// a write it does not watch (another session's earlier write may fire the
// watch, and its event goes first); once it holds none, its writes are
// answered early again.
func TestFollowerWatchFiresBeforeWriteReply(t *testing.T) {
	c := testenv.StartShard(t, 3)
	addr, m := follower(t, c)
	conn := connectZK(t, []string{addr}, 10*time.Second)
	acl := zk.WorldACL(zk.PermAll)
	_, err := conn.Create("/w", []byte("0"), 0, acl)
	require.NoError(t, err)
	_, err = conn.Create("/other", nil, 0, acl)
	require.NoError(t, err)
	// go-zookeeper hands a notification to its watch channel (buffered) in
	// the receive loop before it reads the next frame: when the write
	// returns, an event sent before its reply is already in the channel.
	fired := func(ch <-chan zk.Event, typ zk.EventType, what string) {
		t.Helper()
		select {
		case ev := <-ch:
			require.Equal(t, typ, ev.Type, what)
		default:
			t.Fatalf("%s: the reply came before the watch event", what)
		}
	}
	const rounds = 30
	var answeredEarly int64
	for i := range rounds {
		_, _, ch, err := conn.GetW("/w")
		require.NoError(t, err)
		_, _, other, err := conn.ExistsW("/other")
		require.NoError(t, err)
		early := m.Replica.EarlyReplies()
		_, err = conn.Set("/w", []byte(fmt.Sprint(i)), -1)
		require.NoError(t, err)
		fired(ch, zk.EventNodeDataChanged, "data watch")
		assert.Equal(t, early, m.Replica.EarlyReplies(), "a watched write waits for the local apply")

		// A child watch on the parent of a create and of a delete.
		kid := fmt.Sprintf("/w/k%d", i)
		_, _, ch, err = conn.ChildrenW("/w")
		require.NoError(t, err)
		_, err = conn.Create(kid, nil, 0, acl)
		require.NoError(t, err)
		fired(ch, zk.EventNodeChildrenChanged, "child watch, create")
		_, _, ch, err = conn.ChildrenW("/w")
		require.NoError(t, err)
		require.NoError(t, conn.Delete(kid, -1))
		fired(ch, zk.EventNodeChildrenChanged, "child watch, delete")

		// An exists watch on the name of a sequential node to come.
		seqDir := fmt.Sprintf("/w/q%d", i)
		_, err = conn.Create(seqDir, nil, 0, acl)
		require.NoError(t, err)
		_, _, ch, err = conn.ExistsW(seqDir + "/n0000000000")
		require.NoError(t, err)
		_, err = conn.Create(seqDir+"/n", nil, zk.FlagSequence, acl)
		require.NoError(t, err)
		fired(ch, zk.EventNodeCreated, "exists watch, sequential create")

		// A session holding any watch waits for the local apply even for a
		// write it does not watch: another session's earlier write may
		// fire that watch, and its event goes first.
		early = m.Replica.EarlyReplies()
		_, err = conn.Create(fmt.Sprintf("/held%d", i), nil, 0, acl)
		require.NoError(t, err)
		assert.Equal(t, early, m.Replica.EarlyReplies(), "a session holding a watch was answered early")
		_, err = conn.Set("/other", []byte(fmt.Sprint(i)), -1)
		require.NoError(t, err)
		fired(other, zk.EventNodeDataChanged, "exists watch on /other")

		// Holding no watch any more: answered early (unless the follower's
		// own apply won the race).
		early = m.Replica.EarlyReplies()
		_, err = conn.Create(fmt.Sprintf("/free%d", i), nil, 0, acl)
		require.NoError(t, err)
		answeredEarly += m.Replica.EarlyReplies() - early
	}
	assert.Greater(t, answeredEarly, int64(rounds/2), "unwatched writes are answered early")
}

// keeper.early_replies: false keeps every follower write waiting for the
// local apply.
func TestFollowerEarlyRepliesOff(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Keeper: func(k *config.Keeper) { k.EarlyReplies = false }})
	addr, m := follower(t, c)
	conn := connectZK(t, []string{addr}, 10*time.Second)
	for i := range 20 {
		p := fmt.Sprintf("/n%d", i)
		_, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		ok, _, err := conn.Exists(p)
		require.NoError(t, err)
		require.True(t, ok)
	}
	assert.Zero(t, m.Replica.EarlyReplies())
}
