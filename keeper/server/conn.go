package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// conn is one client connection: a reader that decodes requests in order
// and a writer that sends replies in the same order.
type conn struct {
	s        *Server
	nc       net.Conn
	br       *bufio.Reader
	q        *outq
	session  int64
	timeout  int32
	ids      []proto.ID
	ip       string
	remote   string      // the client's address, for logs and cons
	counted  bool        // counts against its IP's connection cap (under s.mu)
	draining atomic.Bool // close has begun: what the reader sees now is not the client's fault
	member   bool        // the other end proved it is a member: it may send the cross-shard protocol
	routed   bool        // opened by this node's client endpoint for one of its clients (ServeRouted)
	link     bool        // routed, and a handshake naming an unknown session creates it with that id
	attached bool        // session and timeout are set for good (under s.mu)
	moved    atomic.Bool
	// overQueued: the queue passed its bound and the connection closes.
	overQueued atomic.Bool
	// eventIDs is ids for the apply, which checks a watch event against
	// them (watches.trigger); set with ids.
	eventIDs atomic.Pointer[[]proto.ID]
	// clickhouse: the client read one of ClickHouse Keeper's system nodes
	// (/keeper/...), as ClickHouse's client does first: its multiReads are
	// answered in ClickHouse Keeper's form and set the watches their reads
	// ask for, and its multis answer a create2 with its stat (reader
	// only). The node endpoint's connections answer failed reads in
	// ZooKeeper's form, set the watches and answer the stats; it converts.
	clickhouse bool
	// watchesRefused: the connection was refused a watch past a bound, and
	// that was logged (reader only).
	watchesRefused bool
	watchCount     int // its watches, as watches counts them (under s.watches.mu)

	id        uint64       // unique on this member, growing across restarts (Server.nextConnID)
	writes    *writes      // the connection's writes on their way
	lastWrite *slot        // reads wait for the session's earlier writes
	mustApply atomic.Int64 // and for this member to apply this zxid (a write answered early)
	closing   chan struct{}
	closeOnce sync.Once
	// ctx ends when the connection closes (with closing); xslots holds a
	// token per cross-shard transaction of the connection in flight.
	ctx    context.Context
	cancel context.CancelFunc
	xslots chan struct{}
	reason atomic.Value

	unsent int           // bytes of replies the reader queued since it last sent (reader only)
	wmu    sync.Mutex    // held while sending: by the writer, or by the reader for its own replies
	bw     *bufio.Writer // under wmu
	frames [][]byte      // under wmu

	received, sent atomic.Int64
	lastZxid       atomic.Int64
	established    time.Time
}

func newConn(s *Server, nc net.Conn, remote net.Addr) *conn {
	ip := "127.0.0.1"
	if a, ok := remote.(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	// A small buffer until the connection shows what it is: a silent
	// stranger costs little; a session gets a large one (see serve).
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, 256), ip: ip, remote: remote.String(),
		ids: []proto.ID{{Scheme: "ip", ID: ip}}, closing: make(chan struct{}), established: time.Now(), id: s.nextConnID()}
	ids := c.ids
	c.eventIDs.Store(&ids)
	c.q = newOutq(int64(s.cfg.MaxQueuedBytes), c.queuedTooMuch)
	c.writes = newWrites(c)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.xslots = make(chan struct{}, maxXInFlight)
	return c
}

// maxXInFlight bounds the cross-shard transactions one connection runs at
// once (each is a driver on this member); ZooKeeper clients pipeline far
// fewer writes than that.
const maxXInFlight = 64

// shutdown closes the connection once, logging why.
func (c *conn) shutdown(reason string) {
	c.closeOnce.Do(func() {
		c.reason.Store(reason)
		close(c.closing)
		c.cancel()
		c.nc.Close()
		c.q.shut()
	})
}

// expire closes the connection after the replies already queued.
func (c *conn) expire() { c.q.push(&slot{ready: true, close: true}) }

// queuedTooMuch closes a client connection whose queue passed its bound
// (Config.MaxQueuedBytes) and logs that once: the client does not read
// what it is sent, or not nearly as fast, and ZooKeeper too closes a
// client that falls that far behind. A member's link is the cluster's
// own, and stays.
func (c *conn) queuedTooMuch() {
	if c.member || !c.overQueued.CompareAndSwap(false, true) {
		return
	}
	c.s.log.Warn("closing a connection that does not read what it is sent", "queued_bytes", c.q.queued.Load(),
		"bound", "keeper.max_queued_bytes_per_connection", "max", c.s.cfg.MaxQueuedBytes,
		"session", hexID(c.session), "remote", c.remote)
	c.shutdown("queued bytes past the bound")
}

