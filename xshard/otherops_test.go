package xshard_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/xshard"
)

// TestRetryWithOtherOpsAfterCleanupIsRefused (issue 38, item 8): once a
// transaction committed and every shard deleted its record, a retry with
// its id but other ops is refused with a clear error, not told
// "committed" (which it was, by the outcome the coordinator remembers, with
// none of its ops applied), and nothing changes; a retry with the same
// ops is still told committed. Likewise after a failed transaction, whose
// participant remembers its own refusal: the retry is refused for its
// other ops, not told of that refusal.
func TestRetryWithOtherOpsAfterCleanupIsRefused(t *testing.T) {
	c, r := xyCluster(t, nil, nil)
	ctx := ctxT(t)
	t.Run("failed", func(t *testing.T) {
		ops := func(y string) []xshard.MultiRequestForShard {
			return []xshard.MultiRequestForShard{
				{Shard: "a", Requests: []proto.MultiOp{setData("/x", "f", 7)}}, // refused: bad version
				{Shard: "b", Requests: []proto.MultiOp{setData("/y", y, -1)}},
			}
		}
		id := uuid.NewString()
		_, err := xshard.CrossShardTransaction(ctx, r, ops("1"), xshard.Options{ID: id, Coordinator: "b"})
		require.ErrorIs(t, err, proto.ErrBadVersion)
		waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
		_, err = xshard.CrossShardTransaction(ctx, r, ops("2"), xshard.Options{ID: id, Coordinator: "b"})
		assert.ErrorIs(t, err, proto.ErrBadArguments, "a retry with other ops on the coordinator's shard")
		_, err = xshard.CrossShardTransaction(ctx, r, ops("1"), xshard.Options{ID: id, Coordinator: "b"})
		assert.ErrorIs(t, err, proto.ErrBadVersion, "a retry with the same ops")
	})
	id := uuid.NewString()
	_, err := xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })

	_, err = xshard.CrossShardTransaction(ctx, r, xyOps("2", true), xshard.Options{ID: id})
	require.Error(t, err, "a retry with other ops")
	assert.ErrorIs(t, err, proto.ErrBadArguments)
	var unknown *xshard.UnknownOutcomeError
	assert.False(t, errors.As(err, &unknown))

	_, err = xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err, "a retry with the same ops")
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "a", "/x"), "applied once")
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "b", "/y"), "applied once")
}
