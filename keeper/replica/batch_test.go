package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// sized is a proposal of request id that adds n bytes to an entry.
func sized(id uint64, n int) proposal {
	p := proposal{req: fsm.Request{ID: id}}
	p.req.Body = make([]byte, n-entryBytes(p))
	return p
}

// idsOf lists the request ids of a batch.
func idsOf(batch []proposal) (out []uint64) {
	for _, p := range batch {
		out = append(out, p.req.ID)
	}
	return out
}

// TestGatherBoundsABatch: a batch takes what is waiting up to the request
// count and the byte bound (counted as the entry holds requests); the
// request that would cross the byte bound starts the next batch, and one
// larger than the bound goes alone.
func TestGatherBoundsABatch(t *testing.T) {
	waiting := func(sizes ...int) chan proposal {
		ch := make(chan proposal, len(sizes))
		for i, n := range sizes {
			ch <- sized(uint64(i+2), n)
		}
		return ch
	}
	first := sized(1, 400)

	batch, _, held := gather([]proposal{first}, waiting(100, 100, 100), 1024, 1000)
	assert.Equal(t, []uint64{1, 2, 3, 4}, idsOf(batch), "everything waiting fits")
	assert.False(t, held)

	batch, _, held = gather([]proposal{first}, waiting(100, 100, 100), 2, 1000)
	assert.Equal(t, []uint64{1, 2}, idsOf(batch), "the request count bounds the batch")
	assert.False(t, held, "a request left waiting was not taken")

	more := waiting(300, 400, 100)
	batch, next, held := gather([]proposal{first}, more, 1024, 1000)
	assert.Equal(t, []uint64{1, 2}, idsOf(batch), "the byte bound ends the batch")
	require.True(t, held)
	assert.EqualValues(t, 3, next.req.ID, "the request that did not fit starts the next batch")
	batch, _, held = gather([]proposal{next}, more, 1024, 1000)
	assert.Equal(t, []uint64{3, 4}, idsOf(batch))
	assert.False(t, held)

	big := sized(1, 5000)
	more = waiting(100, 6000)
	batch, next, held = gather([]proposal{big}, more, 1024, 1000)
	assert.Equal(t, []uint64{1}, idsOf(batch), "a request over the bound goes alone")
	require.True(t, held)
	batch, next, held = gather([]proposal{next}, more, 1024, 1000)
	assert.Equal(t, []uint64{2}, idsOf(batch))
	require.True(t, held)
	batch, _, held = gather([]proposal{next}, more, 1024, 1000)
	assert.Equal(t, []uint64{3}, idsOf(batch), "so does a request over the bound that was held")
	assert.False(t, held)

	manyIDs := proposal{req: fsm.Request{ID: 1, IDs: identitiesAtBound()}}
	batch, _, held = gather([]proposal{manyIDs}, waiting(100), 1024, entryBytes(manyIDs)+99)
	assert.Equal(t, []uint64{1}, idsOf(batch), "identities count toward the bound")
	assert.True(t, held)
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

	// Held decisions count toward the byte bound: one that does not fit
	// beside them is not held, and goes in the next batch.
	b = &batcher{proposals: proposals, unhold: unhold, closed: make(chan struct{}), max: 1024, maxBytes: 1000, hold: time.Hour}
	decision := func(id uint64) proposal { p := sized(id, 600); p.req.Op = proto.OpXDelete; return p }
	within := func(got chan []proposal) []uint64 {
		select {
		case batch := <-got:
			return idsOf(batch)
		case <-time.After(10 * time.Second):
			t.Fatal("no batch: decisions held past the byte bound")
			return nil
		}
	}
	got = next()
	proposals <- decision(10)
	proposals <- decision(11)
	assert.Equal(t, []uint64{10}, within(got), "a decision that does not fit beside the held ones")
	assert.Equal(t, []uint64{11}, within(next()))
	got = next()
	proposals <- decision(12)
	proposals <- sized(13, 600)
	assert.Equal(t, []uint64{12}, within(got), "a request that does not fit beside the held decisions")
	assert.Equal(t, []uint64{13}, within(next()))
}
