package replica

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ForwardMagic opens a peer link on a member's client port: a connection
// whose first four bytes are these is a follower forwarding requests, not
// a ZooKeeper client.
const ForwardMagic = "xkfw"

// Peer link message types.
const (
	msgRequests byte = 1 // follower → leader: requests to propose
	msgTouch    byte = 2 // follower → leader: sessions seen alive
	msgFailed   byte = 3 // leader → follower: requests that will not commit here
)

const maxLinkFrame = 64 << 20

// errNoLeader is returned when no leader appears in time.
var errNoLeader = errors.New("replica: no leader")

// errLeaderHere is returned when this member has become the leader: the
// request is to be proposed here instead.
var errLeaderHere = errors.New("replica: this member leads")

// forwarder is a follower's link to its leader.
type forwarder struct {
	r        *Replica
	mu       sync.Mutex
	gen      uint64
	conn     net.Conn
	leader   string
	isolated bool
	touchMu  sync.Mutex
	touches  map[int64]struct{}
	done     chan struct{}
	wg       sync.WaitGroup
}

func newForwarder(r *Replica) *forwarder {
	f := &forwarder{r: r, touches: map[int64]struct{}{}, done: make(chan struct{})}
	f.wg.Add(1)
	go f.touchLoop()
	return f
}

func writeMsg(w io.Writer, typ byte, payload []byte) error {
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)+1))
	b[4] = typ
	_, err := w.Write(append(b, payload...))
	return err
}

func readMsg(r io.Reader) (byte, []byte, error) {
	b, err := proto.ReadFrame(r, maxLinkFrame)
	if err != nil {
		return 0, nil, err
	}
	if len(b) == 0 {
		return 0, nil, fmt.Errorf("replica: empty peer message")
	}
	return b[0], b[1:], nil
}

func encodeIDs(ids []int64) []byte {
	e := proto.NewEncoder(nil)
	e.Int32(int32(len(ids)))
	for _, id := range ids {
		e.Int64(id)
	}
	return e.Bytes()
}

func decodeIDs(b []byte) ([]int64, error) {
	d := proto.NewDecoder(b)
	n := d.Int32()
	if n < 0 || int(n) > d.Remaining()/8 {
		return nil, fmt.Errorf("replica: bad id count %d", n)
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = d.Int64()
	}
	return ids, d.Err()
}

// send forwards one request to the leader. register is called with the
// link generation, under the link lock, before the request is written, so
// a failure of that link fails the waiter.
func (f *forwarder) send(req fsm.Request, register func(gen uint64)) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.linkLocked(); err != nil {
		return 0, err
	}
	register(f.gen)
	if err := writeMsg(f.conn, msgRequests, fsm.EncodeEntry(nil, 0, []fsm.Request{req})); err != nil {
		f.dropLocked()
		return f.gen, err
	}
	return f.gen, nil
}

