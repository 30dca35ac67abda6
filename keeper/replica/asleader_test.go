package replica

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestLeaderDecisionIsNotForwarded: a session's expiry decided by a member
// that no longer leads (a leader that woke from a pause) fails instead of
// reaching the leader, whose sessions kept touching it; the session lives.
// The same close submitted as an ordinary request would be forwarded and
// applied.
func TestLeaderDecisionIsNotForwarded(t *testing.T) {
	leader, followers := startShard(t, 3)
	opened := leader.Do(fsm.Request{Member: leader.ID(), Op: proto.OpCreateSession,
		Body: proto.Marshal(&fsm.CreateSession{Timeout: 30000, Passwd: make([]byte, 16)})})
	require.Equal(t, proto.ErrOK, opened.Err)
	id := opened.Session

	done := make(chan fsm.Result, 1)
	followers[0].SubmitAsLeader(fsm.Request{Session: id, Member: followers[0].ID(), Op: proto.OpCloseSession}, func(r fsm.Result) { done <- r })
	assert.Equal(t, proto.ErrConnectionLoss, (<-done).Err, "a member that does not lead decides nothing")
	_, code := leader.Barrier()
	require.Equal(t, proto.ErrOK, code)
	leader.View(func(st *fsm.State) { assert.NotNil(t, st.Session(id), "the session lives") })

	closed := followers[0].Do(fsm.Request{Session: id, Member: followers[0].ID(), Op: proto.OpCloseSession})
	require.Equal(t, proto.ErrOK, closed.Err, "an ordinary close is forwarded")
	_, code = leader.Barrier()
	require.Equal(t, proto.ErrOK, code)
	leader.View(func(st *fsm.State) { assert.Nil(t, st.Session(id)) })
}
