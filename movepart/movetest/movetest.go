// Package movetest holds what the tests of the partition workflows share:
// tables with known rows on the servers of a testenv.Workflow, their
// fingerprints, movers, and the checks of a move's end state.
package movetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/recovery"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// Partition is the partition the tests move: January 2024 of tables
// partitioned by toYYYYMM(d).
const Partition = "202401"

// other is the partition a move must leave alone.
const other = "202402"

// Env wraps a workflow setup with the helpers.
type Env struct{ *testenv.Workflow }

// Auth is the security.auth of the clusters Start sets up.
const Auth = "xkeeper:movetest"

// Start starts a workflow setup (testenv.StartWorkflow) whose cluster file
// sets security.auth to Auth: xkeeper's znodes are protected, and every
// router and xkeeper process of the tests must authenticate.
func Start(t testing.TB) Env {
	t.Helper()
	return protect(t, testenv.StartWorkflow(t))
}

// StartOnNodes is Start on a node cluster (testenv.StartWorkflowOnNodes).
func StartOnNodes(t testing.TB) Env {
	t.Helper()
	return protect(t, testenv.StartWorkflowOnNodes(t))
}

// protect sets security.auth to Auth in w's cluster file.
func protect(t testing.TB, w *testenv.Workflow) Env {
	t.Helper()
	w.Config.Security.Auth = Auth
	if err := w.Config.Write(w.ConfigPath); err != nil {
		t.Fatal(err)
	}
	return Env{Workflow: w}
}

