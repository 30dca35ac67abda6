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
}

func newExpiry(s *Server) *expiry {
	return &expiry{s: s, deadline: map[int64]time.Time{}, closing: map[int64]bool{}}
}

func (e *expiry) setLeader(on bool) {
	e.mu.Lock()
	e.leader = on
	clear(e.deadline)
	clear(e.closing)
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

// sweep closes the sessions whose deadline passed.
func (e *expiry) sweep(now time.Time) {
	var expired []int64
	e.s.replica.View(func(st *fsm.State) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.leader {
			expired = e.scan(st.EachSession, func(id int64) bool { return st.Session(id) != nil }, now)
		}
	})
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
