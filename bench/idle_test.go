package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureIdleCPU measures what an idle 3-member shard (separate
// `xkeeper serve` processes, production Raft timings, fsync on) costs in
// CPU, at the default commit_timeout (the leader's commit notices tell
// the followers; the timeout is the fallback) and at the 1 ms that was the
// default before the notices (runs only with
// XKEEPER_BENCH=1). The goal of the write-path issue is under 3% of one
// core for the whole shard.
//
//	XKEEPER_BENCH=1 XKEEPER_BENCH_DURATION=10s go test ./bench -run TestMeasureIdleCPU -v
func TestMeasureIdleCPU(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	dur := envDuration("XKEEPER_BENCH_DURATION", 10*time.Second)
	var report strings.Builder
	for _, commit := range []time.Duration{config.Default().CommitTimeout, time.Millisecond} {
		pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true,
			Keeper: func(k *config.Keeper) { productionRaft(k); k.CommitTimeout = commit }})
		pc.WaitLeader("a")
		m := startCPU(t, pc)
		time.Sleep(dur) // the measured idle spell, not a synchronisation
		total, each := membersBusy(m.busy(t))
		fmt.Fprintf(&report, "commit_timeout %v: idle shard %.1f%% of one core (%s) over %v\n",
			commit, 100*total, each, dur)
		for _, mb := range pc.Config.Shards[0].Members {
			pc.Kill(mb.ID)
		}
	}
	t.Log("\n" + report.String())
}
