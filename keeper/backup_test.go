package keeper_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/testenv"
)

// acks records the writes acknowledged to loadWrites' clients: each
// znode's data as of its newest acknowledged write.
type acks struct {
	mu   sync.Mutex
	data map[string]string
	n    int
}

func (a *acks) add(path, data string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.data[path] = data
	a.n++
}

// count returns how many writes were acknowledged.
func (a *acks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// snapshot returns a copy of what was acknowledged so far.
func (a *acks) snapshot() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.data)
}

// loadWrites creates and sets znodes under /bk from several clients until
// stop closes (or a bound is reached), recording each acknowledged write.
// A client's counter takes increasing zero-padded values, so a later
// write's data sorts after an earlier one's.
func loadWrites(t *testing.T, servers []string, stop <-chan struct{}, acked *acks) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range 4 {
		conn := connectZK(t, servers, 10*time.Second)
		counter := fmt.Sprintf("/bk/counter-%d", i)
		_, err := conn.Create(counter, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 3000; k++ {
				select {
				case <-stop:
					return
				default:
				}
				path, data := fmt.Sprintf("/bk/w-%d-%d", i, k), "v"
				var err error
				if k%4 == 3 {
					path, data = counter, fmt.Sprintf("%06d", k)
					_, err = conn.Set(path, []byte(data), -1)
				} else {
					_, err = conn.Create(path, []byte(data), 0, zk.WorldACL(zk.PermAll))
				}
				if err == nil {
					acked.add(path, data)
				}
			}
		}()
	}
	return &wg
}

