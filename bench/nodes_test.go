package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
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

	sum := createLoad(t, pc, pids, 64, run)
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

// createLoad runs clients creating 100-byte znodes, spread evenly over
// pc's shards and each shard's over all its members, for run after a
// second of warm-up; the CPU per create is that of the processes pids over
// each run's window.
func createLoad(t *testing.T, pc *testenv.ProcessCluster, pids []int, clients int, run time.Duration) Result {
	results := make([]Result, len(pc.Config.Shards))
	var runs sync.WaitGroup
	for i, sh := range pc.Config.Shards {
		runs.Go(func() {
			r, err := Run(context.Background(), Options{Servers: sh.ClientAddrs(), Clients: clients / len(results), Op: "create",
				Duration: run, Warmup: time.Second, DataSize: 100, ServerCPU: func() (float64, error) { return ProcessCPU(pids...) }})
			require.NoError(t, err)
			results[i] = r
		})
	}
	runs.Wait()
	return combine(results)
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

// TestMeasureGroupLoad asks where the CPU per write of a node with several
// shards goes: 3 `xkeeper serve --node` processes, fsync on, production
// Raft timings, each cell "S×C" S shards with C clients creating in total
// (spread as in TestMeasureNodes). Printed per cell: creates/s, the
// nodes' CPU per create, and creates per Raft append: the creates (the
// warm-up second's counted at the measured rate) over a third of the
// appends the members made to their node logs (each group append is
// stored by its three members). One shard at 16 clients is what each of
// four shards gets at 64.
//
//	XKEEPER_BENCH=1 go test ./bench -run TestMeasureGroupLoad -v
func TestMeasureGroupLoad(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	run := envDuration("XKEEPER_BENCH_DURATION", 6*time.Second)
	cells := strings.Fields(envString("XKEEPER_BENCH_CELLS", "1x64 1x16 4x64 1x8"))
	var report strings.Builder
	report.WriteString("| shards | clients in all | clients per shard | creates/s | server CPU µs per create | creates per Raft append | p50 ms |\n|---|---|---|---|---|---|---|\n")
	for _, cell := range cells {
		var shards, clients int
		_, err := fmt.Sscanf(cell, "%dx%d", &shards, &clients)
		require.NoError(t, err, "a cell is SHARDSxCLIENTS")
		require.True(t, shards >= 1 && clients >= shards, "cell %s: at least one shard and a client per shard", cell)
		pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Shards: shards, Members: 3, Nodes: 3, Fsync: true, Keeper: productionRaft})
		waitBalanced(t, pc)
		var pids []int
		for _, n := range pc.Config.Nodes {
			pids = append(pids, pc.Process(n.Name).PID())
		}
		before := nodeLogAppends(t, pc)
		r := createLoad(t, pc, pids, clients, run)
		appends := nodeLogAppends(t, pc) - before
		creates := r.Throughput * (run + time.Second).Seconds() // the warm-up's creates append too
		fmt.Fprintf(&report, "| %d | %d | %d | %.0f | %.0f | %.1f | %.2f |\n", shards, clients, clients/shards, r.Throughput, r.CPUPerOp,
			3*creates/max(appends, 1), r.P50)
		pc.Stop()
	}
	t.Log("\n" + report.String())
}

// nodeLogAppends sums xkeeper_node_log_requests_total over the nodes: the
// appends their members made to their node logs, and their deletes (log
// compaction after a snapshot, a few per run, counted as appends).
func nodeLogAppends(t *testing.T, pc *testenv.ProcessCluster) float64 {
	total := 0.0
	for _, m := range pc.Config.Shards[0].Members { // one member of each node: the node log's totals are on every member
		resp, err := http.Get("http://" + m.HTTPAddr + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		n, err := testenv.MetricValue(body, "xkeeper_node_log_requests_total")
		require.NoError(t, err, "on %s", m.HTTPAddr)
		total += n
	}
	return total
}
