package keeper_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// reapState is what a member holds of a closed session's reap.
type reapState struct {
	live       bool // the session is in the session table
	left       int  // its ephemerals left to reap
	ephemerals int  // every ephemeral of the member
}

// memberReap reads what member id holds of closed session sess.
func memberReap(c *testenv.Cluster, id string, sess int64) reapState {
	var r reapState
	c.Member(id).Replica.View(func(st *fsm.State) {
		r = reapState{live: st.Session(sess) != nil, left: st.ReapingEphemerals(sess), ephemerals: st.EphemeralCount()}
	})
	return r
}

// ephemeralPaths names n znodes under each of parents in turn (n in
// all, as evenly as they go), in path order.
func ephemeralPaths(n int, parents ...string) []string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("%s%06d", parents[i*len(parents)/n], i)
	}
	return paths
}

// ephemeralMultis yields multis of 1,000 ephemeral creates of paths.
func ephemeralMultis(paths []string) iter.Seq[[]proto.MultiOp] {
	return func(yield func([]proto.MultiOp) bool) {
		for from := 0; from < len(paths); from += 1000 {
			ops := make([]proto.MultiOp, 0, 1000)
			for _, p := range paths[from:min(from+1000, len(paths))] {
				ops = append(ops, client.CreateOp(p, nil, proto.FlagEphemeral, proto.WorldACL(proto.PermAll)))
			}
			if !yield(ops) {
				return
			}
		}
	}
}

// waitReap waits until member id holds want of closed session sess.
func waitReap(t *testing.T, c *testenv.Cluster, id string, sess int64, want reapState, within time.Duration, what string) {
	t.Helper()
	var got reapState
	for end := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if got = memberReap(c, id, sess); got == want {
			return
		}
		require.True(t, time.Now().Before(end), "%s: %s holds %+v, want %+v", what, id, got, want)
	}
}

