package keeper_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestNewSessionRightAfterLeaderDies asks a follower for a new session the
// moment the leader is gone, before the follower has noticed: it must wait
// for the next leader (maybe itself) rather than refuse, at once or late,
// and create the session. ClickHouse, refused by every member, waits 10 s
// before it tries again.
//
// Production Raft timings: the member waits for a leader as long as two
// heartbeat timeouts and two election rounds take (6 s with them); with
// the tests' halved timings, 3 s, a CI machine busy with other packages
// under the race detector once took longer than that to elect.
func TestNewSessionRightAfterLeaderDies(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3, Keeper: testenv.ProductionRaft})
	leader := c.WaitLeader("a")
	follower := c.Follower("a").ID
	r := c.Member(follower).Replica
	c.Kill(leader)
	start := time.Now()
	res := r.Do(fsm.Request{Member: follower, Op: proto.OpCreateSession,
		Body: proto.Marshal(&fsm.CreateSession{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)})})
	took := time.Since(start).Round(time.Millisecond)
	require.Equal(t, proto.ErrOK, res.Err, "create session on %s %v after killing leader %s", follower, took, leader)
	t.Logf("session created on %s %v after killing leader %s; new leader %s", follower, took, leader, c.WaitLeader("a"))
}
