package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSecurityValidation: each mistake in the security section is refused
// with an error naming its key.
func TestSecurityValidation(t *testing.T) {
	cases := map[string]string{
		"cluster_secret: short":           "security.cluster_secret: too short",
		"four_letter_words: [ruok, kill]": `security.four_letter_words[1]: unknown word "kill"`,
		"max_connections_per_ip: -2":      "security.max_connections_per_ip",
		"auth: nocolon":                   "security.auth: want user:password",
		"super_digest: super":             "security.super_digest",
		"client_tls: {cert_file: c, key_file: k, client_auth: maybe}":                                                "security.client_tls.client_auth",
		"client_tls: {cert_file: c, key_file: k, client_auth: required}":                                             "security.client_tls.ca_file: required",
		"peer_tls: {cert_file: c, key_file: k}":                                                                      "security.peer_tls.ca_file: required",
		"peer_tls: {ca_file: ca, cert_file: c, key_file: k}\n  client_tls: {ca_file: ca, cert_file: c, key_file: k}": "give members a CA of their own",
	}
	for section, want := range cases {
		_, err := load(t, twoShards+"security:\n  "+section+"\n")
		require.Error(t, err, section)
		assert.Contains(t, err.Error(), want, section)
	}
}

// TestSecurityFromEnvironment: the secrets can come from the environment
// alone, and the defaults are ZooKeeper's.
func TestSecurityFromEnvironment(t *testing.T) {
	secret := strings.Repeat("s", 40)
	t.Setenv("XKEEPER_SECURITY_CLUSTER_SECRET", secret)
	t.Setenv("XKEEPER_SECURITY_AUTH", "xkeeper:pw")
	c := mustLoad(t, twoShards)
	assert.Equal(t, secret, c.Security.ClusterSecret)
	assert.Equal(t, "xkeeper:pw", c.Security.Auth)
	assert.True(t, c.Security.MembersAuthenticated())
	assert.Equal(t, DefaultMaxConnectionsPerIP, c.Security.ConnectionsPerIP())
	assert.NotContains(t, c.Security.AllowedFourLetterWords(), "cons")
}

// TestLayoutIsSecure: a laid-out cluster has a fresh secret of its own.
func TestLayoutIsSecure(t *testing.T) {
	ports, err := FreeLoopbackPorts(4)
	require.NoError(t, err)
	a, err := Layout(t.TempDir(), 1, 2, ports, Default())
	require.NoError(t, err)
	b, err := Layout(t.TempDir(), 1, 2, ports, Default())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(a.Security.ClusterSecret), minSecret)
	assert.NotEqual(t, a.Security.ClusterSecret, b.Security.ClusterSecret)
}
