package router

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// front is one client connection and its session: the session on the
// root shard, and the sessions behind it on the other shards.
type front struct {
	r    *Router
	nc   net.Conn
	br   *bufio.Reader
	ip   string
	root string

	session  int64
	timeout  int32
	rootZxid atomic.Int64 // the highest zxid the root shard answered with
	wmu      sync.Mutex   // orders writes to the client

	// Read and written by the reader goroutine alone, and by keepAlive's
	// retake under openMu (known and auths change under openMu only).
	passwd     []byte
	known      map[string]bool // the other shards this front session has a session on
	registered bool            // known is stored on the root shard
	auths      [][]byte        // the client's auth packets, replayed on each new session
	// clickhouse: the client read one of ClickHouse Keeper's system nodes
	// (/keeper/...), as ClickHouse's client does first: its multiReads are
	// answered in ClickHouse Keeper's form (the shards answer the
	// endpoint in ZooKeeper's) and keep their watch flags, and its multis'
	// create2 results their stats (which the shards answer the endpoint;
	// ZooKeeper's dialect drops them).
	clickhouse bool

	// openMu is held while a session's connection to a shard opens, and
	// while an identity is added (auths), so that keepAlive may take over
	// a shard's session (retake) while the reader serves the client:
	// known and auths change under it only.
	openMu sync.Mutex

	mu       sync.Mutex
	cond     *sync.Cond
	cur      string          // the shard the requests in flight went to
	untaken  map[string]bool // known shards whose session the reconnect could not take over yet
	retaking atomic.Bool     // keepAlive is taking one over
	inflight int
	backends map[string]*backend
	toClose  []*backend // retired, closed with the client's connection
	heard    time.Time  // when the client last sent a request
	busy     bool       // a request of the client is in hand
	ending   string     // why the connection ends after the request in hand
	expiring bool       // the session is being ended: no request goes on
	closed   bool
	gone     chan struct{} // closed with closed
}

var (
	errClosed = errors.New("router: connection closed")
	// errSessionClosed ends the connection of a client that closed its
	// session.
	errSessionClosed = errors.New("session closed")
	errExpired       = errors.New("router: a shard's session of the front session expired")
)

