package keeper

import (
	"context"
	"log/slog"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// JoinIdentity is what a member joining shard of c (serve --join) learns
// as the shard's identity, for the tests.
func JoinIdentity(ctx context.Context, c *config.Cluster, shard, self string) (string, error) {
	m, err := newMembership(c, shard, slog.Default())
	if err != nil {
		return "", err
	}
	return m.identity(ctx, self)
}

// StatusAt asks the member at the client address addr, a member of c, for
// its status over an admin link, for the tests.
func StatusAt(ctx context.Context, c *config.Cluster, addr string) (replica.Status, error) {
	auth, err := PeerAuth(c, slog.Default())
	if err != nil {
		return replica.Status{}, err
	}
	reply, err := admin(ctx, auth, addr, replica.AdminRequest{Op: replica.AdminStatus})
	return reply.Status, err
}
