package bench

// Guards: cheap tests, run with every test run (no XKEEPER_BENCH), of the
// claims of BENCHMARKS.md that could regress with no test failing. Their
// bounds hold on a loaded 2-core machine and are far from the figures of
// record; each names the regression it catches.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/testenv"
)

// skipUnderRace skips a guard under the race detector, which slows and
// bloats what it measures; scripts/test.sh runs the guards again without
// it.
func skipUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("a guard measures without the race detector (scripts/test.sh runs it in its pass without -race)")
	}
}

// idleShardCPUBound is the most CPU an idle 3-member shard may use, in
// cores, summed over its members. BENCHMARKS.md ("Idle shard and
// follower commits") measured 2.4–3.2% of one core; a 1 ms commit_timeout
// (the default before commit notices) measured 7%.
const idleShardCPUBound = 0.05

// TestGuardIdleShardCPU: an idle 3-member shard (`xkeeper serve`
// processes, production Raft timings, fsync on) uses under 5% of one
// core, its members' user and system time (/proc) over 5 s once it has a
// leader. Catches a timer or poll that wakes far more often than Raft's
// heartbeats, such as commit_timeout back at 1 ms.
func TestGuardIdleShardCPU(t *testing.T) {
	skipUnderRace(t)
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: productionRaft})
	pc.WaitLeader("a")
	m := startCPU(t, pc)
	time.Sleep(5 * time.Second) // the measured idle spell, not a synchronisation
	total, each := membersBusy(m.busy(t))
	t.Logf("idle shard: %.2f%% of one core (%s)", 100*total, each)
	require.Less(t, total, idleShardCPUBound, "an idle shard's CPU, in cores (%s)", each)
}

// membersBusy sums the members' share of busy (cpuMeter.busy), the test
// process's left out, and lists each member's in percent of one core.
func membersBusy(busy map[string]float64) (total float64, each string) {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(busy)) {
		if id != "bench" {
			total += busy[id]
			parts = append(parts, fmt.Sprintf("%s %.2f%%", id, 100*busy[id]))
		}
	}
	return total, strings.Join(parts, ", ")
}

// fillTree creates root and under it parents znodes /d0, /d1, ..., each
// with perParent children k0, k1, ... of 100 bytes, by multis. A parent
// whose fill lost its connection (a busy machine, under -race) is
// completed on a new one: the children it lacks, a multi at a time.
func fillTree(t *testing.T, servers []string, root string, parents, perParent int) {
	conn, err := Connect(servers)
	require.NoError(t, err)
	defer func() { conn.Close() }()
	acl := zk.WorldACL(zk.PermAll)
	_, err = conn.Create(root, nil, 0, acl)
	require.NoError(t, err)
	for p := range parents {
		parent := fmt.Sprintf("%s/d%d", root, p)
		_, err := conn.Create(parent, nil, 0, acl)
		require.NoError(t, err)
		err = Fill(conn, parent, perParent, 100)
		for attempt := 1; err != nil; attempt++ {
			require.Less(t, attempt, 3, "filling %s: %v", parent, err)
			t.Logf("filling %s: %v; completing it on a new connection", parent, err)
			conn.Close()
			conn, err = Connect(servers)
			require.NoError(t, err)
			err = completeChildren(conn, parent, perParent)
		}
	}
}

// completeChildren creates those of parent's children k0 ... k(n-1) of
// 100 bytes that it lacks, a multi at a time.
func completeChildren(conn *zk.Conn, parent string, n int) error {
	kids, _, err := conn.Children(parent)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	for _, k := range kids {
		has[k] = true
	}
	var ops []any
	for i := range n {
		if name := fmt.Sprintf("k%d", i); !has[name] {
			ops = append(ops, &zk.CreateRequest{Path: parent + "/" + name, Data: make([]byte, 100), Acl: zk.WorldACL(zk.PermAll)})
		}
	}
	for len(ops) > 0 {
		batch := min(len(ops), fillBatch)
		if _, err := conn.Multi(ops[:batch]...); err != nil {
			return err
		}
		ops = ops[batch:]
	}
	return nil
}

