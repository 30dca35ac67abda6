package keeper_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/zkimport"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestClickHouseMovesFromZooKeeper migrates two ClickHouse 18.16 replicas
// from a 3-member ZooKeeper 3.8 ensemble to xkeeper: ClickHouse and
// ZooKeeper stop, one member's files are imported and restored into a new
// 3-member shard, and the servers start again on it. The tree is the same znode by znode (ephemerals
// aside), the rows are the same, no replica fetches a part it had, and
// inserts, replication and merges carry on.
func TestClickHouseMovesFromZooKeeper(t *testing.T) {
	z := testenv.StartZooKeeperWith(t, testenv.ZooKeeperOptions{Members: 3, Config: "snapCount=100\n"})
	chs := startReplicas(t, z.Servers())
	ch1, ch2 := chs[0], chs[1]
	for _, ch := range chs {
		chQuery(t, ch, "CREATE TABLE t1 "+fmt.Sprintf(chTable, "t1"))
	}
	for i := range 6 {
		chQuery(t, chs[i%2], fmt.Sprintf(`INSERT INTO t1 VALUES ('2024-0%d-15', %d, 'zk')`, 1+i%3, i))
	}
	const rows = "6\t15\n"
	for _, ch := range chs {
		chWait(t, ch, `SELECT count(), sum(k) FROM t1`, rows)
		chQuery(t, ch, `SYSTEM SYNC REPLICA t1`)
	}
	// One part per partition on both replicas, so that no background merge
	// changes the parts while the servers switch keepers.
	for _, partition := range []string{"202401", "202402", "202403"} {
		chQuery(t, ch1, "OPTIMIZE TABLE t1 PARTITION "+partition+" FINAL")
	}
	for _, ch := range chs {
		chWait(t, ch, `SELECT count() FROM system.parts WHERE table = 't1' AND active`, "3\n")
		chQuery(t, ch, `SYSTEM SYNC REPLICA t1`)
	}
	const parts = `SELECT name, modification_time FROM system.parts WHERE table = 't1' AND active ORDER BY name`
	before := []string{chQuery(t, ch1, parts), chQuery(t, ch2, parts)}

	// The switch: ClickHouse stops (closing its sessions), then ZooKeeper.
	ch1.Stop()
	ch2.Stop()
	zkTree := testenv.ReadTree(t, connectZK(t, z.Servers(), 10*time.Second), "/")
	from := z.Leader() // its files hold every committed transaction
	require.GreaterOrEqual(t, from, 0, "the ensemble has a leader")
	z.Stop()
	st, sum, err := zkimport.FromDataDir(z.DataDir(from), z.DataDir(from), zkimport.Options{})
	require.NoError(t, err)
	t.Logf("imported: %+v", sum)
	var file bytes.Buffer
	require.NoError(t, backup.Write(&file, backup.Header{Zxid: st.Zxid(), OfficialTime: st.Time()}, st.Snapshot()))
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	_, err = keeper.RestoreBackup(cfg, "a", nil, bytes.NewReader(file.Bytes()), testenv.TestLogger(t))
	require.NoError(t, err)
	xk := testenv.StartConfig(t, cfg, testenv.ClusterOptions{})

	xkTree := testenv.ReadTree(t, connectZK(t, xk.Servers("a"), 10*time.Second), "/")
	for p, n := range zkTree {
		if p == "/zookeeper/config" {
			continue // ZooKeeper's own view of its ensemble
		}
		got, ok := xkTree[p]
		if n.Stat.EphemeralOwner != 0 {
			assert.False(t, ok, "ephemeral %s is dropped", p)
			continue
		}
		if assert.True(t, ok, "%s is missing", p) {
			assert.Equal(t, string(n.Data), string(got.Data), "%s data", p)
			assert.Equal(t, n.ACL, got.ACL, "%s ACL", p)
			assert.Equal(t, [3]int32{n.Stat.Version, n.Stat.Cversion, n.Stat.Aversion},
				[3]int32{got.Stat.Version, got.Stat.Cversion, got.Stat.Aversion}, "%s versions", p)
			assert.Equal(t, [2]int64{n.Stat.Czxid, n.Stat.Mzxid}, [2]int64{got.Stat.Czxid, got.Stat.Mzxid}, "%s zxids", p)
		}
	}
	assert.Len(t, xkTree, len(zkTree), "as many znodes (ClickHouse left no ephemeral)")

	for _, ch := range chs {
		ch.UseZooKeeper(xk.Servers("a"))
	}
	for i, ch := range chs {
		chRetry(t, ch, `SYSTEM SYNC REPLICA t1`)
		assert.Equal(t, rows, chQuery(t, ch, `SELECT count(), sum(k) FROM t1`))
		assert.Equal(t, before[i], chQuery(t, ch, parts), "replica %d kept its parts", i+1)
		assert.Equal(t, "0\n", chQuery(t, ch, `SELECT count() FROM system.events WHERE event = 'ReplicatedPartFetches'`),
			"replica %d fetched nothing", i+1)
		assert.Equal(t, "0\n", chQuery(t, ch, `SELECT count() FROM system.replication_queue WHERE table = 't1'`))
	}
	chRetry(t, ch1, `INSERT INTO t1 VALUES ('2024-01-20', 100, 'xkeeper')`)
	chWait(t, ch2, `SELECT count(), sum(k) FROM t1`, "7\t115\n")
	chQuery(t, ch2, `OPTIMIZE TABLE t1 PARTITION 202401 FINAL`)
	for _, ch := range chs {
		chWait(t, ch, `SELECT count() FROM system.parts WHERE table = 't1' AND active AND partition = '202401'`, "1\n")
		chWait(t, ch, `SELECT count(), sum(k) FROM t1`, "7\t115\n")
	}
}
