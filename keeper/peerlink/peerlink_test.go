package peerlink

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// link runs both ends of a link over a pipe and returns their errors.
func link(t *testing.T, dialler, server *Auth) (dialErr, serveErr error) {
	t.Helper()
	dc, sc := net.Pipe()
	served := make(chan error, 1)
	go func() {
		c, err := server.Serve(sc)
		if err == nil {
			// Prove the link carries bytes after the proof.
			_, err = c.Write([]byte("ok"))
			c.Close()
		}
		served <- err
	}()
	c, err := dialler.Dial(dc)
	if err == nil {
		b, rerr := io.ReadAll(c)
		require.NoError(t, rerr)
		assert.Equal(t, "ok", string(b))
		c.Close()
	}
	return err, <-served
}

func mustNew(t *testing.T, cfg Config) *Auth {
	a, err := New(cfg, discard())
	require.NoError(t, err)
	return a
}

func TestSecret(t *testing.T) {
	good := Config{Secret: "the-cluster-secret"}
	dialErr, serveErr := link(t, mustNew(t, good), mustNew(t, good))
	require.NoError(t, dialErr)
	require.NoError(t, serveErr)

	dialErr, serveErr = link(t, mustNew(t, Config{Secret: "another-secret!!"}), mustNew(t, good))
	assert.ErrorIs(t, dialErr, ErrRefused, "the dialler must not accept a server that does not know its secret")
	assert.ErrorIs(t, serveErr, ErrRefused)
}

func TestNoProofRefusedAtStart(t *testing.T) {
	_, err := New(Config{}, discard())
	assert.ErrorContains(t, err, "security.cluster_secret")
}

func TestMissingTLSFiles(t *testing.T) {
	_, err := New(Config{CAFile: "/nonexistent/ca.pem", CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}, discard())
	assert.ErrorContains(t, err, "security.peer_tls")
}
