package config_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// handshake runs a TLS handshake between the two configurations over a
// pipe and returns each side's error.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		err := tls.Server(a, server).HandshakeContext(ctx)
		a.Close() // a failed server handshake must not leave the client waiting
		done <- err
	}()
	clientErr = tls.Client(b, client).HandshakeContext(ctx)
	b.Close()
	return <-done, clientErr
}

func TestClientTLSServerConfig(t *testing.T) {
	ca := testenv.NewCA(t)
	cert, key := ca.Issue(t, "a1")
	for mode, want := range map[string]tls.ClientAuthType{
		"": tls.NoClientCert, "none": tls.NoClientCert,
		"optional": tls.VerifyClientCertIfGiven, "required": tls.RequireAndVerifyClientCert,
	} {
		ct := config.ClientTLS{TLS: config.TLS{CAFile: ca.File(), CertFile: cert, KeyFile: key}, ClientAuth: mode}
		cfg, err := ct.ServerConfig()
		require.NoError(t, err, mode)
		assert.Equal(t, want, cfg.ClientAuth, mode)
		assert.Equal(t, want != tls.NoClientCert, cfg.ClientCAs != nil, mode)
		assert.Len(t, cfg.Certificates, 1)
		assert.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
	}
}

func TestClientTLSErrorsNameKeyAndFile(t *testing.T) {
	ca := testenv.NewCA(t)
	cert, key := ca.Issue(t, "a1")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, c := range []struct {
		tls  config.ClientTLS
		want string
	}{
		{config.ClientTLS{TLS: config.TLS{CertFile: missing, KeyFile: key}},
			"config: security.client_tls.cert_file: open " + missing + ": no such file"},
		{config.ClientTLS{TLS: config.TLS{CertFile: cert, KeyFile: missing}},
			"config: security.client_tls.key_file: open " + missing},
		{config.ClientTLS{TLS: config.TLS{CertFile: cert, KeyFile: cert}},
			"config: security.client_tls: cert_file " + cert + ", key_file " + cert},
		{config.ClientTLS{TLS: config.TLS{CertFile: cert, KeyFile: key}, ClientAuth: "required"},
			"config: security.client_tls.ca_file: required"},
		{config.ClientTLS{TLS: config.TLS{CAFile: key, CertFile: cert, KeyFile: key}, ClientAuth: "optional"},
			"config: security.client_tls.ca_file: " + key + ": no PEM certificate"},
		{config.ClientTLS{TLS: config.TLS{CertFile: cert, KeyFile: key}, ClientAuth: "maybe"},
			`config: security.client_tls.client_auth: "maybe"`},
	} {
		_, err := c.tls.ServerConfig()
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
	}
	_, err := config.ClientConfig(missing, "", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: security.client_tls.ca_file: open "+missing)
}

// TestClientConfigHandshake checks both ends: a client trusts a server by
// its chain to the CA alone, and a server that requires a client
// certificate takes only one the CA signed.
func TestClientConfigHandshake(t *testing.T) {
	ca, other := testenv.NewCA(t), testenv.NewCA(t)
	serverCert, serverKey := ca.Issue(t, "a1")
	clientCert, clientKey := ca.Issue(t, "cli")
	strangerCert, strangerKey := other.Issue(t, "stranger")
	required := config.ClientTLS{TLS: config.TLS{CAFile: ca.File(), CertFile: serverCert, KeyFile: serverKey}, ClientAuth: "required"}
	server, err := required.ServerConfig()
	require.NoError(t, err)

	withCert, err := config.ClientConfig(ca.File(), clientCert, clientKey)
	require.NoError(t, err)
	serverErr, clientErr := handshake(t, server, withCert)
	require.NoError(t, serverErr)
	require.NoError(t, clientErr)

	noCert, err := config.ClientConfig(ca.File(), "", "")
	require.NoError(t, err)
	serverErr, _ = handshake(t, server, noCert)
	assert.Error(t, serverErr, "a client without a certificate")

	stranger, err := config.ClientConfig(ca.File(), strangerCert, strangerKey)
	require.NoError(t, err)
	serverErr, _ = handshake(t, server, stranger)
	assert.Error(t, serverErr, "a client certificate of another CA")

	wrongCA, err := config.ClientConfig(other.File(), clientCert, clientKey)
	require.NoError(t, err)
	_, clientErr = handshake(t, server, wrongCA)
	require.Error(t, clientErr, "a server certificate of another CA")
	assert.Contains(t, clientErr.Error(), "unknown authority")
}
