package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

func TestDigest(t *testing.T) {
	// ZooKeeper's documented superDigest of super:test.
	code, out, _ := xk(t, "digest", "super:test")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "super:D/InIHSb7yEEbrWz8b9l71RjZJU=\n", out)
	code, _, stderr := xk(t, "digest", "nopassword")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "USER:PASSWORD")
}

// TestConnectionFlagErrors checks that bad connection flags are usage
// errors, named, before anything connects.
func TestConnectionFlagErrors(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, testenv.NewClusterConfig(t, t.TempDir(), 1, 1).Write(cfg))
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"client", "--shard", "a", "--tls", "ls", "/"}, "--tls: member a1 has no secure_client_addr"},
		{[]string{"tx", "list", "--tls"}, "--tls: member a1 has no secure_client_addr"},
		{[]string{"partition", "moves", "--tls", "--tls-ca", missing}, "--tls: config: security.client_tls.ca_file: open " + missing},
		{[]string{"client", "--shard", "a", "--auth", "nocolon", "ls", "/"}, "--auth: want user:password"},
	} {
		code, _, stderr := xk(t, append(c.args, "--config", cfg)...)
		assert.Equal(t, exitUsage, code, c.args)
		assert.Contains(t, stderr, c.want, c.args)
	}
}

// TestTLSAndAuth runs commands over the members' TLS ports, which require
// a client certificate, with the cluster file's digest identity.
func TestTLSAndAuth(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 1})
	ca, other := testenv.NewCA(t), testenv.NewCA(t)
	ca.SecureClientPorts(t, c, "required")
	plainCfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(plainCfg))
	c.Config.Security.Auth = "xk:pw"
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(cfg))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, c.Servers("a"), client.WithAuth("digest", []byte("xk:pw")))
	require.NoError(t, err)
	defer cl.Close()
	acl := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: fsm.DigestID("xk:pw")}}}
	_, err = cl.Create(ctx, "/secret", []byte("s3cret"), 0, acl)
	require.NoError(t, err)

	cert, key := ca.Issue(t, "cli")
	get := []string{"client", "--shard", "a", "get", "/secret"}
	authFile := filepath.Join(t.TempDir(), "auth")
	require.NoError(t, os.WriteFile(authFile, []byte("xk:pw\n"), 0o600))
	for _, s := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", cfg, "--tls"}, exitOK, "s3cret"}, // the files of security.client_tls
		{[]string{"--config", cfg, "--tls", "--tls-cert", cert, "--tls-key", key}, exitOK, "s3cret"},
		{[]string{"--config", cfg}, exitOK, "s3cret"},
		{[]string{"--config", plainCfg, "--tls", "--auth", "xk:pw"}, exitOK, "s3cret"},
		{[]string{"--config", plainCfg, "--tls", "--auth-file", authFile}, exitOK, "s3cret"},
		{[]string{"--config", plainCfg, "--auth-file", authFile + ".missing"}, exitUsage, "--auth-file"},
		{[]string{"--config", cfg, "--auth", "other:pw"}, exitFailure, "not authenticated"},
		{[]string{"--config", plainCfg, "--tls"}, exitFailure, "not authenticated"},
		{[]string{"--config", cfg, "--tls", "--tls-ca", other.File(), "--timeout", "2s"}, exitFailure, "deadline exceeded"},
	} {
		code, out, stderr := xk(t, append(get, s.args...)...)
		assert.Equal(t, s.code, code, "%v: %s", s.args, stderr)
		assert.Contains(t, out+stderr, s.want, s.args)
	}
	t.Setenv("XKEEPER_SECURITY_AUTH", "xk:pw")
	code, out, stderr := xk(t, append(get, "--config", plainCfg, "--tls")...)
	assert.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "s3cret\n", out)

	// The commands that open a router: transactions, moves, audit.
	for _, args := range [][]string{{"tx", "list"}, {"partition", "moves"}, {"audit"}} {
		code, out, stderr := xk(t, append(args, "--config", cfg, "--tls")...)
		assert.Equal(t, exitOK, code, "%v: %s%s", args, out, stderr)
	}
}
