package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// Version is what srvr, stat and mntr report; the "3.8.0" prefix keeps
// tools that parse ZooKeeper's version line working.
const Version = "3.8.0-xkeeper"

// Config configures a member's client port.
type Config struct {
	Addr              string // host:port to listen on
	DataDir           string // reported by conf and dirs
	Tick              time.Duration
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	MaxPacket         int // largest frame accepted, bytes
	Logger            *slog.Logger
	// LockWait, if positive, makes a request that meets a path locked by a
	// pending cross-shard transaction wait up to this long for the lock
	// (holding the session's later requests behind it) instead of being
	// refused at once with ErrLocked.
	LockWait time.Duration
	// RoutedLockWait is LockWait for the connections of the node's client
	// endpoint when LockWait is 0: their clients know ZooKeeper's errors
	// only, and a lock they meet (a cross-shard multi's, being released)
	// is waited out.
	RoutedLockWait time.Duration
	// LockGrace is how long a request that meets a lock waits for it when
	// LockWait and RoutedLockWait do not apply, before ErrLocked: a
	// committed cross-shard transaction's locks go a moment after its
	// client has the answer.
	LockGrace time.Duration
	// Takeover is how long after its prepare a cross-shard transaction
	// whose driver is gone is taken over by its coordinator
	// (xshard.Service.Takeover). In reject mode a request that still meets
	// a lock after LockGrace waits on for the transactions in its way to
	// be decided, until the newest one's takeover is done (see
	// conn.awaitUnlocked): the answered client's read of its paths sees
	// its write then, not -1000. 0: no such wait.
	Takeover time.Duration
	// EarlyReplies answers a write on a follower with the leader's result,
	// before this member applies it, when the session watches nothing the
	// write can fire; the session's later reads wait for the apply.
	EarlyReplies bool
	// XTransaction coordinates a cross-shard transaction sent to this
	// member (xshard.Service.Run); nil answers ErrUnimplemented.
	XTransaction func(ctx context.Context, req *proto.XTransactionRequest, ids []proto.ID) (*proto.XTransactionResponse, error)
	// Peers authenticates the links of other members (request forwarding,
	// the cross-shard protocol); a connection that does not pass is closed.
	Peers *peerlink.Auth
	// SecureAddr, if set, is a second listener that speaks TLS with TLS.
	SecureAddr string
	TLS        *tls.Config
	// FourLetterWords are the 4-letter words answered; nil answers all.
	FourLetterWords []string
	// MaxConnsPerIP caps the client connections from one IP; 0 for none.
	// Member links do not count.
	MaxConnsPerIP int
	// SuperDigest is the digest id ("super:BASE64HASH") whose holder
	// passes every ACL check; empty for none.
	SuperDigest string
	// MaxWatchesPerSession and MaxWatchesPerMember bound the watches one
	// session holds on this member and all of them hold
	// (keeper.max_watches_per_session, keeper.max_watches_per_member): a
	// watch past either is refused. 0 means the config's default.
	MaxWatchesPerSession, MaxWatchesPerMember int
	// MaxQueuedBytes bounds the replies and notifications the member holds
	// for a client connection, not yet written to its socket
	// (keeper.max_queued_bytes_per_connection): a connection past it is
	// closed. Members' links are not bounded. 0 means the config's default.
	MaxQueuedBytes int
	// HideKeeperSystem answers NoNode to reads by path (getData, exists,
	// getChildren) of ClickHouse Keeper's system nodes (/keeper and
	// below) from clients, as ZooKeeper does: ClickHouse then sees no
	// feature flags and sends only ZooKeeper's requests. For measurements
	// beside the flags (bench); never set by the config.
	HideKeeperSystem bool
}

// The bounds Config's zero values stand for: config.Default's, where
// their reasons are.
const (
	defaultMaxWatchesPerSession = 100_000
	defaultMaxWatchesPerMember  = 10_000_000
	defaultMaxQueuedBytes       = 64 << 20
)

