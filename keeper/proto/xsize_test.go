package proto

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxResultBytesBoundsResults: the largest result each op of a
// cross-shard transaction can get (a sequential name with the longest
// counter, a failure) takes no more bytes than maxResultBytes says, and
// as many for a create.
func TestMaxResultBytesBoundsResults(t *testing.T) {
	const path = "/some/path-"
	seq := path + fmt.Sprintf("%010d", int32(math.MinInt32))
	stat := Stat{Version: 1}
	create := func(op OpCode, flags int32) MultiOp {
		return MultiOp{Op: op, Req: &CreateRequest{Path: path, Flags: flags}}
	}
	for _, c := range []struct {
		op     MultiOp
		result MultiResult
	}{
		{create(OpCreate, 0), MultiResult{Op: OpCreate, Resp: &PathRequest{Path: path}}},
		{create(OpCreate, FlagSequential), MultiResult{Op: OpCreate, Resp: &PathRequest{Path: seq}}},
		{create(OpCreate, FlagContainer), MultiResult{Op: OpCreate2, Resp: &Create2Response{Path: path, Stat: stat}}},
		{create(OpCreate2, FlagSequential), MultiResult{Op: OpCreate2, Resp: &Create2Response{Path: seq, Stat: stat}}},
		{MultiOp{Op: OpCreateTTL, Req: &CreateTTLRequest{CreateRequest: CreateRequest{Path: path, Flags: FlagSequential}}},
			MultiResult{Op: OpCreateTTL, Resp: &Create2Response{Path: seq, Stat: stat}}},
		{MultiOp{Op: OpSetData, Req: &SetDataRequest{Path: path}}, MultiResult{Op: OpSetData, Resp: &StatResponse{Stat: stat}}},
		{MultiOp{Op: OpDelete, Req: &PathVersionRequest{Path: path}}, MultiResult{Op: OpDelete}},
		{MultiOp{Op: OpCheck, Req: &PathVersionRequest{Path: path}}, MultiResult{Op: OpError, Err: ErrBadVersion}},
	} {
		end := len(Marshal(&MultiResponse{}))
		n := len(Marshal(&MultiResponse{Results: []MultiResult{c.result}})) - end
		assert.LessOrEqual(t, n, maxResultBytes(c.op), "%v", c.op.Op)
		if _, ok := c.op.Req.(*CreateRequest); ok {
			assert.Equal(t, n, maxResultBytes(c.op), "%v", c.op.Op)
		}
	}
}

// TestFitNamesWhatDoesNotFit: a transaction fits a limit until one of its
// messages outgrows it; the error says which, and is ErrTooLarge.
func TestFitNamesWhatDoesNotFit(t *testing.T) {
	ops := func(n int, data string) MultiRequest {
		var m MultiRequest
		for range n {
			m.Ops = append(m.Ops, MultiOp{Op: OpCreate2, Req: &CreateRequest{Path: "/x", Data: []byte(data), Flags: FlagSequential}})
		}
		return m
	}
	tx := func(b MultiRequest) *XTransactionRequest {
		return &XTransactionRequest{ID: "id", Coordinator: "a", Shards: []ShardOps{{Shard: "a", Ops: ops(1, "")}, {Shard: "b", Ops: b}}}
	}
	ids := []ID{{Scheme: "digest", ID: "user:hash"}}
	require.NoError(t, tx(ops(10, "")).Fit(ids, 4096))
	err := tx(ops(10, string(make([]byte, 400)))).Fit(ids, 4096)
	require.ErrorIs(t, err, ErrTooLarge)
	assert.Contains(t, err.Error(), "the prepare for shard b")
	err = tx(ops(50, "")).Fit(ids, 4096)
	require.ErrorIs(t, err, ErrTooLarge)
	assert.Contains(t, err.Error(), "a reply of shard b")
}

// TestBoundRemoveRecursive: a removeRecursive's limit above
// MaxRemoveRecursive is lowered to it, alone and in a multi; one at or
// below it, and every other request, is left as it is.
func TestBoundRemoveRecursive(t *testing.T) {
	over := &RemoveRecursiveRequest{Path: "/a", Limit: MaxRemoveRecursive + 1}
	assert.True(t, BoundRemoveRecursive(over))
	assert.Equal(t, uint32(MaxRemoveRecursive), over.Limit)
	at := &RemoveRecursiveRequest{Path: "/a", Limit: MaxRemoveRecursive}
	assert.False(t, BoundRemoveRecursive(at))
	multi := &MultiRequest{Ops: []MultiOp{
		{Op: OpCreate, Req: &CreateRequest{Path: "/b"}},
		{Op: OpRemoveRecursive, Req: &RemoveRecursiveRequest{Path: "/a", Limit: 1 << 31}},
	}}
	assert.True(t, BoundRemoveRecursive(multi))
	assert.Equal(t, uint32(MaxRemoveRecursive), multi.Ops[1].Req.(*RemoveRecursiveRequest).Limit)
	assert.False(t, BoundRemoveRecursive(&PathVersionRequest{Path: "/a"}))
}
