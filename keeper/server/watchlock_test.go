package server

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// heldWatches returns a table of n watches, all of one connection, which
// it returns too.
func heldWatches(t *testing.T, n int) (*watches, *conn) {
	w := newWatches(0, 0)
	c := &conn{q: newOutq(0, nil)}
	for i := range n {
		_, ok := w.add(fsm.WatchData, "/"+strconv.Itoa(i), c)
		require.True(t, ok)
	}
	return w, c
}

// TestCountersDoNotWalkTheWatches: the metrics (Counters, scraped as
// often as Prometheus likes) and mntr read the member's watch count
// without walking its watches. The walk held the lock every apply's
// watch events wait for: 300,000 watches took 0.3 s, and a member may
// hold 10,000,000 (issue 37).
func TestCountersDoNotWalkTheWatches(t *testing.T) {
	const held = 100_000
	w, _ := heldWatches(t, held)
	s := &Server{watches: w}
	fastest := time.Hour
	for range 5 {
		start := time.Now()
		require.Equal(t, held, s.Counters().Watches)
		fastest = min(fastest, time.Since(start))
	}
	assert.Less(t, fastest, time.Millisecond, "the fastest of 5 reads of the count of %d watches", held)
}

// TestClosingConnectionLetsOthersIn: a closing connection's watches are
// dropped a chunk at a time, and the lock every apply's watch events
// take is never held for long: closing a connection of 100,000 watches
// stalled every write of the shard for half a second (issue 37).
func TestClosingConnectionLetsOthersIn(t *testing.T) {
	const held = 100_000
	w, c := heldWatches(t, held)
	dropped := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		w.drop(c)
		dropped <- time.Since(start)
	}()
	var longest, took time.Duration
	for deadline := time.Now().Add(2 * time.Minute); took == 0 && time.Now().Before(deadline); {
		start := time.Now()
		w.held()
		longest = max(longest, time.Since(start))
		select {
		case took = <-dropped:
		default:
		}
	}
	require.NotZero(t, took, "the drop did not end")
	t.Logf("dropped %d watches in %v; the longest wait for the lock meanwhile %v", held, took, longest)
	assert.Zero(t, w.held())
	// A fifth of the drop: held throughout, the wait was all of it; a
	// chunk is 1/300 of it, and the rest is the scheduler of a machine
	// shared with other tests (and the race detector).
	assert.Less(t, longest, took/5, "the longest wait for the lock while a connection's watches are dropped")
}
