package server

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// TestClosingAConnectionDropsOnlyItsWatches: a connection's close drops its
// own watches without walking the member's others (before, every close,
// a 4-letter word's too, walked every watch under the lock applies wait
// for: seconds with millions), and leaves the others in place.
func TestClosingAConnectionDropsOnlyItsWatches(t *testing.T) {
	w := newWatches(0, 0)
	busy, idle := &conn{}, &conn{}
	for i := range 300_000 {
		w.add(fsm.WatchData, fmt.Sprintf("/w/%d", i), busy)
	}
	w.add(fsm.WatchChild, "/w/1", idle)
	w.add(fsm.WatchData, "/w/1", idle)
	require.NoError(t, w.addPersistentErr("/p", idle))
	looked := w.drop(idle)
	assert.False(t, w.holds(idle))
	assert.True(t, w.holds(busy))
	conns, paths, total := w.counts()
	assert.Equal(t, [3]int{1, 300_000, 300_000}, [3]int{conns, paths, total}, "only the closing connection's watches go")
	assert.LessOrEqual(t, looked, 4, "a close looks at the closing connection's watches, not the member's")
	w.drop(busy)
	assert.False(t, w.holds(busy))
	conns, paths, total = w.counts()
	assert.Zero(t, conns+paths+total)
}

// addPersistentErr is addPersistent's code as an error.
func (w *watches) addPersistentErr(path string, c *conn) error {
	if code, _ := w.addPersistent(path, c, 0); code != 0 {
		return code
	}
	return nil
}
