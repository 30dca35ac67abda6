package movetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/recovery"
	"github.com/xkeeper/xkeeper/testenv"
)

// StartReplicated starts a testenv.ReplicatedWorkflow whose cluster file
// sets security.auth to Auth.
func StartReplicated(t testing.TB) *testenv.ReplicatedWorkflow {
	t.Helper()
	w := testenv.StartReplicatedWorkflow(t)
	w.Config.Security.Auth = Auth
	require.NoError(t, w.Config.Write(w.ConfigPath))
	return w
}

// ReplicaSet is a ReplicatedMergeTree table on servers of a replicated
// workflow, with keys k that tests count.
type ReplicaSet struct {
	W       *testenv.ReplicatedWorkflow
	Servers []string
	Table   string // db.name
}

// NewReplicaSet creates db.name, a ReplicatedMergeTree (d Date, k UInt64)
// partitioned by month, on servers.
func NewReplicaSet(t testing.TB, w *testenv.ReplicatedWorkflow, name string, servers ...string) ReplicaSet {
	t.Helper()
	rs := ReplicaSet{W: w, Servers: servers, Table: "db." + name}
	for _, s := range servers {
		rs.Exec(t, s, "CREATE DATABASE IF NOT EXISTS db")
		rs.Exec(t, s, fmt.Sprintf("CREATE TABLE %s (d Date, k UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/db/%s', '{replica}') PARTITION BY toYYYYMM(d) ORDER BY k", rs.Table, name))
	}
	return rs
}

// NewPair creates NAME_src on ca1 and ca2, with keys [0, rows) in
// Partition inserted through ca1 and replicated, and NAME_dst on cb1 and cb2.
func NewPair(t testing.TB, w *testenv.ReplicatedWorkflow, name string, rows int) (src, dst ReplicaSet) {
	t.Helper()
	src = NewReplicaSet(t, w, name+"_src", "ca1", "ca2")
	dst = NewReplicaSet(t, w, name+"_dst", "cb1", "cb2")
	require.NoError(t, src.Insert(Ctx(t), "ca1", 0, rows))
	src.Sync(t)
	return src, dst
}

// Ref returns the table's name through server.
func (rs ReplicaSet) Ref(server string) movepart.TableRef {
	db, table, _ := strings.Cut(rs.Table, ".")
	return movepart.TableRef{Server: server, Database: db, Table: table}
}

// Exec runs sql on server.
func (rs ReplicaSet) Exec(t testing.TB, server, sql string) string {
	t.Helper()
	out, err := rs.W.Servers[server].Query(Ctx(t), sql)
	require.NoError(t, err, "%s: %s", server, sql)
	return out
}

// Insert adds the keys [from, from+n) to Partition through server.
func (rs ReplicaSet) Insert(ctx context.Context, server string, from, n int) error {
	_, err := rs.W.Servers[server].Query(ctx, fmt.Sprintf("INSERT INTO %s SELECT toDate('2024-01-01') + number %% 28, %d + number FROM numbers(%d)", rs.Table, from, n))
	return err
}

// Sync waits until every replica has caught up. A server whose keeper
// connection broke (a keeper member killed) answers "Session expired"
// until it has a new session, which ClickHouse 18.16 opens by itself: the
// sync is asked again then, for up to a minute.
func (rs ReplicaSet) Sync(t testing.TB) {
	t.Helper()
	for _, s := range rs.Servers {
		var err error
		if !assert.Eventually(t, func() bool {
			_, err = rs.W.Servers[s].Query(Ctx(t), "SYSTEM SYNC REPLICA "+rs.Table)
			return err == nil
		}, time.Minute, 100*time.Millisecond) {
			require.NoError(t, err, "%s: SYSTEM SYNC REPLICA %s", s, rs.Table)
		}
	}
}

// Keys returns how many rows of each key of [from, to) server holds.
func (rs ReplicaSet) Keys(t testing.TB, server string, from, to int) map[int]int {
	t.Helper()
	out := map[int]int{}
	body := rs.Exec(t, server, fmt.Sprintf("SELECT k, count() FROM %s WHERE k >= %d AND k < %d GROUP BY k FORMAT TSV", rs.Table, from, to))
	for line := range strings.Lines(body) {
		k, n, _ := strings.Cut(strings.TrimSpace(line), "\t")
		kk, _ := strconv.Atoi(k)
		nn, _ := strconv.Atoi(n)
		out[kk] = nn
	}
	return out
}

// Rows returns the rows of Partition on every server of rs.
func (rs ReplicaSet) Rows(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, s := range rs.Servers {
		n, err := strconv.Atoi(strings.TrimSpace(rs.Exec(t, s, "SELECT count() FROM "+rs.Table+" WHERE toYYYYMM(d) = "+Partition)))
		require.NoError(t, err)
		out[s] = n
	}
	return out
}

// ReplicatedMover returns a mover over c with hook as its fail point and
// settle as Options.Settle.
func ReplicatedMover(t testing.TB, c *config.Cluster, settle time.Duration, hook func(movepart.Point)) *movepart.Mover {
	r := Router(t, c, client.WithSessionTimeout(2*time.Second))
	m := movepart.New(c, r, movepart.Options{Log: testenv.TestLogger(t), RetryFor: time.Minute, Settle: settle, FailPoint: hook})
	t.Cleanup(m.Close)
	return m
}

// CheckReplicatedClean asserts that the audit of c finds nothing about the
// tables of sets (about anything, with none given) and that no staging
// table is left on any server of w.
func CheckReplicatedClean(t testing.TB, w *testenv.ReplicatedWorkflow, c *config.Cluster, sets ...ReplicaSet) {
	t.Helper()
	rep, err := recovery.Audit(Ctx(t), ReplicatedMover(t, c, time.Second, nil))
	require.NoError(t, err)
	for _, f := range rep.Findings {
		about := len(sets) == 0
		for _, rs := range sets {
			about = about || strings.Contains(f.Table+" "+f.Detail, rs.Table)
		}
		if about {
			t.Errorf("audit: %s: %s", f.Kind, f.Detail)
		}
	}
	for _, srv := range testenv.ReplicatedServers {
		out, err := w.Servers[srv].Query(Ctx(t), "SELECT name FROM system.tables WHERE name LIKE '"+movepart.StagingPrefix+"%'")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("staging tables on %s: %q %v", srv, out, err)
		}
	}
}
