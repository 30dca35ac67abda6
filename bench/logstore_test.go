package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/testenv"
)

// logStores are the values of keeper.log_store.
var logStores = []string{"bolt", "wal", "node"}

// TestMeasureLogStore compares the Raft log stores (keeper.log_store
// bolt, wal and node; a member alone keeps a node log of its own), fsync on, side by side in one run (XKEEPER_BENCH=1 only):
// first three hashicorp/raft nodes in this process on loopback TCP with a
// no-op state machine, 150-byte entries applied by 1, 16 and 64 goroutines
// on the leader; then a 3-member xkeeper shard (one process per member)
// under create and set from 1 client on the leader, 1 on a follower, and
// 16 and 64 spread over the members. Every cell starts fresh clusters and
// runs the stores one after the other, in rotating order, so that the load
// of a shared machine falls on all alike; each run lasts
// XKEEPER_BENCH_DURATION (default 3s) after a 1 s warm-up. The table gives
// ops/s, p50 and p99 per store and the ratios of throughputs wal/bolt and
// node/wal.
//
//	XKEEPER_BENCH=1 go test ./bench -run TestMeasureLogStore -v -timeout 20m
func TestMeasureLogStore(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	dur := envDuration("XKEEPER_BENCH_DURATION", 3*time.Second)
	t.Logf("machine: %d CPUs, %s; %v per run", runtime.NumCPU(), runtime.Version(), dur)
	type row struct {
		name string
		res  map[string]Result // by store
	}
	var rows []row
	// measure runs one cell for every store, rotating which goes first.
	measure := func(name string, run func(t *testing.T, store string) Result) {
		rw := row{name: name, res: map[string]Result{}}
		k := len(rows) % len(logStores)
		for _, store := range append(logStores[k:len(logStores):len(logStores)], logStores[:k]...) {
			t.Run(strings.ReplaceAll(name, " ", "_")+"/"+store, func(t *testing.T) {
				r := run(t, store)
				rw.res[store] = r
				t.Logf("%-5s %-30s %8.0f/s p50 %6.2f p99 %6.2f ms %s", store, name, r.Throughput, r.P50, r.P99, FormatErrors(r.Errors))
			})
		}
		rows = append(rows, rw)
	}

	for _, clients := range []int{1, 16, 64} {
		measure(fmt.Sprintf("raft no-op apply, %d", clients), func(t *testing.T, store string) Result {
			return applyLoad(t, startRawRaft(t, store), clients, dur)
		})
	}
	for _, op := range []string{"create", "set"} {
		for _, cell := range []struct {
			name    string
			clients int
			where   string
		}{
			{"1 on the leader", 1, "leader"},
			{"1 on a follower", 1, "follower"},
			{"16", 16, "all"},
			{"64", 64, "all"},
		} {
			measure(fmt.Sprintf("keeper %s, %s", op, cell.name), func(t *testing.T, store string) Result {
				pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: func(k *config.Keeper) {
					productionRaft(k)
					k.LogStore = store
				}})
				r, err := Run(context.Background(), Options{Servers: clientAddrs(pc, cell.where), Op: op, Clients: cell.clients,
					Duration: dur, Warmup: time.Second, DataSize: 100})
				require.NoError(t, err)
				return r
			})
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n%-30s", "clients")
	for _, store := range logStores {
		fmt.Fprintf(&b, " | %-27s", store+" ops/s  p50 ms  p99 ms")
	}
	fmt.Fprintf(&b, " | wal/bolt | node/wal\n")
	ratio := func(a, b Result) float64 {
		if b.Throughput == 0 {
			return 0
		}
		return a.Throughput / b.Throughput
	}
	for _, rw := range rows {
		fmt.Fprintf(&b, "%-30s", rw.name)
		for _, store := range logStores {
			r := rw.res[store]
			fmt.Fprintf(&b, " | %9.0f %7.2f %7.2f  ", r.Throughput, r.P50, r.P99)
		}
		fmt.Fprintf(&b, " | %.2f×    | %.2f×\n", ratio(rw.res["wal"], rw.res["bolt"]), ratio(rw.res["node"], rw.res["wal"]))
	}
	t.Log(b.String())
}

// clientAddrs returns the client address of shard a's leader, of one of
// its followers, or of every member.
func clientAddrs(pc *testenv.ProcessCluster, where string) []string {
	if where == "all" {
		return pc.Servers("a")
	}
	leader := pc.WaitLeader("a")
	for _, m := range pc.Config.Shards[0].Members {
		if (m.ID == leader) == (where == "leader") {
			return []string{m.ClientAddr}
		}
	}
	return nil
}

// startRawRaft starts three hashicorp/raft nodes with a no-op state
// machine, each with the stores a member opens for keeper.log_store store
// (fsync on), and returns the leader. The nodes stop when t ends.
func startRawRaft(t *testing.T, store string) *raft.Raft {
	const n = 3
	trans := make([]*raft.NetworkTransport, n)
	var servers []raft.Server
	for i := range trans {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
		require.NoError(t, err)
		trans[i] = tr
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprint("n", i)), Address: tr.LocalAddr()})
	}
	nodes := make([]*raft.Raft, n)
	for i := range nodes {
		dir := t.TempDir()
		stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
		require.NoError(t, err)
		var logs raft.LogStore = stable
		switch store {
		case "wal":
			walDir := filepath.Join(dir, "wal")
			require.NoError(t, os.Mkdir(walDir, 0o755))
			w, err := wal.Open(walDir, wal.WithLogger(hclog.NewNullLogger()))
			require.NoError(t, err)
			logs = w
			t.Cleanup(func() { w.Close() })
		case "node":
			l, err := nodelog.Open(filepath.Join(dir, "nodelog"), nodelog.Options{Fsync: true})
			require.NoError(t, err)
			logs, err = l.Group("g")
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
		}
		t.Cleanup(func() { stable.Close() })
		snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
		require.NoError(t, err)
		c := raft.DefaultConfig()
		c.LocalID = servers[i].ID
		c.Logger = hclog.NewNullLogger()
		c.BatchApplyCh = true // as keeper/replica sets them
		c.MaxAppendEntries = 512
		c.CommitTimeout = time.Millisecond
		require.NoError(t, raft.BootstrapCluster(c, logs, stable, snaps, trans[i], raft.Configuration{Servers: servers}))
		r, err := raft.NewRaft(c, noopFSM{}, logs, stable, snaps, trans[i])
		require.NoError(t, err)
		nodes[i] = r
		t.Cleanup(func() {
			r.Shutdown().Error()
			trans[i].Close()
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range nodes {
			if r.State() == raft.Leader {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no raft leader after 30s")
	return nil
}

// applyLoad applies 150-byte entries from clients goroutines on the leader.
func applyLoad(t *testing.T, leader *raft.Raft, clients int, dur time.Duration) Result {
	entry := make([]byte, 150)
	measured := time.Now().Add(time.Second)
	samples, errs, _ := closedLoop(context.Background(), clients, measured, measured.Add(dur), func(int) (func() error, func()) {
		return func() error { return leader.Apply(entry, 5*time.Second).Error() }, nil
	})
	r := summarize(Options{Op: "apply", Clients: clients}, samples, errs, dur)
	if r.Requests == 0 {
		t.Fatalf("no entry applied: %v", errs)
	}
	return r
}

type noopFSM struct{}

func (noopFSM) Apply(*raft.Log) any                 { return nil }
func (noopFSM) Snapshot() (raft.FSMSnapshot, error) { return noopSnapshot{}, nil }
func (noopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type noopSnapshot struct{}

func (noopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (noopSnapshot) Release()                             {}
