package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureNodes compares the two layouts of #12 on this machine, with
// 1, 2 and 4 shards of 3 members: nodes (3 `xkeeper serve --node`
// processes, each hosting a member of every shard on one peer port) and
// separate member processes (3 per shard). For each: processes and the
// TCP ports they listen on (counted in /proc), idle CPU per node (the
// processes of a node's members for the separate layout), aggregate
// create throughput and server CPU per create at 64 clients spread over
// the shards, and RSS per node after
// XKEEPER_BENCH_ZNODES znodes in total (runs only with XKEEPER_BENCH=1);
// XKEEPER_BENCH_SHARDS lists the shard counts (default 1,2,4).
//
//	XKEEPER_BENCH=1 go test ./bench -run TestMeasureNodes -v -timeout 30m
func TestMeasureNodes(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	idle := envDuration("XKEEPER_BENCH_IDLE", 10*time.Second)
	run := envDuration("XKEEPER_BENCH_DURATION", 5*time.Second)
	znodes := envInt("XKEEPER_BENCH_ZNODES", 300_000)
	var report strings.Builder
	fmt.Fprintf(&report, "| shards | layout | processes | ports | idle CPU per node | creates/s at 64 clients | server CPU µs per create | p99 ms | RSS per node at %d znodes |\n|---|---|---|---|---|---|---|---|---|\n", znodes)
	for _, shards := range envInts("XKEEPER_BENCH_SHARDS", []int{1, 2, 4}) {
		for _, nodes := range []int{3, 0} {
			o := testenv.ClusterOptions{Shards: shards, Members: 3, Nodes: nodes, Fsync: true, Keeper: productionRaft}
			row := measureLayout(t, o, idle, run, znodes)
			fmt.Fprintf(&report, "| %d | %s |\n", shards, row)
			t.Logf("%d shards: %s", shards, row)
		}
	}
	t.Log("\n" + report.String())
}

// measureLayout starts one layout, measures it and stops it; it returns
// the table row after the shard count.
func measureLayout(t *testing.T, o testenv.ClusterOptions, idle, run time.Duration, znodes int) string {
	pc := testenv.StartProcessCluster(t, o)
	defer pc.Stop()
	// Node i runs the members i of every shard: its own process in the
	// node layout, one process per member otherwise.
	perNode := map[string][]int{}
	var pids []int
	for _, sh := range pc.Config.Shards {
		for i, m := range sh.Members {
			node := fmt.Sprintf("n%d", i+1)
			unit := m.ID
			if m.Node != "" {
				unit = m.Node
			}
			pid := pc.Process(unit).PID()
			if len(perNode[node]) == 0 || perNode[node][len(perNode[node])-1] != pid {
				perNode[node] = append(perNode[node], pid)
				pids = append(pids, pid)
			}
		}
	}
	cpuOf := func(node string) float64 {
		v, err := ProcessCPU(perNode[node]...)
		require.NoError(t, err)
		return v
	}
	allCPU := func() (float64, error) {
		total := 0.0
		for node := range perNode {
			total += cpuOf(node)
		}
		return total, nil
	}
	for _, sh := range pc.Config.Shards {
		pc.WaitLeader(sh.Name)
	}
	if o.Nodes > 0 {
		waitBalanced(t, pc)
	}
	ports, err := ListeningPorts(pids...)
	require.NoError(t, err)
	idle0, t0 := map[string]float64{}, time.Now()
	for node := range perNode {
		idle0[node] = cpuOf(node)
	}
	time.Sleep(idle) // the measured idle spell, not a synchronisation
	idleMax := 0.0
	for node := range perNode {
		idleMax = max(idleMax, (cpuOf(node)-idle0[node])/time.Since(t0).Seconds())
	}

	// 64 clients spread over the shards, each shard's on all its members,
	// every run counting the whole cluster's CPU over its window.
	results := make([]Result, len(pc.Config.Shards))
	var runs sync.WaitGroup
	for i, sh := range pc.Config.Shards {
		runs.Go(func() {
			r, err := Run(context.Background(), Options{Servers: sh.ClientAddrs(), Clients: 64 / len(results), Op: "create",
				Duration: run, Warmup: time.Second, DataSize: 100, ServerCPU: allCPU})
			require.NoError(t, err)
			results[i] = r
		})
	}
	runs.Wait()
	sum := combine(results)
	// RSS per node after znodes in total, spread evenly.
	var wg sync.WaitGroup
	for _, sh := range pc.Config.Shards {
		wg.Go(func() {
			c, err := Connect(sh.ClientAddrs())
			require.NoError(t, err)
			defer c.Close()
			_, err = c.Create("/fill", nil, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			require.NoError(t, Fill(c, "/fill", znodes/len(pc.Config.Shards), 100))
		})
	}
	wg.Wait()
	rssMax := int64(0)
	for _, pids := range perNode {
		total := int64(0)
		for _, pid := range pids {
			rss, err := RSS(pid)
			require.NoError(t, err)
			total += rss
		}
		rssMax = max(rssMax, total)
	}
	layout := "separate processes"
	if o.Nodes > 0 {
		layout = "3 nodes"
	}
	return fmt.Sprintf("%s | %d | %d | %.1f%% | %.0f | %.0f | %.2f | %.0f MiB", layout, len(pids), ports,
		100*idleMax, sum.Throughput, sum.CPUPerOp, sum.P99, float64(rssMax)/(1<<20))
}

// combine sums the throughput of runs made at the same time on the same
// servers (each measured the servers' whole CPU over its window): their
// throughput, CPU per operation, and the worst of their p50 and p99.
func combine(runs []Result) Result {
	var sum Result
	cpuRate := 0.0 // the servers' CPU µs per second, averaged over the windows
	for _, r := range runs {
		sum.Throughput += r.Throughput
		cpuRate += r.CPUPerOp * r.Throughput / float64(len(runs))
		sum.P50, sum.P99 = max(sum.P50, r.P50), max(sum.P99, r.P99)
	}
	if sum.Throughput > 0 {
		sum.CPUPerOp = cpuRate / sum.Throughput
	}
	return sum
}

// waitBalanced polls until the nodes' leader balancers are done: no node
// leads more than its share of the shards, twice in a row a second apart,
// so that the idle spell measured after is not the balancing.
func waitBalanced(t *testing.T, pc *testenv.ProcessCluster) {
	share := (len(pc.Config.Shards) + len(pc.Config.Nodes) - 1) / len(pc.Config.Nodes)
	balanced := 0
	require.Eventually(t, func() bool {
		led := map[string]int{}
		for _, sh := range pc.Config.Shards {
			id := pc.Leader(sh.Name)
			_, m, err := pc.Config.Member(id)
			if err != nil {
				balanced = 0
				return false
			}
			led[m.Node]++
		}
		if slices.Max(slices.Collect(maps.Values(led))) > share {
			balanced = 0
			return false
		}
		balanced++
		return balanced >= 2
	}, time.Minute, time.Second, "leaders never balanced over the nodes")
}