// serve reads the first four bytes to tell a ZooKeeper handshake from a
// 4-letter word or a member's link, then runs the connection.
func (c *conn) serve() {
	defer c.s.forget(c)
	defer c.close()
	var head [4]byte
	wait := c.s.cfg.MaxSessionTimeout
	if c.overCap() {
		// Over its IP's cap: only a member's link may go on, and it says so
		// at once.
		wait = overCapWait
	}
	c.nc.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.ReadFull(c.br, head[:]); err != nil {
		if c.overCap() {
			c.s.refuseOverCap(c)
		}
		return
	}
	switch magic := string(head[:]); {
	case c.member:
		// A member's session from the peer port, authenticated there:
		// head is its handshake's length.
	case magic == replica.AdminMagic:
		if c.authenticateMember() {
			c.s.replica.ServeAdmin(c.nc)
		}
		return
	case magic == replica.BackupMagic:
		if c.authenticateMember() {
			c.nc.SetReadDeadline(time.Time{})
			c.s.backup(c.nc)
		}
		return
	case magic == peerlink.SessionMagic:
		if !c.authenticateMember() {
			return
		}
		if _, err := io.ReadFull(c.br, head[:]); err != nil {
			return
		}
	default:
		if c.overCap() {
			c.s.refuseOverCap(c)
			return
		}
	}
	if cmd, ok := fourLetterWords[string(head[:])]; ok {
		c.fourLetterWord(string(head[:]), cmd)
		return
	}
	c.br = bufio.NewReaderSize(c.br, 64<<10)
	if !c.handshake(int32(binary.BigEndian.Uint32(head[:]))) {
		return
	}
	c.nc.SetReadDeadline(time.Time{})
	go c.writeLoop()
	c.readLoop()
}

// overCap reports whether the connection is over its IP's cap. The
// endpoint's connections are capped by the endpoint, per client IP, and
// members' links by nothing.
func (c *conn) overCap() bool { return !c.counted && !c.routed && !c.member }

// overCapWait is how long a connection over its IP's cap has to announce
// itself as a member's link.
const overCapWait = time.Second

// authenticateMember runs the member proof on a link that announced itself
// as a member's. The link then no longer counts against its IP's cap, may
// use the cross-shard protocol, and (a member session) speaks ZooKeeper's
// protocol over the authenticated stream.
func (c *conn) authenticateMember() bool {
	if c.s.cfg.Peers == nil {
		return false
	}
	authed, err := c.s.cfg.Peers.Serve(&bufferedConn{Conn: c.nc, r: c.br})
	if err != nil {
		return false
	}
	c.s.mu.Lock() // Close reads nc under mu
	c.nc = authed
	c.s.uncountLocked(c)
	c.s.mu.Unlock()
	c.br, c.member = bufio.NewReaderSize(authed, 256), true
	c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.MaxSessionTimeout))
	return true
}

// fourLetterWord answers a 4-letter word that the operator allows, and
// refuses the others as ZooKeeper does.
func (c *conn) fourLetterWord(word string, cmd func(*Server) string) {
	if !c.s.allows(word) {
		c.nc.Write([]byte(word + " is not executed because it is not in the whitelist.\n"))
		return
	}
	c.nc.Write([]byte(cmd(c.s)))
}

// close ends the connection so that what was written reaches the client:
// a close with unread input makes the kernel send a reset, which can
// overtake the last reply. So the server half-closes, reads what the
// client still sends for a moment, then closes.
func (c *conn) close() {
	if !c.draining.CompareAndSwap(false, true) {
		return // another goroutine is closing it
	}
	select {
	case <-c.closing:
		return // already closed (by Close, or hard on a failure)
	default:
	}
	nc := c.nc
	if b, ok := nc.(*bufferedConn); ok {
		nc = b.Conn // the reader may still be reading the buffer
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		nc.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.CopyN(io.Discard, nc, lingerBytes)
	}
	c.shutdown("done")
}

// The bounds of close's drain.
const (
	lingerTimeout = time.Second
	lingerBytes   = 1 << 20
)

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// CloseWrite half-closes the connection under the buffer.
func (b *bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *conn) fail(format string, err error) {
	c.s.stats.malformed.Add(1)
	c.s.log.Warn("closing connection: "+format, "remote", c.remote, "session", hexID(c.session), "err", err)
	c.shutdown(format)
}