func newFront(r *Router, nc net.Conn) *front {
	ip := "127.0.0.1"
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	f := &front{r: r, nc: nc, br: bufio.NewReaderSize(nc, 64<<10), ip: ip, root: r.table.Root(),
		known: map[string]bool{}, backends: map[string]*backend{}, untaken: map[string]bool{}, gone: make(chan struct{})}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// end closes the client's connection once the request being handled is
// answered: a member connection ended, and what it answered last (an auth
// failure, an unknown opcode) still reaches the client first.
func (f *front) end(reason string) {
	f.mu.Lock()
	if f.ending == "" {
		f.ending = reason
	}
	f.nc.SetReadDeadline(time.Now()) // wakes the reader if it waits for a request
	f.mu.Unlock()
}

// close ends the client's connection and the member connections behind
// it; the sessions stay until they expire or the client comes back.
func (f *front) close(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	close(f.gone)
	f.nc.Close()
	for _, b := range f.backends {
		b.nc.Close()
	}
	for _, b := range f.toClose {
		b.nc.Close()
	}
	f.cond.Broadcast()
	f.r.log.Debug("client connection ends", "session", fmt.Sprintf("%#x", f.session), "reason", reason) // under mu, as handshake sets it
}

// maxConnectFrame tells a connect request (a few dozen bytes) from the
// first four bytes of a 4-letter word or a member's link.
const maxConnectFrame = 4096

func (f *front) serve() {
	f.nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	head, err := f.br.Peek(4)
	if err != nil {
		return
	}
	if n := int32(binary.BigEndian.Uint32(head)); n < 0 || n > maxConnectFrame {
		f.r.proxy(f.nc, f.br)
		return
	}
	if err := f.handshake(); err != nil {
		f.r.log.Debug("client handshake", "err", err)
		return
	}
	for {
		f.mu.Lock()
		ending := f.ending
		if ending == "" {
			f.nc.SetReadDeadline(time.Now().Add(2 * time.Duration(f.timeout) * time.Millisecond))
		}
		f.mu.Unlock()
		if ending != "" {
			f.close(ending)
			return
		}
		frame, err := proto.ReadFrame(f.br, f.r.cfg.MaxPacket)
		if err == nil {
			f.hear(true)
			err = f.handle(frame)
			f.hear(false)
			if err != nil && !errors.Is(err, errSessionClosed) {
				// A shard would not open the session with the client's id
				// (warn: not the client's doing), or a member connection
				// ended (a member closes it after an unknown opcode, a
				// change of leader loses it).
				log := f.r.log.Debug
				if errors.Is(err, errHandshake) {
					log = f.r.log.Warn
				}
				log("a client's request could not be served; its connection is closed",
					"session", fmt.Sprintf("%#x", f.session), "err", err) // set by this goroutine's handshake
			}
		}
		if errors.Is(err, errExpired) {
			f.expire()
		}
		if err != nil {
			f.close(err.Error())
			return
		}
	}
}

// handshake opens (or takes over) the session on the root shard and, for
// a session the client had, learns its sessions on the other shards.
func (f *front) handshake() error {
	frame, err := proto.ReadFrame(f.br, maxConnectFrame)
	if err != nil {
		return err
	}
	var req proto.ConnectRequest
	d := proto.NewDecoder(frame)
	req.Decode(d)
	if d.Err() != nil {
		return d.Err()
	}
	nc, br, resp, err := dial(f.r.cfg.Shards[f.root], f.nc.RemoteAddr(), false, &req, f.r.cfg.MaxPacket)
	if err != nil {
		return err
	}
	if resp.SessionID == 0 {
		nc.Close()
		f.nc.Write(proto.AppendFrame(nil, resp)) // expired: the client hears it
		return errHandshake
	}
	f.mu.Lock()
	f.session, f.passwd, f.timeout = resp.SessionID, resp.Passwd, resp.Timeout
	f.heard = time.Now() // the connect request: the client is heard from
	f.mu.Unlock()
	b := f.attach(f.root, nc, br)
	if req.SessionID != 0 {
		// The session's sessions on the other shards are taken over now,
		// not when first used, so that they are kept alive from here on; if
		// one has expired, so has the client's session. A shard that cannot
		// take its session now (no leader) is tried again by keepAlive, and
		// when used.
		if err := f.loadKnown(b); err != nil {
			return err
		}
		for _, shard := range sortedKeys(f.known) {
			_, err := f.backend(shard)
			if errors.Is(err, errExpired) {
				f.nc.Write(proto.AppendFrame(nil, &proto.ConnectResponse{Passwd: make([]byte, proto.PasswordLen), HasReadOnly: req.HasReadOnly}))
				f.expire()
				return err
			}
			if err != nil {
				f.r.log.Debug("taking over a session", "shard", shard, "err", err)
				f.mu.Lock()
				f.untaken[shard] = true
				f.mu.Unlock()
			}
		}
	}
	_, err = f.nc.Write(proto.AppendFrame(nil, resp))
	if err == nil {
		f.r.wg.Go(f.keepAlive) // the front's own goroutine holds the group open
	}
	return err
}

// hear records that the client sent a request, and whether the endpoint
// is busy with it: the client is heard from as long as its request is in
// hand (a cross-shard multi can take a while, and the client's pings wait
// behind it, as on ZooKeeper).
func (f *front) hear(busy bool) {
	f.mu.Lock()
	f.heard, f.busy = time.Now(), busy
	f.mu.Unlock()
}

// keepAlive keeps the session alive on every shard for the session
// timeout after the client was last heard from, and no longer (issue 38,
// item 10): a member expires a session a timeout after its last request,
// and a client busy with one shard sends the others nothing (it pings
// only when idle). While the client is heard from, it pings each of the
// session's connections that sent nothing for a third of the timeout;
// once the client has been silent for a tick, it pings, once, each that
// sent nothing since the client was last heard from, so that every shard
// counts the timeout from then, within two ticks, and none from earlier.
// A client silent for the timeout has had its last pings: its sessions
// expire together, as on ZooKeeper. It also takes over, each tick, the
// sessions the reconnect could not take over (retake).
func (f *front) keepAlive() {
	timeout := time.Duration(f.timeout) * time.Millisecond
	tick := time.NewTicker(keepAliveTick(timeout))
	defer tick.Stop()
	for {
		select {
		case <-f.gone:
			return
		case <-tick.C:
		}
		now := time.Now()
		f.mu.Lock()
		heard := f.heard
		if f.busy {
			heard = now
		}
		silent := now.Sub(heard) >= keepAliveTick(timeout)
		var idle []*backend
		for _, b := range f.backends {
			if silent && b.lastSent().Before(heard) || !silent && now.Sub(b.lastSent()) >= timeout/3 {
				idle = append(idle, b)
			}
		}
		retake := ""
		for shard := range f.untaken {
			if f.backends[shard] != nil {
				delete(f.untaken, shard) // the client used it: taken over then
			} else if retake == "" && now.Sub(heard) < timeout {
				retake = shard
			}
		}
		f.mu.Unlock()
		for _, b := range idle {
			b.ping()
		}
		if retake != "" && f.retaking.CompareAndSwap(false, true) {
			f.r.wg.Go(func() { f.retake(retake) })
		}
	}
}

// keepAliveTick is how often keepAlive looks at a session of the given
// timeout: a tenth of it, at most a quarter of a second.
func keepAliveTick(timeout time.Duration) time.Duration {
	return max(min(timeout/10, 250*time.Millisecond), time.Millisecond)
}

// retake takes over the session's session on shard, which the reconnect
// could not take over (its member had no leader, say): until then nothing
// kept it alive, and its ephemerals went while the client was healthy.
// If it expired meanwhile, so has the client's session.
func (f *front) retake(shard string) {
	defer f.retaking.Store(false)
	_, err := f.backend(shard)
	switch {
	case err == nil:
		f.mu.Lock()
		delete(f.untaken, shard)
		f.mu.Unlock()
	case errors.Is(err, errExpired):
		f.expire()
	default:
		f.r.log.Debug("taking over a session again", "shard", shard, "err", err)
	}
}

// attach starts a member connection of the session on shard.
func (f *front) attach(shard string, nc net.Conn, br *bufio.Reader) *backend {
	b := &backend{shard: shard, nc: nc, br: br, max: f.r.cfg.MaxPacket, event: func(body []byte) { f.notifyFrom(shard, body) },
		track: func(proto.ReplyHeader) {},
		ended: func(b *backend, err error) {
			f.mu.Lock()
			mine, session := f.backends[shard] == b && !f.closed, f.session
			f.mu.Unlock()
			if mine {
				f.r.log.Debug("a member connection of a client's session ended; the client's connection is closed",
					"session", fmt.Sprintf("%#x", session), "shard", shard, "err", err)
				f.end(fmt.Sprintf("shard %s: %v", shard, err))
			}
		}}
	if shard == f.root {
		b.track = func(h proto.ReplyHeader) { raiseTo(&f.rootZxid, h.Zxid) }
	}
	f.mu.Lock()
	if f.closed {
		nc.Close()
	}
	f.backends[shard] = b
	f.mu.Unlock()
	go b.run()
	return b
}

func raiseTo(v *atomic.Int64, z int64) {
	for old := v.Load(); z > old && !v.CompareAndSwap(old, z); old = v.Load() {
	}
}

// registryPath is the znode that keeps a front session's other sessions.
func registryPath(session int64) string {
	return fmt.Sprintf("%s/%016x", proto.EndpointSessions, uint64(session))
}

// loadKnown reads the front session's sessions on other shards.
func (f *front) loadKnown(root *backend) error {
	h, body, err := root.call(proto.OpGetData, proto.Marshal(&proto.PathWatchRequest{Path: registryPath(f.session)}))
	switch {
	case err != nil:
		return err
	case h.Err == proto.ErrNoNode:
		return nil
	case h.Err != proto.ErrOK:
		return fmt.Errorf("read the session's registry: %w", h.Err)
	}
	var resp proto.GetDataResponse
	if err := proto.Unmarshal(body, &resp); err != nil {
		return err
	}
	d := proto.NewDecoder(resp.Data)
	for _, shard := range d.Strings() {
		f.known[shard] = true
	}
	f.registered = true
	return d.Err()
}

// saveKnown stores which other shards the front session has a session on,
// in an ephemeral znode of the front session on the root shard.
func (f *front) saveKnown() error {
	e := proto.NewEncoder(nil)
	e.Strings(sortedKeys(f.known))
	root, err := f.backend(f.root)
	if err != nil {
		return err
	}
	path := registryPath(f.session)
	if !f.registered {
		create := func(path string, data []byte, flags int32) (proto.ReplyHeader, error) {
			h, _, err := root.call(proto.OpCreate, proto.Marshal(&proto.CreateRequest{Path: path, Data: data,
				ACL: proto.WorldACL(proto.PermAll), Flags: flags}))
			return h, err
		}
		h, err := create(path, e.Bytes(), proto.FlagEphemeral)
		if err == nil && h.Err == proto.ErrNoNode {
			// The first registry on this root shard: make its directory.
			for _, dir := range ancestry(proto.EndpointSessions) {
				if h, err = create(dir, nil, 0); err != nil {
					return err
				}
			}
			h, err = create(path, e.Bytes(), proto.FlagEphemeral)
		}
		if err != nil {
			return err
		}
		if h.Err == proto.ErrOK {
			f.registered = true
			return nil
		}
		if h.Err != proto.ErrNodeExists {
			return fmt.Errorf("register the session's other sessions: %w", h.Err)
		}
		f.registered = true
	}
	return root.callOK(proto.OpSetData, &proto.SetDataRequest{Path: path, Data: e.Bytes(), Version: -1}, nil)
}

// backendOpen returns the session's connection to shard, nil if none.
func (f *front) backendOpen(shard string) *backend {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.backends[shard]
}

// backend returns the session's connection to shard, opening it first.
// The front session's session there has its id and password: one it has
// already (taken over, then synced so that this member has seen whatever
// the client saw through another node), or a new one, recorded as the
// front session's before it is used.
func (f *front) backend(shard string) (*backend, error) {
	if b := f.backendOpen(shard); b != nil {
		return b, nil
	}
	if shard == f.root {
		return nil, errClosed // the root session's connection is the client's: it is never opened again
	}
	f.openMu.Lock()
	defer f.openMu.Unlock()
	if b := f.backendOpen(shard); b != nil {
		return b, nil // keepAlive took it over meanwhile
	}
	known := f.known[shard]
	req := &proto.ConnectRequest{Timeout: f.timeout, SessionID: f.session, Passwd: f.passwd}
	nc, br, resp, err := dial(f.r.cfg.Shards[shard], f.nc.RemoteAddr(), !known, req, f.r.cfg.MaxPacket)
	if err != nil {
		return nil, err
	}
	if resp.SessionID == 0 {
		nc.Close()
		if known {
			return nil, errExpired
		}
		return nil, fmt.Errorf("shard %s: %w", shard, errHandshake)
	}
	b := f.attach(shard, nc, br)
	if !known {
		f.known[shard] = true
		if err := f.saveKnown(); err != nil {
			delete(f.known, shard)
			nc.Close()
			return nil, err
		}
	}
	for _, a := range f.auths {
		if err := replayAuth(b, a); err != nil {
			return nil, err
		}
	}
	if known {
		if err := b.callOK(proto.OpSync, &proto.PathRequest{Path: "/"}, nil); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// callShard sends a request (its encoded body) on the session's
// connection to shard, opened first if need be, and waits for its reply.
func (f *front) callShard(shard string, op proto.OpCode, body []byte) (proto.ReplyHeader, []byte, error) {
	b, err := f.backend(shard)
	if err != nil {
		return proto.ReplyHeader{}, nil, err
	}
	return b.call(op, body)
}

// retire takes a connection out of the session's before the session on
// its shard is closed, so that its end does not end the client's.
func (f *front) retire(b *backend) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.backends[b.shard] == b {
		delete(f.backends, b.shard)
	}
	if !f.closed {
		f.toClose = append(f.toClose, b)
	}
}

// expire ends a front session one of whose sessions on another shard
// expired: its ephemerals there are gone, so the whole session ends, and
// the client, reconnecting, hears that it expired.
func (f *front) expire() {
	f.r.metrics.expired.Inc()
	f.mu.Lock()
	root := f.backends[f.root]
	delete(f.backends, f.root) // closed here, after the closeSession
	f.expiring = true
	f.cond.Broadcast()
	f.mu.Unlock()
	if root != nil {
		root.callOK(proto.OpCloseSession, proto.Empty{}, nil)
		root.nc.Close()
	}
	f.close("a session on another shard expired")
}

// await makes shard the one the session's next request goes to, after
// the requests in flight to another shard are answered: a session's
// requests take effect, and are answered, in the order it sent them, as
// on one ZooKeeper. "" waits until no request is in flight at all (for a
// request that goes to several shards, or is answered here). done ends
// what await began.
func (f *front) await(shard string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.inflight > 0 && (shard == "" || f.cur != shard) && !f.closed && !f.expiring {
		f.cond.Wait()
	}
	if f.closed || f.expiring {
		return errClosed
	}
	f.cur = shard
	f.inflight++
	return nil
}

func (f *front) done() {
	f.mu.Lock()
	if f.inflight--; f.inflight == 0 {
		f.cond.Broadcast()
	}
	f.mu.Unlock()
}

// write sends a frame to the client.
func (f *front) write(frame []byte) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.nc.SetWriteDeadline(time.Now().Add(time.Duration(f.timeout) * time.Millisecond))
	if _, err := f.nc.Write(frame); err != nil {
		go f.close("write: " + err.Error())
	}
}

// notify passes a watch notification (a frame's body) to the client.
func (f *front) notify(body []byte) {
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	f.write(append(frame, body...))
}

// reply answers the client's request xid with a shard's reply. The header
// zxid the client sees is always the root shard's, the one it offers when
// it reconnects.
func (f *front) reply(xid int32, shard string, h proto.ReplyHeader, body []byte) {
	if h == lost || h.Err == proto.ErrConnectionLoss {
		// A shard's connection ended under the request (or its member
		// answered so): the outcome is unknown. ZooKeeper never answers
		// ZCONNECTIONLOSS; it loses the connection, and the client
		// reconnects and finds out.
		f.close(fmt.Sprintf("connection loss on shard %s", shard))
		return
	}
	if shard != f.root && h.Zxid != -1 {
		h.Zxid = f.rootZxid.Load()
	}
	h.Xid = xid
	e := proto.NewEncoder(make([]byte, 4, 20+len(body)))
	h.Encode(e)
	frame := append(e.Bytes(), body...)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	f.write(frame)
	if shard != f.root && h.Err == proto.ErrSessionExpired {
		go f.expire()
	}
}

// answer replies to xid from here, after the requests in flight.
func (f *front) answer(xid int32, code proto.Code, resp proto.Record) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	f.respond(xid, code, resp)
	return nil
}

