package replica

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xkeeper/xkeeper/keeper/peerlink"
)

// errIsolated is returned by dials of an isolated member.
var errIsolated = errors.New("replica: member is isolated")

// stream is raft's TCP stream layer: every connection is authenticated
// as a member's (peerlink), and a switch cuts the member off from its
// peers, for fault injection.
type stream struct {
	net.Listener
	auth     *peerlink.Auth
	mu       sync.Mutex
	isolated bool
	conns    map[net.Conn]struct{}
}

func newStream(addr string, auth *peerlink.Auth) (*stream, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &stream{Listener: l, auth: auth, conns: map[net.Conn]struct{}{}}, nil
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

// Accept implements net.Listener; an isolated member drops what it accepts.
// The connection authenticates on its first use, in the transport's
// goroutine for it, so a silent stranger holds up nobody else.
func (s *stream) Accept() (net.Conn, error) {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc, err := s.track(c); err == nil {
			return s.auth.Lazy(tc), nil
		}
	}
}

// Dial implements raft.StreamLayer.
func (s *stream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	isolated := s.isolated
	s.mu.Unlock()
	if isolated {
		return nil, errIsolated
	}
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	tc, err := s.track(c)
	if err != nil {
		return nil, err
	}
	return s.auth.Dial(tc)
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
