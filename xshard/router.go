package xshard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Router reaches every shard of a cluster by name, with one client session
// per shard, opened on first use and replaced when it ends.
type Router struct {
	cluster  *config.Cluster
	log      *slog.Logger
	opts     []client.Option
	mu       sync.Mutex
	clients  map[string]*client.Client
	closed   bool
	asListed bool
	// unsynced holds the shards where a transaction of this router may
	// have committed since the router's session there last synced: a
	// commit is applied by the shard's leader, not through that session,
	// so a session on a follower that lags could read what came before it
	// (the catalog nemesis met a move whose next move found nothing).
	// Client syncs such a session before it hands it out.
	unsynced map[string]bool
}

// AsListed makes the router enter every shard by its members in the
// cluster file's order instead of by its leader (fault tests choose the
// member that runs a driver this way).
func (r *Router) AsListed() *Router {
	r.asListed = true
	return r
}

// NewRouter returns a router over the cluster's shards.
func NewRouter(c *config.Cluster, log *slog.Logger, opts ...client.Option) *Router {
	if log == nil {
		log = slog.Default()
	}
	return &Router{cluster: c, log: log, opts: append([]client.Option{client.WithLogger(log)}, opts...),
		clients: map[string]*client.Client{}, unsynced: map[string]bool{}}
}

// touched records that a transaction of the router may have committed on
// shards (Router.unsynced).
func (r *Router) touched(shards ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range shards {
		r.unsynced[s] = true
	}
}

// synced syncs c, the router's session to shard, if a transaction may
// have committed there since it last did: its reads then see the
// transaction (or its locks, which hold them until the commit lands).
func (r *Router) synced(ctx context.Context, shard string, c *client.Client) (*client.Client, error) {
	r.mu.Lock()
	stale := r.unsynced[shard]
	delete(r.unsynced, shard)
	r.mu.Unlock()
	if !stale {
		return c, nil
	}
	if _, err := c.Sync(ctx, "/"); err != nil {
		r.touched(shard)
		return nil, fmt.Errorf("xshard: sync shard %s after a transaction: %w", shard, err)
	}
	return c, nil
}

// Cluster returns the cluster the router serves.
func (r *Router) Cluster() *config.Cluster { return r.cluster }

// Client returns a live session to shard.
func (r *Router) Client(ctx context.Context, shard string) (*client.Client, error) {
	sh, err := r.cluster.Shard(shard)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, client.ErrClosed
	}
	c := r.clients[shard]
	r.mu.Unlock()
	if c != nil {
		select {
		case <-c.Done():
			c.Close()
		default:
			return r.synced(ctx, shard, c)
		}
	}
	servers := sh.ClientAddrs()
	// Protocol messages are writes: a session on the leader saves each one
	// the hop from a follower and the wait for the follower to learn the
	// commit. Any member serves if the leader cannot be found.
	if !r.asListed {
		servers = leaderFirst(ctx, servers)
	}
	c, err = client.Connect(ctx, servers, append(slices.Clip(r.opts), client.WithOrderedServers())...)
	if err != nil {
		return nil, fmt.Errorf("xshard: connect to shard %s: %w", shard, err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.Close()
		return nil, client.ErrClosed
	}
	old := r.clients[shard]
	r.clients[shard] = c
	r.mu.Unlock()
	if old != nil && old != c {
		old.Close()
	}
	return r.synced(ctx, shard, c)
}

// Close ends every session.
func (r *Router) Close() {
	r.mu.Lock()
	r.closed = true
	cs := r.clients
	r.clients = map[string]*client.Client{}
	r.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// retryable reports whether an error means "no answer yet" rather than an
// answer: the request is idempotent and is sent again.
func retryable(err error) bool {
	var code proto.Code
	if errors.As(err, &code) {
		switch code {
		case proto.ErrConnectionLoss, proto.ErrSessionExpired, proto.ErrSessionMoved,
			proto.ErrOperationTimeout, proto.ErrRequestTimeout, proto.ErrSystemError:
			return true
		}
		return false
	}
	// Errors that are not an answer from a shard: a lost context, a closed
	// router or a request too large to send will not get better by retrying.
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, proto.ErrFrameTooLarge) && !errors.Is(err, client.ErrClosed)
}

// maxRetryPause is the longest pause between two tries of a message that
// got no answer: pauses double up to it, so that a shard that stays
// unreachable costs a few tries (and debug lines) a second, not a spin.
const maxRetryPause = 200 * time.Millisecond

// Do sends an idempotent request to shard and retries through
// unavailability (lost connections, leader changes, expired sessions)
// until it gets an answer or ctx ends.
func (r *Router) Do(ctx context.Context, shard string, op proto.OpCode, req, resp proto.Record) error {
	backoff := 5 * time.Millisecond
	for {
		c, err := r.Client(ctx, shard)
		if err == nil {
			_, err = c.Do(ctx, op, req, resp)
			if err == nil || !retryable(err) {
				return err
			}
		} else if ctx.Err() != nil {
			return err
		}
		r.log.Debug("xshard: retrying", "shard", shard, "op", op, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("xshard: shard %s unreachable: %w (last error: %v)", shard, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxRetryPause)
	}
}

// leaderFirst orders a shard's members with the one that reports itself
// leader (4-letter word srvr, "Mode: leader") first.
func leaderFirst(ctx context.Context, servers []string) []string {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	type answer struct {
		addr   string
		leader bool
	}
	answers := make(chan answer, len(servers))
	for _, addr := range servers {
		go func() {
			answers <- answer{addr, isLeader(ctx, addr)}
		}()
	}
	out := slices.Clone(servers)
	for range servers {
		if a := <-answers; a.leader {
			i := slices.Index(out, a.addr)
			out[0], out[i] = out[i], out[0]
		}
	}
	return out
}

func isLeader(ctx context.Context, addr string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return false
	}
	out, _ := io.ReadAll(io.LimitReader(conn, 4096))
	return strings.Contains(string(out), "\nMode: leader\n")
}
