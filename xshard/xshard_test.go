package xshard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func create(path, data string) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, Data: []byte(data), ACL: proto.WorldACL(proto.PermAll)}}
}

func setData(path, data string, version int32) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpSetData, Req: &proto.SetDataRequest{Path: path, Data: []byte(data), Version: version}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// node reads a path on every member of a shard, polling until they agree
// (followers apply a moment after the leader).
func node(t *testing.T, c *testenv.Cluster, shard, path string) (data string, ok bool) {
	t.Helper()
	waitFor(t, func() bool {
		agree := true
		for i, m := range c.Shard(shard).Members {
			var d string
			var present bool
			c.Member(m.ID).Replica.View(func(st *fsm.State) {
				if n := st.Node(path); n != nil {
					d, present = string(n.Data()), true
				}
			})
			if i == 0 {
				data, ok = d, present
			} else if d != data || present != ok {
				agree = false
			}
		}
		return agree
	})
	return data, ok
}

func TestCommitAndFail(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	defer r.Close()
	ctx := ctxT(t)
	res, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/acct", "100")}},
		{Shard: "b", Requests: []proto.MultiOp{create("/acct", "0"), create("/other", "x")}},
	})
	require.NoError(t, err)
	if len(res) != 2 || len(res[1].Results) != 2 {
		t.Fatalf("results %+v", res)
	}
	waitFor(t, func() bool { _, ok := node(t, c, "b", "/other"); return ok })
	waitFor(t, func() bool { d, ok := node(t, c, "a", "/acct"); return ok && d == "100" })
	// A version mismatch on b fails the whole transaction, typed.
	_, err = xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{setData("/acct", "50", 0)}},
		{Shard: "b", Requests: []proto.MultiOp{create("/new", ""), setData("/acct", "50", 7)}},
	})
	var xe *xshard.Error
	if !errors.As(err, &xe) || !errors.Is(err, proto.ErrBadVersion) || xe.Shard != "b" || xe.Op != 1 {
		t.Fatalf("want bad version on b op 1, got %v", err)
	}
	if d, _ := node(t, c, "a", "/acct"); d != "100" {
		t.Fatalf("a /acct changed by a failed transaction: %q", d)
	}
	if _, ok := node(t, c, "b", "/new"); ok {
		t.Fatal("b /new created by a failed transaction")
	}
	// Retrying with the same id returns the recorded outcome.
	opts := xshard.Options{ID: "7a0e9f57-2bb0-4d0c-9f7a-5b7a6d5c1e01"}
	tx := []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{setData("/acct", "60", -1)}},
		{Shard: "b", Requests: []proto.MultiOp{create("/seq-", "")}},
	}
	if _, err := xshard.CrossShardTransaction(ctx, r, tx, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := xshard.CrossShardTransaction(ctx, r, tx, opts); err != nil {
		t.Fatalf("retry: %v", err)
	}
	// The answer comes once every shard holds the transaction pending; the
	// state shows it once the commit, held back for company, applies.
	waitFor(t, func() bool { _, ok := node(t, c, "b", "/seq-"); return ok })
	// Pending sets drain.
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
}

func records(c *testenv.Cluster, shard string) int {
	n := 0
	for _, m := range c.Shard(shard).Members {
		c.Member(m.ID).Replica.View(func(st *fsm.State) { n += len(st.XRecords()) + st.LockCount() })
	}
	return n
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeadlineAfterIdleSpell runs a transaction right after the members'
// clocks moved on by twice the deadline with no entry in between: its
// deadline counts from the official time its prepare gets, not from the
// last entry's, so it commits.
func TestDeadlineAfterIdleSpell(t *testing.T) {
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, Clock: clock})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	defer r.Close()
	ctx := ctxT(t)
	tx := func(path string) error {
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{create(path, "")}},
			{Shard: "b", Requests: []proto.MultiOp{create(path, "")}},
		}, xshard.Options{Deadline: time.Second})
		return err
	}
	if err := tx("/before"); err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(2 * time.Second))
	if err := tx("/after"); err != nil {
		t.Fatalf("first transaction after an idle spell: %v", err)
	}
}