// respond replies to xid with the root shard's zxid.
func (f *front) respond(xid int32, code proto.Code, resp proto.Record) {
	var body []byte
	if resp != nil && code == proto.ErrOK {
		body = proto.Marshal(resp)
	}
	f.reply(xid, f.root, proto.ReplyHeader{Zxid: f.rootZxid.Load(), Err: code}, body)
}

// forward sends a request to shard as it came and its reply to the client.
func (f *front) forward(shard string, h proto.RequestHeader, body []byte) error {
	return f.forwardAs(shard, h, body, nil)
}

// forwardAs is forward whose successful reply's body, if conv is not nil,
// the client gets as conv makes it.
func (f *front) forwardAs(shard string, h proto.RequestHeader, body []byte, conv func([]byte) []byte) error {
	if err := f.await(shard); err != nil {
		return err
	}
	f.r.metrics.requests.WithLabelValues(shard).Inc()
	b, err := f.backend(shard)
	if err == nil {
		err = b.send(h.OpCode, body, func(rh proto.ReplyHeader, rbody []byte) {
			if conv != nil && rh != lost && rh.Err == proto.ErrOK {
				rbody = conv(rbody)
			}
			f.reply(h.Xid, shard, rh, rbody)
			f.done()
		})
		if err == nil {
			return nil
		}
	}
	f.done()
	return err
}

