package keeper_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/bench"
	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/keeper/zkimport"
	"github.com/xkeeper/xkeeper/testenv"
)

// shardWatch follows a cluster through an operator's bad day: it samples,
// every few milliseconds, which member of each shard leads in which term,
// and records every write a client had acknowledged, so that check can
// state the invariants no mistake may break. It sees the cluster through
// three functions, so that in-process members (watchShards) and member
// processes (watchProcesses) are watched alike.
type shardWatch struct {
	cfg     func() *config.Cluster
	status  func(id string) (replica.Status, bool) // a running member's status; false if it does not run
	holds   func(id, path string) bool             // whether the running member id holds path
	mu      sync.Mutex
	members map[string]string              // member → shard, of the members sampled (the cluster file's is not the sampler's to read)
	leaders map[string]map[uint64][]string // shard → term → members seen leading it
	acked   map[string][]string            // shard → paths whose create was acknowledged
	conns   map[string]*zk.Conn            // shard → the client connection writes go through
	// apart holds, by id, members the test runs outside the watched
	// cluster (from another cluster file), *keeper.Member each.
	apart sync.Map
	stop  chan struct{}
	done  chan struct{}
}

// watchShards watches the in-process cluster c.
func watchShards(t *testing.T, c *testenv.Cluster) *shardWatch {
	return newShardWatch(t, func() *config.Cluster { return c.Config },
		func(id string) (replica.Status, bool) {
			if m := c.Member(id); m != nil {
				return m.Replica.Status(), true
			}
			return replica.Status{}, false
		},
		func(id, path string) bool { return has(c, id, path) })
}

