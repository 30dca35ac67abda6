package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// TestExpiryScanIsLinearAndAllocatesNothing: the leader's sweep runs
// every tick under a view that holds applies back; over 100,000 sessions
// that all have their deadlines it allocates nothing (issue 37: it copied
// and sorted every session, and built a map of them, every 250 ms), and
// it still finds the sessions whose deadline passed, once each, and
// forgets those gone.
func TestExpiryScanIsLinearAndAllocatesNothing(t *testing.T) {
	sessions := make([]*fsm.Session, 100_000)
	live := map[int64]bool{}
	for i := range sessions {
		sessions[i] = &fsm.Session{ID: int64(i + 1), Timeout: int32(1000 + i%2*1000)}
		live[sessions[i].ID] = true
	}
	each := func(f func(*fsm.Session) bool) {
		for _, ss := range sessions {
			if !live[ss.ID] {
				continue
			}
			if !f(ss) {
				return
			}
		}
	}
	alive := func(id int64) bool { return live[id] }
	e := &expiry{deadline: map[int64]time.Time{}, closing: map[int64]bool{}}
	start := time.Unix(1_000_000, 0)
	require.Empty(t, e.scan(each, alive, start), "a session first seen gets a whole timeout")

	allocs := testing.AllocsPerRun(5, func() { e.scan(each, alive, start.Add(500*time.Millisecond)) })
	assert.Zero(t, allocs, "a sweep in which nothing expires allocates")

	expired := e.scan(each, alive, start.Add(1500*time.Millisecond))
	assert.Len(t, expired, 50_000, "the sessions of 1 s timeout expire")
	assert.Empty(t, e.scan(each, alive, start.Add(1600*time.Millisecond)), "each is reported once")
	delete(live, 1)
	e.scan(each, alive, start.Add(1700*time.Millisecond))
	assert.NotContains(t, e.deadline, int64(1), "a session gone is forgotten")
	assert.NotContains(t, e.closing, int64(1))
}

// TestExpiryClockStandsStillWhileCommitsStall (issue 38, item 5): while
// the leader has requests waiting to commit and applies nothing (its disk
// stalled), its sweeps decide no expiry and every session keeps the time
// it had left; once entries apply again, a session silent for its whole
// timeout outside the stall expires.
func TestExpiryClockStandsStillWhileCommitsStall(t *testing.T) {
	sessions := []*fsm.Session{{ID: 1, Timeout: 1000}}
	each := func(f func(*fsm.Session) bool) {
		for _, ss := range sessions {
			f(ss)
		}
	}
	alive := func(int64) bool { return true }
	e := &expiry{deadline: map[int64]time.Time{}, closing: map[int64]bool{}}
	const after = 500 * time.Millisecond
	start := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	sweep := func(now time.Time, applied uint64, waiting bool) []int64 {
		if e.held(now, applied, waiting, after) {
			return nil
		}
		return e.scan(each, alive, now)
	}
	require.Empty(t, sweep(at(0), 10, false), "a session first seen gets a whole timeout")
	require.Empty(t, sweep(at(250*time.Millisecond), 10, true), "requests wait, nothing applied yet: no stall so far")
	// The disk stalls from 250 ms to 5 s: requests wait, nothing applies.
	for d := 500 * time.Millisecond; d <= 5*time.Second; d += 250 * time.Millisecond {
		assert.Empty(t, sweep(at(d), 10, true), "no expiry while the leader cannot commit (at %v)", d)
	}
	// Entries apply again: of its 1 s, the session had 500 ms left at the
	// last sweep before the stall was seen (at 750 ms, 500 ms without
	// progress); it keeps them.
	assert.Empty(t, sweep(at(5250*time.Millisecond), 11, true), "the time left before the stall is the session's")
	assert.Equal(t, []int64{1}, sweep(at(6*time.Second), 12, false), "expired once its time outside the stall is up")
}
