package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is what every subtest of TestClickHouse shares: two ClickHouse 18.16
// servers, a and b, both with the same one-member xkeeper shard as their
// ZooKeeper, so that a replicated table can have a replica on each.
type env struct {
	a, b   *testenv.ClickHouse
	ca, cb *clickhouse.Conn
}

// Waits of the test; no step of a passing run comes near them.
const (
	stepTimeout = 60 * time.Second // one statement or read
	syncTimeout = 60 * time.Second // replicas catch up
)

// ctx returns a context that ends with the subtest or after stepTimeout.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), stepTimeout)
	t.Cleanup(cancel)
	return c
}

// TestClickHouse runs every function of the package against real
// ClickHouse 18.16 servers.
func TestClickHouse(t *testing.T) {
	began := time.Now()
	shard := testenv.StartShard(t, 1)
	var e env
	e.a = testenv.StartClickHouse(t, testenv.ClickHouseOptions{ZooKeeper: shard.Servers("a"), Replica: "ra"})
	e.b = testenv.StartClickHouse(t, testenv.ClickHouseOptions{ZooKeeper: shard.Servers("a"), Replica: "rb"})
	e.ca = connect(t, "a", e.a)
	e.cb = connect(t, "b", e.b)
	t.Logf("shard and two ClickHouse %s servers started in %v", e.ca.Version(), time.Since(began).Round(time.Millisecond))

	for _, st := range []struct {
		name string
		f    func(*testing.T, *env)
	}{
		{"Connect", testConnect},
		{"Table", testTable},
		{"Compatible", testCompatible},
		{"PartitionsAndParts", testPartitionsAndParts},
		{"Fingerprint", testFingerprint},
		{"ReplacePartitionFrom", testReplace},
		{"AttachPartitionFrom", testAttach},
		{"DropPartition", testDropPartition},
		{"StagingTable", testStaging},
		{"CopyPartitionRemote", testCopyRemote},
		{"QuotedNames", testQuotedNames},
		{"Replicated", testReplicated},
		{"QueryLog", testQueryLog},
		{"SyncReplicaWaitsForADownReplica", testSyncReplicaDown}, // restarts b: last
	} {
		start := time.Now()
		ok := t.Run(st.name, func(t *testing.T) { st.f(t, &e) })
		t.Logf("%s: %v", st.name, time.Since(start).Round(time.Millisecond))
		if !ok && st.name == "Connect" {
			return
		}
	}
	t.Logf("total: %v", time.Since(began).Round(time.Millisecond))
}

func connect(t *testing.T, name string, s *testenv.ClickHouse) *clickhouse.Conn {
	t.Helper()
	c, err := clickhouse.Connect(ctx(t), clickhouse.Server{Name: name, Addr: s.NativeAddr(), User: "default"})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// run executes sql on s through the HTTP interface, failing the test on error.
func run(t *testing.T, s *testenv.ClickHouse, sql string) string {
	t.Helper()
	out, err := s.Query(ctx(t), sql)
	require.NoError(t, err, "%s", sql)
	return out
}

// events is the layout of most tables of the test.
const events = `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
	ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k`

// fill inserts rows k = from…to-1 into January 2024 (partition 202401) and
// one row into February (202402), as one block.
func fill(t *testing.T, s *testenv.ClickHouse, table string, from, to int) {
	t.Helper()
	run(t, s, fmt.Sprintf(`INSERT INTO %s SELECT toDate('2024-01-01') + (number %% 28), number, toString(number),
		if(number %% 3 = 0, NULL, toInt32(number)), [toString(number), NULL], toDecimal64(number / 7, 4),
		toUUID('00000000-0000-0000-0000-000000000001'), toDateTime('2024-01-01 00:00:00') + number
		FROM numbers(%d) WHERE number >= %d`, table, to, from))
	run(t, s, fmt.Sprintf(`INSERT INTO %s VALUES ('2024-02-01', %d, 'feb', 1, [], 1.5, toUUID('00000000-0000-0000-0000-000000000002'), '2024-02-01 00:00:00')`, table, 1_000_000+from))
}

func fingerprint(t *testing.T, c *clickhouse.Conn, db, table, partition string) clickhouse.Fingerprint {
	t.Helper()
	f, err := c.Fingerprint(ctx(t), db, table, partition)
	require.NoError(t, err)
	return f
}

// wantErr fails unless err wraps target and its text has every one of parts.
func wantErr(t *testing.T, err, target error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", target)
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("error %q does not wrap %v", err, target)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not mention %q", err, p)
		}
	}
}