// rssPerZnodeBound is the most each member's resident set may grow per
// znode of 100 bytes, filling 100,000. BENCHMARKS.md ("Memory") measured
// 461–514 bytes at 100,000 (326 at 1,000,000, where the Go heap's
// headroom counts for less).
const rssPerZnodeBound = 1000

// TestGuardRSSPerZnode: a 3-member shard of `xkeeper serve` processes
// filled with 100,000 znodes of 100 bytes (10 parents of 10,000, by
// multis) grows each member's resident set (VmRSS) by at most 1,000 bytes
// a znode, once each member serves the last one. RSS, not the Go heap:
// it is the figure of record, the members run without the race detector
// (testenv builds them plainly), and a bound of twice the measured figure
// leaves room for the garbage collector's timing. Catches a node layout
// or per-znode index that grows by some 500 bytes a znode.
func TestGuardRSSPerZnode(t *testing.T) {
	skipUnderRace(t)
	const parents, perParent = 10, 10_000
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Keeper: func(k *config.Keeper) {
		k.SnapshotThreshold = 1 << 30 // the tree alone, not a snapshot's copy on its way to disk
	}})
	pc.WaitLeader("a")
	before := rssAll(t, pc)
	fillTree(t, pc.Servers("a"), "/rss", parents, perParent)
	last := fmt.Sprintf("/rss/d%d", parents-1)
	for _, m := range pc.Config.Shards[0].Members {
		one, err := Connect([]string{m.ClientAddr})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			kids, _, err := one.Children(last)
			return err == nil && len(kids) == perParent
		}, time.Minute, 50*time.Millisecond, "member %s applies every create", m.ID)
		one.Close()
	}
	after := rssAll(t, pc)
	for _, m := range pc.Config.Shards[0].Members {
		per := float64(after[m.ID]-before[m.ID]) / (parents * perParent)
		t.Logf("member %s: RSS %d → %d MiB, %.0f bytes a znode", m.ID, before[m.ID]>>20, after[m.ID]>>20, per)
		require.Less(t, per, float64(rssPerZnodeBound), "member %s's RSS per znode", m.ID)
	}
}

// snapshotStallShare is the longest the leader's state may be held from
// its readers during a Raft snapshot, as a share of the snapshot's time;
// snapshotStallFloor is the least that bound is (a goroutine of a busy
// machine may wait that long for a core). snapshotWriteShare bounds the
// slowest write overlapping a snapshot in the same way, loosely: a write
// waits for disk syncs, which the snapshot's own slows down. Within each
// snapshot at least snapshotAcksWithin writes are acknowledged.
const (
	snapshotStallShare = 0.1
	snapshotStallFloor = 20 * time.Millisecond
	snapshotWriteShare = 0.75
	snapshotAcksWithin = 10
)

// timedOp is when an operation was asked for and when it was done.
type timedOp struct{ sent, acked time.Time }