// TestSessionCloseReapsAcrossFailover (issue 37): a session holding
// 20,000 ephemerals closes on a 3-member shard while the leader's state
// machine is held, so the followers apply the close (the session gone,
// the first fsm.ReapChunk ephemerals deleted) and the leader never gets to
// reap. The leader is cut off and killed mid-reap; the new leader reaps
// the rest. A client re-creating a path not yet reaped meets NodeExists,
// and succeeds once it is reaped; a watch on the last ephemeral fires.
// Every member, restarted, serves the same tree.
func TestSessionCloseReapsAcrossFailover(t *testing.T) {
	const n = 20_000
	c := startHostileCluster(t)
	leader := c.WaitLeader("a")
	var followers []string
	var followerAddr string
	for _, m := range c.Shard("a").Members {
		if m.ID != leader {
			followers = append(followers, m.ID)
			followerAddr = m.ClientAddr
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	other, err := client.Connect(ctx, []string{followerAddr}, client.WithSessionTimeout(30*time.Second))
	require.NoError(t, err)
	defer other.Close()
	owner, err := client.Connect(ctx, []string{followerAddr}, client.WithSessionTimeout(30*time.Second))
	require.NoError(t, err)
	sess := owner.SessionID()

	_, err = other.Create(ctx, "/e", nil, 0, proto.WorldACL(proto.PermAll))
	require.NoError(t, err)
	paths := ephemeralPaths(n, "/e/")
	for ops := range ephemeralMultis(paths) {
		_, err := owner.Multi(ctx, ops...)
		require.NoError(t, err)
	}
	last := paths[n-1]
	found, _, fired, err := other.ExistsW(ctx, last)
	require.NoError(t, err)
	require.True(t, found)

	resume := testenv.StallState(c.Member(leader).Replica)
	defer resume()
	require.NoError(t, owner.Close())
	for _, id := range followers {
		waitReap(t, c, id, sess, reapState{left: n - fsm.ReapChunk, ephemerals: n - fsm.ReapChunk}, 30*time.Second, "the followers apply the close")
	}
	_, err = other.Create(ctx, last, nil, proto.FlagEphemeral, proto.WorldACL(proto.PermAll))
	assert.ErrorIs(t, err, proto.ErrNodeExists, "not reaped yet")

	c.Isolate(leader, true) // whatever it reaps once resumed does not commit
	resume()
	c.Kill(leader)
	next := c.WaitLeader("a")
	require.NotEqual(t, leader, next)
	for _, id := range followers {
		waitReap(t, c, id, sess, reapState{}, 60*time.Second, "the new leader "+next+" reaps what is left")
	}
	select {
	case ev := <-fired:
		assert.Equal(t, proto.EventNodeDeleted, ev.Type)
		assert.Equal(t, last, ev.Path)
	case <-ctx.Done():
		t.Fatal("the watch on the last ephemeral never fired")
	}
	_, err = other.Create(ctx, last, nil, proto.FlagEphemeral, proto.WorldACL(proto.PermAll))
	require.NoError(t, err, "reaped, the path is free")
	kids, err := other.GetChildren(ctx, "/e")
	require.NoError(t, err)
	assert.Equal(t, []string{last[len("/e/"):]}, kids)

	c.Restart(leader)
	restartEveryMember(t, c)
}

// TestExpiredSessionReapWaitsForALockAcrossFailover (issue 37): a session
// holding 20,000 ephemerals, 10,000 under /e/a then 10,000 under /e/b,
// expires while a cross-shard transaction is prepared, undecided, with
// /e/b locked whole. The expiry's close and the first reap delete 8,192 of
// /e/a's; the next chunk reaches /e/b and is refused while the lock holds.
// Another session expiring with it, of a later id, is reaped meanwhile.
// The leader is killed; the transaction commits; the new leader reaps the
// rest. Every member, restarted, serves the same tree.
func TestExpiredSessionReapWaitsForALockAcrossFailover(t *testing.T) {
	const n = 20_000
	// The transaction's driver, and recovery's (on shard b, the
	// coordinator, never killed), wait once every shard prepared, until
	// released: until then /e/b stays locked on shard a.
	txID := uuid.NewString()
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	hook := func(step, id, _ string) error {
		if id == txID && step == xshard.StepAllPrepared {
			heldOnce.Do(func() { close(held) })
			<-release
		}
		return nil
	}
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 2, 3)
	cfg.Shards[1].Members = cfg.Shards[1].Members[:1]
	k := &cfg.Keeper
	k.HeartbeatTimeout, k.ElectionTimeout, k.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	c := testenv.StartConfig(t, cfg, testenv.ClusterOptions{XHook: hook})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	other, err := client.Connect(ctx, c.Servers("a"), client.WithSessionTimeout(30*time.Second))
	require.NoError(t, err)
	defer other.Close()
	for _, p := range []string{"/e", "/e/a", "/e/b", "/e/c"} {
		_, err = other.Create(ctx, p, nil, 0, proto.WorldACL(proto.PermAll))
		require.NoError(t, err)
	}

	owner := dialSession(t, c.Servers("a")[0], 0, nil)
	sess := owner.resp.SessionID
	bystander := dialSession(t, c.Servers("a")[1], 0, nil) // a later id, reaped in turn with the owner's
	for _, fill := range []struct {
		s     *rawSession
		paths []string
	}{{owner, ephemeralPaths(n, "/e/a/", "/e/b/")}, {bystander, ephemeralPaths(fsm.ReapChunk+10, "/e/c/")}} {
		xid := int32(0)
		for ops := range ephemeralMultis(fill.paths) {
			xid++
			fill.s.send(xid, proto.OpMulti, &proto.MultiRequest{Ops: ops})
			h, _ := readReply(t, fill.s.nc)
			require.Equal(t, proto.ErrOK, h.Err)
		}
	}

	r := c.MemberRouter()
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{client.SetOp("/e/b", []byte("locked"), -1)}},
			{Shard: "b", Requests: []proto.MultiOp{createOp("/in-b")}},
		}, xshard.Options{ID: txID, Coordinator: "b", Deadline: 5 * time.Minute})
		done <- err
	}()
	ping := time.NewTicker(time.Second) // the sessions live until they are dropped
	defer ping.Stop()
	for prepared := false; !prepared; {
		select {
		case <-held:
			prepared = true
		case <-ping.C:
			for _, rs := range []*rawSession{owner, bystander} {
				rs.send(proto.XidPing, proto.OpPing, proto.Empty{})
				h, _ := readReply(t, rs.nc)
				require.Equal(t, proto.XidPing, h.Xid)
			}
		case <-ctx.Done():
			t.Fatal("the transaction never prepared on both shards")
		}
	}

	require.NoError(t, owner.nc.Close()) // no close: the sessions expire
	require.NoError(t, bystander.nc.Close())
	left := n - 2*fsm.ReapChunk
	for _, m := range c.Shard("a").Members {
		waitReap(t, c, m.ID, sess, reapState{left: left, ephemerals: left}, 60*time.Second,
			"the sessions expired, two chunks of the owner's reaped, the third locked, the bystander's reaped whole")
	}
	leader := c.WaitLeader("a")
	c.Kill(leader)
	free()
	next := c.WaitLeader("a")
	require.NotEqual(t, leader, next)
	for _, m := range c.Shard("a").Members {
		if m.ID != leader {
			waitReap(t, c, m.ID, sess, reapState{}, 90*time.Second, "the new leader "+next+" reaps what is left once the transaction ends")
		}
	}
	select {
	case err := <-done:
		require.NoError(t, err, "the transaction commits")
	case <-ctx.Done():
		t.Fatal("the transaction's client was never answered")
	}
	c.Restart(leader)
	restartEveryMember(t, c)
}
