package server

import (
	"slices"
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
	// reaping says an OpReap is in flight, of session reaped; kick wakes
	// reapLoop (a session closed, or a reap applied).
	reaping bool
	reaped  int64
	kick    chan struct{}
	// The expiry clock stands still while the leader cannot commit (held):
	// applied is the replica's applied index at the last sweep, progressAt
	// when it last moved or nothing waited to commit, sweptAt the last
	// sweep.
	applied    uint64
	progressAt time.Time
	sweptAt    time.Time
}

func newExpiry(s *Server) *expiry {
	return &expiry{s: s, deadline: map[int64]time.Time{}, closing: map[int64]bool{}, kick: make(chan struct{}, 1)}
}

func (e *expiry) setLeader(on bool) {
	e.mu.Lock()
	e.leader = on
	clear(e.deadline)
	clear(e.closing)
	e.reaping = false
	e.progressAt = time.Time{} // held starts counting at the next sweep
	e.mu.Unlock()
	if on {
		e.kickReaper() // go on with what the last leader left to reap
	}
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
		if e.leader && st.ReapingCount() > 0 {
			e.kickReaper() // again after a reap that met a lock, or was lost
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

// kickReaper wakes reapLoop, if it is not awake already.
func (e *expiry) kickReaper() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// reapLoop reaps, until done is closed, whenever kicked: a session closed
// (onApply), this member became leader, a reap applied, or a sweep found
// closed sessions still reaping.
func (e *expiry) reapLoop(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-e.kick:
			e.reap()
		}
	}
}

// reap proposes, while this member leads and none is in flight, an
// OpReap of a closed session whose ephemerals are left to delete
// (fsm.State.Reaping), taking them in turn: one chunk at a time, the next
// once the last applied, so that an entry holds at most one reap
// (fsm.ReapChunk deletes), however many sessions closed together, and
// clients' writes go between them. A reap that met a lock waits for the
// next sweep, which tries the next session first.
func (e *expiry) reap() {
	var id int64
	e.s.replica.View(func(st *fsm.State) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.leader || e.reaping || st.ReapingCount() == 0 {
			return
		}
		ids := st.Reaping()
		next, _ := slices.BinarySearch(ids, e.reaped+1)
		id = ids[next%len(ids)]
		e.reaping, e.reaped = true, id
	})
	if id == 0 {
		return
	}
	e.s.replica.SubmitAsLeader(fsm.Request{Session: id, Member: e.s.replica.ID(), Op: fsm.OpReap},
		func(res fsm.Result) {
			e.mu.Lock()
			e.reaping = false
			e.mu.Unlock()
			if res.Err == proto.ErrOK {
				e.kickReaper()
			}
		})
}

// sweepEvery is how often the leader sweeps for expired sessions.
func sweepEvery(tick time.Duration) time.Duration { return min(tick/4, 250*time.Millisecond) }