// handle routes one request.
func (f *front) handle(frame []byte) error {
	d := proto.NewDecoder(frame)
	var h proto.RequestHeader
	h.Decode(d)
	if d.Err() != nil {
		return d.Err()
	}
	body := d.Rest()
	switch h.OpCode {
	case proto.OpPing:
		return f.ping(h)
	case proto.OpAuth:
		return f.auth(h, body)
	case proto.OpCloseSession:
		return f.closeSession(h)
	}
	req := proto.NewRequest(h.OpCode)
	if req != nil {
		d = proto.NewDecoder(body)
		req.Decode(d)
	}
	if req == nil || d.Err() != nil {
		// The root shard's member answers what does not decode, or is not
		// known, as ZooKeeper would.
		return f.forward(f.root, h, body)
	}
	paths := proto.Paths(req)
	if slices.ContainsFunc(paths, proto.UnderEndpointSessions) {
		return f.answer(h.Xid, proto.ErrNoAuth, nil)
	}
	if r, ok := req.(*proto.PathWatchRequest); ok && proto.UnderKeeperSystem(r.Path) {
		f.clickhouse = true
	}
	if f.removesAcrossMounts(h.OpCode, req) {
		return f.answer(h.Xid, proto.ErrBadArguments, nil)
	}
	switch h.OpCode {
	case proto.OpSetWatches, proto.OpSetWatches2:
		return f.setWatches(h, req.(*proto.SetWatchesRequest))
	case proto.OpMulti, proto.OpMultiRead:
		return f.multi(h, req.(*proto.MultiRequest), body)
	case proto.OpFilteredListWithStatsAndData:
		if f.r.table.listsMountedStats(req) {
			return f.listWithMounts(h, req.(*proto.ListWithStatsAndDataRequest), body)
		}
	case proto.OpGetEphemerals:
		return f.ephemerals(h, req.(*proto.PathRequest))
	case proto.OpAddWatch, proto.OpRemoveWatches, proto.OpCheckWatches:
		if spansShards(req) {
			return f.watchRequest(h, paths[0], body)
		}
	case proto.OpCreate, proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL, proto.OpCreateIfNotExists,
		proto.OpDelete, proto.OpDeleteContainer:
		if _, ok := f.r.table.placeholderOp(proto.MultiOp{Op: h.OpCode, Req: req}); ok {
			return f.mountPointWrite(h, body, req)
		}
		return f.forward(f.r.table.OpShard(h.OpCode, req), h, body)
	case proto.OpSync:
		if below := f.r.table.WatchShards(paths[0], true)[1:]; len(below) > 0 {
			return f.sync(h, paths[0], below, body)
		}
	}
	if len(paths) == 0 {
		return f.forward(f.root, h, body)
	}
	return f.forward(f.r.table.Shard(paths[0]), h, body)
}

