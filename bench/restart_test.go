package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureRestart measures restart to serving, like for like: a
// 3-member ZooKeeper 3.8 ensemble and a 3-member xkeeper shard (`xkeeper
// serve` processes, fsync on, production Raft timings), each filled with
// XKEEPER_BENCH_ZNODES (default 1,000,000) znodes of 100 bytes by the
// same multis, every member killed (SIGKILL), all started again at once,
// timed until every member serves a read of the last znode. Runs only
// with XKEEPER_BENCH=1.
//
//	XKEEPER_BENCH=1 go test ./bench -run 'TestMeasureRestart$' -v -timeout 30m
func TestMeasureRestart(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	n := envInt("XKEEPER_BENCH_ZNODES", 1_000_000)
	last := fmt.Sprintf("/big/n%08d", n-1)

	z := testenv.StartZooKeeperWith(t, testenv.ZooKeeperOptions{Members: 3, MaxHeap: "3g"})
	fillZnodes(t, z.Servers(), n)
	for i := range 3 {
		z.Kill(i)
	}
	t0 := time.Now()
	z.StartAll()
	waitServing(t, z.Servers(), last)
	zkRestart := time.Since(t0)
	z.Stop()

	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: productionRaft})
	servers := pc.Servers("a")
	fillZnodes(t, servers, n)
	pc.Stop()
	var ids []string
	for _, m := range pc.Config.Shards[0].Members {
		ids = append(ids, m.ID)
	}
	t0 = time.Now()
	pc.StartAll(ids...)
	waitServing(t, servers, last)
	xkRestart := time.Since(t0)
	pc.Stop()

	t.Logf("restart to serving at %d znodes, every member killed, then started at once: ZooKeeper %v, xkeeper %v (%.2f×)",
		n, zkRestart.Round(time.Millisecond), xkRestart.Round(time.Millisecond), xkRestart.Seconds()/zkRestart.Seconds())
}

// waitServing polls until every server answers a read of path.
func waitServing(t *testing.T, servers []string, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, s := range servers {
		for {
			ok := func() bool {
				conn, err := Connect([]string{s})
				if err != nil {
					return false
				}
				defer conn.Close()
				_, _, err = conn.Get(path)
				return err == nil
			}()
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				require.Fail(t, "not serving", "%s never served %s", s, path)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}
