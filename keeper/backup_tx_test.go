package keeper_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// TestBackupWithATransactionInFlight saves the coordinator shard while a
// cross-shard transaction is prepared everywhere and undecided, lets the
// transaction end, then replaces the coordinator shard with its backup:
// the restored coordinator ends the transaction again, with the outcome
// the other shard already applied, and every record and lock drains.
func TestBackupWithATransactionInFlight(t *testing.T) {
	var (
		mu      sync.Mutex
		txID    string
		held    = make(chan struct{})
		release = make(chan struct{})
		once    sync.Once
	)
	hook := func(step, id, shard string) error {
		mu.Lock()
		mine := id == txID
		mu.Unlock()
		if !mine || step != xshard.StepAllPrepared {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil // recovery drives it to its end
		}
		close(held)
		<-release
		return errors.New("driver crashed after the prepares")
	}
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1, XHook: hook})
	r := c.MemberRouter()
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mu.Lock()
	txID = uuid.NewString()
	mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{createOp("/moved-in-a")}},
			{Shard: "b", Requests: []proto.MultiOp{createOp("/moved-in-b")}},
		}, xshard.Options{ID: txID})
		done <- err
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the transaction never prepared on both shards")
	}
	var file bytes.Buffer
	_, err := keeper.SaveBackup(ctx, c.Config, "a", &file, testenv.TestLogger(t))
	require.NoError(t, err)
	close(release)
	<-done // the client's answer, whatever it is, does not matter here
	waitFor(t, 30*time.Second, "the transaction to end on the old shards", func() bool {
		return drained(c, "a") && drained(c, "b")
	})
	inB := exists(c, "b", "/moved-in-b")
	t.Logf("shard b applied the transaction: %v", inB)

	// Shard a is lost; its backup replaces it, on its own addresses.
	c.Stop()
	cfg := *c.Config
	cfg.Shards = append([]config.Shard(nil), c.Config.Shards...)
	cfg.Shards[0].Members = append([]config.Member(nil), cfg.Shards[0].Members...)
	cfg.Shards[0].Members[0].DataDir = filepath.Join(t.TempDir(), "a1-restored")
	_, err = keeper.RestoreBackup(&cfg, "a", nil, bytes.NewReader(file.Bytes()), testenv.TestLogger(t))
	require.NoError(t, err)
	br, err := backup.NewReader(bytes.NewReader(file.Bytes()))
	require.NoError(t, err)
	st, err := fsm.Restore(br)
	require.NoError(t, err)
	require.Len(t, st.XRecords(), 1)
	require.Equal(t, proto.XPending, st.XRecords()[0].Status, "the backup holds the transaction undecided")

	c2 := testenv.StartConfig(t, &cfg, testenv.ClusterOptions{})
	waitFor(t, 30*time.Second, "the restored coordinator to end the transaction", func() bool {
		return drained(c2, "a") && drained(c2, "b")
	})
	assert.Equal(t, inB, exists(c2, "a", "/moved-in-a"), "shard a ends the transaction as shard b did")
	assert.Equal(t, inB, exists(c2, "b", "/moved-in-b"))
}

func createOp(path string) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)}}
}

// leaderState runs fn on the state of a shard's leader.
func leaderState(c *testenv.Cluster, shard string, fn func(*fsm.State)) {
	if m := c.Member(c.Leader(shard)); m != nil {
		m.Replica.View(fn)
	}
}

// drained reports whether a shard's leader holds no transaction record.
func drained(c *testenv.Cluster, shard string) bool {
	n := -1
	leaderState(c, shard, func(st *fsm.State) { n = len(st.XRecords()) + st.LockCount() })
	return n == 0
}

// exists reports whether a shard's leader holds path.
func exists(c *testenv.Cluster, shard, path string) bool {
	var ok bool
	leaderState(c, shard, func(st *fsm.State) { ok = st.Node(path) != nil })
	return ok
}
