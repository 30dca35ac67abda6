package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fourLetter sends cmd to addr with a short deadline.
func fourLetter(addr, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return FourLetterWord(ctx, addr, cmd)
}

// wantImok fails the test unless the server at addr answers ruok with imok.
func wantImok(t *testing.T, addr string) {
	t.Helper()
	if got, err := fourLetter(addr, "ruok"); err != nil || got != "imok" {
		t.Fatalf("ruok %s = %q, %v; want imok", addr, got, err)
	}
}

func TestZooKeeperStandaloneAnswersRuok(t *testing.T) {
	t.Parallel()
	zk := StartZooKeeper(t, 1)
	if got := len(zk.Servers()); got != 1 {
		t.Fatalf("Servers() has %d entries, want 1", got)
	}
	wantImok(t, zk.Servers()[0])
}

func TestZooKeeperEnsembleAnswersRuokAndHasOneLeader(t *testing.T) {
	t.Parallel()
	zk := StartZooKeeper(t, 3)
	servers := zk.Servers()
	if len(servers) != 3 || zk.ConnectString() != strings.Join(servers, ",") {
		t.Fatalf("Servers() = %v, ConnectString() = %q", servers, zk.ConnectString())
	}
	leaders := 0
	for _, addr := range servers {
		wantImok(t, addr)
		srvr, err := fourLetter(addr, "srvr")
		require.NoError(t, err)
		if strings.Contains(srvr, "Mode: leader\n") {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders, want 1", leaders)
	}
}

func TestZooKeeperKillAndRestartMember(t *testing.T) {
	t.Parallel()
	zk := StartZooKeeper(t, 3)
	victim := (zk.Leader() + 1) % 3 // a follower
	pid := zk.PID(victim)
	zk.Kill(victim)
	if _, err := fourLetter(zk.Servers()[victim], "ruok"); err == nil {
		t.Fatalf("killed member %d still answers ruok", victim)
	}
	zk.Restart(victim)
	if zk.PID(victim) == pid {
		t.Fatalf("member %d has the same pid %d after restart", victim, pid)
	}
	wantImok(t, zk.Servers()[victim])
}

func query(t *testing.T, ch *ClickHouse, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := ch.Query(ctx, sql)
	if err != nil {
		t.Fatalf("%s: %v\n%s", sql, err, ch.LogTail())
	}
	return out
}

func TestClickHouseReplicatedMergeTreeRoundTripOnZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	zk := StartZooKeeper(t, 3)
	ch := StartClickHouse(t, ClickHouseOptions{ZooKeeper: zk.Servers(), Replica: "r1"})
	query(t, ch, `CREATE TABLE t1 (d Date, k UInt64, v String)
		ENGINE=ReplicatedMergeTree('/clickhouse/tables/t1','{replica}') PARTITION BY toYYYYMM(d) ORDER BY k`)
	query(t, ch, `INSERT INTO t1 VALUES ('2024-01-15', 1, 'hello')`)
	if got, want := query(t, ch, `SELECT d, k, v FROM t1`), "2024-01-15\t1\thello\n"; got != want {
		t.Fatalf("SELECT = %q, want %q", got, want)
	}
	if got := query(t, ch, `SELECT count() FROM system.zookeeper WHERE path = '/clickhouse/tables/t1/replicas' AND name = 'r1'`); got != "1\n" {
		t.Fatalf("replica r1 registered in ZooKeeper: count = %q, want 1", got)
	}
}

func TestClickHouseRestartKeepsData(t *testing.T) {
	t.Parallel()
	ch := StartClickHouse(t, ClickHouseOptions{})
	query(t, ch, `CREATE TABLE m (k UInt64) ENGINE=MergeTree ORDER BY k`)
	query(t, ch, `INSERT INTO m VALUES (7)`)
	ch.Kill()
	ch.Restart()
	if got := query(t, ch, `SELECT k FROM m`); got != "7\n" {
		t.Fatalf("after kill and restart: SELECT = %q, want 7", got)
	}
}

func TestClickHouseQueryReturnsServerError(t *testing.T) {
	t.Parallel()
	ch := StartClickHouse(t, ClickHouseOptions{})
	_, err := ch.Query(context.Background(), `SELECT * FROM no_such_table`)
	if err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("Query of a missing table: err = %v, want the exception naming it", err)
	}
}

func TestClickHouseOnClusterDDLCreatesReplicasThatReplicate(t *testing.T) {
	t.Parallel()
	zk := StartZooKeeper(t, 1)
	ports := FreePorts(t, 2)
	cluster := map[string][]string{"c": {"127.0.0.1:" + strconv.Itoa(ports[0]), "127.0.0.1:" + strconv.Itoa(ports[1])}}
	var chs []*ClickHouse
	for _, port := range ports {
		chs = append(chs, StartClickHouse(t, ClickHouseOptions{ZooKeeper: zk.Servers(), Clusters: cluster, NativePort: port}))
	}
	query(t, chs[0], `CREATE TABLE r ON CLUSTER c (d Date, k UInt64)
		ENGINE=ReplicatedMergeTree('/clickhouse/tables/{shard}/r','{replica}') PARTITION BY toYYYYMM(d) ORDER BY k`)
	query(t, chs[0], `INSERT INTO r VALUES ('2024-01-15', 42)`)
	query(t, chs[1], `SYSTEM SYNC REPLICA r`)
	if got := query(t, chs[1], `SELECT k FROM r`); got != "42\n" {
		t.Fatalf("second replica: SELECT = %q, want 42", got)
	}
}
