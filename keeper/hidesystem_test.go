package keeper_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestHideKeeperSystem: a shard started with HideKeeperSystem (the switch
// the ClickHouse 26 benchmark compares the feature flags with) answers
// NoNode under /keeper as ZooKeeper 3.8 does, and serves everything else
// as before; a shard without it serves the flags.
func TestHideKeeperSystem(t *testing.T) {
	for _, hide := range []bool{false, true} {
		c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, HideKeeperSystem: hide})
		conn := connectZK(t, c.Servers("a"), 10*time.Second)
		_, err := conn.Create("/kept", []byte("v"), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		for _, p := range []string{proto.KeeperSystemPath, proto.KeeperAPIVersionPath, proto.KeeperFeatureFlagsPath} {
			data, _, err := conn.Get(p)
			exists, _, existsErr := conn.Exists(p)
			require.NoError(t, existsErr)
			if hide {
				assert.ErrorIs(t, err, zk.ErrNoNode, "getData %s", p)
				assert.False(t, exists, "exists %s", p)
			} else {
				assert.NoError(t, err, "getData %s", p)
				assert.True(t, exists, "exists %s", p)
				if p == proto.KeeperFeatureFlagsPath {
					assert.Equal(t, proto.FeatureBitmap(proto.Features...), data)
				}
			}
		}
		data, _, err := conn.Get("/kept")
		require.NoError(t, err)
		assert.Equal(t, []byte("v"), data, "other reads are served (hide %v)", hide)
		c.Stop()
	}
}
