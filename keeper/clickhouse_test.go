package keeper_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xkeeper/xkeeper/testenv"
)

// chTable is the ReplicatedMergeTree every table of the ClickHouse test uses.
const chTable = `(d Date, k UInt64, v String)
	ENGINE=ReplicatedMergeTree('/clickhouse/tables/{shard}/%s','{replica}') PARTITION BY toYYYYMM(d) ORDER BY k`

// Waits of the ClickHouse test. ClickHouse opens a new session as soon as it
// loses one (it never resumes a session); if no member takes it, it tries
// again 10 s later. The lost session's ephemerals stay until it expires (the
// test shard grants at most 10 s of the 30 s ClickHouse asks for), and
// ClickHouse removes its own is_active node rather than wait for that.
const (
	chReplicationWait = 30 * time.Second // a committed insert reaches the other replica
	chRecoveryWait    = 60 * time.Second // ClickHouse accepts inserts again after a keeper fault
)

// TestClickHouseOnShard runs two ClickHouse 18.16 replicas on one 3-member
// shard through replicated DDL and DML, a leader failover under inserts and
// a restart of every member.
func TestClickHouseOnShard(t *testing.T) {
	began := time.Now()
	c := testenv.StartShard(t, 3)
	chs := startReplicas(t, c.Servers("a"))
	ch1, ch2 := chs[0], chs[1]
	phase := began
	lap := func(name string) {
		t.Logf("%s: %v", name, time.Since(phase).Round(time.Millisecond))
		phase = time.Now()
	}
	lap("shard and two ClickHouse " + strings.TrimSpace(chQuery(t, ch1, `SELECT version()`)) + " servers started")

	for _, ch := range chs {
		chQuery(t, ch, "CREATE TABLE t1 "+fmt.Sprintf(chTable, "t1"))
	}
	chQuery(t, ch1, `INSERT INTO t1 VALUES ('2024-01-15', 1, 'a'), ('2024-01-16', 2, 'b'), ('2024-02-01', 3, 'c')`)
	chWait(t, ch2, `SELECT count(), sum(k) FROM t1`, "3\t6\n")
	chQuery(t, ch2, `INSERT INTO t1 VALUES ('2024-02-02', 4, 'd')`)
	chWait(t, ch1, `SELECT count(), sum(k) FROM t1`, "4\t10\n")
	lap("replicated table created on both, inserts replicate both ways")

	for _, ch := range chs {
		chQuery(t, ch, "CREATE TABLE t2 "+fmt.Sprintf(chTable, "t2"))
	}
	chQuery(t, ch1, `ALTER TABLE t2 ATTACH PARTITION 202401 FROM t1`)
	chWait(t, ch2, `SELECT count(), sum(k) FROM t2`, "2\t3\n")
	chQuery(t, ch2, `ALTER TABLE t1 DROP PARTITION 202401`)
	chWait(t, ch1, `SELECT count(), sum(k) FROM t1`, "2\t7\n")
	chWait(t, ch1, `SELECT count(), sum(k) FROM t2`, "2\t3\n")
	lap("second table, ATTACH PARTITION FROM, DROP PARTITION")

	chQuery(t, ch1, `ALTER TABLE t1 ADD COLUMN x UInt32 DEFAULT 7`)
	chWait(t, ch2, `SELECT type FROM system.columns WHERE database = 'default' AND table = 't1' AND name = 'x'`, "UInt32\n")
	chQuery(t, ch2, `INSERT INTO t1 (d, k, v, x) VALUES ('2024-02-03', 5, 'e', 9)`)
	chWait(t, ch1, `SELECT count(), sum(k), sum(x) FROM t1`, "3\t12\t23\n")
	lap("ALTER ADD COLUMN")

	// The same block inserted twice on one replica and once on the other
	// lands once: the second and third find its block id in the keeper.
	const dup = `INSERT INTO t1 (d, k, v) VALUES ('2024-03-01', 100, 'dup')`
	chQuery(t, ch1, dup)
	chQuery(t, ch1, dup)
	chQuery(t, ch2, dup)
	chQuery(t, ch2, `INSERT INTO t1 (d, k, v) VALUES ('2024-03-01', 101, 'after')`)
	for _, ch := range chs {
		chWait(t, ch, `SELECT countIf(k = 100), countIf(k = 101) FROM t1`, "1\t1\n")
		chQuery(t, ch, `SYSTEM SYNC REPLICA t1`)
		if got := chQuery(t, ch, `SELECT countIf(k = 100) FROM t1`); got != "1\n" {
			t.Fatalf("%s: duplicate block stored %q times, want 1", ch.HTTPAddr(), got)
		}
	}
	for _, ch := range chs {
		if got := chQuery(t, ch, `SELECT value FROM system.events WHERE event = 'DuplicatedInsertedBlocks'`); got != "1\n" {
			t.Errorf("%s: DuplicatedInsertedBlocks = %q, want 1", ch.HTTPAddr(), got)
		}
	}
	lap("duplicate INSERT deduplicated on both replicas")

	out := chQuery(t, ch1, "CREATE TABLE t3 ON CLUSTER xk "+fmt.Sprintf(chTable, "t3"))
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Count(out, "\t0\t\t") != 2 {
		t.Fatalf("CREATE TABLE ON CLUSTER: want status 0 from both hosts, got\n%s", out)
	}
	chQuery(t, ch2, `INSERT INTO t3 VALUES ('2024-05-01', 1, 'ddl')`)
	chWait(t, ch1, `SELECT count() FROM t3`, "1\n")
	lap("ON CLUSTER DDL")

	acked := insertThroughFailover(t, chs, "t1", func() string {
		leader := c.Leader("a")
		if leader == "" {
			t.Fatal("shard has no leader before the kill")
		}
		c.Kill(leader)
		return leader
	}, func(killed string) {
		c.WaitLeader("a")
		c.Restart(killed)
		c.WaitLeader("a")
	})
	lap("inserts through the leader's failover")

	// Every member down at once, then up from its data directory.
	for _, m := range c.Shard("a").Members {
		c.Kill(m.ID)
	}
	for _, m := range c.Shard("a").Members {
		c.Restart(m.ID)
	}
	c.WaitLeader("a")
	chRetry(t, ch2, `INSERT INTO t1 (d, k, v) VALUES ('2024-06-01', 2000, 'restart')`)
	chRetry(t, ch1, `INSERT INTO t1 (d, k, v) VALUES ('2024-06-01', 2001, 'restart')`)
	for _, ch := range chs {
		chWait(t, ch, `SELECT countIf(k >= 2000), countIf(k >= 1000 AND k < 2000) >= `+strconv.Itoa(acked)+` FROM t1`, "2\t1\n")
	}
	lap("restart of every member")
	t.Logf("total: %v", time.Since(began).Round(time.Millisecond))
}

