package replica

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// TestUnblockOnCloseReachesRaftsFuture: the future raft's Apply returns
// has the ShutdownCh that unblockOnClose sets (promoted from an embedded
// struct), so that its Error returns once the replica closes, although
// raft has not answered it; the field's index is looked up once per type.
func TestUnblockOnCloseReachesRaftsFuture(t *testing.T) {
	r := newSoloMember(t).mustOpen(LogStoreWAL)
	// The state machine cannot apply while the state is read: the entry
	// commits, and its future stays unanswered.
	reading, release := make(chan struct{}), make(chan struct{})
	go r.View(func(*fsm.State) { close(reading); <-release })
	<-reading
	defer close(release)
	f := r.raft.Apply(fsm.EncodeEntry(nil, time.Now().UnixMilli(), nil), 10*time.Second)
	closed := make(chan struct{})
	unblockOnClose(f, closed)
	typ := reflect.TypeOf(f).Elem()
	index, ok := shutdownFields.Load(typ)
	require.True(t, ok, "the field's index is remembered for the future's type")
	require.NotNil(t, index, "raft's future has a ShutdownCh")
	assert.Equal(t, closed, reflect.ValueOf(f).Elem().FieldByIndex(index.([]int)).Interface(), "unblockOnClose set it")

	answered := make(chan error, 1)
	go func() { answered <- f.Error() }()
	close(closed)
	select {
	case err := <-answered:
		assert.ErrorIs(t, err, raft.ErrRaftShutdown)
	case <-time.After(10 * time.Second):
		t.Fatal("the future's Error still waits after the replica closed")
	}
}
