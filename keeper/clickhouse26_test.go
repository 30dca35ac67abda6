package keeper_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// ch26Statements is what ClickHouse 26.7 runs against each keeper, in two
// clickhouse-local processes (two keeper sessions; the second attaches
// the first's tables again): KeeperMap tables — insert, select by key and
// by keys, insert over a key, strict mode, ALTER UPDATE, DELETE, ALTER
// DELETE, the keys limit, TRUNCATE, DROP — and a ReplicatedMergeTree
// created and dropped (read-only: clickhouse-local has no interserver
// port). Explicit UUIDs keep the keeper paths and data the same from one
// keeper to the next. km and rmt_kept stay, so that the trees compared
// afterwards hold both kinds.
var ch26Statements = [][]testenv.CHDBStatement{{
	{SQL: `CREATE TABLE km UUID '00000000-0000-0000-0000-00000000c001' (key String, v UInt64) ENGINE = KeeperMap('/km', 4) PRIMARY KEY key`},
	{SQL: `INSERT INTO km VALUES ('a', 1), ('b', 2), ('c', 3)`},
	{SQL: `SELECT v FROM km WHERE key = 'b'`},
	{SQL: `SELECT key, v FROM km WHERE key IN ('a', 'c', 'zz') ORDER BY key`},
	{SQL: `INSERT INTO km VALUES ('a', 10)`},
	{SQL: `INSERT INTO km SETTINGS keeper_map_strict_mode = 1 VALUES ('a', 11)`, MayFail: true},
	{SQL: `ALTER TABLE km UPDATE v = v + 100 WHERE key = 'b'`},
	{SQL: `SELECT key, v FROM km ORDER BY key`},
	{SQL: `DELETE FROM km WHERE key = 'c'`},
	{SQL: `INSERT INTO km VALUES ('d', 4), ('e', 5), ('f', 6)`, MayFail: true}, // 5 keys > keys_limit 4
	{SQL: `INSERT INTO km VALUES ('d', 4), ('e', 5)`},
	{SQL: `SELECT key, v FROM km ORDER BY key`},
	{SQL: `ALTER TABLE km DELETE WHERE v > 100`},
	{SQL: `SELECT count(), sum(v) FROM km`},
	{SQL: `TRUNCATE TABLE km`},
	{SQL: `SELECT count() FROM km`},
	{SQL: `INSERT INTO km VALUES ('kept', 1)`},
	{SQL: `CREATE TABLE km2 UUID '00000000-0000-0000-0000-00000000c002' (k UInt64, s String) ENGINE = KeeperMap('/km2') PRIMARY KEY k`},
	{SQL: `INSERT INTO km2 SELECT number, toString(number) FROM numbers(100)`},
	{SQL: `SELECT count(), sum(k), any(s) FROM km2 WHERE k IN (1, 50, 99, 1000)`},
	{SQL: `DROP TABLE km2 SYNC`},
	{SQL: `CREATE TABLE rmt UUID '00000000-0000-0000-0000-00000000c003' (d Date, k UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/01/rmt', 'r1') ORDER BY k`},
	{SQL: `SELECT is_readonly, zookeeper_path, replica_path FROM system.replicas WHERE table = 'rmt'`},
	{SQL: `DROP TABLE rmt SYNC`},
	{SQL: `CREATE TABLE rmt_kept UUID '00000000-0000-0000-0000-00000000c004' (d Date, k UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/01/rmt_kept', 'r1') ORDER BY k`},
}, {
	{SQL: `SELECT key, v FROM km ORDER BY key`},
	{SQL: `SELECT is_readonly, zookeeper_path FROM system.replicas WHERE table = 'rmt_kept'`},
	{SQL: `EXISTS TABLE rmt`},
}}

// ch26Outcome is what ClickHouse 26.7 answered against one keeper, the
// feature flags it logged, and the keeper's tree afterwards.
type ch26Outcome struct {
	answers []testenv.CHDBResult
	flags   map[string]bool
	tree    testenv.Tree
}

// ch26SystemNodes are the subtrees the comparison of trees leaves out,
// because each keeper keeps its own there.
var ch26SystemNodes = []string{
	"/zookeeper",        // ZooKeeper's config and quota nodes; xkeeper serves its own
	"/keeper",           // ClickHouse Keeper's system nodes (api_version, feature_flags: issue 39); ZooKeeper 3.8 has none
	"/xkeeper",          // xkeeper's own znodes (cross-shard transactions, moves), ACL-protected
	"/xkeeper-sessions", // xkeeper's session records, ACL-protected
}

