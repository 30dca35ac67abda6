package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xkeeper/xkeeper/keeper/peerlink"
)

// PeerPort is a raft port: the listener on which raft's transport, the
// follower→leader forwarding links of members and the members' sessions
// of the cross-shard protocol arrive. Replicas of different shards hosted
// by one process (a node) share one: a link first proves it is a
// member's (peerlink), then offers the identity of the shard it belongs
// to (a session: the shard it is for, see sessionKey), and goes to the
// replica of that shard on the port. A link whose shard has no replica
// here is refused and counted.
type PeerPort struct {
	l        net.Listener
	auth     *peerlink.Auth
	log      *slog.Logger
	proving  chan struct{} // a slot per connection being authenticated
	done     chan struct{}
	refusals atomic.Int64 // links refused while the port served several shards
	warnedAt atomic.Int64 // unix ms of the last such refusal logged

	mu       sync.Mutex
	groups   map[string]*stream    // by shard identity
	sessions map[string]*stream    // by sessionKey
	owner    *stream               // the one replica of a port it opened itself
	raw      map[net.Conn]struct{} // connections still proving themselves
}

// maxProving bounds the accepted connections being authenticated at once;
// past it a stranger's connection is closed at once. Members hold a few
// links each, so this is far above what a cluster needs.
const maxProving = 64

// ErrPortTaken is returned by Open for a replica whose shard already has a
// replica on the peer port given.
var ErrPortTaken = errors.New("replica: the peer port already serves a member of this shard")

// ListenPeers opens a peer port on addr that replicas share (Config.PeerPort).
func ListenPeers(addr string, auth *peerlink.Auth, log *slog.Logger) (*PeerPort, error) {
	p, err := listenPeers(addr, auth, log, nil)
	if err != nil {
		return nil, err
	}
	go p.acceptLoop()
	return p, nil
}

// listenPeers opens a port that does not accept yet; owner, if set, is
// its only replica, on it before the first link arrives.
func listenPeers(addr string, auth *peerlink.Auth, log *slog.Logger, owner *stream) (*PeerPort, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("replica: listen on raft address %s: %w", addr, err)
	}
	p := &PeerPort{l: l, auth: auth, log: log, proving: make(chan struct{}, maxProving), done: make(chan struct{}),
		groups: map[string]*stream{}, sessions: map[string]*stream{}, raw: map[net.Conn]struct{}{}, owner: owner}
	if owner != nil {
		p.groups[owner.identity], p.sessions[owner.session] = owner, owner
	}
	return p, nil
}

// Addr returns the address the port listens on.
func (p *PeerPort) Addr() net.Addr { return p.l.Addr() }

// Refused returns how many links the port refused because no replica on
// it belongs to the shard they offered, while it served several shards
// (a port of one replica counts them on the replica).
func (p *PeerPort) Refused() int64 { return p.refusals.Load() }

// Close stops listening and closes the connections still proving
// themselves; the replicas on the port close their own links.
func (p *PeerPort) Close() error {
	err := p.l.Close()
	closeConns(&p.mu, p.raw)
	return err
}

// closeConns closes and forgets every connection of conns, under mu.
func closeConns(mu *sync.Mutex, conns map[net.Conn]struct{}) {
	mu.Lock()
	defer mu.Unlock()
	for c := range conns {
		c.Close()
	}
	clear(conns)
}

// join puts s on the port, under its shard identity.
func (p *PeerPort) join(s *stream) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.groups[s.identity]; ok {
		return ErrPortTaken
	}
	if _, ok := p.sessions[s.session]; ok {
		return ErrPortTaken // another incarnation of the shard
	}
	select {
	case <-p.done:
		return net.ErrClosed
	default:
	}
	p.groups[s.identity], p.sessions[s.session] = s, s
	return nil
}

// leave takes s off the port.
func (p *PeerPort) leave(s *stream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.groups[s.identity] == s {
		delete(p.groups, s.identity)
	}
	if p.sessions[s.session] == s {
		delete(p.sessions, s.session)
	}
}

