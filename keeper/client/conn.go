package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Request states: a reply (or failure) and the caller's giving up race to
// move a request out of waiting.
const (
	waiting int32 = iota
	answered
	abandoned
)

// request is one request from its caller to its reply.
type request struct {
	op       proto.OpCode
	xid      int32  // fixed for internal requests; assigned by the writer otherwise
	frame    []byte // length, header, body; the writer patches the xid
	resp     proto.Record
	watch    *watchReq
	internal bool      // ping, auth, setWatches at setup: holds no slot
	sent     time.Time // set by the writer, read by the reader after pending
	state    atomic.Int32
	done     chan struct{}
	zxid     int64
	err      error
}

func newRequest(op proto.OpCode, xid int32, req, resp proto.Record) *request {
	return &request{op: op, xid: xid, resp: resp, done: make(chan struct{}),
		frame: proto.AppendFrame(nil, &proto.RequestHeader{Xid: xid, OpCode: op}, req)}
}

// abandon gives up on a request; false means its reply won the race.
func (r *request) abandon() bool { return r.state.CompareAndSwap(waiting, abandoned) }

// finish completes a request with its reply (err nil and the body) or a
// failure, registers its watch, and frees its slot.
func (c *Client) finish(r *request, zxid int64, err error, body []byte) {
	if r.state.CompareAndSwap(waiting, answered) {
		if err == nil && r.resp != nil {
			if derr := proto.Unmarshal(body, r.resp); derr != nil {
				err = fmt.Errorf("%w: %v reply: %v", proto.ErrMarshallingError, r.op, derr)
			}
		}
		if w := r.watch; w != nil {
			switch {
			case err == nil:
				c.w.add(w.path, w.kind, w.ch)
			case w.kind == watchData && w.exists && errors.Is(err, proto.ErrNoNode):
				c.w.add(w.path, watchExist, w.ch)
			}
		}
		r.zxid, r.err = zxid, err
		close(r.done)
	}
	if !r.internal {
		<-c.slots
	}
}

// codeErr turns a reply code into an error, nil for ErrOK.
func codeErr(code proto.Code) error {
	if code == proto.ErrOK {
		return nil
	}
	return code
}

// conn is one connection to a member, from handshake to loss.
type conn struct {
	c       *Client
	nc      net.Conn
	br      *bufio.Reader
	addr    string
	timeout time.Duration // granted session timeout
	dead    chan struct{}
	once    sync.Once
	expired atomic.Bool // the member answered ErrSessionExpired

	mu      sync.Mutex
	pending []*request // written, awaiting replies, in order
}

func (cn *conn) close() {
	cn.once.Do(func() {
		close(cn.dead)
		cn.nc.Close()
	})
}

func (cn *conn) push(r *request) {
	cn.mu.Lock()
	cn.pending = append(cn.pending, r)
	cn.mu.Unlock()
}

func (cn *conn) pop() *request {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if len(cn.pending) == 0 {
		return nil
	}
	r := cn.pending[0]
	cn.pending[0] = nil
	cn.pending = cn.pending[1:]
	return r
}

// failPending fails every request still awaiting a reply.
func (cn *conn) failPending(err error) {
	for r := cn.pop(); r != nil; r = cn.pop() {
		cn.c.finish(r, 0, err, nil)
	}
}

// readTimeout is how long a connection may stay silent: pings go every
// third of the session timeout, so two missed answers mean it is dead.
func (cn *conn) readTimeout() time.Duration { return cn.timeout * 2 / 3 }

// open dials addr, attaches the session (a new one the first time) and
// re-sends auths and watches. The connection is ready to serve.
func (c *Client) open(addr string) (*conn, error) {
	c.mu.Lock()
	id, passwd, timeout := c.sessionID, c.passwd, c.timeout
	auths := append([]proto.AuthPacket(nil), c.auths...)
	c.mu.Unlock()

	dctx, cancel := context.WithTimeout(c.ctx, max(timeout/time.Duration(len(c.servers)), time.Second))
	nc, err := c.opts.dial(dctx, "tcp", addr)
	cancel()
	if err != nil {
		if c.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, err
	}
	if !c.track(nc) {
		nc.Close()
		return nil, ErrClosed
	}
	cn := &conn{c: c, nc: nc, br: bufio.NewReaderSize(nc, 64<<10), addr: addr, timeout: timeout, dead: make(chan struct{})}
	if err := cn.attach(id, passwd, auths); err != nil {
		cn.close()
		c.untrack(nc, StateDisconnected)
		if c.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, err
	}
	return cn, nil
}