// linkLocked makes sure the link goes to the current leader. It waits up to
// leaderWait while no leader is known, and while the known one cannot be
// dialled: a leader that just died is still the leader here until this
// member's heartbeat times out, and its successor (maybe this member) is
// elected soon after.
func (f *forwarder) linkLocked() error {
	if f.isolated {
		return errIsolated
	}
	deadline := time.Now().Add(f.r.leaderWait())
	for {
		err := f.dialLocked()
		if err == nil || err == errLeaderHere || time.Now().After(deadline) {
			return err
		}
		select {
		case <-f.done:
			return ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// dialLocked links to the leader this member knows, unless the link is
// already there.
func (f *forwarder) dialLocked() error {
	if f.r.IsLeader() {
		return errLeaderHere
	}
	leader := f.r.Leader()
	if leader == "" || leader == f.r.cfg.ID {
		return errNoLeader
	}
	if f.conn != nil && f.leader == leader {
		return nil
	}
	f.dropLocked()
	peer, ok := findPeer(f.r.cfg.Peers, leader)
	if !ok {
		return fmt.Errorf("replica: leader %q is not a configured peer", leader)
	}
	c, err := f.r.cfg.Auth.DialMember(context.Background(), peer.ClientAddr, ForwardMagic)
	if err != nil {
		return fmt.Errorf("replica: dial leader %s: %w", leader, err)
	}
	f.gen++
	f.conn, f.leader = c, leader
	f.wg.Add(1)
	go f.readLoop(c, f.gen)
	return nil
}

// dropLocked closes the link; waiters forwarded on it learn their fate is
// unknown.
func (f *forwarder) dropLocked() {
	if f.conn == nil {
		return
	}
	f.conn.Close()
	f.conn, f.leader = nil, ""
	gen := f.gen
	f.r.failWaiters(func(w waiter) bool { return w.gen == gen })
}

func (f *forwarder) readLoop(c net.Conn, gen uint64) {
	defer f.wg.Done()
	br := bufio.NewReader(c)
	for {
		typ, payload, err := readMsg(br)
		if err != nil {
			break
		}
		if typ != msgFailed {
			continue
		}
		ids, err := decodeIDs(payload)
		if err != nil {
			break
		}
		for _, id := range ids {
			f.r.failOne(uint64(id))
		}
	}
	f.mu.Lock()
	if f.gen == gen {
		f.dropLocked()
	}
	f.mu.Unlock()
}

func (f *forwarder) touch(ids []int64) {
	f.touchMu.Lock()
	for _, id := range ids {
		f.touches[id] = struct{}{}
	}
	f.touchMu.Unlock()
}

// touchLoop sends the sessions seen alive to the leader twice a second.
func (f *forwarder) touchLoop() {
	defer f.wg.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-t.C:
		}
		f.touchMu.Lock()
		ids := make([]int64, 0, len(f.touches))
		for id := range f.touches {
			ids = append(ids, id)
		}
		clear(f.touches)
		f.touchMu.Unlock()
		if len(ids) == 0 {
			continue
		}
		if f.r.IsLeader() {
			f.r.Touch(ids)
			continue
		}
		f.mu.Lock()
		if f.linkLocked() == nil {
			if writeMsg(f.conn, msgTouch, encodeIDs(ids)) != nil {
				f.dropLocked()
			}
		}
		f.mu.Unlock()
	}
}

func (f *forwarder) reset() {
	f.mu.Lock()
	f.dropLocked()
	f.mu.Unlock()
}

func (f *forwarder) setIsolated(on bool) {
	f.mu.Lock()
	f.isolated = on
	if on {
		f.dropLocked()
	}
	f.mu.Unlock()
}

func (f *forwarder) close() {
	close(f.done)
	f.reset()
	f.wg.Wait()
}

// leaderWait bounds how long a follower waits for a leader: up to two
// heartbeat timeouts to notice that the old one is gone, then two election
// rounds of up to two election timeouts each to elect the next (raft's
// defaults are one second each, so 6 s: within the 10 s ClickHouse gives a
// request).
func (r *Replica) leaderWait() time.Duration {
	heartbeat, election := time.Second, time.Second
	setDur(&heartbeat, r.cfg.HeartbeatTimeout)
	setDur(&election, r.cfg.ElectionTimeout)
	return 2*heartbeat + 4*election
}

// ServeForward serves a follower's link, whose magic the caller has read
// and whose member proof it has checked: it proposes the follower's
// requests and takes its session touches. It returns when the link closes.
func (r *Replica) ServeForward(c net.Conn) {
	defer c.Close()
	var wmu sync.Mutex
	fail := func(id uint64) {
		wmu.Lock()
		defer wmu.Unlock()
		writeMsg(c, msgFailed, encodeIDs([]int64{int64(id)}))
	}
	br := bufio.NewReader(c)
	for {
		typ, payload, err := readMsg(br)
		if err != nil {
			return
		}
		switch typ {
		case msgRequests:
			_, reqs, err := fsm.DecodeEntry(payload)
			if err != nil {
				r.log.Warn("bad forwarded requests", "err", err)
				return
			}
			for _, req := range reqs {
				if !r.IsLeader() {
					fail(req.ID)
					continue
				}
				r.propose(proposal{req: req, fail: fail})
			}
		case msgTouch:
			ids, err := decodeIDs(payload)
			if err != nil {
				return
			}
			if fn := r.onTouch.Load(); fn != nil && r.IsLeader() {
				(*fn)(ids)
			}
		}
	}
}
