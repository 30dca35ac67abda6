package keeper_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/testenv"
)

// has reports whether member m of c holds path.
func has(c *testenv.Cluster, m, path string) bool { return hasOn(c.Member(m), path) }

// hasOn reports whether the member m holds path.
func hasOn(m *keeper.Member, path string) bool {
	var ok bool
	m.Replica.View(func(st *fsm.State) { ok = st.Node(path) != nil })
	return ok
}

func term(c *testenv.Cluster, m string) uint64 {
	n, _ := strconv.ParseUint(c.Member(m).Replica.Stats()["term"], 10, 64)
	return n
}

// TestRecreatedShardIsANewIncarnation is issue 40's first case: shard a
// is stopped (a3 first, after a few terms), a1 and a2 wiped and started again from the same cluster file
// as a new shard (--bootstrap), and /new written; a3, away meanwhile with a
// higher term, comes back. The new incarnation has an identity of its own:
// a3 and the new members refuse each other's links, a3 never leads the new
// members nor takes their writes, and the two trees never mix.
func TestRecreatedShardIsANewIncarnation(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3})
	conn := connectZK(t, c.Servers("a"), 10*time.Second)
	_, err := conn.Create("/old", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	conn.Close()
	waitConverged(t, c, "a")
	old := c.Member("a3").Replica.Status().Identity

	for range 3 { // each hand-over of the leadership is a new term
		leader := c.WaitLeader("a")
		next := c.Follower("a")
		require.NoError(t, c.Member(leader).Replica.TransferLeadership(next.ID, next.RaftAddr))
		waitFor(t, 20*time.Second, "the hand-over", func() bool { return c.Leader("a") == next.ID })
	}
	waitFor(t, 20*time.Second, "a3 to know the last term", func() bool { return term(c, "a3") == term(c, c.Leader("a")) })
	a3Term := term(c, "a3")
	c.Kill("a3") // then away
	c.Kill("a1")
	c.Kill("a2")
	for _, m := range c.Shard("a").Members[:2] {
		require.NoError(t, os.RemoveAll(m.DataDir))
	}
	_, err = keeper.Start(c.Config, "a2", keeper.Options{Logger: testenv.TestLogger(t)})
	require.ErrorIs(t, err, replica.ErrEmptyDataDir, "a wiped member restarted plainly must not start")
	require.NoError(t, c.Bootstrap("a1"))
	require.NoError(t, c.Bootstrap("a2"))
	identity := c.Member("a1").Replica.Status().Identity
	assert.NotEqual(t, old, identity, "the new shard carries the old one's identity")
	assert.Equal(t, identity, c.Member("a2").Replica.Status().Identity, "a2 took the first member's identity")

	fresh := []string{c.Shard("a").Members[0].ClientAddr, c.Shard("a").Members[1].ClientAddr}
	conn = connectZK(t, fresh, 10*time.Second)
	defer conn.Close()
	_, err = conn.Create("/new", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	newLeader := c.Leader("a")
	require.Contains(t, []string{"a1", "a2"}, newLeader)
	require.Greater(t, a3Term, term(c, newLeader), "a3 comes back with the higher term")

	c.Restart("a3") // back
	waitFor(t, 20*time.Second, "a3 and the new members to refuse each other's links", func() bool {
		return c.Member("a3").Replica.RefusedLinks() > 0 &&
			c.Member("a1").Replica.RefusedLinks()+c.Member("a2").Replica.RefusedLinks() > 0
	})
	_, err = conn.Create("/new2", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err, "the new shard goes on committing")
	waitFor(t, 10*time.Second, "both new members to apply /new2", func() bool { return has(c, "a1", "/new2") && has(c, "a2", "/new2") })

	assert.False(t, c.Member("a3").Replica.IsLeader(), "a3 leads")
	for _, m := range []string{"a1", "a2"} {
		st := c.Member(m).Replica.Status()
		assert.Contains(t, []string{"a1", "a2"}, st.Leader, "%s follows %s", m, st.Leader)
		assert.Equal(t, identity, st.Identity)
		assert.False(t, has(c, m, "/old"), "%s holds the old tree's /old", m)
		assert.True(t, has(c, m, "/new"))
	}
	st := c.Member("a3").Replica.Status()
	assert.Equal(t, old, st.Identity)
	assert.NotEqual(t, newLeader, st.Leader, "a3 follows the new shard's leader")
	assert.False(t, has(c, "a3", "/new"), "a3 took the new shard's writes into the old tree")
	assert.False(t, has(c, "a3", "/new2"), "a3 took the new shard's writes into the old tree")
}

// TestWipedFollowerRefusesToStart: a follower whose data directory was
// wiped, restarted without --join, refuses to start (so it never votes
// with no log and no record of its votes), says what to do, and leaves
// its directory empty; restarted with --bootstrap by mistake, it is
// refused too, as the first member has heard from it (it was in the
// shard); and the first member wiped and started with --bootstrap does not
// start a shard beside the running one.
func TestWipedFollowerRefusesToStart(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3})
	first := c.Shard("a").Members[0]
	if leader := c.WaitLeader("a"); leader != first.ID {
		require.NoError(t, c.Member(leader).Replica.TransferLeadership(first.ID, first.RaftAddr))
	}
	waitFor(t, 20*time.Second, "a1 to lead and hear from a3", func() bool {
		a1 := c.Member("a1").Replica
		return a1.IsLeader() && !slices.Contains(a1.Unheard(), "a3")
	})
	a3 := c.Shard("a").Members[2]
	c.Kill(a3.ID)
	require.NoError(t, os.RemoveAll(a3.DataDir))

	_, err := keeper.Start(c.Config, a3.ID, keeper.Options{Logger: testenv.TestLogger(t)})
	require.ErrorIs(t, err, replica.ErrEmptyDataDir)
	for _, hint := range []string{"--bootstrap", "member remove --shard a a3", "--join", "member add a3"} {
		assert.Contains(t, err.Error(), hint)
	}
	empty, err := replica.Empty(a3.DataDir)
	require.NoError(t, err)
	assert.True(t, empty, "the refused start wrote into the directory")

	err = c.Bootstrap(a3.ID)
	require.ErrorIs(t, err, keeper.ErrShardExists, "a wiped member of the running shard took its identity")
	assert.Contains(t, err.Error(), "--join")

	c.Kill(first.ID)
	require.NoError(t, os.RemoveAll(first.DataDir))
	err = c.Bootstrap(first.ID)
	require.ErrorIs(t, err, keeper.ErrShardExists, "the wiped first member bootstrapped beside the running shard")
	empty, err = replica.Empty(first.DataDir)
	require.NoError(t, err)
	assert.True(t, empty)
}

