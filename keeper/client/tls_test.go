package client_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestTLS connects to a member's secure client port that requires a client
// certificate: with WithTLS and one the CA signed, a session works, also
// over a dialer that maps names to addresses; without a certificate or
// with the wrong CA, none is established.
func TestTLS(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 1})
	ca, other := testenv.NewCA(t), testenv.NewCA(t)
	ca.SecureClientPorts(t, c, "required")
	secure := c.Shard("a").Members[0].SecureClientAddr
	cert, key := ca.Issue(t, "cli")

	tlsCfg := clientTLS(t, ca.File(), cert, key)
	var mu sync.Mutex
	var dialled []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, secure)
	}
	cl := connect(t, []string{"member-1"}, client.WithTLS(tlsCfg), client.WithDialer(dial))
	ctx := testCtx(t)
	_, err := cl.Create(ctx, "/tls", []byte("over tls"), 0, nil)
	require.NoError(t, err)
	data, _, err := cl.Get(ctx, "/tls")
	require.NoError(t, err)
	assert.Equal(t, "over tls", string(data))
	mu.Lock()
	assert.Equal(t, []string{"member-1"}, dialled)
	mu.Unlock()

	// A plain client on the TLS port gets no session.
	for name, opts := range map[string][]client.Option{
		"plain":                 nil,
		"no client certificate": {client.WithTLS(clientTLS(t, ca.File(), "", ""))},
		"another CA":            {client.WithTLS(clientTLS(t, other.File(), cert, key))},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		opts = append(opts, client.WithLogger(testenv.TestLogger(t)))
		cl, err := client.Connect(ctx, []string{secure}, opts...)
		cancel()
		if !assert.Error(t, err, name) {
			cl.Close()
		}
	}
	_, _, err = cl.Exists(ctx, "/tls")
	require.NoError(t, err, "the good session is unaffected")
}

// TestTLSAuth authenticates with a digest over TLS: the identity's ACL
// lets it, and only it, read.
func TestTLSAuth(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 1})
	ca := testenv.NewCA(t)
	ca.SecureClientPorts(t, c, "none")
	secure := []string{c.Shard("a").Members[0].SecureClientAddr}
	tlsCfg := clientTLS(t, ca.File(), "", "")
	ctx := testCtx(t)
	alice := connect(t, secure, client.WithTLS(tlsCfg), client.WithAuth("digest", []byte("alice:secret")))
	acl := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: fsm.DigestID("alice:secret")}}}
	_, err := alice.Create(ctx, "/private", []byte("x"), 0, acl)
	require.NoError(t, err)
	_, _, err = alice.Get(ctx, "/private")
	require.NoError(t, err)
	anon := connect(t, secure, client.WithTLS(tlsCfg))
	_, _, err = anon.Get(ctx, "/private")
	require.ErrorIs(t, err, proto.ErrNoAuth)
}

// clientTLS is config.ClientConfig, failing the test on error.
func clientTLS(t *testing.T, caFile, certFile, keyFile string) *tls.Config {
	t.Helper()
	cfg, err := config.ClientConfig(caFile, certFile, keyFile)
	require.NoError(t, err)
	return cfg
}