// TestGuardSnapshotDoesNotStallWrites: BENCHMARKS.md's "the snapshot is
// the copy-on-write tree taken in O(1) under the apply lock": while the
// leader of a 3-member shard (in process, fsync on, production Raft
// timings) holding 300,000 znodes takes and persists a Raft snapshot,
// writes (setData from 4 clients) keep being acknowledged (10 at least
// within each snapshot), and the
// leader's state is never held from its readers (reads, and the apply of
// each write) for more than a tenth of the snapshot's time (or 20 ms if
// that is more), nor a write overlapping the snapshot slower than three
// quarters of it. Of three snapshots the least stalled counts, so that a
// busy machine's pause is not taken for a stall, which a tree copied
// under the lock causes at every snapshot. Catches a snapshot that copies
// or serialises the tree while holding the state.
func TestGuardSnapshotDoesNotStallWrites(t *testing.T) {
	skipUnderRace(t)
	const parents, perParent = 30, 10_000
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: func(k *config.Keeper) {
		productionRaft(k)             // no election for a busy machine's pause
		k.SnapshotThreshold = 1 << 30 // only the snapshots this test takes
		k.SnapshotInterval = time.Hour
	}})
	fillTree(t, c.Servers("a"), "/big", parents, perParent)
	leader := c.Member(c.WaitLeader("a"))
	conn, err := Connect([]string{leader.Server.Addr()})
	require.NoError(t, err)
	defer conn.Close()

	var (
		mu     sync.Mutex
		writes []timedOp
		failed error
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	acked := func() int { mu.Lock(); defer mu.Unlock(); return len(writes) }
	deadline := time.Now().Add(2 * time.Minute)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; i < 500_000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				sent := time.Now()
				_, err := conn.Set(fmt.Sprintf("/big/d%d/k%d", w, i%perParent), []byte("x"), -1)
				mu.Lock()
				if err != nil && failed == nil {
					failed = err
				}
				writes = append(writes, timedOp{sent, time.Now()})
				mu.Unlock()
			}
		})
	}
	var held []timedOp // when the probe asked for the state for reading, and got it
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 1_000_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			asked := time.Now()
			leader.Replica.View(func(*fsm.State) {})
			mu.Lock()
			held = append(held, timedOp{asked, time.Now()})
			mu.Unlock()
		}
	})
	defer func() { close(stop); wg.Wait() }()
	moreWrites := func(what string) {
		n := acked()
		require.Eventually(t, func() bool { return acked() >= n+100 }, time.Minute, 5*time.Millisecond, "writes %s", what)
	}
	type spell struct{ from, to time.Time }
	var snapshots []spell
	for range 3 {
		moreWrites("before a snapshot")
		t0 := time.Now()
		require.NoError(t, leader.Replica.Snapshot())
		snapshots = append(snapshots, spell{t0, time.Now()})
	}
	moreWrites("after the snapshots")

	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, failed)
	slowest := func(ops []timedOp, sn spell) (time.Duration, int) {
		longest, n := time.Duration(0), 0
		for _, op := range ops {
			if op.acked.After(sn.from) && op.sent.Before(sn.to) {
				longest = max(longest, op.acked.Sub(op.sent))
				n++
			}
		}
		return longest, n
	}
	var report []string
	leastHeld, leastWrite := 2.0, 2.0 // shares of the snapshot's time, of the least stalled snapshot
	var heldBound float64
	for _, sn := range snapshots {
		took := sn.to.Sub(sn.from)
		write, n := slowest(writes, sn)
		hold, _ := slowest(held, sn)
		inside := 0
		for _, w := range writes {
			if w.acked.After(sn.from) && w.acked.Before(sn.to) {
				inside++
			}
		}
		report = append(report, fmt.Sprintf("snapshot in %v: %d writes overlapping it, %d acknowledged within it, slowest %v; state held from readers at most %v",
			took.Round(time.Millisecond), n, inside, write.Round(time.Millisecond), hold.Round(time.Millisecond)))
		assert.GreaterOrEqual(t, inside, snapshotAcksWithin, "writes acknowledged within a snapshot of %v", took)
		if share := hold.Seconds() / took.Seconds(); share < leastHeld {
			leastHeld, heldBound = share, max(snapshotStallShare, snapshotStallFloor.Seconds()/took.Seconds())
		}
		leastWrite = min(leastWrite, write.Seconds()/took.Seconds())
	}
	t.Logf("%d znodes: %s", parents*perParent, strings.Join(report, "; "))
	require.Less(t, leastHeld, heldBound, "the state held from readers during the least stalled of 3 snapshots, as a share of its time (%s)", strings.Join(report, "; "))
	require.Less(t, leastWrite, snapshotWriteShare, "the slowest write during the least stalled of 3 snapshots, as a share of its time (%s)", strings.Join(report, "; "))
}
