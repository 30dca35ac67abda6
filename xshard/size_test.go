package xshard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// sizeDeadline is the deadline of the large transactions below; they
// must end (answered, every record and lock gone) within it and
// sizeMargin. Both are generous: a shard applies each of them (a dry run,
// then the commit) on every member, under the race detector, on a
// machine that runs other tests.
const (
	sizeDeadline = 15 * time.Second
	sizeMargin   = 5 * time.Second
)

// bigTx is a create of parent on shard a and, on shard b, of parent and
// n children of it that mk makes.
func bigTx(parent string, n int, mk func(parent string, i int) proto.MultiOp) []xshard.MultiRequestForShard {
	b := []proto.MultiOp{create(parent, "")}
	for i := range n {
		b = append(b, mk(parent, i))
	}
	return []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create(parent, "")}},
		{Shard: "b", Requests: b},
	}
}

// plainCreate is issue 37's op: /k/00000… with data "x".
func plainCreate(parent string, i int) proto.MultiOp {
	return create(fmt.Sprintf("%s/%05d", parent, i), "x")
}

// containerCreate is the op whose reply outgrows its request most: in a
// multi, a create with the container flag alone answers a stat beside its
// path.
func containerCreate(parent string, i int) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpCreate2, Req: &proto.CreateRequest{Path: fmt.Sprintf("%s/%05d", parent, i),
		ACL: proto.WorldACL(proto.PermAll), Flags: proto.FlagContainer}}
}

// asRequest is the xTransaction the client API sends for reqs.
func asRequest(reqs []xshard.MultiRequestForShard) *proto.XTransactionRequest {
	tx := &proto.XTransactionRequest{ID: uuid.NewString(), Coordinator: reqs[0].Shard}
	for _, rq := range reqs {
		tx.Shards = append(tx.Shards, proto.ShardOps{Shard: rq.Shard, Ops: proto.MultiRequest{Ops: rq.Requests}})
	}
	return tx
}

// clientIDs are the identities a member gives a connection from the
// loopback address without auth.
var clientIDs = []proto.ID{{Scheme: "ip", ID: "127.0.0.1"}}

// largestFit returns the most ops mk makes that a transaction may hold
// on shard b: the boundary of the size check, as the coordinator sees it.
func largestFit(t *testing.T, parent string, mk func(string, int) proto.MultiOp) int {
	lo := testenv.Largest(func(n int) bool { return asRequest(bigTx(parent, n, mk)).Fit(clientIDs, proto.DefaultMaxPacket) == nil })
	require.Positive(t, lo)
	return lo
}

// runEnds runs a legal transaction and asserts that it ends (answered,
// no record and no lock left on any member of either shard) before its
// deadline and a small margin. It reports whether it committed: it may
// fail only as late (its prepare reached a shard past the deadline, on a
// machine too busy), never as too large.
func runEnds(t *testing.T, c *testenv.Cluster, r *xshard.Router, reqs []xshard.MultiRequestForShard) bool {
	t.Helper()
	end := time.Now().Add(sizeDeadline + sizeMargin)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	res, err := xshard.CrossShardTransaction(ctx, r, reqs, xshard.Options{Deadline: sizeDeadline})
	var xe *xshard.Error
	if !errors.As(err, &xe) || xe.Code != proto.ErrOperationTimeout {
		require.NoError(t, err)
		require.Len(t, res, 2)
		assert.Len(t, res[1].Results, len(reqs[1].Requests))
	}
	for records(c, "a")+records(c, "b") != 0 {
		require.True(t, time.Now().Before(end), "records or locks left past the deadline")
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Logf("failed late: %v", err)
	}
	return err == nil
}

// refusedAtOnce asserts that a transaction is refused as too large,
// through the client API and sent straight to the coordinator (whose own
// check is the one that counts), at once and with nothing prepared.
func refusedAtOnce(t *testing.T, c *testenv.Cluster, r *xshard.Router, reqs []xshard.MultiRequestForShard) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sizeDeadline)
	defer cancel()
	start := time.Now()
	_, err := xshard.CrossShardTransaction(ctx, r, reqs, xshard.Options{Deadline: sizeDeadline})
	require.ErrorIs(t, err, proto.ErrTooLarge)
	var resp proto.XTransactionResponse
	err = r.Do(ctx, "a", proto.OpXTransaction, asRequest(reqs), &resp)
	require.ErrorIs(t, err, proto.ErrTooLarge, "the coordinator's own check")
	assert.Less(t, time.Since(start), sizeDeadline/3, "refused at once")
	assert.Zero(t, records(c, "a")+records(c, "b"), "nothing prepared, nothing locked")
}

