package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureEntriesPerTransaction counts the Raft entries each shard
// appends per 2-shard transaction (2 setData ops, one per shard) at 1, 16
// and 64 clients: the leaders' last log index before and after a run, over
// the transactions it completed. 2 shards × 3 in-process members, fsync on,
// production Raft timings. Runs only with XKEEPER_BENCH=1.
//
//	XKEEPER_BENCH=1 go test ./bench -run TestMeasureEntriesPerTransaction -v
func TestMeasureEntriesPerTransaction(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	dur := envDuration("XKEEPER_BENCH_DURATION", 5*time.Second)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, Fsync: true, Keeper: productionRaft})
	lastIndex := func(shard string) uint64 {
		n, err := strconv.ParseUint(c.Member(c.WaitLeader(shard)).Replica.Stats()["last_log_index"], 10, 64)
		require.NoError(t, err)
		return n
	}
	settled := func() bool { // every transaction's records cleaned up
		for _, sh := range []string{"a", "b"} {
			var n int
			c.Member(c.WaitLeader(sh)).Replica.View(func(st *fsm.State) { n = len(st.XRecords()) })
			if n > 0 {
				return false
			}
		}
		return true
	}
	for _, clients := range []int{1, 16, 64} {
		var a0, b0 uint64
		r, err := RunX(context.Background(), XOptions{Cluster: c.Config, Clients: clients, Duration: dur, Span: 2, Ops: 2,
			Started: func() { a0, b0 = lastIndex("a"), lastIndex("b") }})
		require.NoError(t, err)
		require.Eventually(t, settled, time.Minute, 10*time.Millisecond)
		a, b := lastIndex("a")-a0, lastIndex("b")-b0
		txs := float64(r.Requests + sumErrors(r.Errors))
		t.Logf("%2d clients: %.0f tx/s, %d transactions; entries per transaction: shard a %.2f, shard b %.2f (the coordinator is the first shard of each transaction, spread over both)",
			clients, r.Throughput, int(txs), float64(a)/txs, float64(b)/txs)
	}
}

func sumErrors(errs map[string]int) int {
	n := 0
	for _, v := range errs {
		n += v
	}
	return n
}
