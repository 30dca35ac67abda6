package replica

import (
	"sync"
	"sync/atomic"
	"time"
)

// brokenConns remembers the client connections one of whose writes this
// member answered with connection loss, or, leading, failed for the
// follower that forwarded it. The server closes such a
// connection, but the writes it sent after the lost one may already be on
// their way; sent on, they could apply where the lost one did not (a
// follower that learns of a new leader fails what it forwarded to the old
// one, then forwards the next write to the new one), and a connection's
// writes must apply as a prefix of what it sent, as in ZooKeeper. So a
// later write of a broken connection is answered with connection loss
// too, before it leaves the member. Ids are remembered for brokenFor: the
// connection is closed long before.
type brokenConns struct {
	n      atomic.Int32 // len(at): the common case reads no map
	mu     sync.Mutex
	at     map[connKey]time.Time // when each broke
	latest time.Time             // the newest of them
}

// connKey names a client connection: the member it is on and its id there
// (fsm.Request.Member and Conn).
type connKey struct {
	member string
	conn   uint64
}

// brokenFor is how long a broken connection's id is remembered.
const brokenFor = time.Minute

// add records that connection conn (0: none) of member broke.
func (b *brokenConns) add(member string, conn uint64) {
	if conn == 0 {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at == nil {
		b.at = map[connKey]time.Time{}
	}
	for id, t := range b.at {
		if now.Sub(t) > brokenFor {
			delete(b.at, id)
		}
	}
	b.at[connKey{member, conn}] = now
	b.latest = now
	b.n.Store(int32(len(b.at)))
}

// has reports whether connection conn of member broke. Once every
// remembered id is older than brokenFor it forgets them all, so that the
// writes after a failover go back to the path that takes no lock.
func (b *brokenConns) has(member string, conn uint64) bool {
	if conn == 0 || b.n.Load() == 0 {
		return false
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.latest) > brokenFor {
		clear(b.at)
		b.n.Store(0)
		return false
	}
	t, ok := b.at[connKey{member, conn}]
	return ok && now.Sub(t) <= brokenFor
}
