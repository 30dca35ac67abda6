package replica

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// TestUnblockOnCloseReachesRaftsFuture: the future raft's Apply returns
// has the ShutdownCh that unblockOnClose sets (promoted from an embedded
// struct), so that its Error returns once the replica closes; the field's
// index is looked up once per type.
func TestUnblockOnCloseReachesRaftsFuture(t *testing.T) {
	r := newSoloMember(t).mustOpen(LogStoreWAL)
	f := r.raft.Apply(fsm.EncodeEntry(nil, time.Now().UnixMilli(), nil), 10*time.Second)
	closed := make(chan struct{})
	unblockOnClose(f, closed)
	typ := reflect.TypeOf(f).Elem()
	index := shutdownField(typ)
	require.NotNil(t, index, "raft's future has a ShutdownCh")
	assert.Equal(t, index, shutdownField(typ), "remembered")
	got := reflect.ValueOf(f).Elem().FieldByIndex(index).Interface()
	assert.Equal(t, closed, got, "unblockOnClose set it")
	require.NoError(t, f.Error())
}
