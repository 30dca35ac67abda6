package router

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// backend is a front session's session on one shard: a connection to the
// node's member of that shard. The endpoint numbers the requests it sends
// (xids of its own) and pairs each reply with the request it answers, in
// order, as ZooKeeper answers.
type backend struct {
	shard string
	nc    net.Conn
	br    *bufio.Reader
	max   int
	event func(frame []byte)          // a watch notification (xid -1)
	track func(h proto.ReplyHeader)   // sees every reply's header first
	ended func(b *backend, err error) // the connection ended
	wmu   sync.Mutex                  // orders writes
	mu    sync.Mutex                  // guards what follows
	xid   int32                       // the last xid sent
	wait  []pending                   // requests sent, not answered
	gone  bool                        // the connection ended: send refuses
	sent  atomic.Int64                // when the last request was sent, Unix ns
	pings atomic.Bool                 // a keepalive ping is on its way
}

// pending is a request sent and the function its reply goes to (nil: none).
// A request the connection's end leaves unanswered gets lost.
type pending struct {
	xid  int32
	done func(h proto.ReplyHeader, body []byte)
}

// errHandshake is a shard's refusal of a session: the session is unknown
// (expired) or the member could not take it now.
var errHandshake = errors.New("router: the shard refused the session")

// handshakeTimeout bounds a session's handshake with a member.
const handshakeTimeout = 10 * time.Second

// dial opens a session on a shard through serve (the member's ServeRouted)
// for a client at addr, and returns the member's answer; a zero session id
// in it means the session is unknown.
func dial(m Member, addr net.Addr, link bool, req *proto.ConnectRequest, max int) (net.Conn, *bufio.Reader, *proto.ConnectResponse, error) {
	if m == nil {
		return nil, nil, nil, fmt.Errorf("%w: the node hosts no member of that shard", errHandshake)
	}
	ours, theirs := net.Pipe()
	if err := m.ServeRouted(theirs, addr, link); err != nil {
		ours.Close()
		return nil, nil, nil, err
	}
	ours.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReaderSize(ours, 64<<10)
	resp := &proto.ConnectResponse{}
	if _, err := ours.Write(proto.AppendFrame(nil, req)); err != nil {
		ours.Close()
		return nil, nil, nil, fmt.Errorf("%w: %v", errHandshake, err)
	}
	frame, err := proto.ReadFrame(br, max)
	if err == nil {
		err = proto.Unmarshal(frame, resp)
	}
	if err != nil {
		ours.Close()
		return nil, nil, nil, fmt.Errorf("%w: %v", errHandshake, err)
	}
	ours.SetDeadline(time.Time{})
	return ours, br, resp, nil
}

// run reads replies until the connection ends.
func (b *backend) run() {
	var err error
	for {
		var frame []byte
		frame, err = proto.ReadFrame(b.br, b.max)
		if err != nil {
			break
		}
		d := proto.NewDecoder(frame)
		var h proto.ReplyHeader
		h.Decode(d)
		if d.Err() != nil {
			err = d.Err()
			break
		}
		if h.Xid == xidNotification {
			b.event(frame)
			continue
		}
		b.mu.Lock()
		if len(b.wait) == 0 || b.wait[0].xid != h.Xid {
			b.mu.Unlock()
			err = fmt.Errorf("router: shard %s answered xid %d out of turn", b.shard, h.Xid)
			break
		}
		p := b.wait[0]
		b.wait = b.wait[1:]
		b.mu.Unlock()
		b.track(h)
		if p.done != nil {
			p.done(h, d.Rest())
		}
	}
	b.nc.Close()
	b.ended(b, err)
	b.mu.Lock()
	left := b.wait
	b.wait, b.gone = nil, true
	b.mu.Unlock()
	for _, p := range left {
		if p.done != nil {
			p.done(lost, nil)
		}
	}
}

// lost is the reply a request gets when its connection ends first.
var lost = proto.ReplyHeader{Xid: math.MinInt32, Err: proto.ErrConnectionLoss}

// xidNotification is the xid of a watch notification.
const xidNotification = -1

// ping sends a keepalive ping on a goroutine of its own, unless one is
// still on its way: a member's reader can be held (a write waiting for a
// lock), and the pipe with it.
func (b *backend) ping() {
	if !b.pings.CompareAndSwap(false, true) {
		return
	}
	go func() {
		if b.send(proto.OpPing, nil, func(proto.ReplyHeader, []byte) { b.pings.Store(false) }) != nil {
			b.pings.Store(false)
		}
	}()
}

// lastSent returns when the last request was sent.
func (b *backend) lastSent() time.Time { return time.Unix(0, b.sent.Load()) }

// send sends a request whose body is already encoded; done gets the reply,
// or lost if the connection ends first. An error means the connection had
// ended already and done will not be called.
func (b *backend) send(op proto.OpCode, body []byte, done func(h proto.ReplyHeader, body []byte)) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.mu.Lock()
	if b.gone {
		b.mu.Unlock()
		return net.ErrClosed
	}
	b.xid++
	if b.xid <= 0 {
		b.xid = 1 // after 2³¹ requests: the negative xids are ZooKeeper's
	}
	xid := b.xid
	b.wait = append(b.wait, pending{xid: xid, done: done})
	b.mu.Unlock()
	frame := make([]byte, 12, 12+len(body))
	binary.BigEndian.PutUint32(frame, uint32(8+len(body)))
	binary.BigEndian.PutUint32(frame[4:], uint32(xid))
	binary.BigEndian.PutUint32(frame[8:], uint32(op))
	b.sent.Store(time.Now().UnixNano())
	if _, err := b.nc.Write(append(frame, body...)); err != nil {
		b.nc.Close() // run ends and answers done with lost
	}
	return nil
}

// call sends a request (its encoded body) and waits for its reply; the
// connection's end first is an error (wrapping ErrConnectionLoss).
func (b *backend) call(op proto.OpCode, body []byte) (proto.ReplyHeader, []byte, error) {
	type reply struct {
		h    proto.ReplyHeader
		body []byte
	}
	ch := make(chan reply, 1)
	if err := b.send(op, body, func(h proto.ReplyHeader, body []byte) { ch <- reply{h, body} }); err != nil {
		return proto.ReplyHeader{}, nil, err
	}
	r := <-ch
	if r.h == lost {
		return r.h, nil, fmt.Errorf("router: shard %s: %w", b.shard, proto.ErrConnectionLoss)
	}
	return r.h, r.body, nil
}

// callOK is call for a request that must succeed; resp, if not nil,
// receives the reply.
func (b *backend) callOK(op proto.OpCode, req, resp proto.Record) error {
	h, body, err := b.call(op, proto.Marshal(req))
	switch {
	case err != nil:
		return err
	case h.Err != proto.ErrOK:
		return fmt.Errorf("router: %v on shard %s: %w", op, b.shard, h.Err)
	case resp != nil:
		return proto.Unmarshal(body, resp)
	}
	return nil
}
