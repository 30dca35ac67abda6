package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureFollowerWrite measures what keeper.early_replies buys: setData
// from one client on a follower with early replies (the follower answers
// with the leader's result) and without (it answers after its own apply),
// and from one client on the leader, on a 3-member shard (one process per
// member, fsync on, production Raft timings), XKEEPER_BENCH=1 only. Each
// of XKEEPER_BENCH_ROUNDS rounds (default 2) starts fresh clusters and runs
// the three cells in a rotated order, so that a shared machine's load falls
// on each alike; each run lasts XKEEPER_BENCH_DURATION (default 3s) after a
// 1 s warm-up.
//
//	XKEEPER_BENCH=1 go test ./bench -run TestMeasureFollowerWrite -v -timeout 20m
func TestMeasureFollowerWrite(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	dur := envDuration("XKEEPER_BENCH_DURATION", 3*time.Second)
	rounds := 2
	if n, err := strconv.Atoi(os.Getenv("XKEEPER_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	t.Logf("machine: %d CPUs, %s; %v per run, %d rounds", runtime.NumCPU(), runtime.Version(), dur, rounds)
	cells := []struct {
		name  string
		where string
		early bool
	}{
		{"follower, early replies", "follower", true},
		{"follower, no early replies", "follower", false},
		{"leader", "leader", true},
	}
	res := map[string][]Result{}
	for round := range rounds {
		for i := range cells {
			cell := cells[(i+round)%len(cells)]
			t.Run(fmt.Sprintf("%d/%s", round, strings.ReplaceAll(cell.name, " ", "_")), func(t *testing.T) {
				pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: func(k *config.Keeper) {
					productionRaft(k)
					k.EarlyReplies = cell.early
				}})
				r, err := Run(context.Background(), Options{Servers: clientAddrs(pc, cell.where), Op: "set", Clients: 1,
					Duration: dur, Warmup: time.Second, DataSize: 100})
				require.NoError(t, err)
				res[cell.name] = append(res[cell.name], r)
				t.Logf("%-28s %8.0f/s p50 %6.2f p99 %6.2f ms %s", cell.name, r.Throughput, r.P50, r.P99, FormatErrors(r.Errors))
			})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nsetData, 1 client             | round | ops/s    p50 ms  p99 ms\n")
	for _, cell := range cells {
		for round, r := range res[cell.name] {
			fmt.Fprintf(&b, "%-29s | %5d | %7.0f %7.2f %7.2f\n", cell.name, round, r.Throughput, r.P50, r.P99)
		}
	}
	t.Log(b.String())
}
