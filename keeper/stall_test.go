package keeper_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/monitor"
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
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	slow := &cfg.Shards[0].Members[0]
	slow.DataDir = filepath.Join(disk.Dir, slow.ID)
	cfg.Keeper.Fsync = true
	cfg.Keeper.LogStallTimeout = time.Second
	c := testenv.StartConfig(t, cfg, testenv.ClusterOptions{})
	waitFor(t, 20*time.Second, slow.ID+" to lead", func() bool {
		leader := c.WaitLeader("a")
		if leader != slow.ID {
			c.Member(leader).Replica.TransferLeadership(slow.ID, slow.RaftAddr) // tried again until it leads
		}
		return c.Leader("a") == slow.ID
	})
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
	assert.Positive(t, stallSeconds(t, mon))

	disk.Thaw()
	waitConverged(t, c, "a")
	assert.False(t, stalled.Replica.Status().LogStalled, "status once the disk answers")
	assert.Zero(t, stalled.Replica.LogStall())
	c.Member(slow.ID).Replica.View(func(st *fsm.State) {
		require.NotNil(t, st.Node("/during"), "%s caught up with the write made while its disk hung", slow.ID)
	})
}

// stallSeconds reads xkeeper_raft_log_stall_seconds off the monitor's
// /metrics.
func stallSeconds(t *testing.T, mon *monitor.Monitor) float64 {
	rec := httptest.NewRecorder()
	mon.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	m := regexp.MustCompile(`(?m)^xkeeper_raft_log_stall_seconds\{[^}]*\} (\S+)$`).FindStringSubmatch(rec.Body.String())
	require.NotNil(t, m, "xkeeper_raft_log_stall_seconds in /metrics")
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}
