package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestGatherBoundsABatch: a batch takes what is waiting up to the request
// count and the byte bound; the request that would cross the byte bound
// starts the next batch, and one larger than the bound goes alone.
func TestGatherBoundsABatch(t *testing.T) {
	waiting := func(sizes ...int) chan proposal {
		ch := make(chan proposal, len(sizes))
		for i, n := range sizes {
			ch <- proposal{req: fsm.Request{ID: uint64(i + 2), Body: make([]byte, n)}}
		}
		return ch
	}
	ids := func(batch []proposal) (out []uint64) {
		for _, p := range batch {
			out = append(out, p.req.ID)
		}
		return out
	}
	first := proposal{req: fsm.Request{ID: 1, Body: make([]byte, 40)}}

	batch, _, held := gather([]proposal{first}, waiting(10, 10, 10), 1024, 100)
	assert.Equal(t, []uint64{1, 2, 3, 4}, ids(batch), "everything waiting fits")
	assert.False(t, held)

	batch, _, held = gather([]proposal{first}, waiting(10, 10, 10), 2, 100)
	assert.Equal(t, []uint64{1, 2}, ids(batch), "the request count bounds the batch")
	assert.False(t, held, "a request left waiting was not taken")

	more := waiting(30, 40, 10)
	batch, next, held := gather([]proposal{first}, more, 1024, 100)
	assert.Equal(t, []uint64{1, 2}, ids(batch), "the byte bound ends the batch")
	require.True(t, held)
	assert.EqualValues(t, 3, next.req.ID, "the request that did not fit starts the next batch")
	batch, _, held = gather([]proposal{next}, more, 1024, 100)
	assert.Equal(t, []uint64{3, 4}, ids(batch))
	assert.False(t, held)

	big := proposal{req: fsm.Request{ID: 1, Body: make([]byte, 500)}}
	more = waiting(1, 600)
	batch, next, held = gather([]proposal{big}, more, 1024, 100)
	assert.Equal(t, []uint64{1}, ids(batch), "a request over the bound goes alone")
	require.True(t, held)
	batch, next, held = gather([]proposal{next}, more, 1024, 100)
	assert.Equal(t, []uint64{2}, ids(batch))
	require.True(t, held)
	batch, _, held = gather([]proposal{next}, more, 1024, 100)
	assert.Equal(t, []uint64{3}, ids(batch), "so does a request over the bound that was held")
	assert.False(t, held)
}

// TestBatcherHoldsDecisionsForTheNextRequest: a cross-shard decision or
// cleanup waits for the next request of another kind and goes first in its
// batch; held alone, it goes when a request meets a lock (unhold) or when
// the hold ends; one that comes after a lock was met is not held; a plain
// request is never held.
func TestBatcherHoldsDecisionsForTheNextRequest(t *testing.T) {
	proposals, unhold, closed := make(chan proposal, 16), make(chan struct{}, 1), make(chan struct{})
	b := &batcher{proposals: proposals, unhold: unhold, closed: closed, max: 1024, maxBytes: 1 << 20, hold: time.Hour}
	req := func(id uint64, op proto.OpCode) proposal { return proposal{req: fsm.Request{ID: id, Op: op}} }
	ops := func(batch []proposal) (out []proto.OpCode) {
		for _, p := range batch {
			out = append(out, p.req.Op)
		}
		return out
	}
	next := func() chan []proposal {
		ch := make(chan []proposal, 1)
		go func() { ch <- b.batch() }()
		return ch
	}

	proposals <- req(1, proto.OpSetData)
	assert.Equal(t, []proto.OpCode{proto.OpSetData}, ops(<-next()), "a plain request goes at once")

	got := next()
	proposals <- req(2, proto.OpXCommit)
	proposals <- req(3, proto.OpXCommitDelete)
	proposals <- req(4, proto.OpXDelete)
	proposals <- req(5, proto.OpXPrepare)
	assert.Equal(t, []proto.OpCode{proto.OpXCommit, proto.OpXCommitDelete, proto.OpXDelete, proto.OpXPrepare}, ops(<-got),
		"the decisions wait for the prepare and go first, in their order")

	got = next()
	proposals <- req(6, proto.OpXCommit)
	require.Eventually(t, func() bool { return len(proposals) == 0 }, 10*time.Second, time.Millisecond)
	select {
	case batch := <-got:
		t.Fatalf("a decision alone went without waiting: %v", ops(batch))
	default:
	}
	unhold <- struct{}{}
	assert.Equal(t, []proto.OpCode{proto.OpXCommit}, ops(<-got), "a request met a lock: the held decision goes")

	// The lock just met would let the next decision through at once: a
	// batcher of its own shows what closing leaves.
	b = &batcher{proposals: proposals, unhold: unhold, closed: closed, max: 1024, maxBytes: 1 << 20, hold: time.Hour}
	got = next()
	proposals <- req(7, proto.OpXCommit)
	require.Eventually(t, func() bool { return len(proposals) == 0 }, 10*time.Second, time.Millisecond)
	close(closed)
	assert.Nil(t, <-got)
	assert.Equal(t, []proto.OpCode{proto.OpXCommit}, ops(b.stop()), "what was held is returned to be failed")

	b = &batcher{proposals: proposals, unhold: unhold, closed: make(chan struct{}), max: 1024, maxBytes: 1 << 20, hold: time.Millisecond}
	got = next()
	proposals <- req(8, proto.OpXDelete)
	assert.Equal(t, []proto.OpCode{proto.OpXDelete}, ops(<-got), "the hold ends")

	// A lock met before the decision that frees it came: it is not held.
	b = &batcher{proposals: proposals, unhold: unhold, closed: make(chan struct{}), max: 1024, maxBytes: 1 << 20, hold: time.Hour}
	got = next()
	unhold <- struct{}{}
	require.Eventually(t, func() bool { return len(unhold) == 0 }, 10*time.Second, time.Millisecond)
	proposals <- req(9, proto.OpXCommit)
	assert.Equal(t, []proto.OpCode{proto.OpXCommit}, ops(<-got), "a decision after a lock was met goes at once")
}
