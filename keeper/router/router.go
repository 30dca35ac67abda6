// Package router is a node's client endpoint: one ZooKeeper port through
// which one client session reaches every shard the node hosts, each path
// on the shard the cluster file's mount table places it on.
//
// The client's session is its session on the root shard (the front
// session). Behind it the endpoint opens a session on each other shard
// the client touches, on the node's own member of that shard, and keeps
// their ids and passwords in an ephemeral znode of the front session on
// the root shard (proto.EndpointSessions), so that the client, reconnected
// to any node, gets them all back. Requests route by path; a session's
// requests to different shards run in the order it sent them, and a multi
// whose ops span shards runs as a cross-shard transaction. DESIGN-NOTES
// ("One endpoint") says what differs from one ZooKeeper.
package router

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Member is the node's member of a shard as the endpoint uses it (its
// server.Server).
type Member interface {
	// ServeRouted serves a connection the endpoint opened for the client at
	// addr; with link, a handshake naming a session the shard does not have
	// creates it with that id and password.
	ServeRouted(nc net.Conn, addr net.Addr, link bool) error
	// ServeConn serves a connection the endpoint hands on as it came.
	ServeConn(nc net.Conn, addr net.Addr) error
}

// Config is what an endpoint needs.
type Config struct {
	// Addr is the host:port to listen on.
	Addr string
	// SecureAddr, if set, is a second listener that speaks TLS with TLS.
	SecureAddr string
	TLS        *tls.Config
	// Root is the root shard; Mounts place the other subtrees.
	Root   string
	Mounts []config.Mount
	// Shards serves a connection on the node's member of each shard the
	// table names.
	Shards map[string]Member
	// MaxPacket bounds a request (keeper.max_packet_bytes).
	MaxPacket int
	// MaxConnsPerIP caps one IP's connections; 0 for no cap.
	MaxConnsPerIP int
	Logger        *slog.Logger
}

// Router is a running endpoint.
type Router struct {
	cfg     Config
	table   *Table
	ln      net.Listener
	tlsLn   net.Listener // nil without SecureAddr
	log     *slog.Logger
	ready   chan struct{} // closed once the mount points exist
	stop    context.CancelFunc
	ctx     context.Context
	metrics *metrics

	mu     sync.Mutex
	fronts map[*front]struct{}
	perIP  map[string]int
	closed bool
	wg     sync.WaitGroup
}

