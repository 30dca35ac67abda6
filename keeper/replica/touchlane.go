package replica

import (
	"bufio"
	"net"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/keeper/peerlink"
)

// msgLaneOpen is the leader's greeting on a touch lane: it serves the lane.
// A leader of before the lane closes the link instead, and the follower
// sends its touches on its forwarding link, as then.
const msgLaneOpen byte = 6

// touchLaneRetry is how long a follower sends its touches on the
// forwarding link after a leader did not greet its touch lane, before it
// tries the lane again.
const touchLaneRetry = time.Minute

// touchWriteTimeout bounds a write of touches on the lane: a leader that
// does not read them is as good as gone, and the lane is made again.
const touchWriteTimeout = time.Second

// touchLane is a follower's link to its leader for session touches alone
// (issue 38, item 5). On the forwarding link they waited behind the
// follower's writes: the leader reads that link only as fast as its
// proposal queue takes the writes, so a leader whose disk stalled for a
// few seconds under load read no touch, and expired the follower's
// sessions while their clients pinged. The leader takes a lane's touches
// as they arrive, whatever its writes wait on.
type touchLane struct {
	r         *Replica
	mu        sync.Mutex
	conn      net.Conn
	leader    string
	refusedBy string    // the leader that last did not greet the lane
	refusedAt time.Time // when
}

// send writes touches to the leader on the lane, made first if need be,
// and reports whether it did; false leaves them to the forwarding link (no
// leader known, none reachable, or one of before the lane).
func (l *touchLane) send(ids []int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	addr, id := l.r.raft.LeaderWithID()
	leader := string(id)
	if leader == "" || leader == l.r.cfg.ID {
		l.closeLocked()
		return false
	}
	if l.conn != nil && l.leader != leader {
		l.closeLocked()
	}
	if l.conn == nil && !l.openLocked(string(addr), leader) {
		return false
	}
	l.conn.SetWriteDeadline(time.Now().Add(touchWriteTimeout))
	if writeMsg(l.conn, msgTouch, encodeIDs(ids)) != nil {
		l.closeLocked()
		return false
	}
	return true
}

// openLocked dials the lane to leader at addr and waits for its greeting.
func (l *touchLane) openLocked(addr, leader string) bool {
	if l.refusedBy == leader && time.Since(l.refusedAt) < touchLaneRetry {
		return false
	}
	c, err := l.r.stream.dial(addr, linkTouch, peerlink.Handshake)
	if err != nil {
		return false
	}
	c.SetReadDeadline(time.Now().Add(peerlink.Handshake))
	typ, _, err := readMsg(c)
	if err != nil || typ != msgLaneOpen {
		c.Close()
		l.refusedBy, l.refusedAt = leader, time.Now()
		return false
	}
	c.SetReadDeadline(time.Time{})
	l.conn, l.leader = c, leader
	return true
}

func (l *touchLane) closeLocked() {
	if l.conn != nil {
		l.conn.Close()
		l.conn, l.leader = nil, ""
	}
}

// close drops the lane.
func (l *touchLane) close() {
	l.mu.Lock()
	l.closeLocked()
	l.mu.Unlock()
}

// serveTouches serves a follower's touch lane on the raft port: it greets
// the follower, then hands every touch it reads to the session tracker
// while this member leads, until the lane closes.
func (r *Replica) serveTouches(c net.Conn) {
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(peerlink.Handshake))
	if writeMsg(c, msgLaneOpen, nil) != nil {
		return
	}
	br := bufio.NewReader(c)
	for {
		typ, payload, err := readMsg(br)
		if err != nil {
			return
		}
		if typ != msgTouch {
			continue
		}
		if err := r.takeTouches(payload); err != nil {
			r.log.Warn("bad touches on a touch lane", "err", err)
			return
		}
	}
}

// takeTouches hands the sessions of a touch message to the session
// tracker, while this member leads.
func (r *Replica) takeTouches(payload []byte) error {
	ids, err := decodeIDs(payload)
	if err != nil {
		return err
	}
	if fn := r.onTouch.Load(); fn != nil && r.IsLeader() {
		(*fn)(ids)
	}
	return nil
}