// insertThroughFailover inserts blocks with keys 1000… into table
// alternately on the replicas, kills what kill kills (and names) a quarter
// of the way in, and checks that both replicas end up with every block
// ClickHouse acknowledged and that inserts succeed again after the kill;
// then it calls restart. It returns the number of acknowledged blocks.
func insertThroughFailover(t *testing.T, chs []*testenv.ClickHouse, table string, kill func() string, restart func(killed string)) int {
	t.Helper()
	const (
		inserts = 40
		killAt  = 10 // acknowledged inserts before the kill
	)
	type result struct {
		key int
		err error
	}
	results := make(chan result, inserts)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(results)
		for i := range inserts {
			key := 1000 + i
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := chs[i%2].Query(ctx, fmt.Sprintf(`INSERT INTO %s (d, k, v) VALUES ('2024-04-01', %d, 'failover')`, table, key))
			cancel()
			results <- result{key, err}
			if err != nil {
				// Back off while ClickHouse re-opens its session, so that
				// the inserts span the failover instead of failing at once.
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		}
	}()
	var acked, ackedAfter []int
	var errs []string
	killed := ""
	var killedAt time.Time
	for r := range results {
		if r.err != nil {
			errs = append(errs, fmt.Sprintf("%d: %v", r.key, r.err))
			continue
		}
		acked = append(acked, r.key)
		if killed != "" {
			if len(ackedAfter) == 0 {
				t.Logf("first insert acknowledged %v after the kill", time.Since(killedAt).Round(time.Millisecond))
			}
			ackedAfter = append(ackedAfter, r.key)
		}
		if killed == "" && len(acked) == killAt {
			killed = kill()
			killedAt = time.Now()
			t.Logf("killed %s after %d acknowledged inserts", killed, len(acked))
		}
	}
	if killed == "" {
		t.Fatalf("only %d of %d inserts acknowledged before the kill; errors:\n%s", len(acked), inserts, strings.Join(errs, "\n"))
	}
	t.Logf("%d of %d inserts acknowledged, %d after the kill; %d failed", len(acked), inserts, len(ackedAfter), len(errs))
	for _, e := range errs {
		t.Logf("failed insert %s", firstLine(e))
	}
	if len(ackedAfter) == 0 {
		t.Errorf("no insert acknowledged after the leader was killed")
	}
	for _, ch := range chs {
		chWaitFunc(t, ch, chRecoveryWait, `SELECT k FROM `+table+` WHERE k >= 1000 AND k < 2000 ORDER BY k`, func(out string) bool {
			have := map[int]bool{}
			for _, f := range strings.Fields(out) {
				k, _ := strconv.Atoi(f)
				have[k] = true
			}
			return !slices.ContainsFunc(acked, func(k int) bool { return !have[k] })
		}, fmt.Sprintf("every acknowledged key of %v", acked))
	}
	restart(killed)
	return len(acked)
}