// watchProcesses watches the process cluster pc, through each member's
// admin link and a client connection to each member.
func watchProcesses(t *testing.T, pc *testenv.ProcessCluster) *shardWatch {
	var mu sync.Mutex
	conns := map[string]*zk.Conn{}
	return newShardWatch(t, func() *config.Cluster { return pc.Config },
		func(id string) (replica.Status, bool) {
			_, m, err := pc.Config.Member(id)
			if err != nil || !pc.Running(id) {
				return replica.Status{}, false
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := keeper.StatusAt(ctx, pc.Config, m.ClientAddr)
			return st, err == nil
		},
		func(id, path string) bool { // called in require.Eventually's goroutine: no require here
			mu.Lock()
			defer mu.Unlock()
			if conns[id] == nil {
				_, m, err := pc.Config.Member(id)
				if err != nil {
					return false
				}
				if conns[id], err = bench.Connect([]string{m.ClientAddr}); err != nil {
					return false
				}
				t.Cleanup(conns[id].Close)
			}
			ok, _, err := conns[id].Exists(path)
			return err == nil && ok
		})
}

// newShardWatch starts sampling until the test ends or check runs.
func newShardWatch(t *testing.T, cfg func() *config.Cluster, status func(string) (replica.Status, bool),
	holds func(string, string) bool) *shardWatch {
	w := &shardWatch{cfg: cfg, status: status, holds: holds, members: map[string]string{}, leaders: map[string]map[uint64][]string{},
		acked: map[string][]string{}, conns: map[string]*zk.Conn{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, sh := range cfg().Shards {
		for _, m := range sh.Members {
			w.members[m.ID] = sh.Name
		}
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				w.sample()
			}
		}
	}()
	t.Cleanup(w.stopSampling)
	return w
}

// statusOf returns member id's status, from its process or its in-process
// member, or from the member the test runs apart; false if none runs.
func (w *shardWatch) statusOf(id string) (replica.Status, bool) {
	if m, ok := w.apart.Load(id); ok {
		return m.(*keeper.Member).Replica.Status(), true
	}
	return w.status(id)
}

// stopSampling ends the sampling, once.
func (w *shardWatch) stopSampling() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// sample records each running member that leads, with the term it leads
// in (replica.Status.LeaderTerm).
func (w *shardWatch) sample() {
	w.mu.Lock()
	members := maps.Clone(w.members)
	w.mu.Unlock()
	for id, shard := range members {
		st, ok := w.statusOf(id)
		if !ok || st.LeaderTerm == 0 {
			continue
		}
		w.mu.Lock()
		if w.leaders[shard] == nil {
			w.leaders[shard] = map[uint64][]string{}
		}
		if !slices.Contains(w.leaders[shard][st.LeaderTerm], id) {
			w.leaders[shard][st.LeaderTerm] = append(w.leaders[shard][st.LeaderTerm], id)
		}
		w.mu.Unlock()
	}
}

// follow adds member id of shard, new in the cluster file (Grow), to the
// members sampled.
func (w *shardWatch) follow(shard, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.members[id] = shard
}

// shard returns shard name of the cluster file.
func (w *shardWatch) shard(t *testing.T, name string) *config.Shard {
	sh, err := w.cfg().Shard(name)
	require.NoError(t, err)
	return sh
}

// write creates path in shard through the shard's running members and
// records it once acknowledged. A connection lost on the way (its member
// killed or removed) is replaced by one to the members running now, and
// the create asked again; a node found there then, with the data written,
// is the lost create's.
func (w *shardWatch) write(t *testing.T, shard, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for retried := false; ; retried = true {
		conn := w.conns[shard]
		if conn == nil {
			var addrs []string
			for _, m := range w.shard(t, shard).Members {
				if _, ok := w.statusOf(m.ID); ok {
					addrs = append(addrs, m.ClientAddr)
				}
			}
			conn = connectZK(t, addrs, 10*time.Second)
			w.conns[shard] = conn
		}
		_, err := conn.Create(path, []byte(path), 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) && retried {
			data, _, gerr := conn.Get(path)
			require.NoError(t, gerr)
			require.Equal(t, path, string(data), "%s exists with other data", path)
			err = nil
		}
		if errors.Is(err, zk.ErrConnectionClosed) && time.Now().Before(deadline) {
			conn.Close()
			delete(w.conns, shard)
			continue
		}
		require.NoError(t, err, "create %s in shard %s", path, shard)
		break
	}
	w.mu.Lock()
	w.acked[shard] = append(w.acked[shard], path)
	w.mu.Unlock()
}

// writeSome makes n acknowledged writes in shard, named after what.
func (w *shardWatch) writeSome(t *testing.T, shard, what string, n int) {
	t.Helper()
	for i := range n {
		w.write(t, shard, fmt.Sprintf("/%s-%d", what, i))
	}
}

// check states the invariants of a bad day for each shard: no two members
// led it in one term; every running member of it says it is of that
// shard, has the identity of its leader and follows that leader, and the
// leader's configuration lists only members the cluster file places in
// the shard; and every acknowledged write is on every running voter.
func (w *shardWatch) check(t *testing.T, shards ...string) {
	t.Helper()
	w.stopSampling()
	for _, shard := range shards {
		for term, ids := range w.leaders[shard] {
			assert.Len(t, ids, 1, "shard %s had two leaders in term %d: %v", shard, term, ids)
		}
		var leader replica.Status
		members := w.shard(t, shard).Members
		waitFor(t, 20*time.Second, "shard "+shard+" to have a leader", func() bool {
			for _, m := range members {
				if st, ok := w.statusOf(m.ID); ok && st.IsLeader {
					leader = st
					return true
				}
			}
			return false
		})
		ours := map[string]bool{}
		for _, m := range members {
			ours[m.ID] = true
		}
		for _, m := range leader.Members {
			assert.True(t, ours[m.ID], "shard %s's configuration lists %s, which the cluster file places elsewhere", shard, m.ID)
		}
		for _, m := range members {
			if _, ok := w.statusOf(m.ID); !ok {
				continue
			}
			var st replica.Status
			waitFor(t, 20*time.Second, m.ID+" to follow its shard's leader", func() bool {
				st, _ = w.statusOf(m.ID)
				return st.Leader == leader.ID
			})
			assert.Equal(t, shard, st.Shard, "member %s", m.ID)
			assert.Equal(t, leader.Identity, st.Identity, "member %s is of another incarnation than its leader %s", m.ID, leader.ID)
			if !slices.ContainsFunc(leader.Members, func(rm replica.Member) bool { return rm.ID == m.ID && rm.Voter }) {
				continue
			}
			waitFor(t, 20*time.Second, m.ID+" to apply every acknowledged write", func() bool {
				return !slices.ContainsFunc(w.acked[shard], func(p string) bool { return !w.holds(m.ID, p) })
			})
		}
	}
}

// TestBadDay is issue 40's operator having a bad day, one mistake per
// subtest on a cluster of its own. Each mistake is refused with an error
// that names the cause and the next step, or carried out safely; after
// each, shardWatch.check states that no shard had two leaders in one
// term, no member is in the wrong shard, and no acknowledged write was
// lost.
func TestBadDay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	log := testenv.TestLogger(t)

	t.Run("wrong cluster file", func(t *testing.T) {
		// a3 restarted with a file that gives its peers shard b's
		// addresses: its identity keeps it out of b, and it rejoins a
		// through the replicated configuration.
		c, w := twoShards(t)
		wrong := withPeersOf(c.Config, "a", "b", "a3")
		a3 := c.Shard("a").Members[2]
		if c.Leader("a") == a3.ID {
			next := c.Follower("a")
			require.NoError(t, c.Member(a3.ID).Replica.TransferLeadership(next.ID, next.RaftAddr))
			waitFor(t, 20*time.Second, "a3 to hand over", func() bool { return c.Leader("a") == next.ID })
		}
		c.Kill(a3.ID)
		m, err := keeper.Start(wrong, a3.ID, keeper.Options{Logger: log})
		require.NoError(t, err)
		defer m.Close()
		w.apart.Store(a3.ID, m)
		w.writeSome(t, "a", "a-after", 5)
		w.writeSome(t, "b", "b-after", 5)
		waitFor(t, 20*time.Second, "a3 to follow shard a's leader", func() bool { return m.Replica.Status().Leader == c.Leader("a") })
		waitFor(t, 20*time.Second, "a3 to apply every acknowledged write", func() bool {
			return !slices.ContainsFunc(w.acked["a"], func(p string) bool { return !hasOn(m, p) })
		})
		assert.Equal(t, c.Member(c.Leader("a")).Replica.Status().Identity, m.Replica.Status().Identity)
		w.apart.Delete(a3.ID)
		m.Close()
		c.Restart(a3.ID)
		w.check(t, "a", "b")
	})

	t.Run("wrong shard on join and add", func(t *testing.T) {
		c, w := twoShards(t)
		id := c.Grow("a")
		w.follow("a", id)
		wrong := withPeersOf(c.Config, "a", "b", id)
		_, err := keeper.JoinIdentity(ctx, wrong, "a", id)
		require.ErrorIs(t, err, keeper.ErrOtherShard, "a4 joining a through b's addresses")
		assert.Contains(t, err.Error(), "check the addresses of shard a in the cluster file")
		c.Join(id)
		_, err = keeper.AddMember(ctx, wrong, id, log)
		require.ErrorIs(t, err, keeper.ErrOtherShard, "a4 added by b's leader")
		assert.Contains(t, err.Error(), "check the addresses of shard a in the cluster file")
		for _, shard := range []string{"a", "b"} {
			var leader string // a4 runs, not yet added: it knows no leader, so c.WaitLeader would wait for it
			waitFor(t, 20*time.Second, "shard "+shard+" to have a leader", func() bool { leader = c.Leader(shard); return leader != "" })
			members, err := c.Member(leader).Replica.Members()
			require.NoError(t, err)
			assert.Len(t, members, 3, "shard %s's configuration changed", shard)
		}
		_, err = keeper.AddMember(ctx, c.Config, id, log) // the next step, with the right file
		require.NoError(t, err)
		w.writeSome(t, "a", "a-after", 5)
		w.check(t, "a", "b")
	})

	t.Run("wiped directory", func(t *testing.T) {
		c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Only: []string{"a1", "a2"}})
		w := watchShards(t, c)
		wipedFollowerOfAnotherLeader(t, c, w)
		w.check(t, "a")
	})

	t.Run("two shards restored from one backup", func(t *testing.T) {
		file, saved := savedBackup(t)

		// The backup restored twice onto the same addresses, as two
		// machines' operators might: the first restore's a1 and a2 run
		// with the second restore's a3.
		first := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
		second := *first
		second.Shards = slices.Clone(first.Shards)
		second.Shards[0].Members = slices.Clone(first.Shards[0].Members)
		for i := range second.Shards[0].Members {
			second.Shards[0].Members[i].DataDir = filepath.Join(t.TempDir(), second.Shards[0].Members[i].ID)
		}
		one, err := keeper.RestoreBackup(first, "a", nil, bytes.NewReader(file.Bytes()), log)
		require.NoError(t, err)
		two, err := keeper.RestoreBackup(&second, "a", nil, bytes.NewReader(file.Bytes()), log)
		require.NoError(t, err)
		require.NotEqual(t, one.Identity, two.Identity, "two restores of one backup are one shard")
		_, err = keeper.RestoreBackup(&second, "a", []string{"a3"}, bytes.NewReader(file.Bytes()), log)
		require.ErrorContains(t, err, "--identity", "a3 restored apart without the first restore's identity")

		c := testenv.StartConfig(t, first, testenv.ClusterOptions{Only: []string{"a1", "a2"}})
		w := watchShards(t, c)
		stranger, err := keeper.Start(&second, "a3", keeper.Options{Logger: log})
		require.NoError(t, err)
		defer stranger.Close()
		w.writeSome(t, "a", "restored", 10)
		waitFor(t, 20*time.Second, "the restores to refuse each other's links", func() bool {
			return stranger.Replica.RefusedLinks() > 0
		})
		st := stranger.Replica.Status()
		assert.False(t, st.IsLeader, "the second restore's a3 leads")
		assert.NotEqual(t, c.Leader("a"), st.Leader, "the second restore's a3 follows the first's leader")
		for _, p := range w.acked["a"] {
			assert.False(t, hasOn(stranger, p), "the second restore's a3 took the first's write %s", p)
		}
		stranger.Close()
		w.acked["a"] = append(w.acked["a"], saved...) // the saved writes are acknowledged writes of the restored shard
		w.check(t, "a")
	})

	t.Run("import without its logs", func(t *testing.T) {
		z := testenv.StartZooKeeperWith(t, testenv.ZooKeeperOptions{Config: "snapCount=20\n"})
		zconn := connectZK(t, z.Servers(), 10*time.Second)
		var written []string
		for i := range 60 {
			p := fmt.Sprintf("/zk-%d", i)
			_, err := zconn.Create(p, []byte(p), 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			written = append(written, p)
		}
		zconn.Close()
		z.Stop()
		// ZooKeeper's logs in a dataLogDir of their own, which the
		// operator forgets to name.
		snaps, logs := splitZooKeeperDir(t, filepath.Join(z.DataDir(0), "version-2"))
		_, _, err := zkimport.FromDataDir(snaps, snaps, zkimport.Options{})
		require.ErrorIs(t, err, zkimport.ErrNoLogs)
		assert.Contains(t, err.Error(), "--log-dir")
		st, sum, err := zkimport.FromDataDir(snaps, logs, zkimport.Options{}) // the next step
		require.NoError(t, err)
		require.Positive(t, sum.Transactions)
		var file bytes.Buffer
		require.NoError(t, backup.Write(&file, backup.Header{Zxid: st.Zxid(), OfficialTime: st.Time()}, st.Snapshot()))
		cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
		_, err = keeper.RestoreBackup(cfg, "a", nil, bytes.NewReader(file.Bytes()), log)
		require.NoError(t, err)
		c := testenv.StartConfig(t, cfg, testenv.ClusterOptions{})
		w := watchShards(t, c)
		w.acked["a"] = written // acknowledged by ZooKeeper
		w.writeSome(t, "a", "after-import", 5)
		w.check(t, "a")
	})

	t.Run("restore as root", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root, as a restore run with sudo")
		}
		file, saved := savedBackup(t)
		parent := filepath.Join(t.TempDir(), "var-lib-xkeeper")
		require.NoError(t, os.Mkdir(parent, 0o755))
		require.NoError(t, os.Chown(parent, nobody, nobody))
		cfg := testenv.NewClusterConfig(t, filepath.Join(parent, "deeper"), 1, 3)
		_, err := keeper.RestoreBackup(cfg, "a", nil, bytes.NewReader(file.Bytes()), log)
		require.NoError(t, err)
		assertOwnedBy(t, filepath.Join(parent, "deeper"), nobody)
		c := testenv.StartConfig(t, cfg, testenv.ClusterOptions{})
		w := watchShards(t, c)
		w.acked["a"] = saved
		w.writeSome(t, "a", "after-restore", 5)
		w.check(t, "a")
	})

	t.Run("remove under quorum loss", func(t *testing.T) { aroundWrites(t, 3, removeUnderQuorumLoss) })
	t.Run("remove under quorum loss, by the binary", func(t *testing.T) {
		// Issue 40 as reported: member processes, one follower dead,
		// `xkeeper member remove` of the other answered "removed" and left
		// the shard without a leader.
		pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3})
		w := watchProcesses(t, pc)
		w.writeSome(t, "a", "before", 5)
		leader := pc.WaitLeader("a")
		var healthy, dead string
		for _, m := range pc.Config.Shards[0].Members {
			switch {
			case m.ID == leader:
			case healthy == "":
				healthy = m.ID
			default:
				dead = m.ID
			}
		}
		pc.Kill(dead)
		waitFor(t, 20*time.Second, "the leader to miss "+dead, func() bool {
			st, ok := w.statusOf(leader)
			return ok && slices.Contains(st.Unheard, dead)
		})
		out, err := exec.Command(testenv.XkeeperBinary(t), "member", "remove", "--config", pc.File, "--shard", "a", healthy).CombinedOutput()
		require.Error(t, err, "the remove was carried out: %s", out)
		for _, want := range []string{"remove " + healthy + " refused, nothing changed", "bring " + dead + " back"} {
			assert.Contains(t, string(out), want)
		}
		st, ok := w.statusOf(leader)
		require.True(t, ok)
		assert.Len(t, st.Members, 3, "the configuration changed")
		w.writeSome(t, "a", "after", 5)
		w.check(t, "a")
	})
	t.Run("remove the leader that just died", func(t *testing.T) { aroundWrites(t, 3, removeDeadLeader) })
	t.Run("two operators changing membership at once", func(t *testing.T) { aroundWrites(t, 5, concurrentRemoves) })
}

