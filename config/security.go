package config

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Security is the security section of the cluster file: how members prove
// to each other that they belong to the cluster, the optional TLS client
// port, and the operator's controls over clients.
type Security struct {
	// ClusterSecret is shared by every member; members prove they know it
	// with a challenge–response on every link between them (Raft, request
	// forwarding, the cross-shard protocol). XKEEPER_SECURITY_CLUSTER_SECRET
	// sets it from the environment. It is never logged.
	ClusterSecret string `mapstructure:"cluster_secret" yaml:"cluster_secret,omitempty"`
	// PeerTLS, when set, makes every link between members mutual TLS with
	// certificates of the cluster's CA (with a secret as well, both are
	// checked). Every certificate that CA signs passes as a member's, so it
	// must sign members' certificates only.
	PeerTLS TLS `mapstructure:"peer_tls" yaml:"peer_tls,omitempty"`
	// ClientTLS is the certificate of the secure client ports
	// (members[].secure_client_addr) and the CA their clients' certificates
	// are checked against.
	ClientTLS ClientTLS `mapstructure:"client_tls" yaml:"client_tls,omitempty"`
	// SuperDigest, as ZooKeeper's superDigest, is "super:BASE64(SHA1)" (what
	// `xkeeper digest super:PASSWORD` prints): a client that authenticates
	// with that digest passes every ACL check.
	SuperDigest string `mapstructure:"super_digest" yaml:"super_digest,omitempty"`
	// FourLetterWords lists the 4-letter words the client ports answer
	// (ZooKeeper's 4lw.commands.whitelist); "*" allows all. Empty means the
	// harmless ones (DefaultFourLetterWords).
	FourLetterWords []string `mapstructure:"four_letter_words" yaml:"four_letter_words,omitempty"`
	// MaxConnectionsPerIP caps the client connections from one IP address
	// on each member (ZooKeeper's maxClientCnxns); 0 means 60, -1 no cap.
	// Authenticated member links do not count.
	MaxConnectionsPerIP int `mapstructure:"max_connections_per_ip" yaml:"max_connections_per_ip,omitempty"`
	// Auth is the digest identity "user:password" that xkeeper's own
	// commands authenticate with; xkeeper's znodes (/xkeeper/...) are
	// created writable by it alone. XKEEPER_SECURITY_AUTH sets it from the
	// environment.
	Auth string `mapstructure:"auth" yaml:"auth,omitempty"`
}

// TLS names PEM files: a certificate, its key and the CA that signs peers'
// certificates.
type TLS struct {
	CAFile   string `mapstructure:"ca_file" yaml:"ca_file,omitempty"`
	CertFile string `mapstructure:"cert_file" yaml:"cert_file,omitempty"`
	KeyFile  string `mapstructure:"key_file" yaml:"key_file,omitempty"`
}

// Enabled reports whether any file is named.
func (t TLS) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// ClientTLS is the secure client port's TLS.
type ClientTLS struct {
	TLS `mapstructure:",squash" yaml:",inline"`
	// ClientAuth is "none" (the default), "optional" (a certificate, if
	// sent, must be signed by ca_file) or "required".
	ClientAuth string `mapstructure:"client_auth" yaml:"client_auth,omitempty"`
}

// DefaultFourLetterWords are the 4-letter words answered when the file
// names none: those that only report (not cons, which lists every client,
// nor the resets srst and crst).
var DefaultFourLetterWords = []string{"ruok", "srvr", "stat", "mntr", "conf", "isro", "envi", "dirs", "wchs"}

// DefaultMaxConnectionsPerIP is ZooKeeper's maxClientCnxns default.
const DefaultMaxConnectionsPerIP = 60

// AllowedFourLetterWords returns the 4-letter words the client port answers.
func (s Security) AllowedFourLetterWords() []string {
	if len(s.FourLetterWords) == 0 {
		return DefaultFourLetterWords
	}
	return s.FourLetterWords
}

// ConnectionsPerIP returns the cap on client connections from one IP, 0 for
// none.
func (s Security) ConnectionsPerIP() int {
	switch {
	case s.MaxConnectionsPerIP == 0:
		return DefaultMaxConnectionsPerIP
	case s.MaxConnectionsPerIP < 0:
		return 0
	}
	return s.MaxConnectionsPerIP
}

// MembersAuthenticated reports whether members have a way to prove they
// belong to the cluster: a secret or peer TLS.
func (s Security) MembersAuthenticated() bool { return s.ClusterSecret != "" || s.PeerTLS.Enabled() }

// NewClusterSecret returns a fresh random secret for a new cluster file.
func NewClusterSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// minSecret is the shortest cluster secret accepted: with fewer random
// characters, a proof overheard could be guessed offline.
const minSecret = 32

// knownFourLetterWords are the words a client port can answer.
var knownFourLetterWords = []string{"ruok", "srvr", "stat", "mntr", "conf", "cons", "isro", "envi", "dirs", "wchs", "srst", "crst"}

func (s Security) validate(p *problems) {
	if s.ClusterSecret != "" && len(s.ClusterSecret) < minSecret {
		p.add("security.cluster_secret", "too short: at least %d characters (a random one: `openssl rand -hex 32`)", minSecret)
	}
	if s.PeerTLS.CAFile != "" && s.PeerTLS.CAFile == s.ClientTLS.CAFile {
		p.add("security.peer_tls.ca_file", "is also security.client_tls.ca_file: every client certificate would pass as a member's; give members a CA of their own")
	}
	s.PeerTLS.validate(p, "security.peer_tls", true)
	s.ClientTLS.validate(p, "security.client_tls", false)
	switch s.ClientTLS.ClientAuth {
	case "", "none", "optional", "required":
	default:
		p.add("security.client_tls.client_auth", "%q: want none, optional or required", s.ClientTLS.ClientAuth)
	}
	if s.ClientTLS.ClientAuth == "optional" || s.ClientTLS.ClientAuth == "required" {
		p.required("security.client_tls.ca_file", s.ClientTLS.CAFile)
	}
	if s.SuperDigest != "" {
		user, hash, ok := strings.Cut(s.SuperDigest, ":")
		if !ok || user == "" || hash == "" {
			p.add("security.super_digest", "want USER:BASE64HASH, as `xkeeper digest super:PASSWORD` prints")
		}
	}
	for i, w := range s.FourLetterWords {
		if w != "*" && !slices.Contains(knownFourLetterWords, w) {
			p.add(fmt.Sprintf("security.four_letter_words[%d]", i), "unknown word %q (known: %s, or *)", w, strings.Join(knownFourLetterWords, ", "))
		}
	}
	if s.MaxConnectionsPerIP < -1 {
		p.add("security.max_connections_per_ip", "%d: want a count, 0 for the default or -1 for no cap", s.MaxConnectionsPerIP)
	}
	if s.Auth != "" {
		if user, _, ok := strings.Cut(s.Auth, ":"); !ok || user == "" {
			p.add("security.auth", "want user:password")
		}
	}
}

// validate checks a TLS file set; mutual sets need all three files.
func (t TLS) validate(p *problems, key string, mutual bool) {
	if !t.Enabled() {
		return
	}
	p.required(key+".cert_file", t.CertFile)
	p.required(key+".key_file", t.KeyFile)
	if mutual {
		p.required(key+".ca_file", t.CAFile)
	}
}