// Connect opens a keeper session to servers with opts, closed when the
// test ends.
func Connect(t testing.TB, servers []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Connect(Ctx(t), servers, append(opts, client.WithLogger(testenv.TestLogger(t)))...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// Router returns a router over c that authenticates as its security.auth,
// closed when the test ends.
func Router(t testing.TB, c *config.Cluster, opts ...client.Option) *xshard.Router {
	r := xshard.NewRouter(c, testenv.TestLogger(t), append(movepart.AuthOptions(c), opts...)...)
	t.Cleanup(r.Close)
	return r
}

// Ctx returns a context that ends with the test or after 3 minutes.
func Ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

// Table is a test table on one of the workflow's servers.
type Table struct {
	Srv *testenv.ClickHouse
	Ref movepart.TableRef
}

// Ref parses "SERVER:DB.TABLE" or fails the test.
func Ref(t testing.TB, s string) movepart.TableRef {
	r, err := movepart.ParseTableRef(s)
	require.NoError(t, err)
	return r
}

// Server returns the workflow's server called name ("ca" or "cb").
func (e Env) Server(name string) *testenv.ClickHouse {
	if name == "ca" {
		return e.A
	}
	return e.B
}

// NewTable creates SERVER:DB.NAME, partitioned by month, with rows rows in
// Partition (seeded by seed) and 100 in the month after. A replicated table
// keeps its replication metadata on the server's keeper shard.
func (e Env) NewTable(t testing.TB, ref string, replicated bool, rows, seed int) Table {
	t.Helper()
	r := Ref(t, ref)
	tb := Table{Srv: e.Server(r.Server), Ref: r}
	engine := "MergeTree"
	if replicated {
		engine = fmt.Sprintf("ReplicatedMergeTree('/clickhouse/%s/%s', '{replica}')", r.Database, r.Table)
	}
	tb.Exec(t, "CREATE DATABASE IF NOT EXISTS "+r.Database)
	tb.Exec(t, fmt.Sprintf("CREATE TABLE %s.%s (d Date, k UInt64, s String, n Nullable(Int32)) ENGINE = %s PARTITION BY toYYYYMM(d) ORDER BY k",
		r.Database, r.Table, engine))
	tb.Insert(t, "2024-01-01", rows, seed)
	tb.Insert(t, "2024-02-01", 100, seed)
	return tb
}

// Exec runs sql on the table's server.
func (tb Table) Exec(t testing.TB, sql string) string {
	t.Helper()
	out, err := tb.Srv.Query(Ctx(t), sql)
	require.NoError(t, err, "%s", sql)
	return out
}

// Insert adds rows rows to the month starting at day.
func (tb Table) Insert(t testing.TB, day string, rows, seed int) {
	t.Helper()
	if rows == 0 {
		return
	}
	tb.Exec(t, fmt.Sprintf("INSERT INTO %s.%s SELECT toDate('%s') + number %% 28, number * 7 + %d, toString(number * %d), if(number %% 5 = 0, NULL, toInt32(number)) FROM numbers(%d)",
		tb.Ref.Database, tb.Ref.Table, day, seed, seed, rows))
}

// Conn connects to a server of the workflow.
func (e Env) Conn(t testing.TB, server string) *clickhouse.Conn {
	t.Helper()
	s, err := e.Config.ClickHouseServer(server)
	require.NoError(t, err)
	c, err := clickhouse.Connect(Ctx(t), clickhouse.Server{Name: s.Name, Addr: s.Address})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// Fingerprint returns a table's partition fingerprint.
func (e Env) Fingerprint(t testing.TB, ref movepart.TableRef, p string) clickhouse.Fingerprint {
	t.Helper()
	f, err := e.Conn(t, ref.Server).Fingerprint(Ctx(t), ref.Database, ref.Table, p)
	require.NoError(t, err)
	return f
}

// Mover returns a mover over c (the workflow's cluster when nil) with
// hook as its fail point and a 2 s keeper session.
func (e Env) Mover(t testing.TB, c *config.Cluster, hook func(movepart.Point)) *movepart.Mover {
	if c == nil {
		c = e.Config
	}
	r := Router(t, c, client.WithSessionTimeout(2*time.Second))
	m := movepart.New(c, r, movepart.Options{Log: testenv.TestLogger(t), FailPoint: hook, RetryFor: time.Minute})
	t.Cleanup(m.Close)
	return m
}

// Snapshot is what both tables of a move hold before it.
type Snapshot struct {
	Src, Dst     Table
	SrcFP, DstFP clickhouse.Fingerprint
	srcOther     clickhouse.Fingerprint
}

// Snapshot reads both tables' fingerprints.
func (e Env) Snapshot(t testing.TB, src, dst Table) Snapshot {
	return Snapshot{Src: src, Dst: dst, SrcFP: e.Fingerprint(t, src.Ref, Partition), DstFP: e.Fingerprint(t, dst.Ref, Partition),
		srcOther: e.Fingerprint(t, src.Ref, other)}
}

// CheckDone asserts the end state of a finished move or attach: the
// destination holds both tables' rows, the source none (move) or all it
// held (attach), its other partition is untouched, and all is clean.
func (e Env) CheckDone(t testing.TB, kind movepart.Kind, s Snapshot) {
	t.Helper()
	want := clickhouse.Fingerprint{Rows: s.SrcFP.Rows + s.DstFP.Rows, Hash: s.SrcFP.Hash + s.DstFP.Hash}
	wantSrc := s.SrcFP
	if kind == movepart.Move {
		wantSrc = clickhouse.Fingerprint{}
	}
	e.checkHolds(t, s, wantSrc, want)
}

// CheckUntouched asserts that both tables hold what they held before a
// move that was rolled back, and that all is clean.
func (e Env) CheckUntouched(t testing.TB, s Snapshot) {
	t.Helper()
	e.checkHolds(t, s, s.SrcFP, s.DstFP)
}

func (e Env) checkHolds(t testing.TB, s Snapshot, src, dst clickhouse.Fingerprint) {
	t.Helper()
	if got := e.Fingerprint(t, s.Dst.Ref, Partition); got != dst {
		t.Errorf("destination %s holds %+v, want %+v", s.Dst.Ref, got, dst)
	}
	if got := e.Fingerprint(t, s.Src.Ref, Partition); got != src {
		t.Errorf("source %s holds %+v, want %+v", s.Src.Ref, got, src)
	}
	if got := e.Fingerprint(t, s.Src.Ref, other); got != s.srcOther {
		t.Errorf("source's other partition changed: %+v, want %+v", got, s.srcOther)
	}
	e.CheckClean(t)
}

// Audit audits the workflow's cluster.
func (e Env) Audit(t testing.TB) *recovery.Report {
	t.Helper()
	rep, err := recovery.Audit(Ctx(t), e.Mover(t, nil, nil))
	require.NoError(t, err)
	return rep
}

// CheckClean asserts that the audit finds nothing and no staging table is
// left on any server.
func (e Env) CheckClean(t testing.TB) {
	t.Helper()
	for _, f := range e.Audit(t).Findings {
		t.Errorf("audit: %s: %s", f.Kind, f.Detail)
	}
	for _, srv := range []string{"ca", "cb"} {
		tables, err := e.Conn(t, srv).TablesWithPrefix(Ctx(t), movepart.StagingPrefix)
		if err != nil || len(tables) > 0 {
			t.Errorf("staging tables on %s: %v %v", srv, tables, err)
		}
	}
}