func testConnect(t *testing.T, e *env) {
	if v := e.ca.Version(); !strings.HasPrefix(v, "18.16.") {
		t.Errorf("version %s, want 18.16.x", v)
	}
	if r := e.ca.Revision(); r != 54412 {
		t.Errorf("revision %d, want 54412", r)
	}
	if s := e.ca.Server(); s.Name != "a" || s.Addr != e.a.NativeAddr() {
		t.Errorf("Server() = %+v", s)
	}
	// A port nobody listens on: the HTTP port of a answers HTTP, not the
	// native protocol; a closed port refuses.
	port := testenv.FreePort(t)
	_, err := clickhouse.Connect(ctx(t), clickhouse.Server{Name: "nowhere", Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	wantErr(t, err, nil, "clickhouse nowhere: connect to 127.0.0.1:")
	_, err = clickhouse.Connect(ctx(t), clickhouse.Server{Name: "stranger", Addr: e.a.NativeAddr(), User: "nobody", Password: "x"})
	wantErr(t, err, nil, "clickhouse stranger: connect to "+e.a.NativeAddr())
	var exc *ch.Exception
	if !errors.As(err, &exc) || exc.Code != 192 { // UNKNOWN_USER
		t.Errorf("unknown user: %v, want exception 192", err)
	}
}

func testTable(t *testing.T, e *env) {
	run(t, e.a, "CREATE TABLE tt "+events)
	tab, err := e.ca.Table(ctx(t), "default", "tt")
	require.NoError(t, err)
	var cols []string
	for _, c := range tab.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	want := []string{"d Date", "k UInt64", "v String", "n Nullable(Int32)", "a Array(Nullable(String))",
		"dec Decimal(18, 4)", "u UUID", "at DateTime"}
	if !slices.Equal(cols, want) {
		t.Errorf("columns %q, want %q", cols, want)
	}
	if tab.Engine != "MergeTree" || tab.Replicated || tab.LegacySyntax || tab.IndexGranularity != 8192 ||
		tab.PartitionKey != "toYYYYMM(d)" || tab.SortingKey != "k" || tab.PrimaryKey != "k" ||
		!strings.HasPrefix(tab.CreateStatement, "CREATE TABLE default.tt") || tab.String() != "a:default.tt" || !tab.MergeTree() {
		t.Errorf("table %+v", tab)
	}

	run(t, e.a, `CREATE TABLE tlegacy (d Date, k UInt64, m UInt64 MATERIALIZED k * 2, al UInt64 ALIAS k + 1)
		ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/tlegacy', '{replica}', d, (k, d), 1024, k)`)
	tab, err = e.ca.Table(ctx(t), "default", "tlegacy")
	require.NoError(t, err)
	if !tab.Replicated || tab.ZooKeeperPath != "/clickhouse/tables/tlegacy" || tab.ReplicaName != "ra" ||
		!tab.LegacySyntax || tab.IndexGranularity != 1024 || tab.PartitionKey != "toYYYYMM(d)" || tab.SortingKey != "k, d" {
		t.Errorf("legacy replicated table %+v", tab)
	}
	if got := tab.Columns[2]; got.DefaultKind != "MATERIALIZED" || got.DefaultExpression != "k * 2" {
		t.Errorf("materialized column %+v", got)
	}
	if got := tab.Columns[3]; got.DefaultKind != "ALIAS" {
		t.Errorf("alias column %+v", got)
	}

	_, err = e.ca.Table(ctx(t), "default", "absent")
	wantErr(t, err, clickhouse.ErrNoTable, "clickhouse a: read table default.absent: table does not exist")
	_, err = e.ca.Table(ctx(t), "nodb", "tt")
	wantErr(t, err, clickhouse.ErrNoTable, "nodb.tt")
}

func testCompatible(t *testing.T, e *env) {
	run(t, e.a, "CREATE TABLE ca "+events)
	run(t, e.b, "CREATE TABLE cb "+events)
	run(t, e.a, `CREATE TABLE crep (d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
		ENGINE = ReplicatedMergeTree('/clickhouse/tables/crep', '{replica}') PARTITION BY toYYYYMM(d) ORDER BY k`)
	base := table(t, e.ca, "ca")
	for _, other := range []*clickhouse.Table{table(t, e.cb, "cb"), table(t, e.ca, "crep")} {
		if err := clickhouse.Compatible(base, other); err != nil {
			t.Errorf("Compatible(ca, %s): %v", other, err)
		}
	}
	tests := []struct {
		name, ddl string
		want      []string
	}{
		{"column type", `(d Date, k UInt64, v String, n Int32, a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
			ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k`, []string{"column 4 n Nullable(Int32) vs n Int32"}},
		{"column order", `(d Date, k UInt64, n Nullable(Int32), v String, a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
			ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k`, []string{"column 3 v String vs n Nullable(Int32)", "column 4 n Nullable(Int32) vs v String"}},
		{"extra column", `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime, x UInt8)
			ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k`, []string{"column 9 x UInt8 only in a:default.c_extra_column"}},
		{"materialized", `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime MATERIALIZED now())
			ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k`, []string{"column 8 at DateTime vs at DateTime MATERIALIZED"}},
		{"partition key", `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
			ENGINE = MergeTree PARTITION BY d ORDER BY k`, []string{"partition key toYYYYMM(d) vs d"}},
		{"sorting key", `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
			ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY (k, v)`, []string{"sorting key k vs k, v", "primary key k vs k, v"}},
		{"granularity", `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
			ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k SETTINGS index_granularity = 1024`, []string{"index granularity 8192 vs 1024"}},
		{"legacy syntax", `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
			ENGINE = MergeTree(d, k, 8192)`, []string{"syntax PARTITION BY (format version 1) vs MergeTree(date, key, granularity) (format version 0)"}},
		{"not MergeTree", `(d Date, k UInt64, v String, n Nullable(Int32), a Array(Nullable(String)), dec Decimal(18, 4), u UUID, at DateTime)
			ENGINE = Memory`, []string{"a:default.c_not_mergetree has engine Memory, not of the MergeTree family", "partition key toYYYYMM(d) vs (none)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "c_" + strings.ReplaceAll(strings.ToLower(tt.name), " ", "_")
			run(t, e.a, "CREATE TABLE "+name+" "+tt.ddl)
			err := clickhouse.Compatible(base, table(t, e.ca, name))
			wantErr(t, err, clickhouse.ErrIncompatible, append([]string{"a:default.ca and a:default." + name}, tt.want...)...)
			t.Log(err)
		})
	}
	// ClickHouse itself refuses a REPLACE between tables that Compatible
	// says differ in sorting key (the granularity difference, which it
	// lets through, would be read wrongly).
	fill(t, e.a, "ca", 0, 10)
	err := e.ca.ReplacePartitionFrom(ctx(t), "t-compat", "default", "c_sorting_key", "default", "ca", "202401")
	wantErr(t, err, nil, "clickhouse a: replace partition of default.c_sorting_key from default.ca partition 202401", "Tables have different ordering")
}

func table(t *testing.T, c *clickhouse.Conn, name string) *clickhouse.Table {
	t.Helper()
	tab, err := c.Table(ctx(t), "default", name)
	require.NoError(t, err)
	return tab
}

func testPartitionsAndParts(t *testing.T, e *env) {
	run(t, e.a, "CREATE TABLE pp "+events)
	run(t, e.a, "SYSTEM STOP MERGES pp")
	fill(t, e.a, "pp", 0, 100)
	fill(t, e.a, "pp", 100, 150)
	ps, err := e.ca.Partitions(ctx(t), "default", "pp")
	require.NoError(t, err)
	if len(ps) != 2 || ps[0].ID != "202401" || ps[0].Value != "202401" || ps[0].Parts != 2 || ps[0].Rows != 150 || ps[0].Bytes == 0 ||
		ps[1].ID != "202402" || ps[1].Rows != 2 {
		t.Errorf("partitions %+v", ps)
	}
	parts, err := e.ca.Parts(ctx(t), "default", "pp", "202401")
	require.NoError(t, err)
	if len(parts) != 2 || parts[0].Name != "202401_1_1_0" || parts[0].Rows != 100 || parts[1].Rows != 50 || parts[0].Bytes == 0 {
		t.Errorf("parts %+v", parts)
	}
	_, err = e.ca.Parts(ctx(t), "default", "pp", "209901")
	wantErr(t, err, clickhouse.ErrNoPartition, "clickhouse a: list parts of default.pp partition 209901: partition has no active parts")
	_, err = e.ca.Parts(ctx(t), "default", "absent", "202401")
	wantErr(t, err, clickhouse.ErrNoTable, "default.absent partition 202401")
	_, err = e.ca.Partitions(ctx(t), "default", "absent")
	wantErr(t, err, clickhouse.ErrNoTable, "default.absent")
	run(t, e.a, "CREATE TABLE pempty "+events)
	if ps, err := e.ca.Partitions(ctx(t), "default", "pempty"); err != nil || len(ps) != 0 {
		t.Errorf("partitions of an empty table: %+v, %v", ps, err)
	}
}

func testFingerprint(t *testing.T, e *env) {
	// The same rows in another order, split differently into parts, on
	// another server: the same fingerprint.
	run(t, e.a, "CREATE TABLE f1 "+events)
	run(t, e.b, "CREATE TABLE f2 "+events)
	fill(t, e.a, "f1", 0, 1000)
	fill(t, e.b, "f2", 500, 1000)
	fill(t, e.b, "f2", 0, 500)
	f1 := fingerprint(t, e.ca, "default", "f1", "202401")
	f2 := fingerprint(t, e.cb, "default", "f2", "202401")
	if f1 != f2 || f1.Rows != 1000 || f1.Hash == 0 {
		t.Errorf("fingerprints %+v and %+v, want equal with 1000 rows", f1, f2)
	}
	// One more row, or one value changed, changes it.
	run(t, e.b, `INSERT INTO f2 SELECT * FROM f2 WHERE k = 7`)
	if f := fingerprint(t, e.cb, "default", "f2", "202401"); f.Rows != 1001 || f.Hash == f1.Hash {
		t.Errorf("after a duplicate row: %+v (before %+v)", f, f1)
	}
	for _, change := range []string{"n = 0 WHERE k = 3", "a = ['x', NULL] WHERE k = 4", "dec = toDecimal64(0, 4) WHERE k = 5", "at = at + 1 WHERE k = 6"} {
		run(t, e.a, "CREATE TABLE IF NOT EXISTS f3 "+events)
		run(t, e.a, "ALTER TABLE f3 DROP PARTITION ID '202401'")
		run(t, e.a, "INSERT INTO f3 SELECT * FROM f1")
		run(t, e.a, "ALTER TABLE f3 UPDATE "+change)
		if got := waitRows(t, e.a, "SELECT count() FROM system.mutations WHERE table = 'f3' AND NOT is_done", "0\n"); got != "0\n" {
			t.Fatalf("mutation of f3 not done: %q", got)
		}
		if f := fingerprint(t, e.ca, "default", "f3", "202401"); f.Rows != 1000 || f.Hash == f1.Hash {
			t.Errorf("after UPDATE %s: %+v, same hash as before", change, f)
		}
	}
	testFingerprintLowCardinality(t, e)
	if f := fingerprint(t, e.ca, "default", "f1", "209901"); f != (clickhouse.Fingerprint{}) {
		t.Errorf("empty partition: %+v, want zero", f)
	}
	_, err := e.ca.Fingerprint(ctx(t), "default", "absent", "202401")
	wantErr(t, err, clickhouse.ErrNoTable, "default.absent")
}

// testFingerprintLowCardinality checks the fingerprint of 18.16's
// experimental LowCardinality columns, which the HTTP interface of the test
// cannot create (it needs a session setting).
func testFingerprintLowCardinality(t *testing.T, e *env) {
	for i, s := range []*testenv.ClickHouse{e.a, e.b} {
		db, err := ch.Open(&ch.Options{Addr: []string{s.NativeAddr()},
			Settings: ch.Settings{"allow_experimental_low_cardinality_type": 1}})
		require.NoError(t, err)
		defer db.Close()
		// Exec of INSERT ... VALUES hangs on 18.16 (the server waits for
		// data blocks): rows come from SELECTs.
		row := func(k int, x string) string {
			return fmt.Sprintf("SELECT toDate('2024-01-01'), toUInt64(%d), CAST(%s AS Nullable(String)), 'p'", k, x)
		}
		stmts := []string{
			"CREATE TABLE lc (d Date, k UInt64, x LowCardinality(Nullable(String)), y LowCardinality(String)) ENGINE = MergeTree PARTITION BY d ORDER BY k",
			"INSERT INTO lc " + row(1, "'a'") + " UNION ALL " + row(2, "NULL"),
			"INSERT INTO lc " + row(3, "''"),
		}
		if i == 1 { // the same rows, in another order and other blocks
			stmts[1], stmts[2] = "INSERT INTO lc "+row(3, "''")+" UNION ALL "+row(2, "NULL"), "INSERT INTO lc "+row(1, "'a'")
		}
		for _, q := range stmts {
			if err := db.Exec(ctx(t), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	fa := fingerprint(t, e.ca, "default", "lc", "20240101")
	fb := fingerprint(t, e.cb, "default", "lc", "20240101")
	if fa != fb || fa.Rows != 3 {
		t.Errorf("LowCardinality fingerprints %+v and %+v, want equal with 3 rows", fa, fb)
	}
	run(t, e.b, "ALTER TABLE lc UPDATE x = '' WHERE k = 2") // NULL becomes ''
	waitRows(t, e.b, "SELECT count() FROM system.mutations WHERE table = 'lc' AND NOT is_done", "0\n")
	if f := fingerprint(t, e.cb, "default", "lc", "20240101"); f.Rows != 3 || f.Hash == fa.Hash {
		t.Errorf("NULL and '' hash alike: %+v", f)
	}
}

// waitRows polls query on s until it returns want or a deadline passes,
// and returns the last answer.
func waitRows(t *testing.T, s *testenv.ClickHouse, query, want string) string {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got := run(t, s, query)
		if got == want || time.Now().After(deadline) {
			return got
		}
		<-tick.C
	}
}

func testReplace(t *testing.T, e *env) {
	run(t, e.a, "CREATE TABLE rsrc "+events)
	run(t, e.a, "CREATE TABLE rdst "+events)
	fill(t, e.a, "rsrc", 0, 300)
	fill(t, e.a, "rdst", 1000, 1100) // replaced: its 202401 rows go, its 202402 row stays
	src := fingerprint(t, e.ca, "default", "rsrc", "202401")
	feb := fingerprint(t, e.ca, "default", "rdst", "202402")
	for i := range 2 {
		if err := e.ca.ReplacePartitionFrom(ctx(t), "t-replace", "default", "rdst", "default", "rsrc", "202401"); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if got := fingerprint(t, e.ca, "default", "rdst", "202401"); got != src {
			t.Errorf("run %d: destination %+v, source %+v", i+1, got, src)
		}
	}
	if got := fingerprint(t, e.ca, "default", "rsrc", "202401"); got != src {
		t.Errorf("source changed: %+v, was %+v", got, src)
	}
	if got := fingerprint(t, e.ca, "default", "rdst", "202402"); got != feb {
		t.Errorf("other partition changed: %+v, was %+v", got, feb)
	}
	// An extra insert into the source makes them differ.
	run(t, e.a, `INSERT INTO rsrc (d, k, u) VALUES ('2024-01-05', 99999, toUUID('00000000-0000-0000-0000-000000000003'))`)
	if got := fingerprint(t, e.ca, "default", "rsrc", "202401"); got == src {
		t.Errorf("source fingerprint unchanged by an insert: %+v", got)
	}

	// Refusals leave the destination as it was.
	err := e.ca.ReplacePartitionFrom(ctx(t), "t-replace", "default", "rdst", "default", "rsrc", "209901")
	wantErr(t, err, clickhouse.ErrNoPartition, "clickhouse a: replace partition of default.rdst from default.rsrc partition 209901")
	err = e.ca.ReplacePartitionFrom(ctx(t), "t-replace", "default", "rdst", "default", "absent", "202401")
	wantErr(t, err, clickhouse.ErrNoTable, "default.absent partition 202401")
	err = e.ca.ReplacePartitionFrom(ctx(t), "t-replace", "default", "absent", "default", "rsrc", "202401")
	wantErr(t, err, clickhouse.ErrNoTable, "default.absent partition 202401")
	err = e.ca.ReplacePartitionFrom(ctx(t), "", "default", "rdst", "default", "rsrc", "202401")
	wantErr(t, err, nil, "empty query id")
	if got := fingerprint(t, e.ca, "default", "rdst", "202401"); got != src {
		t.Errorf("refusals changed the destination: %+v, want %+v", got, src)
	}
	// Incompatible tables: ClickHouse's own refusal, with the partition named.
	run(t, e.a, "CREATE TABLE rother (d Date, k UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k")
	err = e.ca.ReplacePartitionFrom(ctx(t), "t-replace", "default", "rother", "default", "rsrc", "202401")
	wantErr(t, err, nil, "clickhouse a: replace partition of default.rother from default.rsrc partition 202401 (query id t-replace:replace-partition)", "different structure")
}

func testAttach(t *testing.T, e *env) {
	run(t, e.a, "CREATE TABLE asrc "+events)
	run(t, e.a, "CREATE TABLE adst "+events)
	fill(t, e.a, "asrc", 0, 200)
	fill(t, e.a, "adst", 5000, 5050) // kept
	src := fingerprint(t, e.ca, "default", "asrc", "202401")
	before := fingerprint(t, e.ca, "default", "adst", "202401")
	if err := e.ca.AttachPartitionFrom(ctx(t), "t-attach", "default", "adst", "default", "asrc", "202401"); err != nil {
		t.Fatal(err)
	}
	got := fingerprint(t, e.ca, "default", "adst", "202401")
	if got.Rows != src.Rows+before.Rows || got.Hash != src.Hash+before.Hash {
		t.Errorf("after attach %+v, want the sum of %+v and %+v", got, src, before)
	}
	// Not idempotent, as documented: a second run adds the rows again.
	if err := e.ca.AttachPartitionFrom(ctx(t), "t-attach", "default", "adst", "default", "asrc", "202401"); err != nil {
		t.Fatal(err)
	}
	if again := fingerprint(t, e.ca, "default", "adst", "202401"); again.Rows != got.Rows+src.Rows {
		t.Errorf("second attach: %+v", again)
	}
	err := e.ca.AttachPartitionFrom(ctx(t), "t-attach", "default", "adst", "default", "asrc", "209901")
	wantErr(t, err, clickhouse.ErrNoPartition, "attach partition to default.adst from default.asrc partition 209901")
}

func testDropPartition(t *testing.T, e *env) {
	run(t, e.a, "CREATE TABLE dp "+events)
	fill(t, e.a, "dp", 0, 100)
	feb := fingerprint(t, e.ca, "default", "dp", "202402")
	for i := range 2 {
		if err := e.ca.DropPartition(ctx(t), "t-drop", "default", "dp", "202401"); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if f := fingerprint(t, e.ca, "default", "dp", "202401"); f != (clickhouse.Fingerprint{}) {
			t.Errorf("run %d: dropped partition has %+v", i+1, f)
		}
	}
	if got := fingerprint(t, e.ca, "default", "dp", "202402"); got != feb {
		t.Errorf("other partition changed: %+v, was %+v", got, feb)
	}
	_, err := e.ca.Parts(ctx(t), "default", "dp", "202401")
	wantErr(t, err, clickhouse.ErrNoPartition)
	err = e.ca.DropPartition(ctx(t), "t-drop", "default", "absent", "202401")
	wantErr(t, err, clickhouse.ErrNoTable, "clickhouse a: drop partition of default.absent partition 202401")
}

func testStaging(t *testing.T, e *env) {
	likes := map[string]string{
		"plain": events,
		"replicated_replacing": `(d Date, k UInt64, v UInt32, m UInt64 MATERIALIZED k * 2, al UInt64 ALIAS k + 1)
			ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/stg_replicated_replacing', '{replica}', v)
			PARTITION BY toYYYYMM(d) ORDER BY (k, d) PRIMARY KEY k SAMPLE BY k SETTINGS index_granularity = 256`,
		"legacy_collapsing": `(d Date, k UInt64, sign Int8)
			ENGINE = ReplicatedCollapsingMergeTree('/clickhouse/tables/stg_legacy_collapsing', '{replica}', d, k, 512, sign)`,
	}
	for name, ddl := range likes {
		t.Run(name, func(t *testing.T) {
			like := "like_" + name
			staging := "staging_" + name
			run(t, e.a, "CREATE TABLE "+like+" "+ddl)
			lt := table(t, e.ca, like)
			for i := range 2 {
				if err := e.ca.CreateStagingLike(ctx(t), "t-stage", "default", staging, lt); err != nil {
					t.Fatalf("run %d: %v", i+1, err)
				}
			}
			st := table(t, e.ca, staging)
			if st.Engine != "MergeTree" || st.Replicated {
				t.Errorf("staging engine %s", st.EngineFull)
			}
			if err := clickhouse.Compatible(st, lt); err != nil {
				t.Error(err)
			}
			t.Logf("%s: %s", staging, st.EngineFull)
			// The staging table takes the like table's parts and gives
			// them back.
			run(t, e.a, "INSERT INTO "+like+" (d, k) VALUES ('2024-01-02', 1), ('2024-01-03', 2)")
			want := fingerprint(t, e.ca, "default", like, "202401")
			if err := e.ca.ReplacePartitionFrom(ctx(t), "t-stage", "default", staging, "default", like, "202401"); err != nil {
				t.Fatal(err)
			}
			if err := e.ca.ReplacePartitionFrom(ctx(t), "t-stage", "default", like, "default", staging, "202401"); err != nil {
				t.Fatal(err)
			}
			if got := fingerprint(t, e.ca, "default", staging, "202401"); got != want || got.Rows != 2 {
				t.Errorf("staged %+v, want %+v", got, want)
			}
			for i := range 2 {
				if err := e.ca.DropTable(ctx(t), "t-stage", "default", staging); err != nil {
					t.Fatalf("drop run %d: %v", i+1, err)
				}
			}
			_, err := e.ca.Table(ctx(t), "default", staging)
			wantErr(t, err, clickhouse.ErrNoTable)
		})
	}
	// A staging table that exists with another structure is refused.
	run(t, e.a, "CREATE TABLE staging_wrong (d Date, k UInt64) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k")
	err := e.ca.CreateStagingLike(ctx(t), "t-stage", "default", "staging_wrong", table(t, e.ca, "like_plain"))
	wantErr(t, err, clickhouse.ErrIncompatible, "clickhouse a: create staging table default.staging_wrong", "column 3 v String only in a:default.like_plain")
	err = e.ca.CreateStagingLike(ctx(t), "t-stage", "nodb", "staging", table(t, e.ca, "like_plain"))
	wantErr(t, err, clickhouse.ErrNoTable, "nodb.staging")
}

func testCopyRemote(t *testing.T, e *env) {
	run(t, e.a, "CREATE TABLE csrc "+events)
	run(t, e.b, "CREATE TABLE cdst "+events)
	fill(t, e.a, "csrc", 0, 5000)
	fill(t, e.b, "cdst", 7000, 7100) // its 202401 rows are replaced; 202402 stays
	src := fingerprint(t, e.ca, "default", "csrc", "202401")
	feb := fingerprint(t, e.cb, "default", "cdst", "202402")
	for i := range 2 {
		start := time.Now()
		err := e.cb.CopyPartitionRemote(ctx(t), "t-copy", "default", "cdst", e.a.NativeAddr(), "default", "", "default", "csrc", "202401")
		require.NoError(t, err, "run %d", i+1)
		t.Logf("copy run %d of %d rows: %v", i+1, src.Rows, time.Since(start).Round(time.Millisecond))
		if got := fingerprint(t, e.cb, "default", "cdst", "202401"); got != src {
			t.Errorf("run %d: copy %+v, source %+v", i+1, got, src)
		}
	}
	if got := fingerprint(t, e.cb, "default", "cdst", "202402"); got != feb {
		t.Errorf("other partition changed: %+v, was %+v", got, feb)
	}
	if got := fingerprint(t, e.ca, "default", "csrc", "202401"); got != src {
		t.Errorf("source changed: %+v", got)
	}
	testCopyEndsEarlierCopy(t, e, src)
	err := e.cb.CopyPartitionRemote(ctx(t), "t-copy", "default", "cdst", e.a.NativeAddr(), "default", "", "default", "csrc", "209901")
	wantErr(t, err, clickhouse.ErrNoPartition, "clickhouse b: copy partition to default.cdst from "+e.a.NativeAddr()+":default.csrc partition 209901")
	err = e.cb.CopyPartitionRemote(ctx(t), "t-copy", "default", "cdst", e.a.NativeAddr(), "default", "", "default", "absent", "202401")
	wantErr(t, err, clickhouse.ErrNoTable, e.a.NativeAddr()+":default.absent partition 202401")
	err = e.cb.CopyPartitionRemote(ctx(t), "t-copy", "default", "absent", e.a.NativeAddr(), "default", "", "default", "csrc", "202401")
	wantErr(t, err, clickhouse.ErrNoTable, "clickhouse b: read table default.absent")
	err = e.cb.CopyPartitionRemote(ctx(t), "t-copy", "default", "cdst", e.a.NativeAddr(), "nobody", "secret", "default", "csrc", "202401")
	wantErr(t, err, nil, "clickhouse b: copy partition to default.cdst from "+e.a.NativeAddr()+":default.csrc partition 202401", "nobody")
	if got := fingerprint(t, e.cb, "default", "cdst", "202401"); got != src {
		t.Errorf("refusals changed the destination: %+v, want %+v", got, src)
	}
}

// testCopyEndsEarlierCopy starts a slow copy (0.5 s a block) under the query
// id of CopyPartitionRemote, as a process that crashed mid-copy leaves
// behind, and checks that a new run ends it and makes one copy.
func testCopyEndsEarlierCopy(t *testing.T, e *env, src clickhouse.Fingerprint) {
	db, err := ch.Open(&ch.Options{Addr: []string{e.b.NativeAddr()}})
	require.NoError(t, err)
	defer db.Close()
	id := clickhouse.QueryID("t-kill", clickhouse.OpCopyPartition)
	done := make(chan error, 1)
	go func() {
		done <- db.Exec(ch.Context(ctx(t), ch.WithQueryID(id)), "INSERT INTO cdst SELECT * FROM remote('"+e.a.NativeAddr()+
			"', default, csrc) WHERE _partition_id = '202401' AND sleep(0.5) = 0")
	}()
	if got := waitRows(t, e.b, "SELECT count() FROM system.processes WHERE query_id = '"+id+"'", "1\n"); got != "1\n" {
		t.Fatalf("slow copy not running: %q", got)
	}
	if err := e.cb.CopyPartitionRemote(ctx(t), "t-kill", "default", "cdst", e.a.NativeAddr(), "default", "", "default", "csrc", "202401"); err != nil {
		t.Fatal(err)
	}
	// 18.16's DROP PARTITION waits for an INSERT into the table that is
	// running (a table lock), so the clear would come after the earlier
	// copy anyway; the kill stops that copy rather than wait for it, and
	// guards servers whose DROP does not wait.
	var exc *ch.Exception
	if err := <-done; !errors.As(err, &exc) || exc.Code != 394 { // QUERY_WAS_CANCELLED
		t.Errorf("earlier copy ended with %v, want it cancelled", err)
	}
	if got := fingerprint(t, e.cb, "default", "cdst", "202401"); got != src {
		t.Errorf("copy after an earlier one %+v, source %+v", got, src)
	}
}

// testQuotedNames runs the statements on a database and tables whose names
// need quoting.
func testQuotedNames(t *testing.T, e *env) {
	const db, src, dst = "x-db", "we`ird'src", `dst "1"`
	run(t, e.a, "CREATE DATABASE `x-db`")
	run(t, e.a, "CREATE TABLE `x-db`.`we\\`ird'src` (d Date, `the key` UInt64) ENGINE = MergeTree PARTITION BY d ORDER BY `the key`")
	run(t, e.a, "INSERT INTO `x-db`.`we\\`ird'src` VALUES ('2024-03-04', 1), ('2024-03-04', 2)")
	tab := table2(t, e.ca, db, src)
	if err := e.ca.CreateStagingLike(ctx(t), "q'id`", db, dst, tab); err != nil {
		t.Fatal(err)
	}
	ps, err := e.ca.Partitions(ctx(t), db, src)
	if err != nil || len(ps) != 1 || ps[0].Value != "2024-03-04" {
		t.Fatalf("partitions %+v, %v", ps, err)
	}
	if err := e.ca.ReplacePartitionFrom(ctx(t), "q'id`", db, dst, db, src, ps[0].ID); err != nil {
		t.Fatal(err)
	}
	if a, b := fingerprint(t, e.ca, db, src, ps[0].ID), fingerprint(t, e.ca, db, dst, ps[0].ID); a != b || a.Rows != 2 {
		t.Errorf("fingerprints %+v and %+v", a, b)
	}
	if err := e.cb.CopyPartitionRemote(ctx(t), "q'id`", "default", "qcopy", e.a.NativeAddr(), "", "", db, src, ps[0].ID); !errors.Is(err, clickhouse.ErrNoTable) {
		t.Errorf("copy into a missing table: %v", err)
	}
	run(t, e.b, "CREATE TABLE qcopy (d Date, `the key` UInt64) ENGINE = MergeTree PARTITION BY d ORDER BY `the key`")
	if err := e.cb.CopyPartitionRemote(ctx(t), "q'id`", "default", "qcopy", e.a.NativeAddr(), "", "", db, src, ps[0].ID); err != nil {
		t.Fatal(err)
	}
	if a, b := fingerprint(t, e.ca, db, src, ps[0].ID), fingerprint(t, e.cb, "default", "qcopy", ps[0].ID); a != b {
		t.Errorf("copy %+v, source %+v", b, a)
	}
	if err := e.ca.DropPartition(ctx(t), "q'id`", db, dst, ps[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.ca.DropTable(ctx(t), "q'id`", db, dst); err != nil {
		t.Fatal(err)
	}
}

func table2(t *testing.T, c *clickhouse.Conn, db, name string) *clickhouse.Table {
	t.Helper()
	tab, err := c.Table(ctx(t), db, name)
	require.NoError(t, err)
	return tab
}

const replicated = `(d Date, k UInt64, v String)
	ENGINE = ReplicatedMergeTree('/clickhouse/tables/%s', '{replica}') PARTITION BY toYYYYMM(d) ORDER BY k`

// testReplicated moves a partition into a replicated table on a and checks,
// after SyncReplica and without polling, that b's replica has it.
func testReplicated(t *testing.T, e *env) {
	for _, s := range []*testenv.ClickHouse{e.a, e.b} {
		run(t, s, "CREATE TABLE rep "+fmt.Sprintf(replicated, "rep"))
	}
	run(t, e.a, "CREATE TABLE repsrc (d Date, k UInt64, v String) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k")
	run(t, e.a, "INSERT INTO repsrc SELECT toDate('2024-01-01') + number % 20, number, toString(number) FROM numbers(20000)")
	run(t, e.b, "INSERT INTO rep VALUES ('2024-01-09', 1, 'replaced'), ('2024-02-01', 2, 'kept')")
	src := fingerprint(t, e.ca, "default", "repsrc", "202401")
	ta := table(t, e.ca, "rep")
	tb := table(t, e.cb, "rep")
	if !ta.Replicated || ta.ZooKeeperPath != "/clickhouse/tables/rep" || ta.ReplicaName != "ra" || tb.ReplicaName != "rb" {
		t.Errorf("replicas %+v / %+v", ta, tb)
	}
	start := time.Now()
	if err := e.cb.SyncReplica(ctx(t), "t-rep", "default", "rep"); err != nil { // a has b's insert
		t.Fatal(err)
	}
	t.Logf("SyncReplica after an insert: %v", time.Since(start).Round(time.Millisecond))
	for i := range 2 {
		if err := e.ca.ReplacePartitionFrom(ctx(t), "t-rep", "default", "rep", "default", "repsrc", "202401"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := e.ca.SyncReplica(ctx(t), "t-rep", "default", "rep"); err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d: SyncReplica after REPLACE PARTITION: %v", i+1, time.Since(start).Round(time.Millisecond))
		for _, c := range []*clickhouse.Conn{e.ca, e.cb} {
			if got := fingerprint(t, c, "default", "rep", "202401"); got != src {
				t.Errorf("run %d: replica on %s has %+v, want %+v", i+1, c.Server().Name, got, src)
			}
			if got := fingerprint(t, c, "default", "rep", "202402"); got.Rows != 1 {
				t.Errorf("run %d: replica on %s lost partition 202402: %+v", i+1, c.Server().Name, got)
			}
		}
	}
	if err := e.cb.DropPartition(ctx(t), "t-rep", "default", "rep", "202401"); err != nil {
		t.Fatal(err)
	}
	if err := e.cb.SyncReplica(ctx(t), "t-rep", "default", "rep"); err != nil {
		t.Fatal(err)
	}
	if got := fingerprint(t, e.ca, "default", "rep", "202401"); got.Rows != 0 {
		t.Errorf("drop on b not on a after SyncReplica: %+v", got)
	}
	// A table that is not replicated: nothing to wait for.
	if err := e.ca.SyncReplica(ctx(t), "t-rep", "default", "repsrc"); err != nil {
		t.Error(err)
	}
	err := e.ca.SyncReplica(ctx(t), "t-rep", "default", "absent")
	wantErr(t, err, clickhouse.ErrNoTable, "default.absent")
}

// testQueryLog checks that the statements of the earlier subtests show in
// system.query_log under their query ids.
func testQueryLog(t *testing.T, e *env) {
	for _, tc := range []struct {
		c    *clickhouse.Conn
		qid  string
		want []string
	}{
		{e.ca, "t-replace", []string{clickhouse.OpReplacePartition}},
		{e.ca, "t-attach", []string{clickhouse.OpAttachPartition}},
		{e.ca, "t-drop", []string{clickhouse.OpDropPartition}},
		{e.ca, "t-stage", []string{clickhouse.OpCreateStaging, clickhouse.OpDropTable, clickhouse.OpReplacePartition}},
		{e.cb, "t-copy", []string{clickhouse.OpCopyClear, clickhouse.OpCopyPartition}},
		{e.ca, "t-rep", []string{clickhouse.OpReplacePartition, clickhouse.OpSyncReplica}},
		{e.cb, "t-rep", []string{clickhouse.OpDropPartition, clickhouse.OpSyncReplica}},
		{e.ca, "q'id`", []string{clickhouse.OpCreateStaging, clickhouse.OpReplacePartition, clickhouse.OpDropPartition, clickhouse.OpDropTable}},
	} {
		logged, err := tc.c.QueryLog(ctx(t), tc.qid)
		require.NoError(t, err)
		finished := map[string]bool{}
		for _, q := range logged {
			if !strings.HasPrefix(q.QueryID, tc.qid+":") {
				t.Errorf("QueryLog(%q) returned %q", tc.qid, q.QueryID)
			}
			if q.Type == "QueryFinish" {
				finished[strings.TrimPrefix(q.QueryID, tc.qid+":")] = true
			}
		}
		for _, op := range tc.want {
			if !finished[op] {
				t.Errorf("%s: no QueryFinish of %s in the query log; logged:\n%s", tc.c.Server().Name, clickhouse.QueryID(tc.qid, op), show(logged))
			}
		}
	}
	// The copy's password-bearing statement and a refused statement are
	// logged too, the latter with its exception.
	logged, err := e.ca.QueryLog(ctx(t), "t-compat")
	require.NoError(t, err)
	found := false
	for _, q := range logged {
		found = found || (q.Type == "ExceptionWhileProcessing" || q.Type == "ExceptionBeforeStart") && strings.Contains(q.Exception, "different ordering")
	}
	if !found {
		t.Errorf("refused REPLACE not in the query log:\n%s", show(logged))
	}
	if logged, err := e.ca.QueryLog(ctx(t), "never-ran"); err != nil || len(logged) != 0 {
		t.Errorf("QueryLog of an unknown id: %v, %v", logged, err)
	}
}

func show(qs []clickhouse.LoggedQuery) string {
	var b strings.Builder
	for _, q := range qs {
		fmt.Fprintf(&b, "  %s %s %s %.80q %.80q\n", q.EventTime.Format(time.TimeOnly), q.QueryID, q.Type, q.Query, q.Exception)
	}
	return b.String()
}

// testSyncReplicaDown kills b and checks that SyncReplica on a waits for
// b's replica and names it, then that it returns once b is back.
func testSyncReplicaDown(t *testing.T, e *env) {
	for _, s := range []*testenv.ClickHouse{e.a, e.b} {
		run(t, s, "CREATE TABLE down "+fmt.Sprintf(replicated, "down"))
	}
	e.b.Kill()
	run(t, e.a, "INSERT INTO down VALUES ('2024-01-01', 1, 'x')")
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := e.ca.SyncReplica(short, "t-down", "default", "down")
	wantErr(t, err, context.DeadlineExceeded, "clickhouse a: sync replicas of default.down", "replicas not caught up: rb (has not pulled the log)")
	t.Log(err)
	e.b.Restart()
	start := time.Now()
	long, cancel2 := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel2()
	if err := e.ca.SyncReplica(long, "t-down", "default", "down"); err != nil {
		t.Fatal(err)
	}
	t.Logf("b caught up %v after its restart", time.Since(start).Round(time.Millisecond))
	if got := run(t, e.b, "SELECT count() FROM down"); got != "1\n" {
		t.Errorf("b has %q rows after SyncReplica", got)
	}
}
