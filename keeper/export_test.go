package keeper

import (
	"context"
	"log/slog"

	"github.com/xkeeper/xkeeper/config"
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
