package client

import (
	"context"
	"crypto/tls"
	"net"
)

// WithTLS speaks TLS with cfg on every connection (to a member's secure
// client port), over the connections the dialer (WithDialer, or TCP)
// opens. Without cfg.ServerName, the host of the address dialled is the
// name checked, as tls.Dial does.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// tlsDialer returns dial followed by a TLS handshake, both bounded by the
// dial's context.
func tlsDialer(dial Dialer, cfg *tls.Config) Dialer {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" {
			c = cfg.Clone()
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		return tc, nil
	}
}
