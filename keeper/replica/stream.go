package replica

import (
	"errors"
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

// stream is the member's raft port: raft's TCP stream layer, and the links
// followers forward requests to their leader on. Every connection is
// authenticated as a member's (peerlink) and must belong to the same
// incarnation of the shard (identity) before it is used, and a switch cuts
// the member off from its peers, for fault injection.
type stream struct {
	net.Listener
	auth     *peerlink.Auth
	identity string
	log      *slog.Logger
	warnedAt atomic.Int64   // unix ms of the last refusal logged
	refusals *atomic.Int64  // counts them
	forward  func(net.Conn) // serves a forwarding link until it closes
	ready    chan struct{}  // closed once forwarding links may be served (raft is up)
	authed   chan net.Conn  // accepted connections that proved they are members'
	proving  chan struct{}  // a slot per connection being authenticated
	done     chan struct{}
	mu       sync.Mutex
	isolated bool
	conns    map[net.Conn]struct{}
}

// maxProving bounds the accepted connections being authenticated at once;
// past it a stranger's connection is closed at once. Members hold a few
// links each, so this is far above what a cluster needs.
const maxProving = 64

func newStream(addr string, auth *peerlink.Auth, identity string, log *slog.Logger, refusals *atomic.Int64, forward func(net.Conn)) (*stream, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &stream{Listener: l, auth: auth, identity: identity, log: log, refusals: refusals, forward: forward, ready: make(chan struct{}), authed: make(chan net.Conn), proving: make(chan struct{}, maxProving),
		done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go s.acceptLoop()
	return s, nil
}

// acceptLoop authenticates each accepted connection in a goroutine of its
// own, so a silent stranger holds up nobody, and hands raft only those
// that pass; forwarding links go to the replica.
func (s *stream) acceptLoop() {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			close(s.done)
			return
		}
		select {
		case s.proving <- struct{}{}:
		default:
			c.Close() // too many at once: strangers are flooding the port
			continue
		}
		go func() {
			ac, kind := s.admit(c)
			<-s.proving
			switch {
			case ac == nil:
			case kind == linkRaft:
				select {
				case s.authed <- ac:
				case <-s.done:
					ac.Close()
				}
			case kind == linkForward:
				select {
				case <-s.ready:
					s.forward(ac)
				case <-s.done:
					ac.Close()
				}
			default:
				ac.Close()
			}
		}()
	}
}

// serveForwards lets forwarding links through, once the member can
// serve them.
func (s *stream) serveForwards() { close(s.ready) }

// admit authenticates an accepted connection and checks its identity; it
// returns nil, having closed it, if either fails.
func (s *stream) admit(c net.Conn) (net.Conn, byte) {
	tc, err := s.track(c)
	if err != nil {
		return nil, 0
	}
	ac, err := s.auth.Serve(tc)
	if err != nil {
		return nil, 0
	}
	offered, kind, same, err := checkIdentity(ac, s.identity, peerlink.Handshake)
	if !same {
		if err == nil {
			s.refused(c.RemoteAddr().String(), offered)
		}
		ac.Close()
		return nil, 0
	}
	return ac, kind
}

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

// Accept implements net.Listener: it returns the next connection that
// proved it is a member's; an isolated member drops what it accepts.
func (s *stream) Accept() (net.Conn, error) {
	select {
	case c := <-s.authed:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

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

// refused logs, at most every few seconds, a raft link between members of
// different shards or incarnations: the mark of a cluster file that points
// a member at another shard's address, or of a restored shard next to the
// one it was saved from.
func (s *stream) refused(addr, offered string) {
	s.refusals.Add(1)
	now := time.Now().UnixMilli()
	last := s.warnedAt.Load()
	if now-last < 5000 || !s.warnedAt.CompareAndSwap(last, now) {
		return
	}
	s.log.Error("refusing a raft link with a member of another shard: a shard restored from a backup does not join the shard it came from, and shards never join each other; check the cluster file's raft addresses",
		"peer", addr, "identity", s.identity, "peer_identity", offered)
}

// Close stops listening and closes every connection, so the transport's
// connection goroutines end with it.
func (s *stream) Close() error {
	err := s.Listener.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
	s.mu.Unlock()
	return err
}

// setIsolated cuts or restores every raft connection of the member.
func (s *stream) setIsolated(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.isolated = on
	if on {
		for c := range s.conns {
			c.Close()
		}
		clear(s.conns)
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
