package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xkeeper/xkeeper/config"
)

// CA is a throwaway certificate authority whose PEM files live in a test's
// temporary directory.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	file string
}

// NewCA makes a CA (ECDSA P-256) valid for a day and writes its
// certificate to ca.pem.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca := &CA{dir: t.TempDir()}
	tmpl := certTemplate("xkeeper test CA")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	ca.cert, ca.key, ca.file, _ = ca.write(t, "ca", tmpl, nil, nil)
	return ca
}

// File returns the path of the CA's certificate (a ca_file).
func (ca *CA) File() string { return ca.file }

// Issue signs a certificate for name, good for both ends of a TLS
// connection (ExtKeyUsage ServerAuth and ClientAuth), with name as its DNS
// name and 127.0.0.1 and ips as its IP addresses, and writes NAME.pem and
// NAME-key.pem.
func (ca *CA) Issue(t testing.TB, name string, ips ...string) (certFile, keyFile string) {
	t.Helper()
	tmpl := certTemplate(name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames = []string{name}
	for _, ip := range append([]string{"127.0.0.1"}, ips...) {
		parsed := net.ParseIP(ip)
		if parsed == nil {
			t.Fatalf("testenv: Issue %s: bad IP %q", name, ip)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, parsed)
	}
	_, _, certFile, keyFile = ca.write(t, name, tmpl, ca.cert, ca.key)
	return certFile, keyFile
}

// SecureClientPorts gives every member of c a secure client port on a free
// loopback port (security.client_tls: a certificate of ca, client_auth as
// given), or, on a cluster of nodes, every node's endpoint one, and
// restarts the members (the nodes) so that they listen on it.
func (ca *CA) SecureClientPorts(t testing.TB, c *Cluster, clientAuth string) {
	t.Helper()
	cert, key := ca.Issue(t, "members")
	cfg := c.Config
	for _, n := range cfg.Nodes {
		c.KillNode(n.Name)
	}
	for _, sh := range cfg.Shards {
		for _, m := range sh.Members {
			if m.Node == "" {
				c.Kill(m.ID)
			}
		}
	}
	cfg.Security.ClientTLS = config.ClientTLS{TLS: config.TLS{CAFile: ca.File(), CertFile: cert, KeyFile: key}, ClientAuth: clientAuth}
	for i, port := range FreePorts(t, len(cfg.Nodes)) {
		cfg.Nodes[i].SecureClientAddr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	for i := range cfg.Shards {
		ms := cfg.Shards[i].Members
		for j, port := range FreePorts(t, len(ms)) {
			if ms[j].Node == "" {
				ms[j].SecureClientAddr = fmt.Sprintf("127.0.0.1:%d", port)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, n := range cfg.Nodes {
		c.RestartNode(n.Name)
	}
	for _, sh := range cfg.Shards {
		for _, m := range sh.Members {
			if m.Node == "" {
				c.Restart(m.ID)
			}
		}
	}
	for _, sh := range cfg.Shards {
		c.WaitLeader(sh.Name)
	}
	c.WaitBalanced() // a leadership the balancer moves later would cost a test's client its connection
}

// certTemplate is a certificate for name, valid from an hour ago for a day.
func certTemplate(name string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
}

// write makes a key, signs tmpl with parent's key (itself when parent is
// nil) and writes NAME.pem and NAME-key.pem.
func (ca *CA) write(t testing.TB, name string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(ca.dir, name+".pem")
	keyFile := filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return cert, key, certFile, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