// handshake answers the connect request: a new session, or a reattach by
// id and password.
func (c *conn) handshake(n int32) bool {
	body, err := proto.ReadFrameBody(c.br, n, c.s.cfg.MaxPacket)
	if err != nil {
		c.fail("bad connect frame", err)
		return false
	}
	var req proto.ConnectRequest
	d := proto.NewDecoder(body)
	req.Decode(d)
	if d.Err() != nil {
		c.fail("bad connect request", d.Err())
		return false
	}
	timeout := time.Duration(req.Timeout) * time.Millisecond
	timeout = min(max(timeout, c.s.cfg.MinSessionTimeout), c.s.cfg.MaxSessionTimeout)
	c.timeout = int32(timeout.Milliseconds())
	var zxid int64
	c.s.replica.View(func(st *fsm.State) { zxid = st.Zxid() })
	if req.LastZxidSeen > zxid && !c.s.replica.WaitZxid(req.LastZxidSeen, timeout/2) {
		c.s.log.Info("refusing a client ahead of this member", "client_zxid", req.LastZxidSeen, "zxid", zxid)
		return false
	}
	resp := proto.ConnectResponse{Timeout: c.timeout, HasReadOnly: req.HasReadOnly}
	if req.SessionID == 0 {
		resp.Passwd = make([]byte, proto.PasswordLen)
		rand.Read(resp.Passwd)
		if !c.createSession(&resp) {
			return false
		}
	} else if valid, ok := c.reattach(&req, &resp); !valid && c.link {
		// The endpoint's session on this shard for its client's session:
		// the same id and password.
		resp.SessionID, resp.Passwd = req.SessionID, req.Passwd
		if !c.createSession(&resp) {
			return false
		}
	} else if !valid {
		// An unknown session or a wrong password: ZooKeeper's answer is a
		// zero timeout and session id, which clients read as "expired".
		c.nc.Write(proto.AppendFrame(nil, &proto.ConnectResponse{Passwd: make([]byte, proto.PasswordLen), HasReadOnly: req.HasReadOnly}))
		return false
	} else if !ok {
		return false // could not move the session here now: the client tries again
	}
	c.session = resp.SessionID
	c.s.attach(c)
	c.s.touch(c.session)
	if _, err := c.nc.Write(proto.AppendFrame(nil, &resp)); err != nil {
		return false
	}
	return true
}

// createSession creates the session resp describes (its password, and its
// id unless 0), and sets resp's id.
func (c *conn) createSession(resp *proto.ConnectResponse) bool {
	res := c.s.replica.Do(fsm.Request{Member: c.s.replica.ID(), Op: proto.OpCreateSession,
		Body: proto.Marshal(&fsm.CreateSession{Timeout: c.timeout, Passwd: resp.Passwd, ID: resp.SessionID})})
	if res.Err != proto.ErrOK {
		return false
	}
	resp.SessionID = res.Session
	return true
}

// reattach takes over an existing session: valid reports whether the id
// and password name a live session, ok whether it now belongs here.
func (c *conn) reattach(req *proto.ConnectRequest, resp *proto.ConnectResponse) (valid, ok bool) {
	var here bool
	check := func() {
		c.s.replica.View(func(st *fsm.State) {
			ss := st.Session(req.SessionID)
			if ss != nil && bytes.Equal(ss.Passwd, req.Passwd) {
				valid, here = true, ss.Owner == c.s.replica.ID()
				c.timeout = ss.Timeout
				if here && ss.LastConn() >= c.id {
					// This member's clock went back across a restart: the
					// connection's writes must follow the older one's.
					c.id = c.s.connIDAbove(ss.LastConn())
				}
			}
		})
	}
	check()
	if !valid {
		// This member may simply be behind (it has not applied the session's
		// creation yet): only an answer after a barrier through the log may
		// call the session expired.
		if _, code := c.s.replica.Barrier(); code != proto.ErrOK {
			return true, false
		}
		check()
	}
	if !valid {
		return false, false
	}
	if !here {
		res := c.s.replica.Do(fsm.Request{Session: req.SessionID, Member: c.s.replica.ID(), Op: fsm.OpSessionOwner})
		if res.Err == proto.ErrSessionExpired {
			return false, false
		}
		if res.Err != proto.ErrOK {
			return true, false
		}
	}
	resp.SessionID, resp.Passwd, resp.Timeout = req.SessionID, req.Passwd, c.timeout
	return true, true
}

func (c *conn) writeLoop() {
	for {
		select {
		case <-c.q.wake:
		case <-c.closing:
			return
		}
		if !c.send() {
			return
		}
	}
}

// send writes, in order, every frame the queue has ready; false once the
// connection ends (a reply that closes it was sent, or a write failed).
func (c *conn) send() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.sendLocked()
}

// sendNow is the reader's send, after a request it answered itself (a
// read): it writes the replies at once instead of waking the writer,
// which would cost a wakeup of another goroutine per read. If the writer
// is busy writing, it is woken to send them after what it has.
func (c *conn) sendNow() bool {
	if !c.wmu.TryLock() {
		c.q.signal()
		return true
	}
	defer c.wmu.Unlock()
	return c.sendLocked()
}

func (c *conn) sendLocked() bool {
	if c.bw == nil {
		c.bw = bufio.NewWriterSize(c.nc, 64<<10)
	}
	for {
		frames, messages, cost, closeNow := c.q.next(c.frames[:0])
		for _, f := range frames {
			if len(f) > c.bw.Available() {
				c.armWrite() // the buffer goes to the socket
			}
			if _, err := c.bw.Write(f); err != nil {
				c.shutdown("write failed")
				return false
			}
		}
		clear(frames)
		c.frames = frames
		if len(frames) > 0 {
			c.armWrite()
			if c.bw.Flush() != nil {
				c.shutdown("write failed")
				return false
			}
			c.q.release(cost)
			c.sent.Add(int64(messages))
			c.s.stats.sent.Add(int64(messages))
		}
		if closeNow {
			c.close()
			return false
		}
		if len(frames) == 0 {
			return true
		}
	}
}

