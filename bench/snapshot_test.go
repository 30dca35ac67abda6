package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/monitor"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureSnapshotStall shows that a snapshot of a large tree does not
// stall writes in proportion to its size: with XKEEPER_BENCH_ZNODES
// (default 1,000,000) znodes in a 3-member shard, 16 clients run setData
// for 8 s three times, quietly, while the leader takes and persists a
// Raft snapshot, and while `snapshot save` streams a backup to a file; the
// latencies are printed side by side, then the cost of a /metrics scrape
// at that size. Runs only with XKEEPER_BENCH=1.
func TestMeasureSnapshotStall(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("XKEEPER_BENCH_ZNODES")); err == nil {
		n = v
	}
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: func(k *config.Keeper) {
		productionRaft(k)
		k.SnapshotThreshold = 1 << 30 // only the snapshot this test takes
		k.SnapshotInterval = time.Hour
	}})
	start := time.Now()
	fillZnodes(t, c.Servers("a"), n)
	var count int
	c.Member(c.Leader("a")).Replica.View(func(st *fsm.State) { count = st.NodeCount() })
	if count < n {
		t.Fatalf("only %d znodes after the fill", count)
	}
	t.Logf("filled %d znodes in %v", n, time.Since(start).Round(time.Second))
	o := Options{Servers: c.Servers("a"), Op: "set", Clients: 16, Duration: 8 * time.Second, DataSize: 100}
	quiet, err := Run(context.Background(), o)
	require.NoError(t, err)
	leader := c.Member(c.Leader("a"))
	snapDone := make(chan time.Duration, 1)
	go func() {
		time.Sleep(2 * time.Second)
		t0 := time.Now()
		if err := leader.Replica.Snapshot(); err != nil {
			t.Error(err)
		}
		snapDone <- time.Since(t0)
	}()
	during, err := Run(context.Background(), o)
	require.NoError(t, err)
	took := <-snapDone
	t.Logf("snapshot of %d znodes taken and persisted in %v", n, took.Round(time.Millisecond))

	// The same with `xkeeper snapshot save` (a backup streamed to a file)
	// running on the leader instead.
	saveDone := make(chan time.Duration, 1)
	go func() {
		time.Sleep(2 * time.Second)
		f, err := os.Create(filepath.Join(t.TempDir(), "bench.xkbackup"))
		if err != nil {
			t.Error(err)
			saveDone <- 0
			return
		}
		defer f.Close()
		t0 := time.Now()
		if _, err := keeper.SaveBackup(context.Background(), c.Config, "a", f, testenv.TestLogger(t)); err != nil {
			t.Error(err)
		}
		f.Sync()
		saveDone <- time.Since(t0)
	}()
	saving, err := Run(context.Background(), o)
	require.NoError(t, err)
	saved := <-saveDone
	t.Logf("backup of %d znodes saved to a file in %v", n, saved.Round(time.Millisecond))
	t.Log("rows: quiet, during the raft snapshot, during snapshot save")
	WriteTable(testWriter{t}, []Result{quiet, during, saving})
	measureScrape(t, leader, n)
}

// measureScrape times /metrics of a member holding n znodes.
func measureScrape(t *testing.T, m *keeper.Member, n int) {
	stop, at, err := monitor.Serve("127.0.0.1:0", monitor.New(m, "a", time.Second), testenv.TestLogger(t))
	require.NoError(t, err)
	defer stop()
	var times []time.Duration
	size := 0
	for range 20 {
		t0 := time.Now()
		resp, err := http.Get("http://" + at.String() + "/metrics")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		times = append(times, time.Since(t0))
		size = len(b)
	}
	slices.Sort(times)
	t.Logf("/metrics at %d znodes: %d bytes, p50 %v, max %v over %d scrapes", n, size,
		times[len(times)/2].Round(time.Microsecond), times[len(times)-1].Round(time.Microsecond), len(times))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// fillZnodes creates /big and n znodes of 100 bytes under it, in multis
// of 500 with 32 in flight, on any ZooKeeper-compatible servers.
func fillZnodes(t *testing.T, servers []string, n int) {
	conn, err := Connect(servers)
	require.NoError(t, err)
	defer conn.Close()
	acl := zk.WorldACL(zk.PermAll)
	if _, err := conn.Create("/big", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	const perMulti = 500
	var wg sync.WaitGroup
	var fillErr atomic.Value
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i += perMulti {
		ops := make([]any, 0, perMulti)
		for j := i; j < min(n, i+perMulti); j++ {
			ops = append(ops, &zk.CreateRequest{Path: fmt.Sprintf("/big/n%08d", j), Data: make([]byte, 100), Acl: acl})
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := conn.Multi(ops...); err != nil {
				fillErr.CompareAndSwap(nil, err)
			}
		}()
	}
	wg.Wait()
	if err, ok := fillErr.Load().(error); ok {
		t.Fatal(err)
	}
}
