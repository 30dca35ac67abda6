package keeper_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// TestSmoke: a 3-member shard serves a ZooKeeper client end to end: a
// create, a read with its stat, the root's children, sequential
// ephemerals, and a data watch fired by a set.
func TestSmoke(t *testing.T) {
	c := testenv.StartShard(t, 3)
	conn := connectZK(t, c.Servers("a"), 4*time.Second)
	p, err := conn.Create("/x", []byte("hi"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	assert.Equal(t, "/x", p)
	data, st, err := conn.Get("/x")
	require.NoError(t, err)
	assert.Equal(t, "hi", string(data))
	assert.Equal(t, int32(0), st.Version)
	assert.Equal(t, int32(2), st.DataLength)
	assert.Equal(t, st.Czxid, st.Mzxid)
	kids, _, err := conn.Children("/")
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"x", "zookeeper"}, kids)
	for i, want := range []string{"/x/s-0000000000", "/x/s-0000000001", "/x/s-0000000002"} {
		p, err := conn.Create("/x/s-", nil, zk.FlagSequence|zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err, "sequential ephemeral %d", i)
		assert.Equal(t, want, p)
	}
	_, _, wch, err := conn.GetW("/x")
	require.NoError(t, err)
	_, err = conn.Set("/x", []byte("b"), -1)
	require.NoError(t, err)
	select {
	case e := <-wch:
		assert.Equal(t, zk.EventNodeDataChanged, e.Type)
		assert.Equal(t, "/x", e.Path)
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event after the set")
	}
}