func (c *conn) readLoop() {
	for {
		frame, err := proto.ReadFrame(c.br, c.s.cfg.MaxPacket)
		if err != nil {
			select {
			case <-c.closing:
			default:
				if !c.draining.Load() && (errors.Is(err, proto.ErrFrameTooLarge) || errors.Is(err, io.ErrUnexpectedEOF)) {
					c.fail("bad frame", err)
				}
			}
			return
		}
		c.received.Add(1)
		c.s.stats.received.Add(1)
		c.s.touch(c.session)
		ok := c.handle(frame)
		switch {
		case c.unsent >= maxUnsent:
			// The client pipelines faster than it reads: wait for the
			// writer rather than queue more.
			ok = c.send() && ok
			c.unsent = 0
		case !ok || !c.frameBuffered():
			// Replies to requests pipelined behind this one go out together
			// with its own.
			ok = c.sendNow() && ok
			c.unsent = 0
		}
		if !ok {
			// A reply that ends the connection may still be queued behind
			// the writer: let it go before the connection closes.
			select {
			case <-c.closing:
			case <-time.After(closeFlushTimeout):
			}
			return
		}
	}
}

// armWrite bounds the socket write that follows: a client that takes
// nothing of it in a whole session timeout is gone, and its connection
// ends (and with it the reader, which stops reading while it waits to send
// its replies, so an unread backlog never grows here).
func (c *conn) armWrite() { c.nc.SetWriteDeadline(time.Now().Add(c.sessionTimeout())) }

// sessionTimeout is the session's negotiated timeout.
func (c *conn) sessionTimeout() time.Duration {
	if c.timeout <= 0 {
		return c.s.cfg.MaxSessionTimeout
	}
	return time.Duration(c.timeout) * time.Millisecond
}

// frameBuffered reports whether the reader already holds the whole next
// request, so that reading it cannot wait on the client.
func (c *conn) frameBuffered() bool {
	if c.br.Buffered() < 4 {
		return false
	}
	head, _ := c.br.Peek(4) // buffered: Peek does not read
	return c.br.Buffered()-4 >= int(binary.BigEndian.Uint32(head))
}

// maxUnsent bounds the bytes of replies the reader queues before it waits
// for them to be sent.
const maxUnsent = 1 << 20

// closeFlushTimeout bounds the wait for a connection's last reply.
const closeFlushTimeout = 5 * time.Second

// reply queues a finished reply; only the reader calls it, and readLoop
// sends it.
func (c *conn) reply(xid int32, zxid int64, code proto.Code, resp proto.Record, closeAfter bool) {
	s := &slot{ready: true, close: closeAfter}
	if cr, ok := resp.(*proto.ChildrenResponse); ok && code == proto.ErrOK {
		s.frame, s.vector, s.tail = cr.AppendFrameParts(nil, &proto.ReplyHeader{Xid: xid, Zxid: zxid, Err: code})
	} else {
		s.frame = c.encode(xid, zxid, code, resp)
	}
	c.unsent += len(s.frame) + len(s.vector) + len(s.tail)
	c.q.add(s) // the reader sends it (readLoop)
}

func (c *conn) encode(xid int32, zxid int64, code proto.Code, resp proto.Record) []byte {
	if c.routed {
		code, resp = unlocked(code), unlockedResults(resp)
	}
	h := proto.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}
	if code != proto.ErrOK || resp == nil {
		return proto.AppendFrame(nil, &h)
	}
	return proto.AppendFrame(nil, &h, resp)
}

// unlocked is what the endpoint's clients hear for code: they know
// ZooKeeper's codes alone, and a request still locked after the lock wait
// (not applied) is, to them, one that timed out.
func unlocked(code proto.Code) proto.Code {
	if code == proto.ErrLocked {
		return proto.ErrOperationTimeout
	}
	return code
}

// unlockedResults applies unlocked to a multi's results.
func unlockedResults(resp proto.Record) proto.Record {
	m, ok := resp.(*proto.MultiResponse)
	if !ok || !slices.ContainsFunc(m.Results, func(r proto.MultiResult) bool { return r.Err == proto.ErrLocked }) {
		return resp
	}
	out := &proto.MultiResponse{Results: slices.Clone(m.Results)}
	for i := range out.Results {
		out.Results[i].Err = unlocked(out.Results[i].Err)
	}
	return out
}

func (c *conn) zxid() int64 {
	var z int64
	c.s.replica.View(func(st *fsm.State) { z = st.Zxid() })
	return z
}

// waitWrites blocks until the session's earlier writes have applied here,
// so a read sees them: until their replies are ready, and then, for a
// write answered early with the leader's result, until this member has
// applied it. Every read also waits for the writes answered early to any
// session here (Server.earlyZxid): as with ZooKeeper, whatever a member
// has acknowledged, every read it serves afterwards shows. It returns false if the connection closes first, or if the
// member does not catch up within the session timeout (the connection is
// then dropped and the client retries elsewhere).
func (c *conn) waitWrites() bool {
	if c.lastWrite != nil {
		select {
		case <-c.lastWrite.done:
			c.lastWrite = nil
		case <-c.closing:
			return false
		}
	}
	z := max(c.mustApply.Load(), c.s.earlyZxid.Load())
	if z == 0 {
		return true
	}
	if !c.s.replica.WaitApplied(z, time.Duration(c.timeout)*time.Millisecond, c.closing) {
		c.shutdown("member behind the session's write")
		return false
	}
	c.mustApply.CompareAndSwap(z, 0)
	return true
}