// Server serves ZooKeeper clients of one member.
type Server struct {
	cfg     Config
	replica *replica.Replica
	log     *slog.Logger
	ln      net.Listener
	tlsLn   net.Listener
	watches *watches
	expiry  *expiry
	started time.Time

	mu        sync.Mutex
	conns     map[*conn]struct{}
	bySession map[int64]*conn
	perIP     map[string]int // client connections by remote IP
	refusedAt atomic.Int64   // unix ms of the last logged refusal, to rate-limit the log

	// earlyZxid is the greatest zxid of a write answered here before this
	// member applied it; reads wait until it is applied.
	earlyZxid atomic.Int64

	connID atomic.Uint64 // the last connection id given out
	// portOpen is cleared when a removed member closes its client port;
	// cutOff is set while it closes connections for want of its leader
	// (to log that once).
	portOpen, cutOff atomic.Bool
	// removedAt is when this member first saw itself removed (unix ns).
	removedAt atomic.Int64
	stats     stats
	done      chan struct{}
	wg        sync.WaitGroup
}

// stats are the counters srvr, stat and mntr show.
type stats struct {
	received, sent   atomic.Int64
	latSum, latCount atomic.Int64 // microseconds
	latMin, latMax   atomic.Int64
	malformed        atomic.Int64
	inFlight         atomic.Int64             // requests received and not answered yet
	byOp             *prometheus.HistogramVec // seconds from receipt to reply, by op name
}

func newStats() stats {
	return stats{byOp: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "xkeeper_request_duration_seconds",
		Help:    "Client requests from receipt to reply, by operation.",
		Buckets: prometheus.ExponentialBucketsRange(0.00005, 10, 18),
	}, []string{"op"})}
}

// begin counts a request in flight and returns when it began; observe
// ends it.
func (st *stats) begin() time.Time {
	st.inFlight.Add(1)
	return time.Now()
}

func (st *stats) observe(op proto.OpCode, d time.Duration) {
	st.inFlight.Add(-1)
	st.byOp.WithLabelValues(op.String()).Observe(d.Seconds())
	us := d.Microseconds()
	st.latSum.Add(us)
	st.latCount.Add(1)
	for {
		m := st.latMax.Load()
		if us <= m || st.latMax.CompareAndSwap(m, us) {
			break
		}
	}
	for {
		m := st.latMin.Load()
		if (m != 0 && us >= m) || st.latMin.CompareAndSwap(m, max(us, 1)) {
			break
		}
	}
}

func (st *stats) reset() {
	for _, v := range []*atomic.Int64{&st.received, &st.sent, &st.latSum, &st.latCount, &st.latMin, &st.latMax} {
		v.Store(0)
	}
}

// nextConnID returns a connection id greater than every one given out
// before, by this process or (clocks permitting) an earlier one: the wall
// clock in nanoseconds, or one more than the last.
func (s *Server) nextConnID() uint64 { return s.connIDAbove(0) }

// connIDAbove is nextConnID, and greater than floor too.
func (s *Server) connIDAbove(floor uint64) uint64 {
	for {
		last := s.connID.Load()
		id := max(last+1, uint64(time.Now().UnixNano()), floor+1)
		if s.connID.CompareAndSwap(last, id) {
			return id
		}
	}
}

// Counters are a server's traffic figures, for monitoring.
type Counters struct {
	Received, Sent, Malformed int64 // packets since start (srst resets the first two)
	Connections               int   // open client connections
	Watches                   int   // watches set, counted per connection and path
	Outstanding               int64 // requests received and not answered yet
}

// Counters returns the server's traffic figures now.
func (s *Server) Counters() Counters {
	w := s.watches.held()
	return Counters{Received: s.stats.received.Load(), Sent: s.stats.sent.Load(),
		Malformed: s.stats.malformed.Load(), Connections: s.connCount(), Watches: w, Outstanding: s.stats.inFlight.Load()}
}

// Latency is the histogram of request latency by operation, labelled op,
// for a Prometheus registry.
func (s *Server) Latency() prometheus.Collector { return s.stats.byOp }

