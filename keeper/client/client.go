package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ErrClosed is returned by requests on a client that Close has closed.
var ErrClosed = errors.New("client: closed")

// ErrNoServers is returned by Connect when given no server address.
var ErrNoServers = errors.New("client: no servers")

// State is the state of a client's session.
type State int32

// Session states, as reported by State and in session events.
const (
	// StateDisconnected means no member holds the connection now: the
	// client is connecting, or reconnecting and will reattach the session.
	StateDisconnected State = iota
	// StateConnected means the session is attached to a member.
	StateConnected
	// StateExpired means the session is gone; the client is dead.
	StateExpired
	// StateClosed means Close was called or the client failed for good.
	StateClosed
)

var stateNames = [...]string{"disconnected", "connected", "expired", "closed"}

// String names the state.
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Event is a watch notification (Type is the znode event, Path the watched
// znode) or, on the channel of Events, a change of session state (Type is
// proto.EventNone). A watch whose session ends receives an EventNone event
// whose Err says why.
type Event struct {
	Type   proto.EventType
	State  State
	Path   string
	Zxid   int64  // of the notification's header (-1 from ZooKeeper 3.8)
	Server string // the member, for session events
	Err    error  // proto.ErrSessionExpired or ErrClosed when the session ended
}

// Dialer opens a connection to a member; net.Dialer.DialContext is one.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Option adjusts Connect.
type Option func(*options)

type options struct {
	timeout     time.Duration
	ordered     bool
	auths       []proto.AuthPacket
	log         *slog.Logger
	maxPacket   int
	maxInFlight int
	dial        Dialer
	tls         *tls.Config // wraps dial when set
}

// WithSessionTimeout asks for a session timeout (default 10s); the shard
// clamps it to its bounds and Client.SessionTimeout returns what it
// granted.
func WithSessionTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithOrderedServers tries the servers in the order given rather than in
// a random order.
func WithOrderedServers() Option { return func(o *options) { o.ordered = true } }

// WithAuth adds credentials (for "digest", "user:password") sent on every
// connection before any request.
func WithAuth(scheme string, auth []byte) Option {
	return func(o *options) {
		o.auths = append(o.auths, proto.AuthPacket{Scheme: scheme, Auth: slices.Clone(auth)})
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMaxPacket bounds a request frame (default proto.DefaultMaxPacket,
// ZooKeeper's jute.maxbuffer); a reply may be 1 KiB longer, for the header
// and stat around a value of the full size.
func WithMaxPacket(n int) Option { return func(o *options) { o.maxPacket = n } }

// WithMaxInFlight bounds the requests queued or awaiting a reply (default
// 1024); a caller beyond it waits for a free place or its ctx.
func WithMaxInFlight(n int) Option { return func(o *options) { o.maxInFlight = n } }

// WithDialer replaces the TCP dialer, for tests that inject faults.
func WithDialer(d Dialer) Option { return func(o *options) { o.dial = d } }

// Client is one ZooKeeper session on a shard. It is safe for concurrent
// use; requests are sent in the order they are queued and pipelined.
type Client struct {
	opts    options
	servers []string
	log     *slog.Logger
	next    int // index of the next server to try; run goroutine only

	ctx    context.Context // canceled by Close: ends dials and back-offs
	cancel context.CancelFunc

	queue chan *request  // requests waiting for the writer
	slots chan struct{}  // one per unfinished request: bounds queue and pending
	xid   atomic.Int32   // last xid; written by the writer only
	w     watchSet       // registered watches
	evs   chan Event     // session events; the run goroutine sends
	ready chan struct{}  // closed once the first session is up
	done  chan struct{}  // closed when the client is dead
	wg    sync.WaitGroup // the run goroutine

	closing   atomic.Bool
	closeOnce sync.Once
	readyOnce sync.Once

	lastZxid atomic.Int64 // newest zxid seen in a reply
	lastAck  atomic.Int64 // unix ns: when the newest answered request was sent

	mu        sync.Mutex
	state     State
	server    string
	nc        net.Conn // the connection being opened or served
	sessionID int64
	passwd    []byte
	timeout   time.Duration // granted
	auths     []proto.AuthPacket
	err       error // why the client is dead
}

// Connect opens a session on one of servers (a shard's members) and
// returns once it is established or ctx ends. The client then keeps the
// session: it pings every third of the session timeout, fails over to
// another member when the connection is lost, and reattaches the session
// (re-sending auths and watches) until the session timeout passes without
// an answer from the shard; then the session is reported expired.
func Connect(ctx context.Context, servers []string, opts ...Option) (*Client, error) {
	if len(servers) == 0 {
		return nil, ErrNoServers
	}
	o := options{timeout: 10 * time.Second, maxPacket: proto.DefaultMaxPacket, maxInFlight: 1024}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.dial == nil {
		o.dial = (&net.Dialer{}).DialContext
	}
	if o.tls != nil {
		o.dial = tlsDialer(o.dial, o.tls)
	}
	o.maxInFlight = max(o.maxInFlight, 1)
	list := slices.Clone(servers)
	if !o.ordered {
		rand.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	}
	c := &Client{
		opts: o, servers: list, log: o.log.With("component", "zkclient"),
		queue: make(chan *request, o.maxInFlight), slots: make(chan struct{}, o.maxInFlight),
		w: newWatchSet(), evs: make(chan Event, 32), ready: make(chan struct{}), done: make(chan struct{}),
		timeout: o.timeout, auths: slices.Clone(o.auths),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.run()
	select {
	case <-c.ready:
		return c, nil
	case <-c.done:
		err := c.Err()
		c.Close()
		return nil, err
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// Do sends one request and decodes the reply body into resp (nil ignores
// the body). It returns the zxid of the reply header; a non-zero reply
// code is returned as its proto.Code. Every typed operation is Do with
// the matching records, and a new request type needs nothing more.
//
// A request whose connection is lost before the reply returns
// proto.ErrConnectionLoss: a write may or may not have applied, and the
// caller decides whether to retry. When ctx ends first, Do returns
// ctx.Err() and the request, if already sent, may still apply.
func (c *Client) Do(ctx context.Context, op proto.OpCode, req proto.Record, resp proto.Record) (zxid int64, err error) {
	return c.send(ctx, op, req, resp, nil, false)
}

// send is Do with a watch to register on success; closeSession is sent
// while the client closes.
func (c *Client) send(ctx context.Context, op proto.OpCode, req, resp proto.Record, w *watchReq, closing bool) (int64, error) {
	if c.closing.Load() && !closing {
		return 0, ErrClosed
	}
	select {
	case <-c.done:
		return 0, c.Err()
	default:
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := newRequest(op, 0, req, resp)
	if n := len(r.frame) - 4; n > c.opts.maxPacket {
		return 0, fmt.Errorf("client: %v request of %d bytes: %w", op, n, proto.ErrFrameTooLarge)
	}
	r.watch = w
	select {
	case c.slots <- struct{}{}:
	case <-c.done:
		return 0, c.Err()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	c.queue <- r // never blocks: the queue holds as many as there are slots
	select {
	case <-r.done:
		return r.zxid, r.err
	case <-ctx.Done():
		if r.abandon() {
			return 0, ctx.Err()
		}
	case <-c.done:
		if r.abandon() {
			return 0, c.Err()
		}
	}
	<-r.done
	return r.zxid, r.err
}

// Close ends the session (closeSession, so its ephemerals go at once),
// closes the connection and waits for the client's goroutines. A client
// that is disconnected leaves its session to expire on the shard.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		if c.State() == StateConnected {
			ctx, cancel := context.WithTimeout(context.Background(), c.SessionTimeout())
			_, err = c.send(ctx, proto.OpCloseSession, proto.Empty{}, nil, nil, true)
			cancel()
			if errors.Is(err, proto.ErrConnectionLoss) || errors.Is(err, ErrClosed) {
				err = nil // the server closes the connection after its reply
			}
		}
		c.cancel()
		c.mu.Lock()
		if c.nc != nil {
			c.nc.Close()
		}
		c.mu.Unlock()
		c.wg.Wait()
	})
	return err
}

// Events returns the session events: connected (with the member),
// disconnected, and a last expired or closed event, after which the
// channel closes. It holds the 32 newest events; older ones are dropped
// when nobody reads.
func (c *Client) Events() <-chan Event { return c.evs }

// Done is closed when the client is dead: its session expired or it was
// closed. Err then says which.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns nil while the client lives, then proto.ErrSessionExpired,
// ErrClosed or the error that ended it.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// State returns the session state.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Server returns the address of the member the client is connected to,
// or "" while it is not connected.
func (c *Client) Server() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != StateConnected {
		return ""
	}
	return c.server
}

// SessionID returns the session's id (0 before the first connection).
func (c *Client) SessionID() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// SessionTimeout returns the session timeout the shard granted (the one
// asked for before the first connection).
func (c *Client) SessionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeout
}

// LastZxid returns the newest zxid the client has seen in a reply.
func (c *Client) LastZxid() int64 { return c.lastZxid.Load() }

// run keeps the session until it expires or the client closes.
func (c *Client) run() {
	defer c.wg.Done()
	for {
		cn, err := c.connect()
		if err != nil {
			c.terminate(err)
			return
		}
		c.serve(cn)
		switch {
		case c.closing.Load():
			c.terminate(ErrClosed)
			return
		case cn.expired.Load():
			c.terminate(proto.ErrSessionExpired)
			return
		}
		c.emit(Event{Type: proto.EventNone, State: StateDisconnected, Server: cn.addr})
	}
}

// connect tries the servers in turn, pausing after each round, until one
// attaches the session; it gives up when the session expires or the
// client closes.
func (c *Client) connect() (*conn, error) {
	backoff := 50 * time.Millisecond
	for {
		if c.closing.Load() {
			return nil, ErrClosed
		}
		deadline, hasSession := c.sessionDeadline()
		if hasSession && time.Now().After(deadline) {
			c.log.Warn("session expired: no member answered within the session timeout",
				"session", hexID(c.SessionID()), "timeout", c.SessionTimeout())
			return nil, proto.ErrSessionExpired
		}
		addr := c.servers[c.next%len(c.servers)]
		c.next++
		cn, err := c.open(addr)
		if err == nil {
			return cn, nil
		}
		if errors.Is(err, proto.ErrSessionExpired) || errors.Is(err, proto.ErrAuthFailed) || errors.Is(err, ErrClosed) {
			return nil, err
		}
		c.log.Debug("connect failed", "server", addr, "err", err)
		if c.next%len(c.servers) != 0 {
			continue
		}
		wait := backoff
		if hasSession {
			wait = min(wait, time.Until(deadline)+time.Millisecond)
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return nil, ErrClosed
		}
		backoff = min(2*backoff, time.Second)
	}
}

// sessionDeadline is when the session may have expired on the shard: a
// session timeout after the newest request the shard answered was sent.
func (c *Client) sessionDeadline() (time.Time, bool) {
	c.mu.Lock()
	id, timeout := c.sessionID, c.timeout
	c.mu.Unlock()
	return time.Unix(0, c.lastAck.Load()).Add(timeout), id != 0
}

// acked records that a request sent at t was answered.
func (c *Client) acked(t time.Time) {
	if ns := t.UnixNano(); ns > c.lastAck.Load() {
		c.lastAck.Store(ns)
	}
}

// seen records a zxid from a reply header.
func (c *Client) seen(zxid int64) {
	if zxid > c.lastZxid.Load() {
		c.lastZxid.Store(zxid)
	}
}

// track makes nc the connection Close interrupts; false if closing.
func (c *Client) track(nc net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return false
	}
	c.nc = nc
	return true
}

func (c *Client) untrack(nc net.Conn, state State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc == nc {
		c.nc = nil
	}
	c.state = state
}

// terminate ends the client: every queued request and every watch learns
// why, and the last session event is sent.
func (c *Client) terminate(err error) {
	state := StateClosed
	if errors.Is(err, proto.ErrSessionExpired) {
		state = StateExpired
	}
	c.mu.Lock()
	c.err, c.state = err, state
	c.mu.Unlock()
	close(c.done)
	for drained := false; !drained; {
		select {
		case r := <-c.queue:
			c.finish(r, 0, err, nil)
		default:
			drained = true
		}
	}
	ev := Event{Type: proto.EventNone, State: state, Err: err}
	c.w.closeAll(ev)
	c.emit(ev)
	close(c.evs)
	if state == StateExpired {
		c.log.Warn("session expired", "session", hexID(c.SessionID()))
	}
}

// emit sends a session event, dropping the oldest when the channel is full
// so the newest state always arrives.
func (c *Client) emit(ev Event) {
	for {
		select {
		case c.evs <- ev:
			return
		default:
		}
		select {
		case <-c.evs:
		default:
		}
	}
}

func hexID(id int64) string { return fmt.Sprintf("0x%x", uint64(id)) }