// sync syncs the path's shard and each shard mounted below the path that
// the session has a connection to, and answers with the path's shard's
// reply: a read anywhere under the path then sees every write committed
// before the sync. (A connection opened later is synced as it opens: it
// takes over a known session with a sync, or creates one through the
// shard's log.)
func (f *front) sync(h proto.RequestHeader, path string, below []string, body []byte) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	for _, shard := range below {
		if b := f.backendOpen(shard); b != nil {
			rh, _, err := b.call(h.OpCode, body)
			if err != nil {
				return err
			}
			if rh.Err != proto.ErrOK {
				f.respond(h.Xid, rh.Err, nil)
				return nil
			}
		}
	}
	shard := f.r.table.Shard(path)
	rh, rbody, err := f.callShard(shard, h.OpCode, body)
	if err != nil {
		return err
	}
	f.reply(h.Xid, shard, rh, rbody)
	return nil
}

// ping answers from the root shard and keeps every other session alive.
func (f *front) ping(h proto.RequestHeader) error {
	if err := f.forward(f.root, h, nil); err != nil {
		return err
	}
	f.mu.Lock()
	others := make([]*backend, 0, len(f.backends))
	for shard, b := range f.backends {
		if shard != f.root {
			others = append(others, b)
		}
	}
	f.mu.Unlock()
	for _, b := range others {
		b.send(proto.OpPing, nil, nil)
	}
	return nil
}

// auth adds an identity on every session: the root shard's answer is the
// client's, and the packet is replayed on each session opened later. A
// packet the front holds already is not kept twice; one past the bounds
// (overAuthBounds) fails as the root shard's member fails it, ZAUTHFAILED
// and the connection closed.
func (f *front) auth(h proto.RequestHeader, body []byte) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	held := slices.ContainsFunc(f.auths, func(a []byte) bool { return bytes.Equal(a, body) })
	if !held && f.overAuthBounds(len(body)) {
		f.r.log.Warn("auth failed: identities past the bound", "packets", len(f.auths)+1,
			"session", fmt.Sprintf("%#x", f.session), "remote", f.nc.RemoteAddr().String())
		f.reply(h.Xid, f.root, proto.ReplyHeader{Err: proto.ErrAuthFailed}, nil)
		f.end("auth past the identity bounds")
		return nil
	}
	root, err := f.backend(f.root)
	if err != nil {
		return err
	}
	rh, rbody, err := root.call(proto.OpAuth, body)
	if err != nil {
		return err
	}
	if rh.Err == proto.ErrOK && !held {
		if err := f.addAuth(body); err != nil {
			return err
		}
	}
	f.reply(h.Xid, f.root, rh, rbody)
	return nil
}

// addAuth keeps an auth packet the root shard took, to replay on every
// session opened later, and replays it on those open.
func (f *front) addAuth(body []byte) error {
	f.openMu.Lock()
	defer f.openMu.Unlock()
	f.auths = append(f.auths, slices.Clone(body))
	for shard := range f.known {
		if b := f.backendOpen(shard); b != nil {
			if err := replayAuth(b, body); err != nil {
				return err
			}
		}
	}
	return nil
}

// overAuthBounds reports whether one more auth packet of n bytes would
// take the packets the front keeps, to replay on every shard, past the
// bounds of a member's identities: proto.MaxIdentities packets and
// proto.MaxIdentityBytes of them. (Several packets may give one identity,
// ip ones all the connection's own: the member alone cannot bound them.)
func (f *front) overAuthBounds(n int) bool {
	for _, a := range f.auths {
		n += len(a)
	}
	return len(f.auths)+1 > proto.MaxIdentities || n > proto.MaxIdentityBytes
}

// replayAuth adds the identity of an auth packet the root shard took on
// the session's connection to another shard.
func replayAuth(b *backend, packet []byte) error {
	h, _, err := b.call(proto.OpAuth, packet)
	if err == nil && h.Err != proto.ErrOK {
		err = fmt.Errorf("auth on shard %s: %w", b.shard, h.Err)
	}
	return err
}