// New returns a server for a member; Start listens.
func New(cfg Config, r *replica.Replica) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxPacket <= 0 {
		cfg.MaxPacket = proto.DefaultMaxPacket
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 2 * time.Second
	}
	if cfg.MinSessionTimeout <= 0 {
		cfg.MinSessionTimeout = 2 * cfg.Tick
	}
	if cfg.MaxSessionTimeout <= 0 {
		cfg.MaxSessionTimeout = 20 * cfg.Tick
	}
	if cfg.MaxWatchesPerSession <= 0 {
		cfg.MaxWatchesPerSession = defaultMaxWatchesPerSession
	}
	if cfg.MaxWatchesPerMember <= 0 {
		cfg.MaxWatchesPerMember = defaultMaxWatchesPerMember
	}
	if cfg.MaxQueuedBytes <= 0 {
		cfg.MaxQueuedBytes = defaultMaxQueuedBytes
	}
	s := &Server{
		stats: newStats(), cfg: cfg, replica: r, log: cfg.Logger.With("member", r.ID()),
		watches: newWatches(cfg.MaxWatchesPerSession, cfg.MaxWatchesPerMember),
		conns:   map[*conn]struct{}{}, bySession: map[int64]*conn{}, perIP: map[string]int{}, done: make(chan struct{}),
	}
	s.expiry = newExpiry(s)
	r.SetApplyHook(s.onApply)
	r.OnLeadership(s.expiry.setLeader)
	r.OnTouch(s.expiry.touch)
	s.expiry.setLeader(r.IsLeader())
	return s
}

// Start listens on the client port (and the secure one) and serves until
// Close.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	if s.cfg.SecureAddr != "" {
		tln, err := net.Listen("tcp", s.cfg.SecureAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("server: listen on %s: %w", s.cfg.SecureAddr, err)
		}
		s.tlsLn = tls.NewListener(tln, s.cfg.TLS)
		s.wg.Add(1)
		go s.acceptLoop(s.tlsLn)
	}
	s.started = time.Now()
	s.portOpen.Store(true)
	s.wg.Add(4)
	go s.acceptLoop(s.ln)
	go func() {
		defer s.wg.Done()
		s.expiry.reapLoop(s.done)
	}()
	tick := sweepEvery(s.cfg.Tick)
	go func() {
		defer s.wg.Done()
		every(s.done, tick, s.expiry.sweep)
	}()
	go func() {
		defer s.wg.Done()
		every(s.done, tick, func(time.Time) { s.checkContact() })
	}()
	return nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SecureAddr returns the address of the TLS listener, "" if there is none.
func (s *Server) SecureAddr() string {
	if s.tlsLn == nil {
		return ""
	}
	return s.tlsLn.Addr().String()
}

// Close stops accepting, closes every connection and waits for them.
func (s *Server) Close() error {
	// done is closed under mu: a connection accepted meanwhile is either
	// registered before (and closed here) or refused by acceptLoop.
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return nil // closed before
	default:
	}
	close(s.done)
	for c := range s.conns {
		// Also ends what the connection has in hand (a cross-shard
		// transaction it coordinates stops retrying), so Close never waits on it.
		c.shutdown("server closing")
	}
	s.mu.Unlock()
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // closed when the member was removed
	}
	if s.tlsLn != nil {
		s.tlsLn.Close()
	}
	s.wg.Wait()
	return err
}

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !s.run(newConn(s, nc, nc.RemoteAddr()), false, false) {
			return
		}
	}
}

// run registers c and serves it on a goroutine of its own; false if the
// server is closed (c is then closed too).
func (s *Server) run(c *conn, routed, link bool) bool {
	s.mu.Lock()
	select {
	case <-s.done: // Close ran after Accept returned: nobody would close c
		s.mu.Unlock()
		c.nc.Close()
		return false
	default:
	}
	s.conns[c] = struct{}{}
	c.routed, c.link = routed, link
	c.counted = !routed && !c.member && (s.cfg.MaxConnsPerIP <= 0 || s.perIP[capKey(c.ip)] < s.cfg.MaxConnsPerIP)
	if c.counted {
		s.perIP[capKey(c.ip)]++
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
	}()
	return true
}

// ServeConn serves a connection that this node's client endpoint accepted
// and hands on as it is (a 4-letter word, a member's link): as if this
// member had accepted it from addr.
func (s *Server) ServeConn(nc net.Conn, addr net.Addr) error {
	if !s.run(newConn(s, nc, addr), false, false) {
		return net.ErrClosed
	}
	return nil
}

