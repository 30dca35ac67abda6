package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/xshard"
)

// connFlags are the global flags of how commands reach the keeper shards.
type connFlags struct {
	auth, authFile         string
	tls                    bool
	tlsCA, tlsCert, tlsKey string
}

// add registers the flags on cmd and its subcommands.
func (f *connFlags) add(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.auth, "auth", "", "digest identity user:password (default security.auth of the cluster file, or $XKEEPER_SECURITY_AUTH); "+
		"visible to other users in the process list: prefer --auth-file or the environment")
	pf.StringVar(&f.authFile, "auth-file", "", "read the digest identity user:password from this file (its first line) instead of --auth")
	pf.BoolVar(&f.tls, "tls", false, "connect to the members' secure_client_addr over TLS")
	pf.StringVar(&f.tlsCA, "tls-ca", "", "with --tls: CA of the members' certificates (default security.client_tls.ca_file)")
	pf.StringVar(&f.tlsCert, "tls-cert", "", "with --tls: client certificate (default security.client_tls.cert_file)")
	pf.StringVar(&f.tlsKey, "tls-key", "", "with --tls: its key (default security.client_tls.key_file)")
}

// clientOptions returns the options of every connection to a keeper
// shard: the digest identity of --auth (or security.auth) and, with --tls,
// TLS to the secure client port of the member whose client_addr is
// dialled. c is nil when the addresses come from --servers: --tls then
// dials them as given.
func (g *globals) clientOptions(c *config.Cluster) ([]client.Option, error) {
	var sec config.Security
	var shards []config.Shard
	if c != nil {
		sec, shards = c.Security, c.Shards
	}
	var opts []client.Option
	fromFile, err := readAuthFile(g.authFile)
	if err != nil {
		return nil, err
	}
	if auth := cmp.Or(g.auth, fromFile, sec.Auth); auth != "" {
		if !isIdentity(auth) {
			return nil, usage(errors.New("--auth: want user:password"))
		}
		opts = append(opts, client.WithAuth("digest", []byte(auth)))
	}
	if !g.tls {
		return opts, nil
	}
	files := sec.ClientTLS.TLS
	if g.tlsCert != "" || g.tlsKey != "" {
		files.CertFile, files.KeyFile = g.tlsCert, g.tlsKey
	}
	cfg, err := config.ClientConfig(cmp.Or(g.tlsCA, files.CAFile), files.CertFile, files.KeyFile)
	if err != nil {
		return nil, usage(fmt.Errorf("--tls: %w", err))
	}
	secure := map[string]string{} // client_addr → secure_client_addr
	for _, sh := range shards {
		for _, m := range sh.Members {
			if m.SecureClientAddr == "" {
				return nil, usage(fmt.Errorf("--tls: member %s has no secure_client_addr", m.ID))
			}
			secure[m.ClientAddr] = m.SecureClientAddr
		}
	}
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, cmp.Or(secure[addr], addr))
	}
	return append(opts, client.WithDialer(dial), client.WithTLS(cfg)), nil
}

// isIdentity reports whether s is a digest identity, user:password.
func isIdentity(s string) bool {
	user, _, ok := strings.Cut(s, ":")
	return ok && user != ""
}

// router opens a router over the cluster file's shards with the
// connection flags' options, then extra.
func (g *globals) router(extra ...client.Option) (*config.Cluster, *xshard.Router, error) {
	c, err := g.loadCluster()
	if err != nil {
		return nil, nil, err
	}
	// xkeeper's znodes are created for the identity the session has.
	c.Security.Auth = cmp.Or(g.auth, c.Security.Auth)
	opts, err := g.clientOptions(c)
	if err != nil {
		return nil, nil, err
	}
	return c, xshard.NewRouter(c, slog.Default(), append(opts, extra...)...), nil
}

// connection resolves --servers, or --config with --shard, to addresses,
// with the connection flags' options.
func (g *globals) connection(servers, shard string) ([]string, []client.Option, error) {
	if servers != "" {
		opts, err := g.clientOptions(nil)
		return strings.Split(servers, ","), opts, err
	}
	if shard == "" {
		return nil, nil, usage(errors.New("--servers, or --config with --shard, is required"))
	}
	c, err := g.loadCluster()
	if err != nil {
		return nil, nil, err
	}
	sh, err := c.Shard(shard)
	if err != nil {
		return nil, nil, usage(err)
	}
	opts, err := g.clientOptions(c)
	return sh.ClientAddrs(), opts, err
}

// servers is connection's addresses alone.
func (g *globals) servers(servers, shard string) ([]string, error) {
	addrs, _, err := g.connection(servers, shard)
	return addrs, err
}

func newDigest(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "digest USER:PASSWORD",
		Short: "Print ZooKeeper's digest of an identity, USER:BASE64(SHA1(USER:PASSWORD)), as security.super_digest wants",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !isIdentity(args[0]) {
				return usage(errors.New("want USER:PASSWORD"))
			}
			return printValue(cmd.OutOrStdout(), g.format, fsm.DigestID(args[0]))
		},
	}
}

// readAuthFile returns the first line of the --auth-file, "" without one.
func readAuthFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usage(fmt.Errorf("--auth-file: %w", err))
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}
