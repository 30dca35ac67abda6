package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// ch26Under are the nodes of a ReplicatedMergeTree's keeper path that the
// DROP measurement fills, one table each: blocks (ClickHouse's
// deduplication blocks), which ClickHouse 26.7 empties by multis of
// deletes whatever the flags, and temp, which with REMOVE_RECURSIVE it
// removes by one removeRecursive (limit 1,000).
var ch26Under = []string{"blocks", "temp"}

// ch26Table is the keeper path of the table whose node under is filled.
func ch26Table(under string) string { return "/clickhouse/tables/01/big_" + under }

// ch26Figures is what ClickHouse 26.7 took against one keeper.
type ch26Figures struct {
	selects []time.Duration   // SELECT of every key of the KeeperMap table, in one process
	drops   []time.Duration   // DROP TABLE ... SYNC of each filled ReplicatedMergeTree, as ch26Under
	fill    time.Duration     // creating the extra znodes through a keeper client, every table's
	flags   int               // feature flags ClickHouse logged as enabled
	ops     map[string]uint64 // xkeeper's requests by op during the SELECT and DROP (nil for ZooKeeper)
}

// TestMeasureClickHouse26 measures, from ClickHouse 26.7 (libchdb), a
// DROP TABLE of a ReplicatedMergeTree whose keeper path holds
// XKEEPER_BENCH_CH_ZNODES (default 50,000) extra znodes (one table with
// them under blocks/, one under temp/: ch26Under) and a SELECT of
// every key of a KeeperMap table of XKEEPER_BENCH_CH_KEYS (default
// 10,000) keys, against a 3-member xkeeper shard advertising its feature
// flags, the same shard hiding them (testenv.ClusterOptions.
// HideKeeperSystem: ClickHouse then speaks plain ZooKeeper) and a
// 3-member ZooKeeper 3.8 ensemble, one after the other in one run. Runs
// only with XKEEPER_BENCH=1 (issue 39).
//
//	XKEEPER_BENCH=1 go test ./bench -run TestMeasureClickHouse26 -v -timeout 30m
func TestMeasureClickHouse26(t *testing.T) {
	if !benchEnabled() {
		t.Skip("measurement run: set XKEEPER_BENCH=1")
	}
	znodes := envInt("XKEEPER_BENCH_CH_ZNODES", 50_000)
	keys := envInt("XKEEPER_BENCH_CH_KEYS", 10_000)
	type keeperUnder struct {
		name  string
		start func(t *testing.T) (servers []string, opCounts func() map[string]uint64)
	}
	shard := func(hide bool) func(t *testing.T) ([]string, func() map[string]uint64) {
		return func(t *testing.T) ([]string, func() map[string]uint64) {
			c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true, Keeper: productionRaft, HideKeeperSystem: hide})
			return c.Servers("a"), func() map[string]uint64 { return c.OpCounts() }
		}
	}
	keepers := []keeperUnder{
		{"xkeeper, flags on", shard(false)},
		{"xkeeper, flags off", shard(true)},
		{"ZooKeeper 3.8", func(t *testing.T) ([]string, func() map[string]uint64) {
			return testenv.StartZooKeeper(t, 3).Servers(), nil
		}},
	}
	figures := map[string]ch26Figures{}
	for _, k := range keepers {
		t.Run(k.name, func(t *testing.T) {
			servers, opCounts := k.start(t)
			figures[k.name] = measureCH26(t, servers, opCounts, znodes, keys)
		})
	}
	if len(figures) < len(keepers) {
		return // a subtest alone (go test -run): no table
	}
	t.Logf("ClickHouse 26.7: DROP TABLE of a ReplicatedMergeTree with %d extra znodes, SELECT of %d KeeperMap keys\n%s",
		znodes, keys, ch26Report(figures, keepers[0].name, keepers[1].name, keepers[2].name))
}

