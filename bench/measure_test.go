package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasure is the measurement of record, not a pass/fail test: it runs
// only with XKEEPER_BENCH=1 and prints a 3-member xkeeper shard's
// create/set/get throughput and latency at 1, 16 and 64 clients side by
// side with a 3-member Apache ZooKeeper 3.8 ensemble on the same machine
// (both fsync on, data on the same disk), then xkeeper's RSS per znode
// with XKEEPER_BENCH_ZNODES (default 1,000,000) znodes of 100 bytes.
//
//	XKEEPER_BENCH=1 go test ./bench -run Measure -v -timeout 60m
func TestMeasure(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	dur := envDuration("XKEEPER_BENCH_DURATION", 3*time.Second)
	xk := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: productionRaft})
	zkEnsemble := testenv.StartZooKeeper(t, 3)
	t.Logf("machine: %d CPUs, %s", runtime.NumCPU(), runtime.Version())
	for _, op := range []string{"create", "set", "get"} {
		for _, clients := range []int{1, 16, 64} {
			o := Options{Op: op, Clients: clients, Duration: dur, Warmup: time.Second, DataSize: 100}
			o.Servers = xk.Servers("a")
			rx, err := Run(context.Background(), o)
			require.NoError(t, err)
			o.Servers = zkEnsemble.Servers()
			rz, err := Run(context.Background(), o)
			require.NoError(t, err)
			t.Logf("%-6s %2d clients | xkeeper %8.0f/s p50 %6.2f p99 %6.2f ms | zookeeper %8.0f/s p50 %6.2f p99 %6.2f ms | ratio %.2f×",
				op, clients, rx.Throughput, rx.P50, rx.P99, rz.Throughput, rz.P50, rz.P99, rx.Throughput/rz.Throughput)
		}
	}
	zkEnsemble.Stop()

	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("XKEEPER_BENCH_ZNODES")); err == nil {
		n = v
	}
	before := rssAll(t, xk)
	c, err := Connect(xk.Servers("a"))
	require.NoError(t, err)
	defer c.Close()
	if _, err := c.Create("/rss", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i += 10000 {
		if _, err := c.Create(fmt.Sprintf("/rss/d%d", i), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if err := Fill(c, fmt.Sprintf("/rss/d%d", i), min(10000, n-i), 100); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("filled %d znodes of 100 bytes in %v", n, time.Since(start).Round(time.Second))
	after := rssAll(t, xk)
	for id, b := range before {
		t.Logf("member %s RSS %d MiB → %d MiB: %.0f bytes per znode", id, b>>20, after[id]>>20, float64(after[id]-b)/float64(n))
	}
}

func rssAll(t *testing.T, pc *testenv.ProcessCluster) map[string]int64 {
	out := map[string]int64{}
	for _, m := range pc.Config.Shards[0].Members {
		rss, err := RSS(pc.Process(m.ID).PID())
		require.NoError(t, err)
		out[m.ID] = rss
	}
	return out
}

func envDuration(key string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(key)); err == nil {
		return d
	}
	return def
}

// envInt reads a positive count from the environment, or def.
func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// envInts reads a comma-separated list of positive counts from the
// environment, or def.
func envInts(key string, def []int) []int {
	if v, err := ParseCounts(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

// envString reads a setting from the environment, or def if it is unset.
func envString(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func benchEnabled() bool { return os.Getenv("XKEEPER_BENCH") == "1" }
