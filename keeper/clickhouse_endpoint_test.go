package keeper_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestClickHouseThroughOneEndpoint runs two ClickHouse 18.16 replicas whose
// one <zookeeper> is the three nodes' endpoints: table t1's keeper path is
// mounted on shard b, t2's on shard c, and the ON CLUSTER DDL queue stays
// on the root shard a. Replication, dedup and DDL work; a node killed
// under inserts loses no acknowledged insert; every node restarts.
func TestClickHouseThroughOneEndpoint(t *testing.T) {
	began := time.Now()
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 3, Nodes: 3, Mounts: []config.Mount{
		{Path: "/clickhouse/tables/01/t1", Shard: "b"},
		{Path: "/clickhouse/tables/01/t2", Shard: "c"},
	}})
	t.Cleanup(c.Stop)
	var eps []string
	for _, n := range c.Config.Nodes {
		eps = append(eps, c.Endpoint(n.Name))
	}
	chs := startReplicas(t, eps)
	ch1, ch2 := chs[0], chs[1]
	t.Logf("3 nodes and two ClickHouse servers started: %v", time.Since(began).Round(time.Millisecond))

	for _, table := range []string{"t1", "t2"} {
		for _, ch := range chs {
			chQuery(t, ch, "CREATE TABLE "+table+" "+fmt.Sprintf(chTable, table))
		}
	}
	chQuery(t, ch1, `INSERT INTO t1 VALUES ('2024-01-15', 1, 'a'), ('2024-02-01', 2, 'b')`)
	chQuery(t, ch2, `INSERT INTO t2 VALUES ('2024-01-15', 10, 'x')`)
	chWait(t, ch2, `SELECT count(), sum(k) FROM t1`, "2\t3\n")
	chWait(t, ch1, `SELECT count(), sum(k) FROM t2`, "1\t10\n")
	chQuery(t, ch1, `ALTER TABLE t2 ATTACH PARTITION 202401 FROM t1`)
	chWait(t, ch2, `SELECT count(), sum(k) FROM t2`, "2\t11\n")

	// Each table's keeper data is on its shard, the DDL queue on the root.
	for _, want := range []struct {
		shard, path string
		on          bool
	}{{"b", "/clickhouse/tables/01/t1/replicas/r1", true}, {"a", "/clickhouse/tables/01/t1/replicas", false},
		{"c", "/clickhouse/tables/01/t2/replicas/r2", true}, {"b", "/clickhouse/tables/01/t2/replicas", false}} {
		assert.Equal(t, want.on, existsOn(t, c, want.shard, want.path), "%s on shard %s", want.path, want.shard)
	}

	const dup = `INSERT INTO t1 (d, k, v) VALUES ('2024-03-01', 100, 'dup')`
	chQuery(t, ch1, dup)
	chQuery(t, ch2, dup)
	for _, ch := range chs {
		chQuery(t, ch, `SYSTEM SYNC REPLICA t1`)
		if got := chQuery(t, ch, `SELECT countIf(k = 100) FROM t1`); got != "1\n" {
			t.Fatalf("%s: duplicate block stored %q times, want 1", ch.HTTPAddr(), got)
		}
	}

	out := chQuery(t, ch1, "CREATE TABLE t3 ON CLUSTER xk "+fmt.Sprintf(chTable, "t3"))
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Count(out, "\t0\t\t") != 2 {
		t.Fatalf("CREATE TABLE ON CLUSTER: want status 0 from both hosts, got\n%s", out)
	}
	assert.True(t, existsOn(t, c, "a", "/clickhouse/task_queue/ddl"))
	chQuery(t, ch2, `INSERT INTO t3 VALUES ('2024-05-01', 1, 'ddl')`)
	chWait(t, ch1, `SELECT count() FROM t3`, "1\n")
	t.Logf("replication, dedup and ON CLUSTER DDL through the endpoints: %v", time.Since(began).Round(time.Millisecond))

	// The node that leads t1's shard goes while inserts go on.
	acked := insertThroughFailover(t, chs, "t1", func() string {
		leader := c.Leader("b")
		_, m, err := c.Config.Member(leader)
		if err != nil {
			t.Fatalf("leader of shard b: %q: %v", leader, err)
		}
		c.KillNode(m.Node)
		return m.Node
	}, func(node string) {
		c.RestartNode(node)
	})

	// Every node down at once, then up from its data directory.
	for _, n := range c.Config.Nodes {
		c.KillNode(n.Name)
	}
	for _, n := range c.Config.Nodes {
		c.RestartNode(n.Name)
	}
	for _, s := range []string{"a", "b", "c"} {
		c.WaitLeader(s)
	}
	chRetry(t, ch2, `INSERT INTO t1 (d, k, v) VALUES ('2024-06-01', 2000, 'restart')`)
	chRetry(t, ch1, `INSERT INTO t2 (d, k, v) VALUES ('2024-06-01', 2001, 'restart')`)
	for _, ch := range chs {
		chWait(t, ch, `SELECT countIf(k = 2000), countIf(k >= 1000 AND k < 2000) >= `+strconv.Itoa(acked)+` FROM t1`, "1\t1\n")
		chWait(t, ch, `SELECT countIf(k = 2001) FROM t2`, "1\n")
	}
	t.Logf("total: %v", time.Since(began).Round(time.Millisecond))
}