// Listen starts an endpoint: it accepts at once, and creates the mount
// points (Table.Scaffold) in the background, retrying until every shard
// has taken them; Ready says when.
func Listen(cfg Config) (*Router, error) {
	t := NewTable(cfg.Root, cfg.Mounts)
	for _, s := range t.Shards() {
		if cfg.Shards[s] == nil {
			return nil, fmt.Errorf("router: the node hosts no member of shard %s", s)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxPacket <= 0 {
		cfg.MaxPacket = proto.DefaultMaxPacket
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Router{cfg: cfg, table: t, ready: make(chan struct{}), ctx: ctx, stop: stop, metrics: newMetrics(),
		fronts: map[*front]struct{}{}, perIP: map[string]int{}}
	var err error
	if cfg.Addr != "" {
		r.ln, err = net.Listen("tcp", cfg.Addr)
	}
	if err == nil && cfg.SecureAddr != "" {
		var l net.Listener
		if l, err = net.Listen("tcp", cfg.SecureAddr); err == nil {
			r.tlsLn = tls.NewListener(l, cfg.TLS)
		}
	}
	if err != nil || r.ln == nil && r.tlsLn == nil {
		r.Close()
		return nil, fmt.Errorf("router: listen on %q and %q: %v", cfg.Addr, cfg.SecureAddr, cmp.Or[error](err, errors.New("no address")))
	}
	r.log = cfg.Logger.With("endpoint", cmp.Or(r.Addr(), r.SecureAddr()))
	r.wg.Go(r.scaffold)
	for _, ln := range []net.Listener{r.ln, r.tlsLn} {
		if ln != nil {
			r.wg.Go(func() { r.accept(ln) })
		}
	}
	return r, nil
}

// Addr returns the address of the plain listener, "" if there is none.
func (r *Router) Addr() string { return addrOf(r.ln) }

// SecureAddr returns the address of the TLS listener, "" if there is none.
func (r *Router) SecureAddr() string { return addrOf(r.tlsLn) }

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// Ready is closed once every mount point exists.
func (r *Router) Ready() <-chan struct{} { return r.ready }

// Close stops accepting, ends every client connection (their sessions live
// on until they expire or the client reconnects) and waits.
func (r *Router) Close() error {
	r.mu.Lock()
	r.closed = true
	for f := range r.fronts {
		f.close("endpoint closing")
	}
	r.mu.Unlock()
	r.stop()
	var errs []error
	for _, ln := range []net.Listener{r.ln, r.tlsLn} {
		if ln != nil {
			errs = append(errs, ln.Close())
		}
	}
	r.wg.Wait()
	return errors.Join(errs...)
}

func (r *Router) accept(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			r.log.Warn("accept", "err", err)
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		f := newFront(r, nc)
		if !r.admit(f) {
			nc.Close()
			continue
		}
		r.wg.Go(func() {
			defer r.forget(f)
			f.serve()
		})
	}
}

// admit registers a connection unless the endpoint is closing or its IP
// is over the cap.
func (r *Router) admit(f *front) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if max := r.cfg.MaxConnsPerIP; max > 0 && r.perIP[f.ip] >= max {
		r.log.Warn("refusing a connection over its IP's cap", "ip", f.ip, "cap", max)
		return false
	}
	r.perIP[f.ip]++
	r.fronts[f] = struct{}{}
	r.metrics.connections.Inc()
	return true
}

func (r *Router) forget(f *front) {
	f.close("done")
	r.mu.Lock()
	delete(r.fronts, f)
	r.metrics.connections.Dec()
	if r.perIP[f.ip]--; r.perIP[f.ip] <= 0 {
		delete(r.perIP, f.ip)
	}
	r.mu.Unlock()
}

// scaffold prepares the shards for the mounts, then closes ready: it
// creates each mount point's ancestors on the mount's shard
// (Table.Scaffold) and the directory of endpoint sessions on the root
// shard, and, for a mount point that exists, the placeholder
// and its ancestors on the shard that holds its parent (a crash can leave
// a mount point without one: it is made when the mount point is). It
// retries until every shard has answered.
func (r *Router) scaffold() {
	for {
		err := r.prepare()
		if err == nil {
			close(r.ready)
			return
		}
		r.log.Debug("preparing the mounts", "err", err)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *Router) prepare() error {
	sessions := map[string]*backend{}
	defer func() {
		for _, b := range sessions {
			b.callOK(proto.OpCloseSession, proto.Empty{}, nil)
			b.nc.Close()
		}
	}()
	session := func(shard string) (*backend, error) {
		if b := sessions[shard]; b != nil {
			return b, nil
		}
		nc, br, resp, err := dial(r.cfg.Shards[shard], endpointAddr, false, &proto.ConnectRequest{
			Timeout: int32(handshakeTimeout.Milliseconds()), Passwd: make([]byte, proto.PasswordLen)}, r.cfg.MaxPacket)
		if err != nil {
			return nil, err
		}
		if resp.SessionID == 0 {
			nc.Close()
			return nil, errHandshake
		}
		b := &backend{shard: shard, nc: nc, br: br, max: r.cfg.MaxPacket,
			event: func([]byte) {}, track: func(proto.ReplyHeader) {}, ended: func(*backend, error) {}}
		go b.run()
		sessions[shard] = b
		return b, nil
	}
	create := func(shard string, paths []string) error {
		b, err := session(shard)
		if err != nil {
			return err
		}
		for _, p := range paths {
			h, _, err := b.call(proto.OpCreate, proto.Marshal(&proto.CreateRequest{Path: p, ACL: proto.WorldACL(proto.PermAll)}))
			if err != nil {
				return err
			}
			if h.Err != proto.ErrOK && h.Err != proto.ErrNodeExists {
				return fmt.Errorf("create %s on shard %s: %w", p, shard, h.Err)
			}
		}
		return nil
	}
	need := r.table.Scaffold()
	need[r.table.Root()] = append(need[r.table.Root()], proto.EndpointSessions)
	for shard, paths := range need {
		if err := create(shard, paths); err != nil {
			return err
		}
	}
	for _, m := range r.table.MountPoints() {
		b, err := session(r.table.Shard(m))
		if err != nil {
			return err
		}
		h, _, err := b.call(proto.OpExists, proto.Marshal(&proto.PathWatchRequest{Path: m}))
		if err != nil {
			return err
		}
		if h.Err == proto.ErrOK {
			if err := create(r.table.Holder(m), ancestry(m)); err != nil {
				return err
			}
		}
	}
	return nil
}

// endpointAddr is the client address of the endpoint's own sessions.
var endpointAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

// proxy hands a connection that is not a ZooKeeper session (a 4-letter
// word, a member's admin or backup link) to the root shard's member as it
// is, br holding what was read of it already: the member serves it as one
// it accepted itself, with nothing the endpoint's own connections may do.
func (r *Router) proxy(nc net.Conn, br *bufio.Reader) {
	ours, theirs := net.Pipe()
	if err := r.cfg.Shards[r.table.Root()].ServeConn(theirs, nc.RemoteAddr()); err != nil {
		return
	}
	defer ours.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(nc, ours)
		nc.Close()
	}()
	nc.SetReadDeadline(time.Time{})
	io.Copy(ours, br)
	ours.Close()
	<-done
}
