package keeper_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestIdleFollowerRestartLearnsTheCommitIndex restarts a follower of an
// idle shard: with no write after the restart, it must still apply the
// entries it holds in its log. On an idle shard the leader holds back the
// empty appends that only repeat the commit index (the quiet transport),
// so this is what shows that it still repeats them often enough for a
// member that forgot the commit index.
func TestIdleFollowerRestartLearnsTheCommitIndex(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true})
	leader := c.WaitLeader("a")
	_, self, err := c.Config.Member(leader)
	require.NoError(t, err)
	conn := connectZK(t, []string{self.ClientAddr}, 10*time.Second)
	_, err = conn.Create("/idle", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	var zxid int64
	c.Member(leader).Replica.View(func(st *fsm.State) { zxid = st.Zxid() })

	for _, m := range c.Shard("a").Members {
		if m.ID == leader {
			continue
		}
		require.True(t, c.Member(m.ID).Replica.WaitZxid(zxid, 10*time.Second), "member %s before the restart", m.ID)
		c.Kill(m.ID)
		c.Restart(m.ID)
		require.True(t, c.Member(m.ID).Replica.WaitZxid(zxid, 10*time.Second),
			"member %s restarted on an idle shard never applied its log", m.ID)
		c.Member(m.ID).Replica.View(func(st *fsm.State) {
			require.NotNil(t, st.Node("/idle"), "member %s lost /idle", m.ID)
		})
	}
}

// TestFollowersLearnEachCommitAtOnce runs a shard whose commit timeout is
// a minute: raft's own loop would tell the followers the commit index of a
// write that ends a burst only a minute later. The leader's commit notices
// must tell them at once, so a follower applies every write, and a client
// of a follower reads each of its own writes, well within the minute.
func TestFollowersLearnEachCommitAtOnce(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true,
		Keeper: func(k *config.Keeper) { k.CommitTimeout = time.Minute }})
	leader := c.WaitLeader("a")
	conn := connectZK(t, []string{c.Follower("a").ClientAddr}, 10*time.Second)
	for i := range 20 {
		p := fmt.Sprintf("/burst-%d", i)
		_, err := conn.Create(p, []byte("v"), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		ok, _, err := conn.Exists(p)
		require.NoError(t, err)
		require.True(t, ok, "the follower's client does not see its own write %s", p)
	}
	var zxid int64
	c.Member(leader).Replica.View(func(st *fsm.State) { zxid = st.Zxid() })
	for _, m := range c.Shard("a").Members {
		require.True(t, c.Member(m.ID).Replica.WaitZxid(zxid, 10*time.Second),
			"member %s did not apply the last write of the burst", m.ID)
	}
}
