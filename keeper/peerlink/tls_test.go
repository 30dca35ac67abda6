package peerlink_test

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/testenv"
)

func member(t *testing.T, ca *testenv.CA, name, secret string) *peerlink.Auth {
	cert, key := ca.Issue(t, name, "127.0.0.1")
	a, err := peerlink.New(peerlink.Config{Secret: secret, CAFile: ca.File(), CertFile: cert, KeyFile: key},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return a
}

// connect links dialler to server over loopback TCP and returns both
// ends' errors.
func connect(t *testing.T, dialler, server *peerlink.Auth) (dialErr, serveErr error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		sc, err := server.Serve(c)
		if err == nil {
			sc.Close()
		}
		served <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	dc, dialErr := dialler.Dial(c)
	if dialErr == nil {
		dc.Close()
	}
	return dialErr, <-served
}

// TestMutualTLS: members whose certificates the cluster's CA signed link;
// a certificate of another CA is refused on either end; with a secret as
// well, both proofs are needed.
func TestMutualTLS(t *testing.T) {
	cluster, stranger := testenv.NewCA(t), testenv.NewCA(t)
	a, b := member(t, cluster, "a1", ""), member(t, cluster, "a2", "")
	dialErr, serveErr := connect(t, a, b)
	require.NoError(t, dialErr)
	require.NoError(t, serveErr)

	dialErr, serveErr = connect(t, member(t, stranger, "x", ""), b)
	assert.Error(t, dialErr)
	assert.ErrorIs(t, serveErr, peerlink.ErrRefused, "a client certificate of another CA was accepted")

	dialErr, _ = connect(t, a, member(t, stranger, "x", ""))
	assert.Error(t, dialErr, "a server certificate of another CA was accepted")

	both1, both2 := member(t, cluster, "a1", "secret-number-one"), member(t, cluster, "a2", "secret-number-two")
	dialErr, serveErr = connect(t, both1, both2)
	assert.ErrorIs(t, dialErr, peerlink.ErrRefused, "right certificate, wrong secret")
	assert.ErrorIs(t, serveErr, peerlink.ErrRefused)
}