// twoShards starts shards a and b of 3 members each, with a few
// acknowledged writes in each.
func twoShards(t *testing.T) (*testenv.Cluster, *shardWatch) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3})
	w := watchShards(t, c)
	w.writeSome(t, "a", "a-before", 5)
	w.writeSome(t, "b", "b-before", 5)
	return c, w
}

// aroundWrites runs scenario on a new shard a of members members, with
// acknowledged writes before and after it, and checks the invariants.
func aroundWrites(t *testing.T, members int, scenario func(*testing.T, *testenv.Cluster)) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: members})
	w := watchShards(t, c)
	w.writeSome(t, "a", "before", 5)
	scenario(t, c)
	w.writeSome(t, "a", "after", 5)
	w.check(t, "a")
}

// savedBackup returns a backup of a one-member shard a holding a few
// acknowledged writes, and their paths.
func savedBackup(t *testing.T) (*bytes.Buffer, []string) {
	src := testenv.StartCluster(t, testenv.ClusterOptions{Members: 1})
	w := watchShards(t, src)
	w.writeSome(t, "a", "saved", 5)
	var file bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := keeper.SaveBackup(ctx, src.Config, "a", &file, testenv.TestLogger(t))
	require.NoError(t, err)
	w.check(t, "a")
	return &file, w.acked["a"]
}

