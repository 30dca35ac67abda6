package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/zkimport"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureZooKeeperImport fills a ZooKeeper 3.8 server with
// XKEEPER_BENCH_ZNODES (default 1,000,000) znodes of 100 bytes, stops it,
// and measures side by side: ZooKeeper's own restart to serving on those
// files, the import of the files (time and peak Go heap), and a 3-member
// xkeeper shard restored from the import, from start to serving. Runs
// only with XKEEPER_BENCH=1.
func TestMeasureZooKeeperImport(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("XKEEPER_BENCH_ZNODES")); err == nil {
		n = v
	}
	z := testenv.StartZooKeeperWith(t, testenv.ZooKeeperOptions{MaxHeap: "3g", Config: "snapCount=1000\n"})
	t0 := time.Now()
	fillZnodes(t, z.Servers(), n)
	t.Logf("filled ZooKeeper with %d znodes in %v", n, time.Since(t0).Round(time.Second))
	t0 = time.Now()
	z.Restart(0)
	zkRestart := time.Since(t0)
	z.Stop()

	runtime.GC()
	base := heapInUse()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if h := heapInUse(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t0 = time.Now()
	st, sum, err := zkimport.FromDataDir(z.DataDir(0), z.DataDir(0), zkimport.Options{})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "zk.xkbackup") // as xkeeper import zookeeper writes it
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, backup.Write(f, backup.Header{Zxid: st.Zxid(), OfficialTime: st.Time()}, st.Snapshot()))
	require.NoError(t, f.Close())
	imported := time.Since(t0)
	close(stop)
	<-sampled
	size, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("import: %d znodes (%d transactions after snapshot %s) in %v, backup %d MB, peak Go heap +%d MB",
		sum.Znodes, sum.Transactions, sum.Snapshot, imported.Round(time.Millisecond), size.Size()>>20, (peak.Load()-base)>>20)
	file, err := os.ReadFile(path)
	require.NoError(t, err)

	st = nil
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	cfg.Keeper.Fsync = true
	t0 = time.Now()
	if _, err := keeper.RestoreBackup(cfg, "a", nil, bytes.NewReader(file), testenv.TestLogger(t)); err != nil {
		t.Fatal(err)
	}
	restored := time.Since(t0)
	t0 = time.Now()
	c := testenv.StartConfig(t, cfg, testenv.ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.Connect(ctx, c.Servers("a"))
	require.NoError(t, err)
	defer cl.Close()
	if _, _, err := cl.Get(ctx, "/big/n00000000"); err != nil {
		t.Fatal(err)
	}
	serving := time.Since(t0)
	t.Logf("ZooKeeper restart to serving: %v; xkeeper restore (3 data dirs): %v, start to serving: %v (%.2fx ZooKeeper's restart)",
		zkRestart.Round(time.Millisecond), restored.Round(time.Millisecond), serving.Round(time.Millisecond),
		serving.Seconds()/zkRestart.Seconds())
}

// heapInUse returns the bytes of live and not yet swept heap objects.
func heapInUse() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
