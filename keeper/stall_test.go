package keeper_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/monitor"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestLeaderWithAStalledDiskHandsOver puts the leader's data directory on
// a disk that then hangs (testenv.Disk: fsfreeze on a loop-mounted ext4, so
// its log writes wait as on a disk that stopped answering). Once the write
// has waited keeper.log_stall_timeout the leader stops replicating, the
// other two members elect one of themselves, and a client of theirs gets
// its write in; without that the write waits for the disk. When the disk
// answers again the old leader follows and catches up.
func TestLeaderWithAStalledDiskHandsOver(t *testing.T) {
	disk := testenv.StartDisk(t)
	c, cfg, slow := startOnDisk(t, disk, func(k *config.Keeper) { k.LogStallTimeout = time.Second })
	leadOn(t, c, slow)
	others := cfg.Shards[0].ClientAddrs()[1:]
	conn := connectZK(t, others, 10*time.Second)
	_, err := conn.Create("/before", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	disk.Freeze()
	start := time.Now()
	done := make(chan error, 1)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) }) // before the session closes (connectZK's cleanup)
	go func() {                       // a write lost with the old leader fails with the connection; the client tries again
		for {
			_, err := conn.Create("/during", []byte("x"), 0, zk.WorldACL(zk.PermAll))
			if err == nil || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrClosing) {
				done <- err
				return
			}
			select {
			case <-stop:
				done <- err
				return
			case <-time.After(20 * time.Millisecond): // a pause between tries, not a synchronisation
			}
		}
	}()
	select {
	case err := <-done:
		if !errors.Is(err, zk.ErrNodeExists) {
			require.NoError(t, err)
		}
	case <-time.After(30 * time.Second):
		disk.Thaw() // the write can end now, and the test with it
		require.Fail(t, "no write went in within 30 s of the leader's disk hanging")
	}
	t.Logf("a write went in %v after the leader's disk hung", time.Since(start).Round(time.Millisecond))
	newLeader := c.Member(cfg.Shards[0].Members[1].ID).Replica.IsLeader() || c.Member(cfg.Shards[0].Members[2].ID).Replica.IsLeader()
	require.True(t, newLeader, "another member leads")
	// The member on the hung disk says so: in its status (which the leader
	// balancer reads before it hands a leadership on), its readiness and
	// its metrics.
	stalled := c.Member(slow.ID)
	mon := monitor.New(stalled, "a", cfg.Keeper.ElectionTimeout)
	assert.True(t, stalled.Replica.Status().LogStalled, "status of the member on the hung disk")
	assert.Contains(t, mon.NotReady(), "Raft log write has not returned")
	assert.Positive(t, gauge(t, mon, "xkeeper_raft_log_stall_seconds"))

	disk.Thaw()
	waitConverged(t, c, "a")
	assert.False(t, stalled.Replica.Status().LogStalled, "status once the disk answers")
	assert.Zero(t, stalled.Replica.LogStall())
	c.Member(slow.ID).Replica.View(func(st *fsm.State) {
		require.NotNil(t, st.Node("/during"), "%s caught up with the write made while its disk hung", slow.ID)
	})
}

// startOnDisk starts a shard of 3 members, fsync on, the first of which
// keeps its data directory on disk; set adjusts the keeper settings.
func startOnDisk(t *testing.T, disk *testenv.Disk, set func(*config.Keeper)) (*testenv.Cluster, *config.Cluster, *config.Member) {
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	m := &cfg.Shards[0].Members[0]
	m.DataDir = filepath.Join(disk.Dir, m.ID)
	cfg.Keeper.Fsync = true
	set(&cfg.Keeper)
	return testenv.StartConfig(t, cfg, testenv.ClusterOptions{}), cfg, m
}

