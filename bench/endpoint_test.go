package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureEndpoint measures what the nodes' one endpoint costs: on 2
// shards placed on 3 node processes (/bench-b mounted on shard b), 64
// clients, half on each shard, create and then read 100-byte znodes, once
// through the members' own client ports and once through the endpoints,
// in the same run (runs only with XKEEPER_BENCH=1).
//
//	XKEEPER_BENCH=1 go test ./bench -run TestMeasureEndpoint -v -timeout 30m
func TestMeasureEndpoint(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	run := envDuration("XKEEPER_BENCH_DURATION", 5*time.Second)
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3, Fsync: true, Keeper: productionRaft,
		Mounts: []config.Mount{{Path: "/bench-b", Shard: "b"}}})
	defer pc.Stop()
	var pids []int
	var endpoints []string
	for _, n := range pc.Config.Nodes {
		pids = append(pids, pc.Process(n.Name).PID())
		endpoints = append(endpoints, n.ClientAddr)
	}
	for _, sh := range pc.Config.Shards {
		pc.WaitLeader(sh.Name)
	}
	cpu := func() (float64, error) { return ProcessCPU(pids...) }
	c, err := Connect(endpoints)
	require.NoError(t, err)
	for _, p := range []string{"/bench-a", "/bench-b"} {
		_, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	c.Close()

	var report strings.Builder
	report.WriteString("| op | via | ops/s at 64 clients | server CPU µs per op | p50 ms | p99 ms |\n|---|---|---|---|---|---|\n")
	for _, op := range []string{"create", "get"} {
		for _, via := range []string{"member ports", "endpoint"} {
			var results [2]Result
			var runs sync.WaitGroup
			for i, sh := range pc.Config.Shards {
				servers := sh.ClientAddrs()
				if via == "endpoint" {
					servers = endpoints
				}
				prefix := fmt.Sprintf("/bench-%s/%s-%s", sh.Name, op, strings.ReplaceAll(via, " ", "-"))
				runs.Go(func() {
					r, err := Run(context.Background(), Options{Servers: servers, Clients: 32, Op: op, Prefix: prefix,
						Duration: run, Warmup: time.Second, DataSize: 100, KeySpace: 1000, ServerCPU: cpu})
					require.NoError(t, err)
					results[i] = r
				})
			}
			runs.Wait()
			sum := combine(results[:])
			row := fmt.Sprintf("| %s | %s | %.0f | %.0f | %.2f | %.2f |", op, via, sum.Throughput, sum.CPUPerOp, sum.P50, sum.P99)
			t.Log(row)
			report.WriteString(row + "\n")
		}
	}
	t.Log("\n" + report.String())
}