// attach runs the handshake, then the auths and setWatches, each reply
// awaited, under a deadline.
func (cn *conn) attach(id int64, passwd []byte, auths []proto.AuthPacket) error {
	c := cn.c
	cn.nc.SetDeadline(time.Now().Add(cn.timeout * 2 / 3))
	req := proto.ConnectRequest{LastZxidSeen: c.lastZxid.Load(), Timeout: int32(cn.timeout.Milliseconds()),
		SessionID: id, Passwd: passwd, HasReadOnly: true}
	if req.Passwd == nil {
		req.Passwd = make([]byte, proto.PasswordLen)
	}
	sent := time.Now()
	if _, err := cn.nc.Write(proto.AppendFrame(nil, &req)); err != nil {
		return err
	}
	frame, err := proto.ReadFrame(cn.br, c.opts.maxPacket)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	var resp proto.ConnectResponse
	if err := proto.Unmarshal(frame, &resp); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	switch {
	case id != 0 && (resp.Timeout <= 0 || resp.SessionID == 0):
		return proto.ErrSessionExpired
	case id != 0 && resp.SessionID != id:
		return fmt.Errorf("handshake: asked for session %s, got %s", hexID(id), hexID(resp.SessionID))
	case resp.Timeout <= 0 || resp.SessionID == 0:
		return errors.New("handshake: the member refused a new session")
	}
	cn.timeout = time.Duration(resp.Timeout) * time.Millisecond
	c.mu.Lock()
	c.sessionID, c.passwd, c.timeout = resp.SessionID, resp.Passwd, cn.timeout
	c.mu.Unlock()
	c.acked(sent)

	var setup []*request
	for i := range auths {
		setup = append(setup, newRequest(proto.OpAuth, proto.XidAuth, &auths[i], nil))
	}
	for _, sw := range c.w.setWatches(c.lastZxid.Load(), min(128<<10, c.opts.maxPacket/2)) {
		setup = append(setup, newRequest(proto.OpSetWatches, proto.XidSetWatches, sw, nil))
	}
	if err := cn.exchange(setup); err != nil {
		return err
	}
	cn.nc.SetDeadline(time.Time{})
	if id == 0 {
		c.log.Info("session established", "server", cn.addr, "session", hexID(resp.SessionID), "timeout", cn.timeout)
	} else {
		c.log.Info("session reattached", "server", cn.addr, "session", hexID(id), "watches", c.w.len())
	}
	return nil
}

// exchange sends internal requests and reads until all are answered.
func (cn *conn) exchange(reqs []*request) error {
	if len(reqs) == 0 {
		return nil
	}
	bw := bufio.NewWriter(cn.nc)
	for _, r := range reqs {
		r.internal = true
		if err := cn.write(bw, r); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	for _, r := range reqs {
		for done := false; !done; {
			frame, err := proto.ReadFrame(cn.br, cn.c.opts.maxPacket+1024)
			if err != nil {
				return err
			}
			if err := cn.handle(frame); err != nil {
				return err
			}
			select {
			case <-r.done:
				done = true
			default:
			}
		}
		if r.err != nil {
			return fmt.Errorf("%v at reattach: %w", r.op, r.err)
		}
	}
	return nil
}

// serve runs an attached connection until it is lost, then fails the
// requests that were awaiting replies on it.
func (c *Client) serve(cn *conn) {
	c.mu.Lock()
	c.state, c.server = StateConnected, cn.addr
	c.mu.Unlock()
	c.readyOnce.Do(func() { close(c.ready) })
	c.emit(Event{Type: proto.EventNone, State: StateConnected, Server: cn.addr})

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cn.writeLoop()
	}()
	err := cn.readLoop()
	cn.close()
	wg.Wait()
	cn.failPending(proto.ErrConnectionLoss)
	c.untrack(cn.nc, StateDisconnected)
	if !c.closing.Load() {
		c.log.Warn("connection lost", "server", cn.addr, "session", hexID(c.SessionID()), "err", err)
	}
}