// acceptLoop authenticates each accepted connection in a goroutine of its
// own, so a silent stranger holds up nobody, and hands each that passes
// to the replica of its shard.
func (p *PeerPort) acceptLoop() {
	defer func() {
		p.mu.Lock()
		close(p.done)
		groups := make([]*stream, 0, len(p.groups))
		for _, s := range p.groups {
			groups = append(groups, s)
		}
		p.mu.Unlock()
		for _, s := range groups {
			s.portClosed()
		}
	}()
	backoff := time.Duration(0)
	for {
		c, err := p.l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors, say: every shard on the port
			// depends on this loop, so it waits and goes on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("peer port: accept failed; retrying", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-p.done:
				return
			}
		}
		backoff = 0
		select {
		case p.proving <- struct{}{}:
		default:
			c.Close() // too many at once: strangers are flooding the port
			continue
		}
		go func() {
			s, ac, kind := p.admit(c)
			<-p.proving
			if s != nil {
				s.take(ac, kind)
			}
		}()
	}
}

// admit authenticates an accepted connection and finds the replica of the
// shard it offers; it returns a nil stream, having closed the connection,
// if there is none or the proof fails.
func (p *PeerPort) admit(c net.Conn) (*stream, net.Conn, byte) {
	if !p.track(c, true) {
		c.Close()
		return nil, nil, 0
	}
	defer p.track(c, false)
	ac, err := p.auth.Serve(c)
	if err != nil {
		return nil, nil, 0
	}
	offered, kind, err := readOffer(ac, peerlink.Handshake)
	if err != nil {
		ac.Close()
		return nil, nil, 0
	}
	p.mu.Lock()
	s := p.groups[offered]
	if kind == linkSession {
		s = p.sessions[offered]
	}
	p.mu.Unlock()
	switch {
	case kind == linkSession && (s == nil || s.sessions.Load() == nil):
		// No member of the shard here, or one still starting: the dialler
		// goes to the member's client port instead.
		answerOffer(ac, identityNotHosted, peerlink.Handshake)
		ac.Close()
		return nil, nil, 0
	case s == nil:
		p.refuse(ac, offered)
		ac.Close()
		return nil, nil, 0
	case kind != linkSession && !s.admits(): // isolated: as if the port were unreachable
		ac.Close()
		return nil, nil, 0
	case answerOffer(ac, identityOK, peerlink.Handshake) != nil:
		ac.Close()
		return nil, nil, 0
	}
	return s, ac, kind
}

// track adds or removes a connection still proving itself; it reports
// false for one accepted after the port closed.
func (p *PeerPort) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.raw, c)
		return true
	}
	select {
	case <-p.done:
		return false
	default:
	}
	p.raw[c] = struct{}{}
	return true
}

// refuse answers a link that offered a shard the port does not serve.
// A replica's own port says the link reached another shard, and counts it
// on the replica. A node's port says only that it hosts no member of that
// shard, which is also what it says while its members start one by one:
// the dialler retries as after any failed dial, and the port counts it and
// logs now and then.
func (p *PeerPort) refuse(c net.Conn, offered string) {
	addr := c.RemoteAddr().String()
	if p.owner != nil {
		if answerOffer(c, identityRefused, peerlink.Handshake) == nil {
			p.owner.refused(addr, offered)
		}
		return
	}
	if answerOffer(c, identityNotHosted, peerlink.Handshake) != nil {
		return
	}
	p.refusals.Add(1)
	if warnDue(&p.warnedAt) {
		p.log.Warn("a raft link asked for a shard this node hosts no member of (fine while the node starts; else check the cluster file's nodes)",
			"peer", addr, "peer_identity", offered)
	}
}

// warnDue reports whether a warning last logged at *at (unix ms) may be
// logged again, at most every few seconds, and records now if so.
func warnDue(at *atomic.Int64) bool {
	now := time.Now().UnixMilli()
	last := at.Load()
	return now-last >= 5000 && at.CompareAndSwap(last, now)
}
