// Package peerlink authenticates the links between members of a cluster:
// Raft, follower→leader forwarding and the cross-shard protocol. Both ends
// prove they belong to the cluster, by mutual TLS with the cluster's CA, by
// a challenge–response over a shared secret, or both; a link that fails is
// closed and logged with the peer's address.
package peerlink

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// ErrRefused is returned when the other end fails to prove it belongs to
// the cluster, or refuses this end's proof.
var ErrRefused = errors.New("peerlink: authentication failed")

// Handshake bounds the whole authentication of a link.
const Handshake = 5 * time.Second

const (
	version   = "XKA1"
	nonceLen  = 32
	macLen    = sha256.Size
	ekmLabel  = "EXPORTER-xkeeper-peerlink"
	roleDial  = "xkeeper member dials"
	roleServe = "xkeeper member serves"
)

// Config names what members prove themselves with; at least one of the two.
type Config struct {
	// Secret is the cluster secret; empty for none.
	Secret string
	// CAFile, CertFile and KeyFile are PEM files for mutual TLS; empty for
	// none.
	CAFile, CertFile, KeyFile string
}

// Auth authenticates links for one member.
type Auth struct {
	secret    []byte
	serverTLS *tls.Config
	clientTLS *tls.Config
	log       *slog.Logger
	loggedAt  atomic.Int64 // unix ms of the last refusal logged
}

// New loads the configured proofs. With neither a secret nor TLS files it
// refuses: members that cannot tell each other from strangers would obey
// anyone.
func New(cfg Config, log *slog.Logger) (*Auth, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Auth{secret: []byte(cfg.Secret), log: log}
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		if err := a.loadTLS(cfg); err != nil {
			return nil, err
		}
	}
	if len(a.secret) == 0 && a.serverTLS == nil {
		return nil, errors.New("peerlink: members cannot authenticate each other: set security.cluster_secret (or XKEEPER_SECURITY_CLUSTER_SECRET) or security.peer_tls")
	}
	return a, nil
}

func (a *Auth) loadTLS(cfg Config) error {
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("peerlink: security.peer_tls: %w", err)
	}
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return fmt.Errorf("peerlink: security.peer_tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("peerlink: security.peer_tls.ca_file %s: no PEM certificate", cfg.CAFile)
	}
	a.serverTLS = &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
	}
	// Members are dialled by address, and a member's certificate need not
	// name it: the chain to the cluster's CA is what proves membership.
	a.clientTLS = &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: verifyChain(pool),
	}
	return nil
}

// verifyChain checks the peer's certificate against the cluster's CA alone.
func verifyChain(roots *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("peerlink: peer sent no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, b := range raw {
			c, err := x509.ParseCertificate(b)
			if err != nil {
				return err
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
}

// Dial authenticates a connection this member opened to another member.
// On failure the connection is closed.
func (a *Auth) Dial(c net.Conn) (net.Conn, error) {
	c.SetDeadline(time.Now().Add(Handshake))
	out, err := a.dial(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("peerlink: link to %s: %w", c.RemoteAddr(), err)
	}
	c.SetDeadline(time.Time{})
	return out, nil
}

func (a *Auth) dial(c net.Conn) (net.Conn, error) {
	var ekm []byte
	if a.clientTLS != nil {
		tc := tls.Client(c, a.clientTLS)
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		c, ekm = tc, exported(tc)
	}
	if len(a.secret) == 0 {
		return c, nil
	}
	// The dialler proves itself first: a server gives no proof (nothing to
	// guess the secret from offline) to anyone who has not proved theirs,
	// and the dialler only dials members' configured addresses.
	if _, err := c.Write([]byte(version)); err != nil {
		return nil, err
	}
	theirs := make([]byte, nonceLen)
	if _, err := io.ReadFull(c, theirs); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	mine := nonce()
	if _, err := c.Write(append(mine, a.mac(roleDial, mine, theirs, ekm)...)); err != nil {
		return nil, err
	}
	proof := make([]byte, macLen)
	if _, err := io.ReadFull(c, proof); err != nil {
		return nil, fmt.Errorf("%w: the member refused this member's proof", ErrRefused)
	}
	if !hmac.Equal(proof, a.mac(roleServe, mine, theirs, ekm)) {
		return nil, fmt.Errorf("%w: the member does not know the cluster secret", ErrRefused)
	}
	return c, nil
}

// Serve authenticates a connection another member opened to this one, at
// once. On failure the connection is closed and the attempt logged.
func (a *Auth) Serve(c net.Conn) (net.Conn, error) {
	c.SetDeadline(time.Now().Add(Handshake))
	out, err := a.serve(c)
	if err != nil {
		if now := time.Now().UnixMilli(); now-a.loggedAt.Load() >= 1000 {
			a.loggedAt.Store(now) // at most a line a second: strangers may be many
			a.log.Warn("peer link refused", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.Close()
		return nil, fmt.Errorf("peerlink: link from %s: %w", c.RemoteAddr(), err)
	}
	c.SetDeadline(time.Time{})
	return out, nil
}

func (a *Auth) serve(c net.Conn) (net.Conn, error) {
	var ekm []byte
	if a.serverTLS != nil {
		tc := tls.Server(c, a.serverTLS)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRefused, err)
		}
		c, ekm = tc, exported(tc)
	}
	if len(a.secret) == 0 {
		return c, nil
	}
	hello := make([]byte, len(version))
	if _, err := io.ReadFull(c, hello); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if !bytes.Equal(hello, []byte(version)) {
		return nil, fmt.Errorf("%w: not a member's hello", ErrRefused)
	}
	mine := nonce()
	if _, err := c.Write(mine); err != nil {
		return nil, err
	}
	answer := make([]byte, nonceLen+macLen)
	if _, err := io.ReadFull(c, answer); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	theirs, proof := answer[:nonceLen], answer[nonceLen:]
	if !hmac.Equal(proof, a.mac(roleDial, theirs, mine, ekm)) {
		return nil, fmt.Errorf("%w: wrong cluster secret", ErrRefused)
	}
	if _, err := c.Write(a.mac(roleServe, theirs, mine, ekm)); err != nil {
		return nil, err
	}
	return c, nil
}

// mac is the proof of one role over both nonces (the dialler's first) and,
// under TLS, the session's exported key, which binds the proof to this TLS
// session.
func (a *Auth) mac(role string, dialler, server, ekm []byte) []byte {
	h := hmac.New(sha256.New, a.secret)
	h.Write([]byte(role))
	h.Write(dialler)
	h.Write(server)
	h.Write(ekm)
	return h.Sum(nil)
}

func exported(tc *tls.Conn) []byte {
	st := tc.ConnectionState()
	ekm, err := st.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		return nil
	}
	return ekm
}

func nonce() []byte {
	b := make([]byte, nonceLen)
	rand.Read(b)
	return b
}

// DialMember opens an authenticated link to a member's port that serves
// both clients and members: magic tells the port what the link is for.
func (a *Auth) DialMember(ctx context.Context, addr, magic string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, Handshake)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte(magic)); err != nil {
		c.Close()
		return nil, err
	}
	return a.Dial(c)
}

// SessionMagic opens a member's ZooKeeper session on another member's
// client port: the link authenticates, then carries ZooKeeper's protocol,
// in which the cross-shard protocol's opcodes are accepted.
const SessionMagic = "xkms"
