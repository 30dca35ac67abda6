package movepart_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestReplicatedMoves moves partitions between ReplicatedMergeTree tables
// of two replicas each (ClickHouse 18.16), with a replica that lags and
// inserts through every replica while the move runs: every row ends in
// exactly one of the tables, on every replica.
func TestReplicatedMoves(t *testing.T) {
	w := movetest.StartReplicated(t)
	t.Run("LaggingSourceReplica", func(t *testing.T) { testLaggingSourceReplica(t, w) })
	t.Run("InsertsDuringTheMove", func(t *testing.T) { testInsertsDuringTheMove(t, w) })
	t.Run("Refusals", func(t *testing.T) { testReplicatedRefusals(t, w) })
	t.Run("FenceRefusesInserts", func(t *testing.T) { testFenceRefusesInserts(t, w) })
	t.Run("ReplacingWhileMerging", func(t *testing.T) { testReplacingWhileMerging(t, w) })
}

// testReplacingWhileMerging moves a partition between ReplicatedReplacing
// tables that share keys, with OPTIMIZE ... FINAL on both asked for after
// the commit point and between the statements: the move ends (no check of
// apply stops at rows a merge removed), the destination holds what
// ReplacingMergeTree makes of both tables' rows, and the audit is clean.
func testReplacingWhileMerging(t *testing.T, w *testenv.ReplicatedWorkflow) {
	ctx := movetest.Ctx(t)
	var src, dst movetest.ReplicaSet
	for _, rs := range []*movetest.ReplicaSet{&src, &dst} {
		name, servers := "rep_src", []string{"ca1", "ca2"}
		if rs == &dst {
			name, servers = "rep_dst", []string{"cb1", "cb2"}
		}
		*rs = movetest.ReplicaSet{W: w, Servers: servers, Table: "db." + name}
		for _, s := range servers {
			rs.Exec(t, s, "CREATE DATABASE IF NOT EXISTS db")
			rs.Exec(t, s, "CREATE TABLE "+rs.Table+" (d Date, k UInt64, v UInt8) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/db/"+name+"', '{replica}', v) PARTITION BY toYYYYMM(d) ORDER BY k")
		}
	}
	// src: keys 0-299 at version 1, twice; dst: keys 200-399 at version 2.
	for range 2 {
		src.Exec(t, "ca1", "INSERT INTO "+src.Table+" SELECT toDate('2024-01-01'), number, 1 FROM numbers(300)")
	}
	dst.Exec(t, "cb1", "INSERT INTO "+dst.Table+" SELECT toDate('2024-01-02'), 200 + number, 2 FROM numbers(200)")
	src.Sync(t)
	dst.Sync(t)
	optimize := func(p movepart.Point) {
		if p != movepart.PointCommitted && p != movepart.PointDestinationReplaced {
			return
		}
		for _, q := range []struct {
			rs     movetest.ReplicaSet
			server string
		}{{src, "ca2"}, {dst, "cb2"}} {
			octx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := w.Servers[q.server].Query(octx, "OPTIMIZE TABLE "+q.rs.Table+" PARTITION ID '"+movetest.Partition+"' FINAL")
			cancel()
			t.Logf("OPTIMIZE %s at %s: %v", q.rs.Table, p, err)
		}
	}
	m := movetest.ReplicatedMover(t, w.Config, 10*time.Second, optimize)
	plan, err := m.Plan(ctx, movepart.Request{Kind: movepart.Move, From: src.Ref("ca1"), To: dst.Ref("cb1"), Partition: movetest.Partition})
	require.NoError(t, err)
	_, err = m.Run(ctx, plan)
	require.NoError(t, err, "the move ends")
	src.Sync(t)
	dst.Sync(t)
	dst.Exec(t, "cb1", "OPTIMIZE TABLE "+dst.Table+" PARTITION ID '"+movetest.Partition+"' FINAL")
	dst.Sync(t)
	assert.Equal(t, map[string]int{"ca1": 0, "ca2": 0}, src.Rows(t))
	assert.Equal(t, map[string]int{"cb1": 400, "cb2": 400}, dst.Rows(t), "one row a key once merged")
	for _, s := range dst.Servers {
		assert.Equal(t, "200\t2\n", dst.Exec(t, s, "SELECT count(), max(v) FROM "+dst.Table+" WHERE k >= 200"), "%s: the newer version of a shared key wins", s)
	}
	movetest.CheckReplicatedClean(t, w, w.Config, src, dst)
}

