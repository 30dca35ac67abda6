package replica

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
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

	batch, _, held := gather(first, waiting(10, 10, 10), 1024, 100)
	assert.Equal(t, []uint64{1, 2, 3, 4}, ids(batch), "everything waiting fits")
	assert.False(t, held)

	batch, _, held = gather(first, waiting(10, 10, 10), 2, 100)
	assert.Equal(t, []uint64{1, 2}, ids(batch), "the request count bounds the batch")
	assert.False(t, held, "a request left waiting was not taken")

	more := waiting(30, 40, 10)
	batch, next, held := gather(first, more, 1024, 100)
	assert.Equal(t, []uint64{1, 2}, ids(batch), "the byte bound ends the batch")
	require.True(t, held)
	assert.EqualValues(t, 3, next.req.ID, "the request that did not fit starts the next batch")
	batch, _, held = gather(next, more, 1024, 100)
	assert.Equal(t, []uint64{3, 4}, ids(batch))
	assert.False(t, held)

	big := proposal{req: fsm.Request{ID: 1, Body: make([]byte, 500)}}
	more = waiting(1, 600)
	batch, next, held = gather(big, more, 1024, 100)
	assert.Equal(t, []uint64{1}, ids(batch), "a request over the bound goes alone")
	require.True(t, held)
	batch, next, held = gather(next, more, 1024, 100)
	assert.Equal(t, []uint64{2}, ids(batch))
	require.True(t, held)
	batch, _, held = gather(next, more, 1024, 100)
	assert.Equal(t, []uint64{3}, ids(batch), "so does a request over the bound that was held")
	assert.False(t, held)
}
