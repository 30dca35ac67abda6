package keeper_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestFollowersSessionOutlivesLeadersDiskStall (issue 38, item 5): the
// leader's disk hangs for twice a session's timeout while clients of a
// follower keep writing, so the leader's proposal queue fills and the
// follower's forwarded writes wait on their link. A client of that
// follower, which only reads and pings meanwhile, keeps its session and
// its ephemeral: its touches reach the leader on a lane of their own, not
// behind the writes (they waited there, the leader expired the session
// and the expiry committed once the disk answered).
func TestFollowersSessionOutlivesLeadersDiskStall(t *testing.T) {
	disk := testenv.StartDisk(t)
	c, cfg, slow := startOnDisk(t, disk, func(k *config.Keeper) {
		k.LogStallTimeout = 0  // the leader keeps leading through the stall
		k.MaxBatchRequests = 1 // so that a hundred writes fill its queue
	})
	leadOn(t, c, slow)
	follower := cfg.Shards[0].Members[1].ClientAddr
	const timeout = 2 * time.Second
	pinger := connectZK(t, []string{follower}, timeout)
	_, err := pinger.Create("/alive", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, err = pinger.Create("/load", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	loaders := make([]*zk.Conn, 4)
	for i := range loaders {
		loaders[i] = connectZK(t, []string{follower}, 10*time.Second) // their pings wait behind their writes
	}

	disk.Freeze()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures sync.Map
	for i := range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := loaders[i%len(loaders)]
			for n := 0; n < 1000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := conn.Create("/load/w-", nil, zk.FlagSequence, zk.WorldACL(zk.PermAll)); err != nil {
					failures.Store(i, err)
				}
			}
		}()
	}
	end := time.Now().Add(2 * timeout)
	for time.Now().Before(end) {
		ok, _, err := pinger.Exists("/alive")
		if err != nil || !ok {
			disk.Thaw()
			require.Fail(t, "the follower's client lost its session during the stall", "exists %v, err %v", ok, err)
		}
		time.Sleep(50 * time.Millisecond) // the client's pace, not a synchronisation
	}
	disk.Thaw()
	close(stop)
	wg.Wait()
	failures.Range(func(k, v any) bool {
		t.Logf("a loader's write failed: %v", v)
		return false
	})

	// Every write the stall held is committed now, the expiry of the
	// session included if the leader decided one.
	observer := connectZK(t, cfg.Shards[0].ClientAddrs()[:1], 10*time.Second)
	_, err = observer.Sync("/")
	require.NoError(t, err)
	children, _, err := observer.Children("/load")
	require.NoError(t, err)
	t.Logf("%d writes went in", len(children))
	ok, _, err := observer.Exists("/alive")
	require.NoError(t, err)
	assert.True(t, ok, "the ephemeral of the follower's client, which pinged throughout, is there")
	_, _, err = pinger.Exists("/alive")
	assert.False(t, errors.Is(err, zk.ErrSessionExpired), "the client's session lives: %v", err)
	assert.Equal(t, zk.StateHasSession, pinger.State())
}
