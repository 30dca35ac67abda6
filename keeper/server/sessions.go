package server

import (
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// expiry is the leader's session tracker: every member reports the
// sessions it hears from, and the leader closes, through the log, any
// session silent for longer than its timeout. A new leader gives every
// session a full timeout, so a failover shorter than the timeout loses no
// session.
type expiry struct {
	s        *Server
	mu       sync.Mutex
	leader   bool
	deadline map[int64]time.Time
	closing  map[int64]bool
	// The expiry clock stands still while the leader cannot commit (held):
	// applied is the replica's applied index at the last sweep, progressAt
	// when it last moved or nothing waited to commit, sweptAt the last
	// sweep.
	applied    uint64
	progressAt time.Time
	sweptAt    time.Time
}

func newExpiry(s *Server) *expiry {
	return &expiry{s: s, deadline: map[int64]time.Time{}, closing: map[int64]bool{}}
}

func (e *expiry) setLeader(on bool) {
	e.mu.Lock()
	e.leader = on
	clear(e.deadline)
	clear(e.closing)
	e.progressAt = time.Time{} // held starts counting at the next sweep
	e.mu.Unlock()
}

// scan returns the sessions of each whose deadline passed at now, marked
// closing, gives a deadline to those that have none and forgets the
// deadlines of sessions gone (live reports whether one lives). It runs
// every tick under a view that holds applies back: it is linear in the
// sessions and, once each has its deadline, allocates nothing but the
// list it returns (issue 37: it sorted every session each time). Under
// e.mu.
func (e *expiry) scan(each func(func(*fsm.Session) bool), live func(int64) bool, now time.Time) []int64 {
	var expired []int64
	each(func(ss *fsm.Session) bool {
		d, ok := e.deadline[ss.ID]
		switch {
		case !ok:
			e.deadline[ss.ID] = now.Add(time.Duration(ss.Timeout) * time.Millisecond)
		case now.After(d) && !e.closing[ss.ID]:
			e.closing[ss.ID] = true
			expired = append(expired, ss.ID)
		}
		return true
	})
	for id := range e.deadline {
		if !live(id) {
			delete(e.deadline, id)
			delete(e.closing, id)
		}
	}
	return expired
}

// held reports, at a sweep at now, whether the leader's commits stall:
// requests of its wait to commit (waiting) and its applied index has not
// moved for longer than after. It then moves every deadline on by the
// time since the last sweep, so that the expiry clock stands still: a
// leader whose disk stalls for a few seconds decides no expiry meanwhile
// (it would commit, late, once the disk answers), and gives every session
// the time it had left before the stall, since touches that could not be
// processed then are not the sessions' fault. Under e.mu.
func (e *expiry) held(now time.Time, applied uint64, waiting bool, after time.Duration) bool {
	if !waiting || applied != e.applied || e.progressAt.IsZero() {
		e.applied, e.progressAt = applied, now
	}
	since := now.Sub(e.sweptAt)
	e.sweptAt = now
	if now.Sub(e.progressAt) <= after {
		return false
	}
	for id, d := range e.deadline {
		e.deadline[id] = d.Add(since)
	}
	return true
}

// touch extends the given sessions by their timeouts.
func (e *expiry) touch(ids []int64) {
	now := time.Now()
	e.s.replica.View(func(st *fsm.State) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.leader {
			return
		}
		for _, id := range ids {
			if ss := st.Session(id); ss != nil {
				e.deadline[id] = now.Add(time.Duration(ss.Timeout) * time.Millisecond)
			}
		}
	})
}

// sweep closes the sessions whose deadline passed, unless the leader's
// commits stall (held). The closes are submitted on a goroutine of their
// own: a full proposal queue must not stop the sweeps, which keep the
// expiry clock standing while it stays full.
func (e *expiry) sweep(now time.Time) {
	var expired []int64
	applied, waiting := e.s.replica.Progress()
	e.s.replica.View(func(st *fsm.State) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.leader && !e.held(now, applied, waiting, 2*sweepEvery(e.s.cfg.Tick)) {
			expired = e.scan(st.EachSession, func(id int64) bool { return st.Session(id) != nil }, now)
		}
	})
	if len(expired) > 0 {
		e.s.wg.Go(func() { e.close(expired) }) // the sweep holds the server's group: Stop waits for it
	}
}

// close submits the expiry of sessions.
func (e *expiry) close(expired []int64) {
	for _, id := range expired {
		e.s.log.Info("session expired", "session", hexID(id))
		e.s.replica.SubmitAsLeader(fsm.Request{Session: id, Member: e.s.replica.ID(), Op: proto.OpCloseSession},
			func(res fsm.Result) {
				if res.Err != proto.ErrOK {
					e.mu.Lock()
					delete(e.closing, id)
					e.mu.Unlock()
				}
			})
	}
}

// sweepEvery is how often the leader sweeps for expired sessions.
func sweepEvery(tick time.Duration) time.Duration { return min(tick/4, 250*time.Millisecond) }
