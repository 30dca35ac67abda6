package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureSnapshotStall shows that a snapshot of a large tree does not
// stall writes in proportion to its size: with XKEEPER_BENCH_ZNODES
// (default 1,000,000) znodes in a 3-member shard, 16 clients run setData
// for 8 s twice, once quietly and once while the leader takes and persists
// a snapshot, and the latencies are printed side by side. Runs only with
// XKEEPER_BENCH=1.
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
	conn, err := Connect(c.Servers("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	acl := zk.WorldACL(zk.PermAll)
	start := time.Now()
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
	var count int
	c.Member(c.Leader("a")).Replica.View(func(st *fsm.State) { count = st.NodeCount() })
	if count < n {
		t.Fatalf("only %d znodes after the fill", count)
	}
	t.Logf("filled %d znodes in %v", n, time.Since(start).Round(time.Second))
	o := Options{Servers: c.Servers("a"), Op: "set", Clients: 16, Duration: 8 * time.Second, DataSize: 100}
	quiet, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	took := <-snapDone
	t.Logf("snapshot of %d znodes taken and persisted in %v", n, took.Round(time.Millisecond))
	WriteTable(testWriter{t}, []Result{quiet, during})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
