package keeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/testenv"
)

// suffrage returns "voter", "nonvoter" or "absent": member id's place in
// the shard's configuration as its leader knows it.
func suffrage(t *testing.T, c *testenv.Cluster, id string) string {
	members, err := c.Member(c.WaitLeader("a")).Replica.Members()
	require.NoError(t, err)
	for _, m := range members {
		if m.ID == id && m.Voter {
			return "voter"
		} else if m.ID == id {
			return "nonvoter"
		}
	}
	return "absent"
}

// throughout calls check every 20 ms for d and fails the test with what
// check says as soon as it says something: for a claim that something
// does not happen within a spell of many chances for it to happen.
func throughout(t *testing.T, d time.Duration, check func() string) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		if why := check(); why != "" {
			t.Fatal(why)
		}
		<-tick.C
	}
}

// TestAddedMemberVotesOnlyOnceItsStateCaughtUp: AddMember (`xkeeper member
// add`) adds the newcomer as a non-voter and promotes it only once its
// state machine has applied what the leader's had. The newcomer's state
// machine is held while it joins a shard with a few hundred entries: raft
// hands it every entry (raft's applied index reaches the leader's commit
// index, which is what the promotion used to wait for), yet it stays a
// non-voter for many of AddMember's polls; once its state machine runs
// again it becomes a voter, holding every znode.
func TestAddedMemberVotesOnlyOnceItsStateCaughtUp(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3})
	conn := connectZK(t, c.Servers("a"), 10*time.Second)
	const znodes = 300
	for i := range znodes {
		_, err := conn.Create(fmt.Sprintf("/c%03d", i), nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	id := c.Grow("a")
	c.Join(id)
	newcomer := c.Member(id).Replica
	resume := testenv.StallState(newcomer)
	defer resume() // a held state machine would keep the member from closing

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	added := make(chan error, 1)
	go func() {
		_, err := keeper.AddMember(ctx, c.Config, id, testenv.TestLogger(t))
		added <- err
	}()
	waitFor(t, 30*time.Second, "raft to hand the newcomer every committed entry", func() bool {
		leader := c.Member(c.WaitLeader("a")).Replica.Status()
		return suffrage(t, c, id) != "absent" && newcomer.Status().AppliedIndex >= leader.CommitIndex
	})
	require.Equal(t, "nonvoter", suffrage(t, c, id), "a newcomer joins as a non-voter")

	// AddMember asks every 100 ms: 3 s is some 30 chances to promote it.
	throughout(t, 3*time.Second, func() string {
		select {
		case err := <-added:
			return fmt.Sprintf("AddMember returned (%v) while the newcomer's state machine was held", err)
		default:
		}
		if s := suffrage(t, c, id); s != "nonvoter" {
			return "promoted while its state machine has applied nothing: " + s
		}
		return ""
	})
	require.Less(t, newcomer.StateApplied(), uint64(znodes), "the state machine applied none of the creates (configuration entries pass it by)")

	resume()
	select {
	case err := <-added:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("AddMember did not return once the newcomer's state machine ran again")
	}
	require.Equal(t, "voter", suffrage(t, c, id))
	newcomer.View(func(st *fsm.State) {
		for i := range znodes {
			require.NotNil(t, st.Node(fmt.Sprintf("/c%03d", i)), "the promoted member holds every znode")
		}
	})
}