// TestClickHouse26 runs ClickHouse 26.7 (libchdb, in-process
// clickhouse-local) against ZooKeeper 3.8, a 3-member xkeeper shard and
// the endpoint of three nodes whose mount table puts the KeeperMap and
// ReplicatedMergeTree paths on other shards: every answer and the keeper
// tree afterwards are ZooKeeper's, and the requests that reached xkeeper
// are the ones the feature flags it advertises allow.
func TestClickHouse26(t *testing.T) {
	var ref *ch26Outcome
	t.Run("ZooKeeper", func(t *testing.T) {
		z := testenv.StartZooKeeper(t, 1)
		out := ch26Run(t, z.Servers())
		out.tree = testenv.ReadTreeExcept(t, connectZK(t, z.Servers(), 10*time.Second), "/", ch26SystemNodes...)
		assert.NotContains(t, slices.Collect(maps.Values(out.flags)), true, "ZooKeeper 3.8 has no feature flags, ClickHouse logged %v", out.flags)
		ref = &out
	})
	t.Run("Shard", func(t *testing.T) {
		c := testenv.StartShard(t, 3)
		out := ch26Run(t, c.Servers("a"))
		ops := c.OpCounts()
		conn := connectZK(t, c.Servers("a"), 10*time.Second)
		out.tree = testenv.ReadTreeExcept(t, conn, "/", ch26SystemNodes...)
		ch26Compare(t, ref, out)
		ch26CheckFlags(t, conn, out.flags)
		assertExtensionOps(t, out.flags, ops)
	})
	t.Run("EndpointWithMounts", func(t *testing.T) {
		// Mounted above the tables: ClickHouse 26 creates a
		// ReplicatedMergeTree's own path in the multi that writes its
		// metadata, so that path must not exist beforehand; and its drop
		// ends with a multi that deletes the table's ephemeral lock and
		// checks its own node under /clickhouse/sessions, so the two
		// must share a shard (a multi that spans shards runs as a
		// cross-shard transaction, which takes no ephemeral node).
		c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3, Mounts: []config.Mount{
			{Path: "/keeper_map_tables", Shard: "b"},
			{Path: "/clickhouse", Shard: "c"},
		}})
		var eps []string
		for _, n := range c.Config.Nodes {
			eps = append(eps, c.Endpoint(n.Name))
		}
		out := ch26Run(t, eps)
		ops := c.OpCounts()
		conn := connectZK(t, eps, 10*time.Second)
		out.tree = testenv.ReadTreeExcept(t, conn, "/", ch26SystemNodes...)
		ch26Compare(t, ref, out)
		ch26CheckFlags(t, conn, out.flags)
		assertExtensionOps(t, out.flags, ops)
		// The tables' keeper data is on the shards the mounts name.
		assert.True(t, existsOn(t, c, "b", "/keeper_map_tables/km/data"))
		assert.True(t, existsOn(t, c, "c", "/clickhouse/tables/01/rmt_kept/replicas/r1"))
		assert.False(t, existsOn(t, c, "a", "/clickhouse/tables/01/rmt_kept"))
		assert.False(t, existsOn(t, c, "c", "/clickhouse/tables/01/rmt"), "DROP TABLE left the table's subtree")
	})
}

// ch26Run runs ch26Statements against the keeper at servers, one
// clickhouse-local process for each list, and logs what each process
// took to start.
func ch26Run(t *testing.T, servers []string) ch26Outcome {
	t.Helper()
	ch := testenv.NewCHDB(t, testenv.CHDBOptions{Servers: servers})
	var out ch26Outcome
	for i, statements := range ch26Statements {
		answers, run, err := ch.Run(statements...)
		require.NoError(t, err)
		t.Logf("clickhouse-local run %d: %d statements in %v, of which %v outside them (library load, engine start, keeper session, shutdown)",
			i+1, len(statements), run.Total.Round(time.Millisecond), run.Start.Round(time.Millisecond))
		out.answers = append(out.answers, answers...)
	}
	// XKEEPER_CHDB_LOG=1 prints ClickHouse's debug log of the runs: what
	// it asked the keeper and why a statement failed inside ClickHouse
	// (a drop it retries in the background fails nowhere else).
	if os.Getenv("XKEEPER_CHDB_LOG") != "" {
		t.Log(ch.Log())
	}
	out.flags = ch.FeatureFlags()
	require.NotEmpty(t, out.flags, "ClickHouse logged no keeper feature flags")
	var logged []string
	for _, f := range ch26FeatureFlags {
		logged = append(logged, f+"="+map[bool]string{true: "enabled", false: "disabled"}[out.flags[f]])
	}
	t.Logf("ClickHouse 26.7's keeper feature flags: %s", strings.Join(logged, " "))
	return out
}