// withPeersOf returns a copy of c in which the members of shard other
// than keep (every one, with "") have the addresses of shard to's
// members: a cluster file that validates but leads shard's members to
// another shard.
func withPeersOf(c *config.Cluster, shard, to, keep string) *config.Cluster {
	wrong := *c
	wrong.Shards = slices.Clone(c.Shards)
	from := slices.IndexFunc(wrong.Shards, func(sh config.Shard) bool { return sh.Name == shard })
	dst := slices.IndexFunc(wrong.Shards, func(sh config.Shard) bool { return sh.Name == to })
	wrong.Shards[from].Members = slices.Clone(c.Shards[from].Members)
	for i := range wrong.Shards[from].Members {
		m := &wrong.Shards[from].Members[i]
		if m.ID != keep && i < len(wrong.Shards[dst].Members) {
			m.ClientAddr, m.RaftAddr = wrong.Shards[dst].Members[i].ClientAddr, wrong.Shards[dst].Members[i].RaftAddr
		}
	}
	return &wrong
}

// splitZooKeeperDir copies ZooKeeper's version-2 directory into two, its
// snapshots and its transaction logs, as with a dataLogDir of their own.
func splitZooKeeperDir(t *testing.T, src string) (snaps, logs string) {
	snaps, logs = t.TempDir(), t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		dst := snaps
		if strings.HasPrefix(e.Name(), "log.") {
			dst = logs
		}
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
	return snaps, logs
}