// closeSession closes the session on every shard, the root shard's last.
func (f *front) closeSession(h proto.RequestHeader) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	for shard := range f.known {
		if b, err := f.backend(shard); err == nil {
			f.retire(b)
			b.callOK(proto.OpCloseSession, proto.Empty{}, nil)
		}
	}
	root, err := f.backend(f.root)
	if err != nil {
		return err
	}
	rh, rbody, err := root.call(proto.OpCloseSession, nil)
	if err != nil {
		return err
	}
	f.reply(h.Xid, f.root, rh, rbody)
	return errSessionClosed
}

// setWatches hands each shard the watches on its paths, and a recursive
// one also to each shard mounted below its path. Only the root
// shard's zxids are the client's: another shard fires every watch whose
// znode changed at all, which the client reads as a change it may have
// missed (it re-reads).
func (f *front) setWatches(h proto.RequestHeader, req *proto.SetWatchesRequest) error {
	parts := map[string]*proto.SetWatchesRequest{}
	part := func(shard string) *proto.SetWatchesRequest {
		p := parts[shard]
		if p == nil {
			p = &proto.SetWatchesRequest{V2: req.V2}
			if shard == f.root {
				p.RelativeZxid = req.RelativeZxid
			}
			parts[shard] = p
		}
		return p
	}
	lists := func(r *proto.SetWatchesRequest) []*[]string {
		return []*[]string{&r.DataWatches, &r.ExistWatches, &r.ChildWatches, &r.PersistentWatches, &r.PersistentRecursiveWatches}
	}
	for i, l := range lists(req) {
		for _, path := range *l {
			for _, shard := range f.r.table.WatchShards(path, l == &req.PersistentRecursiveWatches) {
				dst := lists(part(shard))[i]
				*dst = append(*dst, path)
			}
		}
	}
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	for shard, p := range parts {
		b, err := f.backend(shard)
		if err != nil {
			return err
		}
		if err := b.callOK(h.OpCode, p, nil); err != nil {
			return err
		}
	}
	f.respond(h.Xid, proto.ErrOK, nil)
	return nil
}