// TestRestoringTwiceGivesTwoIdentities: one backup restored twice makes
// two shards with identities of their own (each restore draws one), the
// members of one restore share theirs, and restoring members apart needs
// the identity the first member's restore printed.
func TestRestoringTwiceGivesTwoIdentities(t *testing.T) {
	src := testenv.StartCluster(t, testenv.ClusterOptions{Members: 1})
	var file bytes.Buffer
	_, err := keeper.SaveBackup(context.Background(), src.Config, "a", &file, testenv.TestLogger(t))
	require.NoError(t, err)

	restore := func(members []string, identity string) (keeper.Restored, *config.Cluster, error) {
		dst := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
		out, err := keeper.RestoreBackupAs(dst, "a", members, identity, bytes.NewReader(file.Bytes()), testenv.TestLogger(t))
		return out, dst, err
	}
	one, c1, err := restore(nil, "")
	require.NoError(t, err)
	two, _, err := restore(nil, "")
	require.NoError(t, err)
	assert.NotEqual(t, one.Identity, two.Identity, "two restores of one backup share an identity")
	for _, m := range c1.Shards[0].Members {
		id, err := replica.RecordedIdentity(m.DataDir)
		require.NoError(t, err)
		assert.Equal(t, one.Identity, id, "member %s", m.ID)
	}

	_, _, err = restore([]string{"a2"}, "")
	require.ErrorContains(t, err, "--identity", "a2 restored alone would have an identity of its own")
	first, _, err := restore([]string{"a1"}, "")
	require.NoError(t, err)
	rest, c3, err := restore([]string{"a2", "a3"}, first.Identity)
	require.NoError(t, err)
	assert.Equal(t, first.Identity, rest.Identity)
	id, err := replica.RecordedIdentity(c3.Shards[0].Members[1].DataDir)
	require.NoError(t, err)
	assert.Equal(t, first.Identity, id)
	assert.True(t, slices.Equal([]string{"a2", "a3"}, rest.Members))
}

// wipedFollowerOfAnotherLeader is the gap issue 40's first fix left: a
// follower that the shard's first member never heard from (a2 led before
// a3 first started, and since) has its data directory wiped and is
// restarted with --bootstrap within the first member's 10 minutes. The
// first member handed it the identity, and it came back as a voter with
// no log and no record of its votes. It must be refused, naming the
// cause and the next step, write nothing, and the next step (member
// remove, serve --join, member add) must bring it back with every write.
// c runs a1 and a2 of shard a, a3 never started.
func wipedFollowerOfAnotherLeader(t *testing.T, c *testenv.Cluster, w *shardWatch) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a2, a3 := c.Shard("a").Members[1], c.Shard("a").Members[2]
	if leader := c.WaitLeader("a"); leader != a2.ID {
		require.NoError(t, c.Member(leader).Replica.TransferLeadership(a2.ID, a2.RaftAddr))
	}
	waitFor(t, 20*time.Second, "a2 to lead", func() bool { return c.Leader("a") == a2.ID })
	w.writeSome(t, "a", "before-a3", 5)
	c.Join(a3.ID) // its first start, while a2 leads: a1 never hears from it
	w.writeSome(t, "a", "with-a3", 5)
	waitFor(t, 20*time.Second, "a3 to follow a2 and apply every write", func() bool {
		return c.Member(a3.ID).Replica.Status().Leader == a2.ID &&
			!slices.ContainsFunc(w.acked["a"], func(p string) bool { return !has(c, a3.ID, p) })
	})
	c.Kill(a3.ID)
	require.NoError(t, os.RemoveAll(a3.DataDir))

	err := c.Bootstrap(a3.ID)
	require.ErrorIs(t, err, keeper.ErrShardExists, "the wiped a3 took the running shard's identity again, with no log and no record of its votes")
	for _, hint := range []string{"member remove --shard a a3", "--join", "member add a3"} {
		assert.Contains(t, err.Error(), hint)
	}
	empty, err := replica.Empty(a3.DataDir)
	require.NoError(t, err)
	assert.True(t, empty, "the refused start wrote into the directory")
	w.writeSome(t, "a", "without-a3", 5)

	_, err = keeper.RemoveMember(ctx, c.Config, "a", a3.ID, testenv.TestLogger(t))
	require.NoError(t, err)
	c.Join(a3.ID)
	_, err = keeper.AddMember(ctx, c.Config, a3.ID, testenv.TestLogger(t))
	require.NoError(t, err)
	w.writeSome(t, "a", "a3-back", 5)
}
