package replica

import (
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// touchRecorder is a leader's session tracker that keeps what it is told.
type touchRecorder struct {
	mu  sync.Mutex
	ids []int64
}

func (tr *touchRecorder) touch(ids []int64) {
	tr.mu.Lock()
	tr.ids = append(tr.ids, ids...)
	tr.mu.Unlock()
}

func (tr *touchRecorder) has(id int64) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Contains(tr.ids, id)
}

// TestTouchesTakeTheirOwnLane: a follower's session touches reach its
// leader on the touch lane, not behind its writes on the forwarding link;
// a leader that does not serve the lane (a member of before it closes
// such a link) still hears them, on the forwarding link.
func TestTouchesTakeTheirOwnLane(t *testing.T) {
	leader, followers := startShard(t, 3)
	seen := &touchRecorder{}
	leader.OnTouch(seen.touch)
	followers[0].Touch([]int64{41})
	require.Eventually(t, func() bool { return seen.has(41) }, 10*time.Second, 10*time.Millisecond, "the leader hears the touch")
	lane := followers[0].fwd.lane
	lane.mu.Lock()
	assert.NotNil(t, lane.conn, "the touch went on the lane")
	assert.Equal(t, leader.ID(), lane.leader)
	lane.mu.Unlock()

	var unserved *func(net.Conn)
	leader.stream.touches.Store(unserved)
	followers[1].Touch([]int64{42})
	require.Eventually(t, func() bool { return seen.has(42) }, 10*time.Second, 10*time.Millisecond, "a leader without the lane hears the touch")
	lane = followers[1].fwd.lane
	lane.mu.Lock()
	assert.Nil(t, lane.conn, "no lane to a leader that does not serve it")
	assert.Equal(t, leader.ID(), lane.refusedBy)
	lane.mu.Unlock()
}