// leadOn hands shard a's leadership to m and waits until m leads.
func leadOn(t *testing.T, c *testenv.Cluster, m *config.Member) {
	waitFor(t, 20*time.Second, m.ID+" to lead", func() bool {
		leader := c.WaitLeader("a")
		if leader != m.ID {
			c.Member(leader).Replica.TransferLeadership(m.ID, m.RaftAddr) // tried again until it leads
		}
		return c.Leader("a") == m.ID
	})
}

// gauge reads a metric of one sample off the monitor's /metrics.
func gauge(t *testing.T, mon *monitor.Monitor, name string) float64 {
	rec := httptest.NewRecorder()
	mon.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	v, err := testenv.MetricValue(rec.Body.Bytes(), name)
	require.NoError(t, err)
	return v
}

// TestMemberWhoseLogFailsSaysSo fills the disk of a follower's own node
// log (keeper.log_store: node): a write that needs a new block fails with
// ENOSPC, and the node log takes no write after a failed one. The member
// still hears its leader, so only its own report shows it: its status,
// /ready and metric; the other two go on taking writes. Space freed, the
// log stays failed until the member restarts; restarted, it catches up.
func TestMemberWhoseLogFailsSaysSo(t *testing.T) {
	disk := testenv.StartDisk(t)
	c, cfg, full := startOnDisk(t, disk, func(k *config.Keeper) { k.LogStore = replica.LogStoreNode })
	waitFor(t, 20*time.Second, "another member to lead", func() bool {
		if leader := c.WaitLeader("a"); leader == full.ID {
			next := cfg.Shards[0].Members[1]
			c.Member(leader).Replica.TransferLeadership(next.ID, next.RaftAddr)
		}
		return c.Leader("a") != full.ID
	})
	conn := connectZK(t, cfg.Shards[0].ClientAddrs()[1:], 10*time.Second)
	failed := c.Member(full.ID)
	mon := monitor.New(failed, "a", cfg.Keeper.ElectionTimeout)
	require.Empty(t, mon.NotReady())

	// The other two take writes throughout; a leader of theirs that steps
	// down for a moment (its lease lapses while 256 KiB entries are synced
	// on this machine: CI saw it) is a connection loss, and the write is
	// asked again, as a client does.
	create := func(path string, data []byte) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := conn.Create(path, data, 0, zk.WorldACL(zk.PermAll))
			switch {
			case err == nil || err == zk.ErrNodeExists: // the path is new: an earlier try was applied
				return nil
			case err != zk.ErrConnectionClosed && err != zk.ErrNoServer || time.Now().After(deadline):
				return err
			}
			time.Sleep(50 * time.Millisecond) // backoff before asking again, not synchronisation
		}
	}
	disk.Fill()
	data := make([]byte, 256<<10)
	for i := 0; failed.Replica.LogFailed() == nil; i++ {
		require.Less(t, i, 200, "50 MiB written and %s's log never failed", full.ID)
		require.NoError(t, create(fmt.Sprintf("/big-%03d", i), data), "the other two members take writes")
	}
	t.Logf("%s's log failed: %v", full.ID, failed.Replica.LogFailed())
	assert.NotEmpty(t, failed.Replica.Status().LogFailed)
	assert.Contains(t, mon.NotReady(), "the last Raft log write failed")
	assert.Equal(t, 1.0, gauge(t, mon, "xkeeper_raft_log_failed"))
	require.NoError(t, create("/after", nil), "the shard goes on without the member")

	disk.Unfill()
	require.NoError(t, create("/after-unfill", nil))
	assert.Error(t, failed.Replica.LogFailed(), "a node log that failed takes no write until the member restarts")

	c.Kill(full.ID)
	c.Restart(full.ID)
	waitConverged(t, c, "a")
	restarted := c.Member(full.ID)
	assert.NoError(t, restarted.Replica.LogFailed())
	restarted.Replica.View(func(st *fsm.State) {
		require.NotNil(t, st.Node("/after-unfill"), "%s caught up after its restart", full.ID)
	})
}
