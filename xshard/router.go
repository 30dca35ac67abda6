package xshard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Router reaches every shard of a cluster by name, with one client session
// per shard, opened on first use and replaced when it ends.
type Router struct {
	cluster *config.Cluster
	log     *slog.Logger
	opts    []client.Option
	mu      sync.Mutex
	clients map[string]*client.Client
	closed  bool
}

// NewRouter returns a router over the cluster's shards.
func NewRouter(c *config.Cluster, log *slog.Logger, opts ...client.Option) *Router {
	if log == nil {
		log = slog.Default()
	}
	return &Router{cluster: c, log: log, opts: append([]client.Option{client.WithLogger(log)}, opts...),
		clients: map[string]*client.Client{}}
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
			return c, nil
		}
	}
	servers := make([]string, len(sh.Members))
	for i, m := range sh.Members {
		servers[i] = m.ClientAddr
	}
	c, err = client.Connect(ctx, servers, r.opts...)
	if err != nil {
		return nil, fmt.Errorf("xshard: connect to shard %s: %w", shard, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return nil, client.ErrClosed
	}
	if old := r.clients[shard]; old != nil && old != c {
		old.Close()
	}
	r.clients[shard] = c
	return c, nil
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
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}
