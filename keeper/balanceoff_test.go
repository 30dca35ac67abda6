package keeper_test

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestLeaderBalanceIntervalZeroMovesNoLeader: README's
// `leader_balance_interval: 5s   # ...; 0: off`. A cluster file that says
// `leader_balance_interval: 0` loads as 0; nodes started from it run no
// leader balancer; and with every shard's leadership on one node, three
// times its share, nothing moves a leader: for 3 s (six rounds of the 500
// ms testenv otherwise balances at) each shard keeps its leader and term.
func TestLeaderBalanceIntervalZeroMovesNoLeader(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.LayoutNodes(dir, 3, 3, testenv.FreePorts(t, config.NodePorts(3, 3)), testenv.TestKeeper(false))
	require.NoError(t, err)
	require.Positive(t, cfg.Keeper.LeaderBalanceInterval, "testenv balances leaders unless told not to")
	file := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, cfg.Write(file))
	text, err := os.ReadFile(file)
	require.NoError(t, err)
	key := regexp.MustCompile(`(?m)^(\s*leader_balance_interval:).*$`)
	require.Regexp(t, key, string(text))
	require.NoError(t, os.WriteFile(file, key.ReplaceAll(text, []byte("${1} 0")), 0o600))
	loaded, err := config.Load(file)
	require.NoError(t, err)
	require.Zero(t, loaded.Keeper.LeaderBalanceInterval, "leader_balance_interval: 0 loads as 0")

	c := testenv.StartConfig(t, loaded, testenv.ClusterOptions{})
	require.Zero(t, balancers(t), "no leader balancer runs")

	// Hand every shard's leadership to its member on n1.
	onN1 := map[string]config.Member{}
	for _, sh := range c.Config.Shards {
		for _, m := range sh.Members {
			if m.Node == "n1" {
				onN1[sh.Name] = m
			}
		}
		require.Contains(t, onN1, sh.Name)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		all := true
		for shard, to := range onN1 {
			if leader := c.Leader(shard); leader != to.ID {
				all = false
				if leader != "" {
					_ = c.Member(leader).Replica.TransferLeadership(to.ID, to.RaftAddr) // tried again until it took
				}
			}
		}
		if all {
			break
		}
		require.True(t, time.Now().Before(deadline), "n1 leads every shard within 30 s")
		time.Sleep(50 * time.Millisecond)
	}
	terms := map[string]string{}
	for shard, m := range onN1 {
		require.Equal(t, m.ID, c.WaitLeader(shard), "shard %s: every member follows n1's", shard)
		terms[shard] = c.Member(m.ID).Replica.Stats()["term"]
	}

	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		for shard, m := range onN1 {
			require.Equal(t, m.ID, c.Leader(shard), "shard %s: its leader moved", shard)
			require.Equal(t, terms[shard], c.Member(m.ID).Replica.Stats()["term"], "shard %s: a new term", shard)
		}
		time.Sleep(50 * time.Millisecond) // observing: the window is the test
	}
	assert.Zero(t, balancers(t), "no leader balancer started meanwhile")
}

// balancers counts the goroutines that run a node's leader balancer.
func balancers(t *testing.T) int {
	var dump strings.Builder
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&dump, 2))
	return strings.Count(dump.String(), "\n"+keeper.BalancerLoop+"(")
}