// measureCH26 runs the DROP and SELECT measurements against the keeper at
// servers; opCounts, if not nil, reads xkeeper's requests by op.
func measureCH26(t *testing.T, servers []string, opCounts func() map[string]uint64, znodes, keys int) ch26Figures {
	ch := testenv.NewCHDB(t, testenv.CHDBOptions{Servers: servers})
	setup := []testenv.CHDBStatement{
		{SQL: `CREATE TABLE km UUID '00000000-0000-0000-0000-00000000b000' (key String, v UInt64) ENGINE = KeeperMap('/kmbench') PRIMARY KEY key`},
		{SQL: fmt.Sprintf(`INSERT INTO km SELECT toString(number), number FROM numbers(%d)`, keys)},
	}
	drops := []testenv.CHDBStatement{}
	for i, under := range ch26Under {
		setup = append(setup, testenv.CHDBStatement{SQL: fmt.Sprintf(`CREATE TABLE big_%s UUID '00000000-0000-0000-0000-00000000b%03d' (d Date, k UInt64) ENGINE = ReplicatedMergeTree('%s', 'r1') ORDER BY k`,
			under, i+1, ch26Table(under))})
		drops = append(drops, testenv.CHDBStatement{SQL: fmt.Sprintf(`DROP TABLE big_%s SYNC`, under)})
	}
	_, _, err := ch.Run(setup...)
	require.NoError(t, err)

	var f ch26Figures
	start := time.Now()
	for _, under := range ch26Under {
		fillChildren(t, servers, ch26Table(under)+"/"+under, znodes)
	}
	f.fill = time.Since(start)

	var before map[string]uint64
	if opCounts != nil {
		before = opCounts()
	}
	sum := keys * (keys - 1) / 2
	selectAll := testenv.CHDBStatement{SQL: `SELECT count(), sum(v) FROM km`}
	res, _, err := ch.Run(append([]testenv.CHDBStatement{selectAll, selectAll, selectAll}, drops...)...)
	require.NoError(t, err)
	require.Len(t, res, 3+len(drops))
	for _, r := range res[:3] {
		require.Equal(t, fmt.Sprintf("%d\t%d", keys, sum), strings.TrimSpace(r.Output), "SELECT read every key")
		f.selects = append(f.selects, r.Elapsed)
	}
	for _, r := range res[3:] {
		f.drops = append(f.drops, r.Elapsed)
	}
	for _, on := range ch.FeatureFlags() {
		if on {
			f.flags++
		}
	}
	if opCounts != nil {
		f.ops = opCounts()
		for op, n := range before {
			f.ops[op] -= n
		}
	}
	c, err := client.Connect(context.Background(), servers)
	require.NoError(t, err)
	defer c.Close()
	for _, under := range ch26Under {
		_, err = c.Do(context.Background(), proto.OpExists, &proto.PathWatchRequest{Path: ch26Table(under)}, nil)
		require.ErrorIs(t, err, proto.ErrNoNode, "DROP TABLE removed the table's keeper path %s", ch26Table(under))
	}
	t.Logf("fill %v, SELECT %v, DROP %v, flags enabled %d, ops %v", f.fill, f.selects, f.drops, f.flags, f.ops)
	return f
}

// fillChildren creates n empty children of parent (which must exist)
// through a keeper client (fillWire).
func fillChildren(t *testing.T, servers []string, parent string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, servers, wireOptions...)
	require.NoError(t, err)
	defer c.Close()
	ops := make([]proto.MultiOp, n)
	for i := range ops {
		ops[i] = createOp(fmt.Sprintf("%s/b%07d", parent, i), nil, 0, openACL)
	}
	require.NoError(t, fillWire(ctx, c, ops))
}

// ch26Report renders the figures as BENCHMARKS.md's table: each keeper's
// median SELECT and DROP, and each xkeeper's over ZooKeeper's.
func ch26Report(figures map[string]ch26Figures, on, off, zk string) string {
	var b strings.Builder
	b.WriteString("| statement | xkeeper, flags on | xkeeper, flags off | ZooKeeper 3.8 | flags on / ZooKeeper | flags off / ZooKeeper | flags on / flags off |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	row := func(name string, of func(ch26Figures) time.Duration) {
		x, y, z := of(figures[on]), of(figures[off]), of(figures[zk])
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f× | %.2f× | %.2f× |\n", name, ms(x), ms(y), ms(z),
			x.Seconds()/z.Seconds(), y.Seconds()/z.Seconds(), x.Seconds()/y.Seconds())
	}
	row("SELECT of every key (median of 3)", func(f ch26Figures) time.Duration { return median(f.selects) })
	for i, under := range ch26Under {
		row(fmt.Sprintf("DROP TABLE ... SYNC, the znodes under %s/", under), func(f ch26Figures) time.Duration { return f.drops[i] })
	}
	row("filling the znodes of both tables (keeper client, multis of 1,000, 4 at once)", func(f ch26Figures) time.Duration { return f.fill })
	for _, name := range []string{on, off, zk} {
		f := figures[name]
		fmt.Fprintf(&b, "\n%s: feature flags enabled %d; SELECTs %v", name, f.flags, f.selects)
		if f.ops != nil {
			fmt.Fprintf(&b, "; requests during SELECTs and DROP %s", opList(f.ops))
		}
	}
	return b.String()
}

// opList renders the non-zero request counts, by op name.
func opList(ops map[string]uint64) string {
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		if ops[op] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", op, ops[op]))
		}
	}
	return strings.Join(parts, " ")
}

// median returns the middle of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// ms renders d in milliseconds.
func ms(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