// handle serves one request; false ends the connection.
func (c *conn) handle(frame []byte) bool {
	d := proto.NewDecoder(frame)
	var h proto.RequestHeader
	h.Decode(d)
	if d.Err() != nil {
		c.fail("bad request header", d.Err())
		return false
	}
	if c.moved.Load() {
		c.reply(h.Xid, c.zxid(), proto.ErrSessionMoved, nil, true)
		return false
	}
	if !proto.IsWrite(h.OpCode) && c.attached && c.stale() {
		// A ping or a read this member cannot answer for: see vouches.
		c.shutdown("no contact with the shard's leader")
		return false
	}
	if h.OpCode == proto.OpPing {
		if !c.waitWrites() {
			return false
		}
		c.reply(h.Xid, c.zxid(), proto.ErrOK, nil, false)
		return true
	}
	if h.OpCode == proto.OpReconfig {
		// Membership is the cluster file's business, as in a ZooKeeper
		// without reconfigEnabled.
		c.reply(h.Xid, c.zxid(), proto.ErrReconfigDisabled, nil, false)
		return true
	}
	req := proto.NewRequest(h.OpCode)
	if proto.MemberOnly(h.OpCode) && !c.member {
		req = nil // the cross-shard protocol is for members alone
	}
	if req == nil {
		// ZooKeeper's UnimplementedRequestProcessor: zxid -1, then close.
		c.s.log.Warn("unknown opcode", "op", h.OpCode, "session", hexID(c.session))
		c.reply(h.Xid, -1, proto.ErrUnimplemented, nil, true)
		return false
	}
	body := d.Rest()
	d = proto.NewDecoder(body)
	req.Decode(d)
	trailing := d.Remaining() > 0 // bytes after the record, which ZooKeeper ignores
	if d.Err() != nil {
		if proto.IsWrite(h.OpCode) {
			// As in ZooKeeper, a write that does not decode (a multi that
			// mixes reads and writes) still takes a zxid and is answered
			// with a marshalling error; the connection stays.
			c.write(h, body, nil, time.Now())
			return true
		}
		c.fail("bad "+h.OpCode.String()+" request", d.Err())
		return false
	}
	if !c.routed && proto.NamesEndpointSessions(req) {
		c.reply(h.Xid, c.zxid(), proto.ErrNoAuth, nil, false)
		return true
	}
	switch {
	case h.OpCode == proto.OpAuth:
		return c.auth(h.Xid, req.(*proto.AuthPacket))
	case h.OpCode == proto.OpWhoAmI:
		resp := &proto.WhoAmIResponse{}
		for _, id := range c.ids {
			resp.IDs = append(resp.IDs, proto.ID{Scheme: id.Scheme, ID: fsm.UserName(id)})
		}
		c.reply(h.Xid, c.zxid(), proto.ErrOK, resp, false)
		return true
	case h.OpCode == proto.OpSetWatches || h.OpCode == proto.OpSetWatches2:
		return c.setWatches(h.Xid, req.(*proto.SetWatchesRequest))
	case h.OpCode == proto.OpAddWatch || h.OpCode == proto.OpRemoveWatches || h.OpCode == proto.OpCheckWatches:
		return c.watchRequest(h, req)
	case h.OpCode == proto.OpXTransaction:
		c.xtransaction(h, req.(*proto.XTransactionRequest))
		return true
	case proto.IsWrite(h.OpCode):
		start := c.s.stats.begin()
		if h.OpCode == proto.OpXPrepare {
			if c.busy(h.Xid, req) {
				return true
			}
		} else {
			c.awaitUnlocked(h.OpCode, req, start.Add(c.lockPatience()))
		}
		if proto.BoundRemoveRecursive(req) || trailing {
			body = proto.Marshal(req)
		}
		c.write(h, body, req, start) // the record as the client encoded it (bounded): it decodes to req everywhere
		return true
	}
	start := c.s.stats.begin()
	defer func() { c.s.stats.observe(h.OpCode, time.Since(start)) }()
	return c.read(h, req)
}

// lockWait is how long the connection's requests wait for a lock (0:
// they are refused with ErrLocked).
func (c *conn) lockWait() time.Duration {
	if c.routed && c.s.cfg.LockWait <= 0 {
		return c.s.cfg.RoutedLockWait
	}
	return c.s.cfg.LockWait
}

// busy answers a patient prepare that meets a lock now with ErrLocked,
// without applying it (the shard records nothing), and reports whether it
// did. The driver sends it again until keeper.lock_grace has passed, the
// last time not patient: waiting here would hold this member link's later
// messages behind it, the commit that releases the lock among them.
func (c *conn) busy(xid int32, req proto.Record) bool {
	if p, ok := req.(*proto.XPrepareRequest); !ok || !p.Patient {
		return false
	}
	if locked, _ := c.s.replica.Locked(proto.OpXPrepare, req); !locked {
		return false
	}
	sl := &slot{done: make(chan struct{})}
	c.q.push(sl)
	c.q.fill(sl, c.encode(xid, c.zxid(), proto.ErrLocked, nil), false)
	return true
}

