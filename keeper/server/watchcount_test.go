package server

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestWatchCountsFollowEveryChange: the counts the watch bounds are checked
// against (each connection's, the member's) stay equal to the watches the
// tables hold through every way a watch comes and goes (a read's, a
// replacement, addWatch, a watch that fires, removeWatches, a close): a
// count that drifted up would in time refuse every watch, one that
// drifted down would let the bound be passed.
func TestWatchCountsFollowEveryChange(t *testing.T) {
	w := newWatches(1000, 1500)
	a, b := &conn{q: newOutq(0, nil)}, &conn{q: newOutq(0, nil)}
	check := func(step string) {
		t.Helper()
		_, _, total := w.counts()
		assert.Equal(t, total, w.total, "%s: the member's count", step)
		assert.Equal(t, total, a.watchCount+b.watchCount, "%s: the connections' counts", step)
	}
	for i := range 10 {
		_, ok := w.add(fsm.WatchData, fmt.Sprintf("/d%d", i), a)
		require.True(t, ok)
		_, ok = w.add(fsm.WatchChild, fmt.Sprintf("/d%d", i), b)
		require.True(t, ok)
	}
	check("reads")
	w.add(fsm.WatchData, "/d1", a)
	check("a watch set again")
	code, _ := w.addPersistent("/d2", a, proto.AddWatchPersistent)
	require.Equal(t, proto.ErrOK, code)
	code, _ = w.addPersistent("/r", b, proto.AddWatchPersistentRecursive)
	require.Equal(t, proto.ErrOK, code)
	check("addWatch")
	w.trigger(fsm.Event{Type: proto.EventNodeDataChanged, Path: "/d3"})
	w.trigger(fsm.Event{Type: proto.EventNodeDeleted, Path: "/d4"})
	w.trigger(fsm.Event{Type: proto.EventNodeCreated, Path: "/r/x"})
	check("fired")
	assert.Equal(t, proto.ErrOK, w.remove("/d2", a, proto.WatcherAny, true))
	assert.Equal(t, proto.ErrOK, w.remove("/d5", b, proto.WatcherChildren, true))
	check("removed")
	w.drop(a)
	check("a closed")
	assert.Zero(t, a.watchCount)
	w.drop(b)
	check("b closed")
	assert.Zero(t, w.total)
}

// TestWatchBoundsRefuseOnlyNewWatches: at a bound, a watch the connection
// holds already may be set again (it takes no room); a new one is refused
// and names the bound it would pass.
func TestWatchBoundsRefuseOnlyNewWatches(t *testing.T) {
	w := newWatches(2, 3)
	a, b := &conn{}, &conn{}
	for _, p := range []string{"/1", "/2"} {
		_, ok := w.add(fsm.WatchData, p, a)
		require.True(t, ok)
	}
	_, ok := w.add(fsm.WatchData, "/1", a)
	assert.True(t, ok, "a watch held, set again")
	lim, ok := w.add(fsm.WatchChild, "/1", a)
	assert.False(t, ok)
	assert.Equal(t, watchBound{"keeper.max_watches_per_session", 2}, lim)
	code, lim := w.addPersistent("/1", a, proto.AddWatchPersistent)
	assert.Equal(t, proto.ErrQuotaExceeded, code, "a persistent watch takes a place in both tables")
	assert.Equal(t, "keeper.max_watches_per_session", lim.key)
	_, ok = w.add(fsm.WatchData, "/1", b)
	require.True(t, ok)
	lim, ok = w.add(fsm.WatchData, "/2", b)
	assert.False(t, ok)
	assert.Equal(t, watchBound{"keeper.max_watches_per_member", 3}, lim)
	_, _, total := w.counts()
	assert.Equal(t, 3, total, "a refused watch registers nothing")
}

// TestMultiReadWatchesAllOrNone: a multiRead's watches (MULTI_WATCHES)
// are set all or none: past a bound none is set; near it, those the
// connection holds already, and a path read twice, take room once.
func TestMultiReadWatchesAllOrNone(t *testing.T) {
	w := newWatches(3, 0)
	a := &conn{}
	_, ok := w.add(fsm.WatchData, "/held", a)
	require.True(t, ok)
	lim, ok := w.addReads(a, []fsm.ReadWatch{{Path: "/x", Kind: fsm.WatchData}, {Path: "/y", Kind: fsm.WatchData}, {Path: "/z", Kind: fsm.WatchChild}})
	assert.False(t, ok, "three new watches past a bound of 3 with one held")
	assert.Equal(t, watchBound{"keeper.max_watches_per_session", 3}, lim)
	_, _, total := w.counts()
	assert.Equal(t, 1, total, "none of them set")
	_, ok = w.addReads(a, []fsm.ReadWatch{{Path: "/held", Kind: fsm.WatchData}, {Path: "/x", Kind: fsm.WatchData}, {Path: "/x", Kind: fsm.WatchData}, {Path: "/y", Kind: fsm.WatchChild}})
	assert.True(t, ok, "the held one and a path read twice take no more room")
	_, _, total = w.counts()
	assert.Equal(t, 3, total)
	assert.Equal(t, 3, a.watchCount)
}
