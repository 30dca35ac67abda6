package keeper_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// storm is writers creating unique znodes through every member until
// stopped, remembering each create that was acknowledged.
type storm struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]string // path → data
}

func startStorm(t *testing.T, servers []string, writers int) *storm {
	s := &storm{stop: make(chan struct{}), acked: map[string]string{}}
	for w := range writers {
		conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false))
		require.NoError(t, err)
		t.Cleanup(conn.Close)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for n := 0; n < 100_000; n++ { // bounded; stopped long before
				select {
				case <-s.stop:
					return
				default:
				}
				path, data := fmt.Sprintf("/storm/w%d-%06d", w, n), fmt.Sprintf("%d:%d", w, n)
				if _, err := conn.Create(path, []byte(data), 0, zk.WorldACL(zk.PermAll)); err != nil {
					// A lost answer: the create may or may not have happened.
					select {
					case <-s.stop:
						return
					case <-time.After(20 * time.Millisecond): // back off while the shard elects
					}
					continue
				}
				s.mu.Lock()
				s.acked[path] = data
				s.mu.Unlock()
			}
		}()
	}
	return s
}

func (s *storm) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

// waitCount waits until n creates were acknowledged in all.
func (s *storm) waitCount(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return s.count() >= n }, 60*time.Second, 10*time.Millisecond,
		"the storm reached %d of %d acknowledged creates", s.count(), n)
}

func (s *storm) halt() map[string]string {
	close(s.stop)
	s.wg.Wait()
	return s.acked
}

// TestSIGKILLDuringWriteStorm kills processes with SIGKILL while writers
// create znodes through every member: first the leader's, then, once the
// shards took more writes, all of them at once. Restarted from their data
// directories (fsync on), every member holds every acknowledged create
// with its data, and the members of a shard hold the same tree. Once as a
// process per member (raft-wal), once as 3 nodes hosting 2 shards (the
// node log, both shards' entries in one log per node).
func TestSIGKILLDuringWriteStorm(t *testing.T) {
	t.Run("members", func(t *testing.T) { sigkillStorm(t, testenv.ClusterOptions{Members: 3, Fsync: true}) })
	t.Run("nodes", func(t *testing.T) { sigkillStorm(t, testenv.ClusterOptions{Shards: 2, Nodes: 3, Fsync: true}) })
}

func sigkillStorm(t *testing.T, o testenv.ClusterOptions) {
	pc := testenv.StartProcessCluster(t, o)
	// process names a member's process: its node's, or its own.
	process := func(m config.Member) string { return cmp.Or(m.Node, m.ID) }
	var processes []string
	storms := map[string]*storm{}
	for _, sh := range pc.Config.Shards {
		servers := pc.Servers(sh.Name)
		setup := connectZK(t, servers, 10*time.Second)
		_, err := setup.Create("/storm", nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
		storms[sh.Name] = startStorm(t, servers, 8/len(pc.Config.Shards))
		for _, m := range sh.Members {
			if !slices.Contains(processes, process(m)) {
				processes = append(processes, process(m))
			}
		}
	}
	more := func() {
		for _, s := range storms {
			s.waitCount(t, s.count()+300/len(storms))
		}
	}
	more()
	_, leader, err := pc.Config.Member(pc.WaitLeader("a"))
	require.NoError(t, err)
	pc.Kill(process(*leader))
	more() // the others elect and take writes
	pc.Start(process(*leader))
	more()
	for _, p := range processes {
		pc.Kill(p)
	}
	acked := map[string]map[string]string{}
	for name, s := range storms {
		acked[name] = s.halt()
		t.Logf("shard %s: %d creates acknowledged before the last kill", name, len(acked[name]))
	}
	for _, p := range processes {
		pc.Start(p)
	}
	for _, sh := range pc.Config.Shards {
		checkStormSurvived(t, pc, sh, acked[sh.Name])
	}
}

// checkStormSurvived checks that every member of shard holds every
// acknowledged create, and that they hold the same tree, znode by znode:
// data, stat and ACL.
func checkStormSurvived(t *testing.T, pc *testenv.ProcessCluster, sh config.Shard, acked map[string]string) {
	pc.WaitLeader(sh.Name)
	servers := pc.Servers(sh.Name)
	// A write of the new term commits everything before it on a majority.
	// (On nodes the leader balancer may move a leadership meanwhile, which
	// costs a request in flight its connection.)
	after := connectZK(t, servers, 20*time.Second)
	retryLost(t, func() error {
		_, err := after.Create("/storm-after", nil, 0, zk.WorldACL(zk.PermAll))
		return err
	}, "the write after the restart")

	var first map[string]testenv.ZNode
	for _, m := range sh.Members {
		conn := connectZK(t, []string{m.ClientAddr}, 20*time.Second)
		// A member answers from its own state: wait until it applied the
		// write made after the restart, then check every acknowledged one.
		require.Eventually(t, func() bool {
			ok, _, err := conn.Exists("/storm-after")
			return err == nil && ok
		}, 30*time.Second, 20*time.Millisecond, "member %s never applied the write after the restart", m.ID)
		tree := testenv.ReadTree(t, conn, "/storm")
		missing := 0
		for path, data := range acked {
			if n, ok := tree[path]; !ok || string(n.Data) != data {
				missing++
			}
		}
		assert.Zero(t, missing, "member %s lost acknowledged creates", m.ID)
		if first == nil {
			first = tree
		} else {
			assert.Equal(t, first, tree, "shard %s: members %s and %s hold different trees", sh.Name, sh.Members[0].ID, m.ID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := testenv.FourLetterWord(ctx, m.ClientAddr, "ruok")
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "imok", out)
	}
}