// startReplicas starts two ClickHouse servers, replicas r1 and r2 of
// cluster xk, with zk as their keeper.
func startReplicas(t *testing.T, zk []string) []*testenv.ClickHouse {
	ports := testenv.FreePorts(t, 2)
	var natives []string
	for _, p := range ports {
		natives = append(natives, "127.0.0.1:"+strconv.Itoa(p))
	}
	var chs []*testenv.ClickHouse
	for i, p := range ports {
		chs = append(chs, testenv.StartClickHouse(t, testenv.ClickHouseOptions{
			ZooKeeper: zk, Clusters: map[string][]string{"xk": natives},
			NativePort: p, Replica: fmt.Sprintf("r%d", i+1),
		}))
	}
	return chs
}

// chQuery runs sql and fails the test on an error.
func chQuery(t *testing.T, ch *testenv.ClickHouse, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := ch.Query(ctx, sql)
	if err != nil {
		t.Fatalf("%s: %v\n%s", sql, err, ch.LogTail())
	}
	return out
}

// chRetry runs sql until it succeeds, for statements ClickHouse refuses
// while it re-opens its keeper session. A retried INSERT of the same block
// is deduplicated, so a retry after an unknown outcome stores it once.
func chRetry(t *testing.T, ch *testenv.ClickHouse, sql string) {
	t.Helper()
	deadline := time.Now().Add(chRecoveryWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := ch.Query(ctx, sql)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v\n%s", sql, chRecoveryWait, err, ch.LogTail())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// chWait polls sql until it returns want.
func chWait(t *testing.T, ch *testenv.ClickHouse, sql, want string) {
	t.Helper()
	chWaitFunc(t, ch, chReplicationWait, sql, func(out string) bool { return out == want }, fmt.Sprintf("%q", want))
}

// chWaitFunc polls sql until ok accepts its output.
func chWaitFunc(t *testing.T, ch *testenv.ClickHouse, timeout time.Duration, sql string, ok func(string) bool, want string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out string
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err = ch.Query(ctx, sql)
		cancel()
		if err == nil && ok(out) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s on %s: after %v got %q (err %v), want %s\n%s", sql, ch.HTTPAddr(), timeout, out, err, want, ch.LogTail())
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