// ServeMemberSession serves a member's session that arrived on the peer
// port (replica.DialSession) and proved itself there: like a link with
// peerlink.SessionMagic on the client port, it speaks ZooKeeper's protocol
// and may send the cross-shard protocol's messages. The server closes nc
// when the session ends or the server closes. The caller vouches that nc
// proved itself a member's: nothing here checks again.
func (s *Server) ServeMemberSession(nc net.Conn) error {
	c := newConn(s, nc, nc.RemoteAddr())
	c.member = true
	if !s.run(c, false, false) {
		return net.ErrClosed
	}
	return nil
}

// ServeRouted serves a connection that this node's client endpoint opened
// on behalf of a client at addr: the member sees the client's IP (for ip
// ACLs and logs); the connection is not counted against that IP's cap (the
// endpoint caps its clients), and it may name proto.EndpointSessions,
// which the endpoint itself keeps from its clients. With link, a handshake
// that names a session this shard does not have creates it, with that id
// and password (the client's session on the endpoint's root shard). The
// server closes nc when the connection ends or the server closes.
func (s *Server) ServeRouted(nc net.Conn, addr net.Addr, link bool) error {
	if !s.run(newConn(s, nc, addr), true, link) {
		return net.ErrClosed
	}
	return nil
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.uncountLocked(c)
	if s.bySession[c.session] == c {
		delete(s.bySession, c.session)
	}
	s.mu.Unlock()
	s.watches.drop(c)
}

// uncountLocked takes c out of its IP's count (a member link, or a
// connection that ended).
func (s *Server) uncountLocked(c *conn) {
	if !c.counted {
		return
	}
	c.counted = false
	if key := capKey(c.ip); s.perIP[key] <= 1 {
		delete(s.perIP, key)
	} else {
		s.perIP[key]--
	}
}

// refuseOverCap logs a connection refused by the per-IP cap, at most once
// a second.
func (s *Server) refuseOverCap(c *conn) {
	now := time.Now().UnixMilli()
	if last := s.refusedAt.Load(); now-last >= 1000 && s.refusedAt.CompareAndSwap(last, now) {
		s.log.Warn("too many connections from one address: refusing", "remote", c.ip, "max_connections_per_ip", s.cfg.MaxConnsPerIP)
	}
}

// attach makes c the connection of its session here, closing an older one.
func (s *Server) attach(c *conn) {
	s.mu.Lock()
	old := s.bySession[c.session]
	s.bySession[c.session] = c
	c.attached = true
	s.mu.Unlock()
	if old != nil && old != c {
		old.shutdown("session reattached on a new connection")
	}
}

func (s *Server) sessionConn(id int64) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bySession[id]
}

// touch records that a local session is alive.
func (s *Server) touch(id int64) {
	if s.replica.IsLeader() {
		s.expiry.touch([]int64{id})
		return
	}
	s.replica.Touch([]int64{id})
}

// onApply runs for every applied entry with the state locked: it fires
// watches, and closes or moves local connections whose session was closed
// or reattached elsewhere.
func (s *Server) onApply(st *fsm.State, results []fsm.Result, events []fsm.Event, restored bool) {
	for _, ev := range events {
		s.watches.trigger(ev)
	}
	for _, res := range results {
		if res.Err != proto.ErrOK {
			continue
		}
		switch res.Op {
		case proto.OpCloseSession:
			if c := s.sessionConn(res.Session); c != nil {
				c.expire()
			}
			if st.ReapingCount() > 0 {
				s.expiry.kickReaper() // the leader reaps the ephemerals the close left
			}
		case fsm.OpSessionOwner:
			if res.Member == s.replica.ID() {
				continue
			}
			if c := s.sessionConn(res.Session); c != nil {
				c.moved.Store(true)
			}
		}
	}
	if restored {
		s.mu.Lock()
		for id, c := range s.bySession {
			if st.Session(id) == nil {
				c.expire()
			}
		}
		s.mu.Unlock()
	}
}

// capKey is what connections count against max_connections_per_ip by:
// the address itself for IPv4, its /64 for IPv6, where one host commonly
// holds a whole /64 and could open a connection from each address.
func capKey(ip string) string {
	a := net.ParseIP(ip)
	if a == nil || a.To4() != nil {
		return ip
	}
	return a.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

func hexID(id int64) string { return fmt.Sprintf("0x%x", uint64(id)) }
