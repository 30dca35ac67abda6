package keeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestJoinRefusesAnotherShardsMembers: a cluster file that gives shard a
// the addresses of shard b's members validates, but a member joining shard
// a through it is refused (before, it took shard b's identity and became a
// voter of b while saying a); through the right file it gets a's identity.
func TestJoinRefusesAnotherShardsMembers(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3})
	c.WaitLeader("b")
	wrong := withPeersOf(c.Config, "a", "b", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := keeper.JoinIdentity(ctx, wrong, "a", "a4")
	require.ErrorIs(t, err, keeper.ErrOtherShard)
	assert.Contains(t, err.Error(), "shard b")

	id, err := keeper.JoinIdentity(ctx, c.Config, "a", "a4")
	require.NoError(t, err)
	assert.Equal(t, c.Member(c.WaitLeader("a")).Replica.Status().Identity, id)
}