// TestBackupUnderLoadRestoresIntoANewShard saves a backup of a shard while
// clients write, restores it into a new shard, and compares the two trees
// znode by znode: the new shard holds every write acknowledged before the
// save began, and exactly the state at the backup's zxid (every znode and
// stat untouched since then is identical, nothing younger is there), and
// it serves and takes writes. The save asks first a follower cut off from
// the shard all along: without its barrier through the log it would
// answer with a stale tree.
func TestBackupUnderLoadRestoresIntoANewShard(t *testing.T) {
	src := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3})
	stale := src.Follower("a")
	src.Isolate(stale.ID, true)
	live := slices.DeleteFunc(src.Servers("a"), func(a string) bool { return a == stale.ClientAddr })
	setup := connectZK(t, live, 10*time.Second)
	for _, p := range []string{"/bk", "/bk/deep", "/bk/deep/er"} {
		_, err := setup.Create(p, []byte(p), 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	_, err := setup.Create("/bk/deep/guarded", []byte("g"), 0, zk.WorldACL(zk.PermRead|zk.PermWrite))
	require.NoError(t, err)
	_, err = setup.Create("/bk/deep/seq-", nil, zk.FlagSequence, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, err = setup.Create("/bk/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	acked := &acks{data: map[string]string{}}
	stop := make(chan struct{})
	load := loadWrites(t, live, stop, acked)
	waitFor(t, 20*time.Second, "writes before the backup", func() bool { return acked.count() >= 300 })
	var file bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	beforeSave := acked.snapshot()
	h, err := keeper.SaveBackup(ctx, memberFirst(src.Config, "a", stale.ID), "a", &file, testenv.TestLogger(t))
	require.NoError(t, err)
	during := acked.count()
	waitFor(t, 20*time.Second, "writes after the backup", func() bool { return acked.count() >= during+200 })
	close(stop)
	load.Wait()
	assert.Equal(t, "a", h.Shard)
	assert.NotEqual(t, stale.ID, h.Member, "a member cut off from the shard passes no barrier")
	assert.Positive(t, h.Zxid)
	assert.Positive(t, h.OfficialTime)

	dstCfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	out, err := keeper.RestoreBackup(dstCfg, "a", nil, bytes.NewReader(file.Bytes()), testenv.TestLogger(t))
	require.NoError(t, err)
	assert.Len(t, out.Members, 3)
	dst := testenv.StartConfig(t, dstCfg, testenv.ClusterOptions{})

	before := testenv.ReadTree(t, setup, "/")
	after := testenv.ReadTree(t, connectZK(t, dst.Servers("a"), 10*time.Second), "/")
	lost := 0
	for p, data := range beforeSave {
		// A write after the save began may have overwritten it, never an
		// earlier one.
		if n, ok := after[p]; !ok || string(n.Data) < data {
			lost++
		}
	}
	assert.Zero(t, lost, "of %d znodes written before the save, some are missing or older in the restored shard", len(beforeSave))
	want := 0
	for p, n := range before {
		if n.Stat.Czxid > h.Zxid {
			assert.NotContains(t, after, p, "%s was created after the backup", p)
			continue
		}
		want++
		got, ok := after[p]
		if !assert.True(t, ok, "%s is missing from the restored shard", p) {
			continue
		}
		if n.Stat.Mzxid <= h.Zxid && n.Stat.Pzxid <= h.Zxid {
			assert.Equal(t, n, got, "%s differs", p)
		} else {
			assert.LessOrEqual(t, got.Stat.Mzxid, h.Zxid, "%s holds a write newer than the backup", p)
			assert.LessOrEqual(t, got.Stat.Pzxid, h.Zxid, "%s holds a child newer than the backup", p)
		}
	}
	assert.Len(t, after, want, "the restored shard holds exactly the znodes of the backup")
	assert.Less(t, len(after), len(before), "the load went on after the backup")
	assert.Contains(t, after, "/bk/eph", "an ephemeral stays until its session expires, as after a ZooKeeper restart")

	// The restored shard is a shard of its own: it takes writes, and the
	// zxids go on from the backup's.
	conn := connectZK(t, dst.Servers("a"), 10*time.Second)
	_, err = conn.Create("/bk/after-restore", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, stat, err := conn.Get("/bk/after-restore")
	require.NoError(t, err)
	assert.Greater(t, stat.Czxid, h.Zxid)
}

// memberFirst returns a copy of the cluster file in which shard's member
// id comes first: the one SaveBackup asks first.
func memberFirst(c *config.Cluster, shard, id string) *config.Cluster {
	out := *c
	out.Shards = slices.Clone(c.Shards)
	for i, sh := range out.Shards {
		if sh.Name == shard {
			j := slices.IndexFunc(sh.Members, func(m config.Member) bool { return m.ID == id })
			out.Shards[i].Members = append([]config.Member{sh.Members[j]}, slices.Delete(slices.Clone(sh.Members), j, j+1)...)
		}
	}
	return &out
}

// TestRestoredShardRefusesTheOldOne restores a backup onto the old shard's
// own addresses while one old member is still up: the restored members
// form their shard, and the old member and the new ones refuse each
// other's Raft links instead of joining (the old member's log, longer and
// of a higher term, would otherwise take over the new shard, or the new
// leader overwrite it).
func TestRestoredShardRefusesTheOldOne(t *testing.T) {
	old := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3})
	conn := connectZK(t, old.Servers("a"), 10*time.Second)
	_, err := conn.Create("/before", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	var file bytes.Buffer
	_, err = keeper.SaveBackup(context.Background(), old.Config, "a", &file, testenv.TestLogger(t))
	require.NoError(t, err)
	_, err = conn.Create("/after", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	conn.Close()
	waitConverged(t, old, "a") // the session's close applied everywhere: nothing left to apply

	ids := []string{old.Config.Shards[0].Members[0].ID, old.Config.Shards[0].Members[1].ID, old.Config.Shards[0].Members[2].ID}
	survivor := old.Member(ids[2])
	old.Kill(ids[0])
	old.Kill(ids[1])
	survivorZxid, survivorLog := zxidOf(survivor), survivor.Replica.Stats()["last_log_index"]

	// The same members on the same addresses, in new data directories.
	same := *old.Config
	same.Shards = []config.Shard{old.Config.Shards[0]}
	same.Shards[0].Members = append([]config.Member(nil), old.Config.Shards[0].Members...)
	dir := t.TempDir()
	for i := range same.Shards[0].Members {
		same.Shards[0].Members[i].DataDir = path.Join(dir, same.Shards[0].Members[i].ID)
	}
	_, err = keeper.RestoreBackup(&same, "a", ids[:2], bytes.NewReader(file.Bytes()), testenv.TestLogger(t))
	require.NoError(t, err)
	restored := testenv.StartConfig(t, &same, testenv.ClusterOptions{Only: ids[:2]})

	waitFor(t, 20*time.Second, "the old and the new members to refuse each other", func() bool {
		return survivor.Replica.RefusedLinks() > 0 && restored.Member(ids[0]).Replica.RefusedLinks()+restored.Member(ids[1]).Replica.RefusedLinks() > 0
	})
	c2 := connectZK(t, restored.Servers("a")[:2], 10*time.Second)
	for i := range 20 {
		_, err := c2.Create(fmt.Sprintf("/restored-%d", i), nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	ok, _, err := c2.Exists("/after")
	require.NoError(t, err)
	assert.False(t, ok, "the restored shard holds the backup's state")
	assert.Equal(t, survivorZxid, zxidOf(survivor), "the old member took nothing from the new shard")
	assert.Equal(t, survivorLog, survivor.Replica.Stats()["last_log_index"], "the old member's log took no entry of the new shard")
}

// zxidOf returns what a member has applied.
func zxidOf(m *keeper.Member) int64 {
	var z int64
	m.Replica.View(func(st *fsm.State) { z = st.Zxid() })
	return z
}

// TestRestoreOnNodesKeepsTheLogInTheNodeLog restores a backup into a shard
// on nodes: each member's log then goes into its node's shared log, as for
// any new member on a node, not into a log of its own.
func TestRestoreOnNodesKeepsTheLogInTheNodeLog(t *testing.T) {
	src := testenv.StartCluster(t, testenv.ClusterOptions{Nodes: 3})
	conn := connectZK(t, src.Servers("a"), 10*time.Second)
	_, err := conn.Create("/restored", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	var file bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = keeper.SaveBackup(ctx, src.Config, "a", &file, testenv.TestLogger(t))
	require.NoError(t, err)

	dstCfg, err := config.LayoutNodes(t.TempDir(), 1, 3, testenv.FreePorts(t, config.NodePorts(1, 3)), testenv.TestKeeper(false))
	require.NoError(t, err)
	_, err = keeper.RestoreBackup(dstCfg, "a", nil, bytes.NewReader(file.Bytes()), testenv.TestLogger(t))
	require.NoError(t, err)
	dst := testenv.StartConfig(t, dstCfg, testenv.ClusterOptions{})
	data, _, err := connectZK(t, dst.Servers("a"), 10*time.Second).Get("/restored")
	require.NoError(t, err)
	assert.Equal(t, "v", string(data))
	for _, m := range dst.Shard("a").Members {
		marker, err := os.ReadFile(filepath.Join(m.DataDir, "log_store"))
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(marker), "node "), "member %s keeps its log in %q", m.ID, marker)
	}
}

// TestRestoreAsRootLeavesDirectoriesToTheirUser: a restore run as root
// (sudo xkeeper snapshot restore) gives the data directories it makes, and
// everything in them, the owner of the directory they are made in (the
// packaged unit's user owns /var/lib/xkeeper), so that the member, which
// runs as that user, can write them.
func TestRestoreAsRootLeavesDirectoriesToTheirUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as a restore run with sudo")
	}
	src := testenv.StartCluster(t, testenv.ClusterOptions{Members: 1})
	var file bytes.Buffer
	_, err := keeper.SaveBackup(context.Background(), src.Config, "a", &file, testenv.TestLogger(t))
	require.NoError(t, err)

	parent := filepath.Join(t.TempDir(), "var-lib-xkeeper")
	require.NoError(t, os.Mkdir(parent, 0o755))
	require.NoError(t, os.Chown(parent, nobody, nobody))
	dst := testenv.NewClusterConfig(t, filepath.Join(parent, "deeper"), 1, 3)
	_, err = keeper.RestoreBackup(dst, "a", nil, bytes.NewReader(file.Bytes()), testenv.TestLogger(t))
	require.NoError(t, err)
	assertOwnedBy(t, filepath.Join(parent, "deeper"), nobody)
}

// nobody is the uid and gid a restore as root is made to give away.
const nobody = 65534

// assertOwnedBy asserts that dir and everything in it, the data
// directories of a restore (more than 6 entries), belong to uid and gid id.
func assertOwnedBy(t *testing.T, dir string, id uint32) {
	t.Helper()
	assert.Greater(t, testenv.AssertOwnedBy(t, dir, id, id), 6, "the restore made the members' directories and files")
}