// testFenceRefusesInserts: from the intent to the apply, an insert into the
// partition through any replica of either table is refused (and leaves no
// row), one into another partition is not, and the move ends with exactly
// the rows it planned.
func testFenceRefusesInserts(t *testing.T, w *testenv.ReplicatedWorkflow) {
	ctx := movetest.Ctx(t)
	src, dst := movetest.NewPair(t, w, "fence", 100)
	var tried []error
	hook := func(p movepart.Point) {
		if p != movepart.PointStaged && p != movepart.PointCommitted {
			return
		}
		for i, s := range testenv.ReplicatedServers {
			rs := src
			if s[1] == 'b' {
				rs = dst
			}
			tried = append(tried, rs.Insert(ctx, s, 50_000+i*100+len(tried)*1000, 1))
		}
		_, err := w.Servers["ca2"].Query(ctx, "INSERT INTO "+src.Table+" VALUES ('2024-02-01', 99999)")
		assert.NoError(t, err, "another partition is not fenced")
	}
	m := movetest.ReplicatedMover(t, w.Config, 10*time.Second, hook)
	plan, err := m.Plan(ctx, movepart.Request{Kind: movepart.Move, From: movetest.Ref(t, "ca1:"+src.Table), To: movetest.Ref(t, "cb1:"+dst.Table), Partition: movetest.Partition})
	require.NoError(t, err)
	_, err = m.Run(ctx, plan)
	require.NoError(t, err)
	require.Len(t, tried, 8)
	for i, err := range tried {
		assert.Error(t, err, "insert %d through %s during the move", i, testenv.ReplicatedServers[i%4])
	}
	src.Sync(t)
	dst.Sync(t)
	assert.Equal(t, map[string]int{"ca1": 0, "ca2": 0}, src.Rows(t))
	assert.Equal(t, map[string]int{"cb1": 100, "cb2": 100}, dst.Rows(t))
	require.NoError(t, src.Insert(ctx, "ca2", 60_000, 5), "the fence is gone with the move")
	src.Exec(t, "ca2", "ALTER TABLE "+src.Table+" DROP PARTITION ID '"+movetest.Partition+"'")
}

// testLaggingSourceReplica is the case of the issue: 1,000 rows inserted
// through ca1 and replicated, ca1's fetches stopped, 500 more through ca2;
// a move named through ca1 moves all 1,500.
func testLaggingSourceReplica(t *testing.T, w *testenv.ReplicatedWorkflow) {
	ctx := movetest.Ctx(t)
	src, dst := movetest.NewPair(t, w, "lag", 1000)
	src.Exec(t, "ca1", "SYSTEM STOP FETCHES "+src.Table)
	require.NoError(t, src.Insert(ctx, "ca2", 1000, 500))
	require.NoError(t, dst.Insert(ctx, "cb2", 5000, 10))
	dst.Sync(t)
	require.Equal(t, map[string]int{"ca1": 1000, "ca2": 1500}, src.Rows(t), "ca1 lags")

	m := movetest.ReplicatedMover(t, w.Config, 10*time.Second, nil)
	plan, err := m.Plan(ctx, movepart.Request{Kind: movepart.Move, From: movetest.Ref(t, "ca1:"+src.Table), To: movetest.Ref(t, "cb1:"+dst.Table), Partition: movetest.Partition})
	require.NoError(t, err)
	assert.Equal(t, uint64(1500), plan.Rows, "the plan sees every replica's parts")
	_, err = m.Run(ctx, plan)
	require.NoError(t, err)

	src.Exec(t, "ca1", "SYSTEM START FETCHES "+src.Table)
	src.Sync(t)
	dst.Sync(t)
	assert.Equal(t, map[string]int{"ca1": 0, "ca2": 0}, src.Rows(t))
	assert.Equal(t, map[string]int{"cb1": 1510, "cb2": 1510}, dst.Rows(t))
	for _, s := range dst.Servers {
		keys := dst.Keys(t, s, 0, 1500)
		assert.Equal(t, 1500, len(keys), "%s holds every moved key", s)
		for k, n := range keys {
			if n != 1 {
				t.Errorf("%s holds key %d %d times", s, k, n)
			}
		}
	}
}

