package replica

import (
	"sync"
	"sync/atomic"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// relays passes on to the leader the followers' requests that reached this
// member after it stopped leading: those that waited while it handed its
// leadership on (TransferLeadership), and those a follower sent before it
// heard of the new leader. Each follower's go on a forwarding link of
// their own, since request ids are unique only per proposer. The follower
// applies the entries itself, which answers them; a request the leader
// fails, or that was on a link that broke, is failed back to the follower
// (its connection then breaks, as at any change of leader).
type relays struct {
	r       *Replica
	mu      sync.Mutex
	by      map[string]*forwarder // by the follower's member id
	closed  bool
	pending atomic.Int64 // relayed requests without an outcome, over all links
}

func newRelays(r *Replica) *relays {
	return &relays{r: r, by: map[string]*forwarder{}}
}

// pass relays a follower's request, whose failure fail reports back to the
// follower, if a leader is known or becomes known soon (awaitLeader). It
// returns false, having done nothing, if this member leads: the request is
// then to be proposed here.
func (rs *relays) pass(req fsm.Request, fail func(uint64)) bool {
	if !rs.r.awaitLeader() {
		fail(req.ID)
		return true
	}
	gen, err := rs.send(req, fail)
	switch {
	case err == errLeaderHere:
		return false
	case err != nil && gen == 0:
		fail(req.ID) // never sent; if it was, the broken link failed it
	}
	return true
}

// send forwards a follower's request on that follower's relay link (see
// forwarder.send).
func (rs *relays) send(req fsm.Request, fail func(uint64)) (uint64, error) {
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return 0, ErrClosed
	}
	f := rs.by[req.Member]
	if f == nil {
		f = &forwarder{r: rs.r, sink: &relayed{fails: map[uint64]relay{}, pending: &rs.pending}, done: make(chan struct{})}
		rs.by[req.Member] = f
	}
	rs.mu.Unlock()
	s := f.sink.(*relayed)
	return f.send(req, func(gen uint64) { s.add(req.ID, relay{gen: gen, fail: fail}) })
}

// forget drops a request this member relayed from the relays that wait, if
// it did: the request came back to it, relayed by the member that led
// then, and is proposed here, so its outcome will not come on the relay
// link (which, waiting for it, would be held and, in the end, fail it).
func (rs *relays) forget(req fsm.Request) {
	if rs.pending.Load() == 0 {
		return
	}
	rs.mu.Lock()
	f := rs.by[req.Member]
	rs.mu.Unlock()
	if f != nil {
		f.sink.(*relayed).take(req.ID)
	}
}

// each calls fn on every relay forwarder.
func (rs *relays) each(fn func(*forwarder)) {
	rs.mu.Lock()
	all := make([]*forwarder, 0, len(rs.by))
	for _, f := range rs.by {
		all = append(all, f)
	}
	rs.mu.Unlock()
	for _, f := range all {
		fn(f)
	}
}

func (rs *relays) setIsolated(on bool) { rs.each(func(f *forwarder) { f.setIsolated(on) }) }

func (rs *relays) close() {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.each((*forwarder).close)
}

// relay is a relayed request waiting for its outcome.
type relay struct {
	gen  uint64
	fail func(uint64)
}

// relayed is a relay forwarder's sink: the requests it passed on.
type relayed struct {
	mu      sync.Mutex
	fails   map[uint64]relay
	pending *atomic.Int64 // relays.pending
}

func (s *relayed) add(id uint64, r relay) {
	s.mu.Lock()
	if _, ok := s.fails[id]; !ok {
		s.pending.Add(1)
	}
	s.fails[id] = r
	s.mu.Unlock()
}

func (s *relayed) take(id uint64) (relay, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.fails[id]
	if ok {
		delete(s.fails, id)
		s.pending.Add(-1)
	}
	return r, ok
}

// result forgets an applied request: this member answers the follower's
// link when it applies the entry (answerLink), and the follower's own
// apply answers its client.
func (s *relayed) result(res fsm.Result, _ uint64) { s.take(res.ID) }

func (s *relayed) failed(id uint64) {
	if r, ok := s.take(id); ok {
		r.fail(id)
	}
}

func (s *relayed) dropped(gen uint64) {
	s.mu.Lock()
	var lost []uint64
	for id, r := range s.fails {
		if r.gen == gen {
			lost = append(lost, id)
		}
	}
	s.mu.Unlock()
	for _, id := range lost {
		s.failed(id)
	}
}

func (s *relayed) waiting(gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.fails {
		if r.gen == gen {
			return true
		}
	}
	return false
}