// lockPatience is how long the connection's requests wait for a lock
// before meeting it: in delay mode lockWait, else the grace in which a
// committed transaction's locks go.
func (c *conn) lockPatience() time.Duration {
	if w := c.lockWait(); w > 0 {
		return w
	}
	return c.s.cfg.LockGrace
}

// awaitUnlocked, for up to lockPatience, waits until no pending cross-shard
// transaction locks a path the request touches, or until deadline. The
// reader waits with it, so the session's later requests stay behind. For a
// write this is only the first line: a lock taken between this check and
// the write's apply holds the write back in the state machine in delay
// mode (see writes), and refuses it in reject mode.
func (c *conn) awaitUnlocked(op proto.OpCode, req proto.Record, deadline time.Time) {
	if c.lockPatience() <= 0 || req == nil {
		return
	}
	c.s.replica.AwaitUnlocked(op, req, deadline, c.closing)
	if c.lockWait() > 0 || c.s.cfg.Takeover <= 0 {
		return
	}
	// Reject mode, still locked after the grace: the transactions in the
	// way may include one whose driver died after answering, which its
	// coordinator takes over Takeover after its prepare (found by a
	// recovery round, then committed). Wait for those transactions to be
	// decided, not for the path to be free (other transactions may lock it
	// meanwhile, and their requests meet them afresh): until the newest
	// one's takeover and a grace more, bounded from now the same and by a
	// third of the session's timeout, so that the client's pings, which
	// wait behind, keep it. The replies queued so far go out first.
	ids, since := c.s.replica.Stoppers(op, req)
	if len(ids) == 0 {
		return
	}
	wait := c.s.cfg.Takeover + 2*c.s.cfg.LockGrace + takeoverRound
	now := time.Now()
	until := time.UnixMilli(since).Add(wait)
	if limit := now.Add(min(wait, c.sessionTimeout()/3)); until.After(limit) {
		until = limit
	}
	if !until.After(now) {
		return
	}
	c.sendNow()
	c.unsent = 0
	c.s.replica.AwaitDecided(ids, until, c.closing)
}

// takeoverRound is what a takeover takes after Takeover: the recovery
// round that finds the transaction (every 200 ms; official time moves on
// an idle shard every other round) and the round of its messages.
const takeoverRound = 600 * time.Millisecond

// write submits a write (its encoded request record, and the decoded one
// if it decoded) and queues its slot; the reply fills in when this member
// applies it, or, if the write may be answered early, when the leader's
// result arrives.
func (c *conn) write(h proto.RequestHeader, body []byte, req proto.Record, start time.Time) {
	sl := &slot{done: make(chan struct{})}
	c.q.push(sl)
	c.lastWrite = sl
	closeAfter := h.OpCode == proto.OpCloseSession
	// A create2 in a multi is answered with its stat in ClickHouse
	// Keeper's dialect (the node endpoint converts for its own clients),
	// with a create's path alone in ZooKeeper's.
	zkCreates, _ := req.(*proto.MultiRequest)
	if c.clickhouse || c.routed || zkCreates != nil && !zkCreates.HoldsCreate2() {
		zkCreates = nil
	}
	c.writes.send(&write{
		req: fsm.Request{Session: c.session, Member: c.s.replica.ID(), Op: h.OpCode, IDs: c.ids, Body: body},
		rec: req, early: c.earlyOK(h.OpCode, req), deadline: start.Add(c.lockWait()),
		done: func(res fsm.Result) {
			c.s.stats.observe(h.OpCode, time.Since(start))
			if res.Err == proto.ErrConnectionLoss {
				c.q.fill(sl, nil, true) // outcome unknown: drop the client, as ZooKeeper does
				return
			}
			c.lastZxid.Store(res.Zxid)
			// Later requests of the session, and later reads of every session
			// here, wait until this member applies the write.
			raise(&c.mustApply, res.Zxid)
			raise(&c.s.earlyZxid, res.Zxid)
			end := closeAfter || res.Err == proto.ErrSessionExpired || res.Err == proto.ErrSessionMoved
			if zkCreates != nil && res.Err == proto.ErrOK {
				res.Resp = zooKeeperForm(res.Resp, zkCreates.Ops)
			}
			c.q.fill(sl, c.encode(h.Xid, res.Zxid, res.Err, res.Resp), end)
		},
	})
}

// zooKeeperForm returns resp, the answer to a multi of ops, in ZooKeeper's
// form (proto.MultiResponse.ZooKeeperForm), decoded first if it came
// encoded (an early reply's proto.Raw, the leader's result).
func zooKeeperForm(resp proto.Record, ops []proto.MultiOp) proto.Record {
	switch r := resp.(type) {
	case *proto.MultiResponse:
		return r.ZooKeeperForm(ops)
	case *proto.Raw:
		if m, ok := proto.ZooKeeperFormOf(*r, ops); ok {
			return m
		}
	}
	return resp
}