// ch26Compare asserts that ClickHouse answered against xkeeper what it
// answered against ZooKeeper 3.8 (ref; nil if ZooKeeper was not run) and
// that the trees are the same.
func ch26Compare(t *testing.T, ref *ch26Outcome, got ch26Outcome) {
	t.Helper()
	if ref == nil {
		t.Log("no ZooKeeper 3.8 to compare with (its subtest was skipped)")
		return
	}
	require.Len(t, got.answers, len(ref.answers))
	for i, want := range ref.answers {
		assert.Equal(t, want.Output, got.answers[i].Output, "answer to %s", want.SQL)
		assert.Equal(t, want.Error, got.answers[i].Error, "error of %s", want.SQL)
	}
	assert.Empty(t, ref.tree.Diff(got.tree), "the tree after the statements: ZooKeeper 3.8's, then xkeeper's")
	assert.Contains(t, got.tree.Nodes, "/keeper_map_tables/km/data")
	assert.Contains(t, got.tree.Nodes, "/clickhouse/tables/01/rmt_kept/replicas/r1/metadata")
}

// ch26FeatureFlags are ClickHouse 26.7's keeper feature flags in the order
// of its KeeperFeatureFlag enum: flag i is bit 7-i%8 of byte i/8 of
// /keeper/feature_flags (src/Common/ZooKeeper/KeeperFeatureFlags.cpp).
var ch26FeatureFlags = []string{"FILTERED_LIST", "MULTI_READ", "CHECK_NOT_EXISTS", "CREATE_IF_NOT_EXISTS",
	"REMOVE_RECURSIVE", "MULTI_WATCHES", "CHECK_STAT", "PERSISTENT_WATCHES", "CREATE_WITH_STATS", "TRY_REMOVE",
	"LIST_WITH_STAT_AND_DATA", "GET_CHILDREN_RECURSIVE", "CREATE_TTL", "CREATE_CONTAINER"}

// ch26CheckFlags asserts that ClickHouse read the flags the keeper
// advertises in /keeper/feature_flags: all disabled while it has none.
func ch26CheckFlags(t *testing.T, conn *zk.Conn, logged map[string]bool) {
	t.Helper()
	assert.ElementsMatch(t, ch26FeatureFlags, slices.Collect(maps.Keys(logged)), "the flags ClickHouse 26.7 knows")
	data, _, err := conn.Get("/keeper/feature_flags")
	if err == zk.ErrNoNode {
		data = nil
	} else {
		require.NoError(t, err)
	}
	for i, f := range ch26FeatureFlags {
		advertised := i/8 < len(data) && data[i/8]&(1<<(7-i%8)) != 0
		assert.Equal(t, advertised, logged[f], "feature flag %s: advertised in /keeper/feature_flags (%x), as ClickHouse logged it", f, data)
	}
}

// ch26ExtensionOps are ClickHouse Keeper's requests that a feature flag
// allows, by opcode (ClickHouse's src/Common/ZooKeeper/ZooKeeperConstants.h),
// and whether ch26Statements must send it once the flag is on: seen sent by
// ClickHouse 26.7 here, multiRead (KeeperMap's reads of keys) and
// removeRecursive (DROP TABLE of both kinds). Requests ClickHouse sends
// inside a multi (CHECK_NOT_EXISTS, CREATE_IF_NOT_EXISTS in its
// table-creation multis) count as the multi; it sent no filteredList,
// tryRemove or addWatch in these statements.
var ch26ExtensionOps = []struct {
	flag    string
	op      proto.OpCode
	mustUse bool
}{
	{"MULTI_READ", proto.OpMultiRead, true},
	{"FILTERED_LIST", proto.OpFilteredList, false},
	{"CHECK_NOT_EXISTS", proto.OpCheckNotExists, false},
	{"CREATE_IF_NOT_EXISTS", proto.OpCreateIfNotExists, false},
	{"REMOVE_RECURSIVE", proto.OpRemoveRecursive, true},
	{"CHECK_STAT", proto.OpCheckStat, false},
	{"PERSISTENT_WATCHES", proto.OpAddWatch, false},
	{"TRY_REMOVE", proto.OpTryRemove, false},
	{"LIST_WITH_STAT_AND_DATA", proto.OpFilteredListWithStatsAndData, false},
	{"GET_CHILDREN_RECURSIVE", proto.OpListRecursive, false},
}

// assertExtensionOps asserts, from xkeeper's per-op counters (ops), that
// ClickHouse sent no extension request whose flag it saw disabled (it
// fell back to ZooKeeper's requests) and sent those the scenario must use
// whose flag it saw enabled.
func assertExtensionOps(t *testing.T, flags map[string]bool, ops map[string]uint64) {
	t.Helper()
	var counts []string
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		counts = append(counts, fmt.Sprintf("%s=%d", op, ops[op]))
	}
	t.Logf("requests xkeeper answered, by op: %s", strings.Join(counts, " "))
	for _, e := range ch26ExtensionOps {
		n := ops[e.op.String()]
		switch {
		case !flags[e.flag]:
			assert.Zero(t, n, "%s is disabled, yet ClickHouse sent %s", e.flag, e.op)
		case e.mustUse:
			assert.NotZero(t, n, "%s is enabled, yet ClickHouse did not send %s", e.flag, e.op)
		}
	}
}