// testInsertsDuringTheMove inserts batches through all four replicas while
// a partition moves: every acknowledged batch ends in exactly one table,
// once, and a refused one (the move's fence) in none.
func testInsertsDuringTheMove(t *testing.T, w *testenv.ReplicatedWorkflow) {
	ctx := movetest.Ctx(t)
	src, dst := movetest.NewPair(t, w, "busy", 1000)

	const batch = 10
	type result struct {
		from int
		err  error
	}
	var mu sync.Mutex
	var results []result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range testenv.ReplicatedServers {
		rs := src
		if s[1] == 'b' {
			rs = dst
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 40; n++ {
				select {
				case <-stop:
					return
				default:
				}
				from := 10_000 + (i*1000+n)*batch
				err := rs.Insert(ctx, s, from, batch)
				mu.Lock()
				results = append(results, result{from, err})
				mu.Unlock()
				time.Sleep(time.Duration(150+50*i) * time.Millisecond) // pacing, not synchronisation: gaps in which a plan settles
			}
		}()
	}
	// A move that meets a change between its plan and its intent is rolled
	// back (nothing changed) and tried again; either end keeps every row.
	m := movetest.ReplicatedMover(t, w.Config, 20*time.Second, nil)
	var err error
	moved, attempts := false, 0
	for ; attempts < 10 && !moved; attempts++ {
		var plan *movepart.Plan
		if plan, err = m.Plan(ctx, movepart.Request{Kind: movepart.Move, From: movetest.Ref(t, "ca1:"+src.Table), To: movetest.Ref(t, "cb1:"+dst.Table), Partition: movetest.Partition}); err != nil {
			continue // not settled under the inserts: plan again
		}
		var aborted *movepart.AbortedError
		_, err = m.Run(ctx, plan)
		moved = err == nil
		if err != nil && !errors.As(err, &aborted) {
			break
		}
	}
	close(stop)
	wg.Wait()
	var aborted *movepart.AbortedError
	if !moved {
		require.ErrorAs(t, err, &aborted, "the move ends, done or rolled back")
	}
	src.Sync(t)
	dst.Sync(t)

	acked, refused := 0, 0
	for _, rs := range []movetest.ReplicaSet{src, dst} {
		for _, s := range rs.Servers[1:] {
			assert.Equal(t, rs.Rows(t)[rs.Servers[0]], rs.Rows(t)[s], "the replicas of %s agree", rs.Table)
		}
	}
	srcKeys := src.Keys(t, "ca2", 0, 1_000_000)
	dstKeys := dst.Keys(t, "cb2", 0, 1_000_000)
	for k := range 1000 {
		assert.Equal(t, 1, srcKeys[k]+dstKeys[k], "key %d of the moved partition", k)
		if moved {
			assert.Equal(t, 1, dstKeys[k], "key %d of the moved partition is in the destination", k)
		}
	}
	for _, r := range results {
		for k := r.from; k < r.from+batch; k++ {
			got := srcKeys[k] + dstKeys[k]
			if r.err == nil {
				assert.Equal(t, 1, got, "key %d of an acknowledged insert", k)
			} else {
				assert.LessOrEqual(t, got, 1, "key %d of a refused insert (%v)", k, r.err)
			}
		}
		if r.err == nil {
			acked++
		} else {
			refused++
		}
	}
	t.Logf("inserts during the move: %d acknowledged, %d refused; %d moves tried, moved: %v", acked, refused, attempts, moved)
}

// testReplicatedRefusals: a move between two names of one table, and one
// whose partition no named replica holds whole, are refused and change
// nothing.
func testReplicatedRefusals(t *testing.T, w *testenv.ReplicatedWorkflow) {
	ctx := movetest.Ctx(t)
	src := movetest.NewReplicaSet(t, w, "ref_src", "ca1", "ca2")
	require.NoError(t, src.Insert(ctx, "ca1", 0, 100))
	src.Sync(t)
	m := movetest.ReplicatedMover(t, w.Config, time.Second, nil)
	_, err := m.Plan(ctx, movepart.Request{Kind: movepart.Move, From: movetest.Ref(t, "ca1:"+src.Table), To: movetest.Ref(t, "ca2:"+src.Table), Partition: movetest.Partition})
	require.ErrorIs(t, err, movepart.ErrRefused)
	assert.Contains(t, err.Error(), "one table")

	// ca2 is not in this cluster file; ca1 lags behind it.
	c := *w.Config
	c.ClickHouse.Servers = nil
	c.Tables = nil
	for _, s := range w.Config.ClickHouse.Servers {
		if s.Name != "ca2" {
			c.ClickHouse.Servers = append(c.ClickHouse.Servers, s)
		}
	}
	for _, tb := range w.Config.Tables {
		if tb.Server != "ca2" {
			c.Tables = append(c.Tables, tb)
		}
	}
	dst := movetest.NewReplicaSet(t, w, "ref_dst", "cb1", "cb2")
	src.Exec(t, "ca1", "SYSTEM STOP FETCHES "+src.Table)
	defer src.Exec(t, "ca1", "SYSTEM START FETCHES "+src.Table)
	require.NoError(t, src.Insert(ctx, "ca2", 100, 50))
	m = movetest.ReplicatedMover(t, &c, 2*time.Second, nil)
	_, err = m.Plan(ctx, movepart.Request{Kind: movepart.Move, From: movetest.Ref(t, "ca1:"+src.Table), To: movetest.Ref(t, "cb1:"+dst.Table), Partition: movetest.Partition})
	require.ErrorIs(t, err, movepart.ErrRefused)
	assert.Contains(t, err.Error(), "not settled")
	assert.Contains(t, err.Error(), "ca2")
	assert.Equal(t, map[string]int{"ca1": 100, "ca2": 150}, src.Rows(t), "nothing changed")
}
