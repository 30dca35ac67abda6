package server

import (
	"time"
)

// A member cut off from its shard's leader cannot know which sessions the
// majority still keeps: the leader may have expired a session whose client
// talks to this member alone, and another client may hold its lock by
// now. ZooKeeper's follower closes its clients when it loses its leader;
// this one does so session by session: a connection whose session this
// member has not heard the leader within half the timeout of is closed
// (pings and reads included), and the client reconnects to a member that
// hears the leader, where its session goes on if the majority kept it
// (the leader expires it only a whole timeout after its last touch). A
// member removed from the shard's configuration closes its client port.

// removedGrace is how long a member that sees itself removed goes on
// serving before it closes its client port and connections.
const removedGrace = time.Second

// vouches reports whether this member may still answer for c's session,
// since its leader was last heard: within half the session's timeout.
func vouches(c *conn, since time.Duration) bool { return since <= c.sessionTimeout()/2 }

// stale reports whether c's session is one this member can no longer
// answer for (see vouches).
func (c *conn) stale() bool {
	return !c.member && !vouches(c, c.s.replica.SinceLeaderContact())
}

// checkContact closes the client connections this member can no longer
// vouch for, and its client port once it was removed from the shard.
func (s *Server) checkContact() {
	removed := s.replica.Removed()
	if removed {
		// The answers on their way go out first: the member that leads
		// the removal of itself answers `member remove` once it commits,
		// and closing at once cut that answer off (CI saw it).
		now := time.Now().UnixNano()
		s.removedAt.CompareAndSwap(0, now)
		if time.Duration(now-s.removedAt.Load()) < removedGrace {
			removed = false
		}
	}
	since := s.replica.SinceLeaderContact()
	if removed && s.portOpen.CompareAndSwap(true, false) {
		s.log.Error("this member was removed from the shard's configuration: closing its client port and its clients' connections " +
			"(they reconnect to the shard's members); stop it, or add it again with xkeeper member add")
		s.ln.Close()
		if s.tlsLn != nil {
			s.tlsLn.Close()
		}
	}
	var cut []*conn
	s.mu.Lock()
	for c := range s.conns {
		if removed || c.attached && !c.member && !vouches(c, since) {
			cut = append(cut, c)
		}
	}
	s.mu.Unlock()
	if len(cut) == 0 {
		s.cutOff.Store(false)
		return
	}
	if !removed && !s.cutOff.Swap(true) {
		s.log.Warn("no word from the shard's leader: closing the connections of sessions this member can no longer vouch for "+
			"(their clients reconnect to a member that hears the leader)", "since", since.Round(time.Millisecond), "connections", len(cut))
	}
	for _, c := range cut {
		c.shutdown("no contact with the shard's leader")
	}
}

// every calls fn every tick until done.
func every(done <-chan struct{}, tick time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			fn(now)
		}
	}
}
