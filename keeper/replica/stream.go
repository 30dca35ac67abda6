package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xkeeper/xkeeper/keeper/peerlink"
)

// errIsolated is returned by dials of an isolated member.
var errIsolated = errors.New("replica: member is isolated")

// stream is one replica's view of its raft port (PeerPort): raft's
// stream layer, and the links followers forward requests to their leader
// on. Every link arrives authenticated as a member's (peerlink) and of the
// same incarnation of the shard (identity), and a switch cuts the member
// off from its peers, for fault injection. A replica given no shared port
// opens a port of its own.
type stream struct {
	port     *PeerPort
	auth     *peerlink.Auth
	identity string
	session  string // sessionKey of the shard
	log      *slog.Logger
	warnedAt atomic.Int64                   // unix ms of the last refusal logged
	refusals *atomic.Int64                  // counts them
	forward  func(net.Conn)                 // serves a forwarding link until it closes
	touches  atomic.Pointer[func(net.Conn)] // serves a touch lane until it closes; unset: closed, as by a member of before the lane
	sessions atomic.Pointer[func(net.Conn)] // serves a member's session link; unset: refused
	ready    chan struct{}                  // closed once forwarding links may be served (raft is up)
	authed   chan net.Conn                  // links for raft
	done     chan struct{}                  // closed when the stream or its port closes
	once     sync.Once
	mu       sync.Mutex
	isolated bool
	conns    map[net.Conn]struct{}
}

// newStream puts a replica on port, or on a port of its own at addr if
// port is nil.
func newStream(port *PeerPort, addr string, auth *peerlink.Auth, identity, shard string, log *slog.Logger, refusals *atomic.Int64, forward func(net.Conn)) (*stream, error) {
	s := &stream{port: port, auth: auth, identity: identity, session: sessionKey(shard), log: log, refusals: refusals, forward: forward, ready: make(chan struct{}),
		authed: make(chan net.Conn), done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	if port == nil {
		p, err := listenPeers(addr, auth, log, s)
		if err != nil {
			return nil, err
		}
		s.port = p
		go p.acceptLoop()
		return s, nil
	}
	if err := port.join(s); err != nil {
		return nil, err
	}
	return s, nil
}

// admits reports whether the stream takes links: not while isolated.
func (s *stream) admits() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.isolated
}

// take serves a link the port admitted for this replica: raft's, a
// forwarding link once raft is up, or a member's session once the member
// serves them.
func (s *stream) take(c net.Conn, kind byte) {
	select {
	case <-s.done: // closed while the link proved itself
		c.Close()
		return
	default:
	}
	if kind == linkSession {
		// A session belongs to the member's server, which closes it; and
		// isolation, a fault of the raft links, leaves it alone, as it
		// leaves the client port.
		if serve := s.sessions.Load(); serve != nil {
			(*serve)(c)
		} else {
			c.Close()
		}
		return
	}
	tc, err := s.track(c)
	if err != nil {
		return
	}
	switch kind {
	case linkRaft:
		select {
		case s.authed <- tc:
		case <-s.done:
			tc.Close()
		}
	case linkForward:
		s.serveReady(tc, &s.forward)
	case linkTouch:
		s.serveReady(tc, s.touches.Load())
	default:
		tc.Close()
	}
}

// serveReady serves a link with serve once the member can serve links (a
// nil serve closes it).
func (s *stream) serveReady(c net.Conn, serve *func(net.Conn)) {
	select {
	case <-s.ready:
		if serve != nil && *serve != nil {
			(*serve)(c)
		} else {
			c.Close()
		}
	case <-s.done:
		c.Close()
	}
}

// serveForwards lets forwarding links through, once the member can
// serve them.
func (s *stream) serveForwards() { close(s.ready) }

func (s *stream) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isolated {
		c.Close()
		return nil, errIsolated
	}
	s.conns[c] = struct{}{}
	return &trackedConn{Conn: c, s: s}, nil
}

// Accept implements net.Listener: it returns the next raft link.
func (s *stream) Accept() (net.Conn, error) {
	select {
	case c := <-s.authed:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Addr implements net.Listener.
func (s *stream) Addr() net.Addr { return s.port.Addr() }

// portClosed ends the stream's Accept when its port closes.
func (s *stream) portClosed() { s.once.Do(func() { close(s.done) }) }

// Dial implements raft.StreamLayer.
func (s *stream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.dial(string(addr), linkRaft, timeout)
}

// dial opens an authenticated link of the given kind to a member's raft
// port.
func (s *stream) dial(addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	isolated := s.isolated
	s.mu.Unlock()
	if isolated {
		return nil, errIsolated
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	tc, err := s.track(c)
	if err != nil {
		return nil, err
	}
	ac, err := s.auth.Dial(tc)
	if err != nil {
		return nil, err
	}
	if err := offerIdentity(ac, s.identity, kind, timeout); err != nil {
		ac.Close()
		if err == errOtherShard {
			s.refused(addr, "")
		}
		return nil, err
	}
	return ac, nil
}

// ErrNoSession is returned by DialSession when the peer port serves no
// member session of the shard: no member of it is there (yet), or the port
// is an older version's, which serves sessions on the client port only.
var ErrNoSession = errors.New("replica: the peer port serves no member session of this shard")

// DialSession opens a member's session link to the member of shard whose
// peer port is addr: authenticated as a member's (auth), it then carries
// ZooKeeper's protocol, the cross-shard protocol's messages included, as
// a link with peerlink.SessionMagic does on a client port.
func DialSession(ctx context.Context, auth *peerlink.Auth, addr, shard string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*peerlink.Handshake)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() }) // the proof and the offer do not watch ctx
	ac, err := auth.Dial(c)
	if err != nil {
		stop()
		return nil, err
	}
	err = offerIdentity(ac, sessionKey(shard), linkSession, peerlink.Handshake)
	if !stop() && err == nil { // ctx ended as the offer was answered: c is closed
		err = ctx.Err()
	}
	switch {
	case err == nil:
		return ac, nil
	case errors.Is(err, errNotHosted), errors.Is(err, errOtherShard):
		ac.Close()
		return nil, fmt.Errorf("%w: %s at %s", ErrNoSession, shard, addr)
	default:
		ac.Close()
		return nil, err
	}
}

// refused logs, at most every few seconds, a raft link between members of
// different shards or incarnations: the mark of a cluster file that points
// a member at another shard's address, or of a restored shard next to the
// one it was saved from.
func (s *stream) refused(addr, offered string) {
	s.refusals.Add(1)
	if warnDue(&s.warnedAt) {
		s.log.Error("refusing a raft link with a member of another shard: a shard restored from a backup does not join the shard it came from, and shards never join each other; check the cluster file's raft addresses",
			"peer", addr, "identity", s.identity, "peer_identity", offered)
	}
}

// Close takes the replica off its port, closing the port too if it is
// the replica's own, and closes every link of the replica, so the
// transport's connection goroutines end with it.
func (s *stream) Close() error {
	var err error
	s.port.leave(s)
	if s.port.owner == s { // the port is this replica's alone
		err = s.port.Close()
	}
	s.portClosed()
	closeConns(&s.mu, s.conns)
	return err
}

// setIsolated cuts or restores every raft connection of the member.
func (s *stream) setIsolated(on bool) {
	s.mu.Lock()
	s.isolated = on
	s.mu.Unlock()
	if on {
		closeConns(&s.mu, s.conns)
	}
}

type trackedConn struct {
	net.Conn
	s    *stream
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c.Conn)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}
