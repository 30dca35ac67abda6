package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// clientTLSKey prefixes the keys named in errors about the client TLS files.
const clientTLSKey = "security.client_tls"

// ServerConfig loads the secure client port's certificate and, when
// client_auth is optional or required, the CA its clients' certificates
// are checked against.
func (t ClientTLS) ServerConfig() (*tls.Config, error) {
	cert, err := loadKeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	switch t.ClientAuth {
	case "", "none":
		cfg.ClientAuth = tls.NoClientCert
		return cfg, nil
	case "optional":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("config: %s.client_auth: %q: want none, optional or required", clientTLSKey, t.ClientAuth)
	}
	if cfg.ClientCAs, err = loadPool(t.CAFile); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ClientConfig returns the TLS configuration of a client of the secure
// client ports. With caFile, the server's certificate must chain to that
// CA, whatever names it holds (members are dialled by address); without,
// the system's roots and the host name are checked. certFile and keyFile,
// if given, are the client's certificate.
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certFile != "" || keyFile != "" {
		cert, err := loadKeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if caFile == "" {
		return cfg, nil
	}
	roots, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg.InsecureSkipVerify = true // the chain is checked by VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("config: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
	return cfg, nil
}

// loadKeyPair reads a PEM certificate and its key.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := readPEM("cert_file", certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readPEM("key_file", keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("config: %s: cert_file %s, key_file %s: %w", clientTLSKey, certFile, keyFile, err)
	}
	return cert, nil
}

// loadPool reads a PEM file of CA certificates.
func loadPool(caFile string) (*x509.CertPool, error) {
	pem, err := readPEM("ca_file", caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("config: %s.ca_file: %s: no PEM certificate", clientTLSKey, caFile)
	}
	return pool, nil
}

// readPEM reads the file of a client_tls key, naming the key on error.
func readPEM(key, file string) ([]byte, error) {
	if file == "" {
		return nil, fmt.Errorf("config: %s.%s: required", clientTLSKey, key)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %s.%s: %w", clientTLSKey, key, err)
	}
	return b, nil
}
