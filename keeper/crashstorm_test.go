package keeper_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestSIGKILLDuringWriteStorm kills member processes with SIGKILL while
// eight writers create znodes through every member: first the leader,
// then, once the shard took more writes, all three at once. Restarted
// from their data directories (raft-wal, fsync on), every member holds
// every acknowledged create with its data, and all hold the same tree.
func TestSIGKILLDuringWriteStorm(t *testing.T) {
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3, Fsync: true})
	servers := pc.Servers("a")
	setup := connectZK(t, servers, 10*time.Second)
	_, err := setup.Create("/storm", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	s := startStorm(t, servers, 8)
	s.waitCount(t, 300)
	leader := pc.WaitLeader("a")
	pc.Kill(leader)
	s.waitCount(t, s.count()+300) // the other two elect and take writes
	pc.Start(leader)
	s.waitCount(t, s.count()+300)
	members := pc.Config.Shards[0].Members
	for _, m := range members {
		pc.Kill(m.ID)
	}
	acked := s.halt()
	t.Logf("%d creates acknowledged before the last kill", len(acked))

	for _, m := range members {
		pc.Start(m.ID)
	}
	pc.WaitLeader("a")
	// A write of the new term commits everything before it on a majority.
	after := connectZK(t, servers, 20*time.Second)
	_, err = after.Create("/storm-after", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	var counts []string
	for _, m := range members {
		conn := connectZK(t, []string{m.ClientAddr}, 20*time.Second)
		// A member answers from its own state: wait until it applied the
		// write made after the restart, then check every acknowledged one.
		require.Eventually(t, func() bool {
			ok, _, err := conn.Exists("/storm-after")
			return err == nil && ok
		}, 30*time.Second, 20*time.Millisecond, "member %s never applied the write after the restart", m.ID)
		missing := 0
		for path, data := range acked {
			got, _, err := conn.Get(path)
			if !assert.NoError(t, err, "member %s: acknowledged %s", m.ID, path) || string(got) != data {
				missing++
			}
		}
		assert.Zero(t, missing, "member %s lost acknowledged creates", m.ID)
		kids, _, err := conn.Children("/storm")
		require.NoError(t, err)
		counts = append(counts, fmt.Sprint(len(kids)))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out, err := testenv.FourLetterWord(ctx, m.ClientAddr, "ruok")
		cancel()
		require.NoError(t, err)
		assert.Equal(t, "imok", out)
	}
	assert.Equal(t, counts[0], counts[1], "members hold different trees: %v", counts)
	assert.Equal(t, counts[0], counts[2], "members hold different trees: %v", counts)
}
