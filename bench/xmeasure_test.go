package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureCrossShard is the cross-shard measurement of record (runs only
// with XKEEPER_BENCH=1): 3 shards × 3 members, fsync on, production Raft
// timings, first as a process per member, then on 3 nodes (a process
// each, hosting a member of every shard: the layout the design intends).
// For each it prints a 2-shard transaction's latency beside a one-shard
// multi of the same ops and beside two one-shard multis at once on two
// shards (the floor of one round where the shards share a disk and
// cores), transactions per second at 1, 16 and 64 clients over 2 and 3
// shards (the 3-shard ones beside three one-shard multis at once), and (member processes) one-shard setData throughput on
// untouched paths with and without cross-shard load beside it.
//
//	XKEEPER_BENCH=1 go test ./bench -run MeasureCrossShard -v -timeout 30m
func TestMeasureCrossShard(t *testing.T) {
	if testing.Short() || !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	dur := envDuration("XKEEPER_BENCH_DURATION", 5*time.Second)
	for _, nodes := range []int{0, 3} {
		layout := "a process per member"
		if nodes > 0 {
			layout = "3 nodes"
		}
		pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Shards: 3, Members: 3, Nodes: nodes, Fsync: true, Keeper: productionRaft})
		if nodes > 0 {
			// A leadership the balancer moved during the setup would cost
			// a client its connection (and the run its measurement).
			waitBalanced(t, pc)
		}
		rows := measureCrossShard(t, pc, dur, layout)
		if nodes == 0 {
			rows = append(rows, besideCrossShard(t, pc, dur)...)
		}
		t.Logf("%s:", layout)
		WriteTable(testWriter{t}, rows)
		pc.Stop()
	}
}

// measureCrossShard runs the transaction rows on pc.
func measureCrossShard(t *testing.T, pc *testenv.ProcessCluster, dur time.Duration, layout string) []Result {
	var rows []Result
	x := func(o XOptions) Result {
		o.Cluster, o.Duration, o.Warmup, o.Ops = pc.Config, dur, time.Second, 2
		r, err := RunX(context.Background(), o)
		require.NoError(t, err)
		rows = append(rows, r)
		return r
	}
	for _, clients := range []int{1, 16, 64} {
		multi := x(XOptions{Clients: clients, Span: 1})
		pair := x(XOptions{Clients: clients, Span: 2, Concurrent: true})
		tx := x(XOptions{Clients: clients, Span: 2})
		t.Logf("%s, %2d clients: 2-shard tx p50 %.2f ms p99 %.2f ms vs one-shard multi p50 %.2f ms p99 %.2f ms: ratio p50 %.2f× p99 %.2f×; %.0f tx/s",
			layout, clients, tx.P50, tx.P99, multi.P50, multi.P99, tx.P50/multi.P50, tx.P99/multi.P99, tx.Throughput)
		t.Logf("%s, %2d clients: two one-shard multis at once p50 %.2f ms p99 %.2f ms: the transaction is %.2f× at p50, %.2f× at p99",
			layout, clients, pair.P50, pair.P99, tx.P50/pair.P50, tx.P99/pair.P99)
	}
	triple := x(XOptions{Clients: 64, Span: 3, Concurrent: true})
	tx3 := x(XOptions{Clients: 64, Span: 3})
	t.Logf("%s, 64 clients: 3-shard tx %.0f/s; three one-shard multis at once %.0f/s, the most one round can do", layout, tx3.Throughput, triple.Throughput)
	return rows
}

// besideCrossShard measures one-shard setData on paths no transaction
// touches, alone and beside 16 clients of 2-shard transactions.
func besideCrossShard(t *testing.T, pc *testenv.ProcessCluster, dur time.Duration) []Result {
	ctx := context.Background()
	setOpts := Options{Servers: pc.Servers("a"), Op: "set", Clients: 16, Duration: dur, Warmup: time.Second, DataSize: 100}
	alone, err := Run(ctx, setOpts)
	require.NoError(t, err)
	var (
		wg   sync.WaitGroup
		load Result
		xerr error
	)
	wg.Go(func() {
		load, xerr = RunX(ctx, XOptions{Cluster: pc.Config, Clients: 16, Span: 2, Ops: 2, Duration: dur, Warmup: time.Second})
	})
	beside, err := Run(ctx, setOpts)
	wg.Wait()
	require.NoError(t, err)
	require.NoError(t, xerr)
	t.Logf("one-shard setData: %.0f/s alone, %.0f/s beside cross-shard load: %.1f%% loss",
		alone.Throughput, beside.Throughput, 100*(1-beside.Throughput/alone.Throughput))
	return []Result{load, alone, beside}
}

// productionRaft puts config.Default's Raft timings back on a test cluster.
var productionRaft = testenv.ProductionRaft