// raise sets v to z if z is greater.
func raise(v *atomic.Int64, z int64) {
	for {
		old := v.Load()
		if old >= z || v.CompareAndSwap(old, z) {
			return
		}
	}
}

// earlyOK reports whether a write may be answered with the leader's result
// before this member applies it. Only the znode writes qualify (not
// closeSession, sync, nor the cross-shard protocol), and only on a
// connection that holds no watch: ZooKeeper sends a watch event before the
// reply of any later write of the watching session, the event comes from
// this member's own apply, and the write may fire one itself or follow
// another session's write that does.
func (c *conn) earlyOK(op proto.OpCode, req proto.Record) bool {
	if !c.s.cfg.EarlyReplies || req == nil || c.s.replica.IsLeader() {
		return false
	}
	switch op {
	case proto.OpCreate, proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL, proto.OpDelete,
		proto.OpDeleteContainer, proto.OpSetData, proto.OpSetACL, proto.OpMulti, proto.OpCheck,
		proto.OpCreateIfNotExists, proto.OpCheckNotExists, proto.OpTryRemove, proto.OpRemoveRecursive, proto.OpCheckStat:
	default:
		return false
	}
	return !c.s.watches.holds(c)
}

// xtransaction hands a cross-shard transaction to the coordinator service
// and queues its reply like a write's: later requests of the session are
// answered after it.
func (c *conn) xtransaction(h proto.RequestHeader, req *proto.XTransactionRequest) {
	sl := &slot{done: make(chan struct{})}
	c.q.push(sl)
	c.lastWrite = sl
	run := c.s.cfg.XTransaction
	if run == nil {
		c.q.fill(sl, c.encode(h.Xid, c.zxid(), proto.ErrUnimplemented, nil), false)
		return
	}
	ids := c.ids
	start := c.s.stats.begin()
	// At most maxXInFlight of the connection's transactions run at once:
	// the next waits here, and so does the connection's reading (a client
	// that pipelines thousands starts no more than that many drivers).
	select {
	case c.xslots <- struct{}{}:
	case <-c.closing:
		c.q.fill(sl, c.encode(h.Xid, c.zxid(), proto.ErrConnectionLoss, nil), false)
		return
	}
	go func() {
		defer func() {
			<-c.xslots
			c.s.stats.observe(h.OpCode, time.Since(start))
		}()
		resp, err := run(c.ctx, req, ids)
		if err != nil {
			// A ZooKeeper code inside the error is the answer; anything else
			// (the coordinator lost its way, shards unreachable) means the
			// outcome is not known yet: the client retries with the same id.
			var code proto.Code
			if !errors.As(err, &code) {
				code = proto.ErrOperationTimeout
			}
			c.s.log.Debug("cross-shard transaction", "id", req.ID, "err", err)
			c.q.fill(sl, c.encode(h.Xid, c.zxid(), code, nil), false)
			return
		}
		c.q.fill(sl, c.encode(h.Xid, c.zxid(), proto.ErrOK, resp), false)
	}()
}

func (c *conn) read(h proto.RequestHeader, req proto.Record) bool {
	if !c.waitWrites() {
		return false
	}
	c.awaitUnlocked(h.OpCode, req, time.Now().Add(c.lockPatience()))
	if r, ok := req.(*proto.PathWatchRequest); ok && !c.routed && proto.UnderKeeperSystem(r.Path) {
		if c.s.cfg.HideKeeperSystem {
			c.reply(h.Xid, c.zxid(), proto.ErrNoNode, nil, false)
			return true
		}
		c.clickhouse = true
	}
	c.s.replica.View(func(st *fsm.State) {
		resp, code, set := c.readOn(st, h.OpCode, req)
		if !c.member {
			resp = redactRecords(resp)
		}
		if m, ok := resp.(*proto.MultiResponse); ok && c.clickhouse {
			resp = m.ClickHouseKeeperForm(req.(*proto.MultiRequest).Ops)
		}
		if len(set) > 0 {
			// Past a watch bound the read is refused whole: answered
			// without the watch, the client would wait for an event
			// that never comes.
			if b, ok := c.s.watches.addReads(c, set); !ok {
				c.refuseWatches(b)
				resp, code = nil, proto.ErrQuotaExceeded
			}
		}
		c.reply(h.Xid, st.Zxid(), code, resp, false)
	})
	return true
}

// readOn answers a read on st and returns the watches it leaves. A
// multiRead's reads leave theirs (MULTI_WATCHES) in ClickHouse Keeper's
// dialect, and on the node endpoint's connections (it drops the flags of
// its clients in ZooKeeper's); in ZooKeeper's, as ZooKeeper 3.8, none.
func (c *conn) readOn(st *fsm.State, op proto.OpCode, req proto.Record) (proto.Record, proto.Code, []fsm.ReadWatch) {
	if m, ok := req.(*proto.MultiRequest); ok && op == proto.OpMultiRead && (c.clickhouse || c.routed) {
		return st.MultiRead(m, c.ids, c.s.cfg.MaxPacket)
	}
	resp, code, kind := st.ReadBounded(op, req, c.session, c.ids, c.s.cfg.MaxPacket)
	if kind == fsm.WatchNone {
		return resp, code, nil
	}
	return resp, code, []fsm.ReadWatch{{Path: watchedPath(req), Kind: kind}}
}