// readLoop matches replies to pending requests until the connection
// fails or stays silent too long.
func (cn *conn) readLoop() error {
	for {
		cn.nc.SetReadDeadline(time.Now().Add(cn.readTimeout()))
		frame, err := proto.ReadFrame(cn.br, cn.c.opts.maxPacket+1024)
		if err != nil {
			return err
		}
		if err := cn.handle(frame); err != nil {
			return err
		}
	}
}

// handle dispatches one frame: a watch notification, or the reply of the
// oldest pending request (ZooKeeper answers in order).
func (cn *conn) handle(frame []byte) error {
	c := cn.c
	d := proto.NewDecoder(frame)
	var h proto.ReplyHeader
	h.Decode(d)
	if d.Err() != nil {
		return fmt.Errorf("reply header: %w", d.Err())
	}
	if h.Xid == proto.XidNotification {
		var ev proto.WatcherEvent
		if err := proto.Unmarshal(d.Rest(), &ev); err != nil {
			return fmt.Errorf("notification: %w", err)
		}
		c.w.trigger(Event{Type: ev.Type, State: StateConnected, Path: ev.Path, Zxid: h.Zxid})
		return nil
	}
	r := cn.pop()
	if r == nil {
		return fmt.Errorf("reply with xid %d and no request outstanding", h.Xid)
	}
	if r.xid != h.Xid {
		c.finish(r, 0, proto.ErrConnectionLoss, nil)
		return fmt.Errorf("reply with xid %d, expected %d", h.Xid, r.xid)
	}
	if r.op != proto.OpPing {
		c.seen(h.Zxid)
	}
	c.acked(r.sent)
	if h.Err == proto.ErrSessionExpired {
		cn.expired.Store(true)
	}
	c.finish(r, h.Zxid, codeErr(h.Err), d.Rest())
	return nil
}

// write queues a request's frame on bw and adds it to pending. A request
// its caller abandoned before it went out is dropped.
func (cn *conn) write(bw *bufio.Writer, r *request) error {
	if r.state.Load() != waiting {
		cn.c.finish(r, 0, proto.ErrConnectionLoss, nil)
		return nil
	}
	if r.xid == 0 {
		r.xid = cn.c.nextXid()
		binary.BigEndian.PutUint32(r.frame[4:], uint32(r.xid))
	}
	r.sent = time.Now()
	cn.push(r)
	_, err := bw.Write(r.frame)
	return err
}

func (c *Client) nextXid() int32 {
	x := c.xid.Add(1)
	if x <= 0 {
		x = 1
		c.xid.Store(x)
	}
	return x
}

// writeLoop sends queued requests in order, batching what is queued
// together, and pings when nothing else went out for a third of the
// session timeout.
func (cn *conn) writeLoop() {
	c := cn.c
	bw := bufio.NewWriterSize(cn.nc, 64<<10)
	ping := time.NewTicker(cn.timeout / 3)
	defer ping.Stop()
	busy := false
	for {
		var r *request
		select {
		case <-cn.dead:
			return
		case <-ping.C:
			if busy {
				busy = false
				continue
			}
			r = newRequest(proto.OpPing, proto.XidPing, proto.Empty{}, nil)
			r.internal = true
		case r = <-c.queue:
			busy = true
		}
		cn.nc.SetWriteDeadline(time.Now().Add(cn.readTimeout()))
		err := cn.write(bw, r)
	batch:
		for err == nil && bw.Buffered() < 32<<10 {
			select {
			case r = <-c.queue:
				err = cn.write(bw, r)
			default:
				break batch
			}
		}
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			cn.close()
			return
		}
	}
}