// TestLargeTransactions runs issue 37's transaction, then, for the op
// whose reply outgrows its request most (a container's create), the
// largest transaction the size check admits and the smallest it refuses,
// on one cluster of two shards. A shard has one member: the links between
// shards are under test, and each member applies every large entry twice
// (a dry run, then the commit), which the race detector makes slow.
func TestLargeTransactions(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	defer r.Close()

	// One create on a, 15,001 on b (a 850 KB request). Its prepare reply
	// used to carry b's ops beside their results, too large for the
	// member link, and the link was retried for ever: the transaction
	// never ended and kept every znode it touched locked.
	t.Run("issue 37", func(t *testing.T) {
		if runEnds(t, c, r, bigTx("/k", 15000, plainCreate)) {
			_, ok := node(t, c, "b", "/k/14999")
			assert.True(t, ok)
		}
	})
	n := largestFit(t, "/c", containerCreate)
	t.Logf("largest fit: %d container creates on b", n)
	t.Run("smallest refused", func(t *testing.T) { refusedAtOnce(t, c, r, bigTx("/c", n+1, containerCreate)) })
	t.Run("largest admitted", func(t *testing.T) { runEnds(t, c, r, bigTx("/c", n, containerCreate)) })
}

// refusingShard is a one-shard cluster's own shard whose log refuses
// every prepare with err; it records the other messages it gets.
type refusingShard struct {
	err error
	mu  sync.Mutex
	got []proto.OpCode
}

func (l *refusingShard) Shard() string { return "a" }

func (l *refusingShard) Submit(_ context.Context, op proto.OpCode, req proto.Record) (*proto.XRecord, error) {
	if op == proto.OpXPrepare {
		return nil, l.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, op)
	return &proto.XRecord{ID: req.(*proto.XIDRequest).ID, Status: proto.XFailed}, nil
}

func (l *refusingShard) sent() []proto.OpCode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

func (l *refusingShard) Time() int64                                                      { return time.Now().UnixMilli() }
func (l *refusingShard) Now() int64                                                       { return time.Now().UnixMilli() }
func (l *refusingShard) Records() []proto.XRecord                                         { return nil }
func (l *refusingShard) Record(string) *proto.XRecord                                     { return nil }
func (l *refusingShard) IsLeader() bool                                                   { return true }
func (l *refusingShard) AwaitUnlocked(context.Context, *proto.XPrepareRequest, time.Time) {}

// TestPrepareThatCannotBeTakenFails: a prepare that a shard can never
// take (too large for the link, or answered with an error code: the shard
// recorded nothing) fails the transaction at once, with the reason, and
// the failure and cleanup are sent as for any refusal. It used to be an
// error that left the transaction pending, to be driven again for ever.
func TestPrepareThatCannotBeTakenFails(t *testing.T) {
	cfg := &config.Cluster{Shards: []config.Shard{{Name: "a"}}}
	for _, c := range []struct {
		err  error
		code proto.Code
	}{
		{fmt.Errorf("client: xPrepare request of 2000000 bytes: %w", proto.ErrFrameTooLarge), proto.ErrTooLarge},
		{proto.ErrMarshallingError, proto.ErrMarshallingError},
	} {
		local := &refusingShard{err: c.err}
		r := xshard.NewRouter(cfg, testenv.TestLogger(t))
		t.Cleanup(r.Close)
		s := xshard.NewService(local, r, testenv.TestLogger(t))
		resp, err := s.Run(ctxT(t), &proto.XTransactionRequest{ID: uuid.NewString(), Coordinator: "a",
			Shards: []proto.ShardOps{{Shard: "a", Ops: proto.MultiRequest{Ops: []proto.MultiOp{create("/x", "")}}}}}, nil)
		require.NoError(t, err, "%v", c.err)
		assert.Equal(t, proto.XFailed, resp.Status)
		assert.Equal(t, c.code, resp.Err)
		assert.Equal(t, "a", resp.FailedShard)
		waitFor(t, func() bool { return len(local.sent()) == 2 })
		s.Close()
		assert.Equal(t, []proto.OpCode{proto.OpXFail, proto.OpXDelete}, local.sent())
	}
}