// redactRecords hides, from a client outside the cluster, what transaction
// records say of other callers: identities, ops and results.
func redactRecords(resp proto.Record) proto.Record {
	switch r := resp.(type) {
	case *proto.XListResponse:
		out := &proto.XListResponse{Time: r.Time, Records: make([]proto.XRecord, len(r.Records))}
		for i, rec := range r.Records {
			out.Records[i] = rec.Redacted()
		}
		return out
	case *proto.XRecord:
		red := r.Redacted()
		return &red
	}
	return resp
}

// auth adds an identity: digest from "user:password", ip from the
// connection's own address whatever the packet says (ZooKeeper's
// IPAuthenticationProvider). Any other scheme, or identities past the
// bounds (proto.MaxIdentities, proto.MaxIdentityBytes), fail as a bad
// credential does in ZooKeeper: ZAUTHFAILED, then the connection closes
// (the session stays until it expires; a client keeps the identities it
// was granted when it reconnects).
func (c *conn) auth(xid int32, a *proto.AuthPacket) bool {
	var add []proto.ID
	switch a.Scheme {
	case "digest":
		id := proto.ID{Scheme: "digest", ID: fsm.DigestID(string(a.Auth))}
		if super := c.s.cfg.SuperDigest; super != "" && subtle.ConstantTimeCompare([]byte(id.ID), []byte(super)) == 1 {
			add = append(add, proto.ID{Scheme: "super"})
		}
		add = append(add, id)
	case "ip":
		add = c.ids[:1] // the connection's ip identity, set when it opened
	default:
		return c.refuseAuth(xid, "unknown scheme", "scheme", a.Scheme)
	}
	ids := withIDs(c.ids, add)
	if n := identityBytes(ids); len(ids) > proto.MaxIdentities || n > proto.MaxIdentityBytes {
		return c.refuseAuth(xid, "identities past the bound", "identities", len(ids), "bytes", n)
	}
	c.ids = ids
	c.eventIDs.Store(&ids)
	c.reply(xid, 0, proto.ErrOK, nil, false)
	return true
}

// eventIdentities returns the identities a watch event is checked
// against: the connection's, as its last auth left them.
func (c *conn) eventIdentities() []proto.ID {
	if ids := c.eventIDs.Load(); ids != nil {
		return *ids
	}
	return nil
}

// refuseAuth answers an auth with ZAUTHFAILED and closes the connection,
// logging why: once, as the connection ends. It returns false.
func (c *conn) refuseAuth(xid int32, why string, args ...any) bool {
	c.s.log.Warn("auth failed: "+why, append(args, "session", hexID(c.session), "remote", c.remote)...)
	c.reply(xid, 0, proto.ErrAuthFailed, nil, true)
	return false
}

// withIDs returns ids with those of add it lacks appended, in a new slice
// if any is: running requests hold the old one.
func withIDs(ids, add []proto.ID) []proto.ID {
	for _, id := range add {
		if !slices.Contains(ids, id) {
			ids = append(ids[:len(ids):len(ids)], id)
		}
	}
	return ids
}

// identityBytes is the size of ids, schemes and ids, as proto.MaxIdentityBytes counts it.
func identityBytes(ids []proto.ID) int {
	n := 0
	for _, id := range ids {
		n += len(id.Scheme) + len(id.ID)
	}
	return n
}

// setWatches re-registers a reconnected client's watches; those whose node
// changed since the client's last zxid fire at once. For persistent and
// recursive watches (setWatches2), as in ZooKeeper, nothing fires for
// what changed while the client was away.
//
// A setWatches that would pass a watch bound is refused whole, answered
// ZQUOTAEXCEEDED, and its connection closed: it has no code per watch, and
// a ZooKeeper client ignores its reply's, so a refusal it could go on from
// would leave it believing in watches it does not have. Closed, it
// reconnects, to a member with room perhaps, and says it again.
func (c *conn) setWatches(xid int32, r *proto.SetWatchesRequest) bool {
	if !c.waitWrites() {
		return false
	}
	ok := true
	c.s.replica.View(func(st *fsm.State) {
		resolved := st.ResolveWatches(r)
		if b, fits := c.s.watches.restore(c, resolved, r); !fits {
			c.refuseWatches(b)
			c.reply(xid, st.Zxid(), proto.ErrQuotaExceeded, nil, true)
			ok = false
			return
		}
		for _, w := range resolved {
			if w.Fire != proto.EventNone {
				c.q.notify(notification(w.Fire, w.Path))
			}
		}
		c.reply(xid, st.Zxid(), proto.ErrOK, nil, false)
	})
	return ok
}