// ephemerals lists the session's ephemerals under a path on every shard
// it has a session on.
func (f *front) ephemerals(h proto.RequestHeader, req *proto.PathRequest) error {
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	all := &proto.ChildrenResponse{}
	for _, shard := range append([]string{f.root}, sortedKeys(f.known)...) {
		b, err := f.backend(shard)
		if err != nil {
			return err
		}
		var part proto.ChildrenResponse
		if err := b.callOK(h.OpCode, req, &part); err != nil {
			return err
		}
		// The record of the session's shards is the endpoint's, not the
		// client's: ZooKeeper would not list it.
		all.Children = append(all.Children, slices.DeleteFunc(part.Children, proto.UnderEndpointSessions)...)
	}
	f.respond(h.Xid, proto.ErrOK, all)
	return nil
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// multi sends a multi whose ops all live on one shard there as it came.
// A multiRead spanning shards is read shard by shard; a multi spanning
// shards, or creating or deleting a mount point (with its placeholder on
// another shard), runs as a cross-shard transaction (writeAcross).
func (f *front) multi(h proto.RequestHeader, m *proto.MultiRequest, body []byte) error {
	if len(m.Ops) == 0 {
		return f.forward(f.root, h, body)
	}
	if h.OpCode == proto.OpMultiRead {
		return f.multiRead(h, m, body)
	}
	xs := f.r.table.plan(m.Ops)
	zkCreates := !f.clickhouse && m.HoldsCreate2() // the shards answer create2's stat (ZooKeeperForm)
	if !spans(xs) {
		if zkCreates {
			return f.forwardAs(xs[0].shard, h, body, zooKeeperForm(m.Ops))
		}
		return f.forward(xs[0].shard, h, body)
	}
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	resp, code, err := f.writeAcross(xs, len(m.Ops))
	if err != nil {
		return err
	}
	if code != proto.ErrOK {
		resp = nil
	} else if zkCreates {
		resp.ZooKeeperForm(m.Ops)
	}
	f.respond(h.Xid, code, resp)
	return nil
}

// zooKeeperForm converts a shard's answer to a multi of ops (as the
// endpoint's connections get it) to ZooKeeper's form: a create2's result
// a create's, the path alone (proto.MultiResponse.ZooKeeperForm).
func zooKeeperForm(ops []proto.MultiOp) func([]byte) []byte {
	return func(body []byte) []byte {
		if m, ok := proto.ZooKeeperFormOf(body, ops); ok {
			return proto.Marshal(m)
		}
		return body
	}
}

// removesAcrossMounts reports whether req, or an op of a multi req,
// is a removeRecursive of a subtree that a mount point is in or under, or
// a tryRemove of a mount point: the endpoint refuses it (ErrBadArguments),
// since the shards cannot do it at once, and one shard's part would leave
// the mounted subtree behind, or the mount point's placeholder (a
// tryRemove that leaves a mount point with children does nothing; its
// placeholder, a leaf, would go).
func (f *front) removesAcrossMounts(op proto.OpCode, req proto.Record) bool {
	t := f.r.table
	mountPoint := func(path string) bool { return t.IsMountPoint(path) && t.Holder(path) != t.Shard(path) }
	crosses := func(op proto.OpCode, req proto.Record) bool {
		switch r := req.(type) {
		case *proto.RemoveRecursiveRequest:
			return op == proto.OpRemoveRecursive && (len(t.WatchShards(r.Path, true)) > 1 || mountPoint(r.Path))
		case *proto.PathVersionRequest:
			return op == proto.OpTryRemove && mountPoint(r.Path)
		}
		return false
	}
	if m, ok := req.(*proto.MultiRequest); ok {
		return slices.ContainsFunc(m.Ops, func(o proto.MultiOp) bool { return crosses(o.Op, o.Req) })
	}
	return crosses(op, req)
}

// multiRead reads a multiRead's ops on their shards, shard by shard, and
// puts the results back in op order.
func (f *front) multiRead(h proto.RequestHeader, m *proto.MultiRequest, body []byte) error {
	shards := make([]string, len(m.Ops))
	for i, op := range m.Ops {
		shards[i] = f.r.table.Shard(proto.Paths(op.Req)[0])
	}
	if !f.clickhouse && m.DropReadWatches() {
		// The shards set the watches their reads ask for (MULTI_WATCHES)
		// on the endpoint's connections; ZooKeeper sets none.
		body = proto.Marshal(m)
	}
	if !f.clickhouse && !slices.ContainsFunc(shards, func(s string) bool { return s != shards[0] }) &&
		!slices.ContainsFunc(m.Ops, func(o proto.MultiOp) bool { return f.r.table.listsMountedStats(o.Req) }) {
		return f.forward(shards[0], h, body)
	}
	if err := f.await(""); err != nil {
		return err
	}
	defer f.done()
	f.r.metrics.requests.WithLabelValues("several").Inc()
	var groups []proto.ShardOps
	index := map[string]int{}
	for i, o := range m.Ops {
		g, ok := index[shards[i]]
		if !ok {
			g = len(groups)
			index[shards[i]] = g
			groups = append(groups, proto.ShardOps{Shard: shards[i]})
		}
		groups[g].Ops.Ops = append(groups[g].Ops.Ops, o)
	}
	results, code, err := f.readEach(groups)
	if err != nil {
		return err
	}
	if code != proto.ErrOK {
		f.respond(h.Xid, code, nil)
		return nil
	}
	resp := &proto.MultiResponse{}
	for _, shard := range shards {
		resp.Results = append(resp.Results, results[shard][0])
		results[shard] = results[shard][1:]
	}
	if err := f.fillMountedReads(m.Ops, resp.Results); err != nil {
		return err
	}
	if f.clickhouse {
		resp.ClickHouseKeeperForm(m.Ops)
	}
	f.respond(h.Xid, proto.ErrOK, resp)
	return nil
}

// callMulti sends a multi to one shard and waits for its answer; a code
// other than ErrOK is the reply header's.
func (f *front) callMulti(shard string, op proto.OpCode, body []byte) (*proto.MultiResponse, proto.Code, error) {
	b, err := f.backend(shard)
	if err != nil {
		return nil, 0, err
	}
	rh, rbody, err := b.call(op, body)
	if err != nil || rh.Err != proto.ErrOK {
		return nil, rh.Err, err
	}
	resp := &proto.MultiResponse{}
	return resp, proto.ErrOK, proto.Unmarshal(rbody, resp)
}

// isCreate reports whether op creates a znode.
func isCreate(op proto.OpCode) bool {
	switch op {
	case proto.OpCreate, proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL, proto.OpCreateIfNotExists:
		return true
	}
	return false
}

// readEach runs a multiRead's ops shard by shard.
func (f *front) readEach(groups []proto.ShardOps) (map[string][]proto.MultiResult, proto.Code, error) {
	results := map[string][]proto.MultiResult{}
	for _, g := range groups {
		b, err := f.backend(g.Shard)
		if err != nil {
			return nil, 0, err
		}
		rh, body, err := b.call(proto.OpMultiRead, proto.Marshal(&g.Ops))
		if err != nil || rh.Err != proto.ErrOK {
			return nil, rh.Err, err
		}
		var part proto.MultiResponse
		if err := proto.Unmarshal(body, &part); err != nil {
			return nil, 0, err
		}
		if len(part.Results) != len(g.Ops.Ops) {
			return nil, 0, fmt.Errorf("router: shard %s answered %d of %d reads", g.Shard, len(part.Results), len(g.Ops.Ops))
		}
		results[g.Shard] = part.Results
	}
	return results, proto.ErrOK, nil
}

// outcome runs a cross-shard transaction until its outcome is known (or
// the request is refused, with the code returned): while
// the coordinator answers that it is not known yet, the same transaction
// (same id: joined, or its recorded outcome returned) is asked again, up to
// the session timeout, with the session's later requests held behind it.
// If it is still not known then, the client's connection ends, as on a
// ZooKeeper that lost the connection during a multi: the client finds out
// by reading, and a retry cannot apply it twice.
func (f *front) outcome(b *backend, tx *proto.XTransactionRequest) ([]byte, proto.Code, error) {
	timeout := time.Duration(f.timeout) * time.Millisecond
	deadline := time.Now().Add(timeout)
	// The coordinator may not answer at all while a shard is unreachable:
	// the connection ends then, which ends the call.
	stop := time.AfterFunc(timeout, func() { f.close("a cross-shard multi's outcome still unknown") })
	defer stop.Stop()
	for {
		rh, body, err := b.call(proto.OpXTransaction, proto.Marshal(tx))
		switch {
		case err != nil:
			return nil, 0, err
		case rh.Err != proto.ErrOperationTimeout:
			return body, rh.Err, nil // the outcome, or a refusal of the request itself
		case time.Now().After(deadline):
			return nil, 0, fmt.Errorf("router: transaction %s: outcome still unknown after the session timeout", tx.ID)
		}
		time.Sleep(outcomeRetry)
	}
}

// outcomeRetry spaces the questions about a transaction's outcome.
const outcomeRetry = 50 * time.Millisecond

// writeAcross runs a write's ops (Table.plan) on their shards as one
// cross-shard transaction and answers for the client's n ops: their
// results if it committed (a placeholder's left out), else ZooKeeper's
// failed multi naming the first op that failed in the client's order
// (firstFailure). A code other than ErrOK refuses the whole request.
func (f *front) writeAcross(xs []xop, n int) (*proto.MultiResponse, proto.Code, error) {
	f.r.metrics.requests.WithLabelValues("several").Inc()
	var groups []proto.ShardOps
	index := map[string]int{}
	for _, x := range xs {
		g, ok := index[x.shard]
		if !ok {
			g = len(groups)
			index[x.shard] = g
			groups = append(groups, proto.ShardOps{Shard: x.shard})
		}
		groups[g].Ops.Ops = append(groups[g].Ops.Ops, x.op)
	}
	coordinator := groups[0].Shard
	b, err := f.backend(coordinator)
	if err != nil {
		return nil, 0, err
	}
	tx := &proto.XTransactionRequest{ID: uuid.NewString(), Coordinator: coordinator, Shards: groups}
	body, code, err := f.outcome(b, tx)
	if err != nil {
		f.r.metrics.multis.WithLabelValues("unknown").Inc()
	}
	if err != nil || code != proto.ErrOK {
		return nil, code, err
	}
	var out proto.XTransactionResponse
	if err := proto.Unmarshal(body, &out); err != nil {
		return nil, 0, err
	}
	if out.Status != proto.XCommitted {
		f.r.metrics.multis.WithLabelValues("failed").Inc()
		failed, code := f.firstFailure(tx.ID, xs, &out)
		if code == proto.ErrLocked {
			code = proto.ErrOperationTimeout // as the members answer the endpoint (server.unlocked)
		}
		return proto.FailedMulti(n, failed, code), proto.ErrOK, nil
	}
	f.r.metrics.multis.WithLabelValues("committed").Inc()
	results := map[string][]proto.MultiResult{}
	for _, r := range out.Results {
		results[r.Shard] = r.Results.Results
	}
	for _, g := range groups {
		if len(results[g.Shard]) != len(g.Ops.Ops) {
			return nil, 0, fmt.Errorf("router: transaction %s: shard %s answered %d of %d ops", tx.ID, g.Shard, len(results[g.Shard]), len(g.Ops.Ops))
		}
	}
	// The shards' leaders hold the transaction (pending, its locks taken),
	// but the session's members on them may lag: a sync on each brings
	// them up to it, so that the client's next request there meets the
	// locks (and waits for the commit) instead of reading from before.
	for _, g := range groups {
		sb, err := f.backend(g.Shard)
		if err == nil {
			err = sb.callOK(proto.OpSync, &proto.PathRequest{Path: "/"}, nil)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	resp := &proto.MultiResponse{Results: make([]proto.MultiResult, 0, n)}
	for _, x := range xs {
		r := results[x.shard][0]
		results[x.shard] = results[x.shard][1:]
		if !x.placeholder {
			resp.Results = append(resp.Results, r)
		}
	}
	return resp, proto.ErrOK, nil
}

// firstFailure returns the client's op that fails a failed transaction
// first in the client's order, and its code, as ZooKeeper, running the
// ops one by one, names it. Each shard's prepare ran that shard's ops
// alone (their paths are its own), so that op is the earliest of the
// shards' first failures; the coordinator names one shard's, and each
// other shard that holds an earlier op is asked what its prepare found
// (xOutcome, after a sync: its member here may lag). A shard that cannot
// be asked leaves the coordinator's answer.
func (f *front) firstFailure(id string, xs []xop, out *proto.XTransactionResponse) (int, proto.Code) {
	// at returns the index in xs of shard's i-th op, -1 if none.
	at := func(shard string, i int) int {
		for j, x := range xs {
			if x.shard == shard {
				if i == 0 {
					return j
				}
				i--
			}
		}
		return -1
	}
	first, code := max(at(out.FailedShard, int(max(out.FailedOp, 0))), 0), out.Err
	var asked []string
	for i := 0; i < first; i++ {
		x := xs[i]
		if x.shard == out.FailedShard || slices.Contains(asked, x.shard) {
			continue
		}
		asked = append(asked, x.shard)
		b, err := f.backend(x.shard)
		if err == nil {
			err = b.callOK(proto.OpSync, &proto.PathRequest{Path: "/"}, nil)
		}
		var rec proto.XRecord
		if err == nil {
			err = b.callOK(proto.OpXOutcome, &proto.XIDRequest{ID: id}, &rec)
		}
		if err != nil {
			f.r.log.Debug("reading a failed transaction's record", "id", id, "shard", x.shard, "err", err)
			continue
		}
		if rec.Err == proto.ErrOK || rec.Status != proto.XRejected && rec.Status != proto.XFailed {
			continue
		}
		if j := at(x.shard, int(max(rec.FailedOp, 0))); j >= 0 && j < first {
			first, code = j, rec.Err
		}
	}
	return xs[first].client, code
}
