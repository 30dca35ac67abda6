package proto

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFeatureBitmap: flag n is bit 7-n%8 of byte n/8, as ClickHouse's
// KeeperFeatureFlags reads it, and the bitmap covers every flag ClickHouse
// knows.
func TestFeatureBitmap(t *testing.T) {
	assert.Equal(t, []byte{0x80, 0}, FeatureBitmap(FeatureFilteredList))
	assert.Equal(t, []byte{0x08, 0}, FeatureBitmap(FeatureRemoveRecursive))
	assert.Equal(t, []byte{0, 0x40}, FeatureBitmap(FeatureTryRemove))
	assert.Equal(t, []byte{0, 0x20}, FeatureBitmap(FeatureListWithStatAndData))
	assert.Equal(t, []byte{0, 0, 0x80}, FeatureBitmap(16), "a flag past ClickHouse's grows it")
	b := FeatureBitmap(Features...)
	for f := FeatureFlag(0); f < featureCount+8; f++ {
		want := false
		for _, on := range Features {
			want = want || on == f
		}
		assert.Equal(t, want, FeatureEnabled(b, f), "flag %d", f)
	}
}

// TestKeeperExtensionRecords: ClickHouse Keeper's request records in the
// bytes ClickHouse writes (ZooKeeperCommon.cpp): filteredList's kind is
// one byte, removeRecursive's limit four.
func TestKeeperExtensionRecords(t *testing.T) {
	assert.Equal(t, []byte{0, 0, 0, 2, '/', 'l', 1, 2}, Marshal(FilteredList("/l", true, ListEphemeralOnly)))
	assert.Equal(t, []byte{0, 0, 0, 2, '/', 'r', 0xff, 0xff, 0xff, 0xfe}, Marshal(&RemoveRecursiveRequest{Path: "/r", Limit: 1<<32 - 2}))
	var r RemoveRecursiveRequest
	assert.NoError(t, Unmarshal([]byte{0, 0, 0, 2, '/', 'r', 0xff, 0xff, 0xff, 0xfe}, &r))
	assert.Equal(t, uint32(1<<32-2), r.Limit)
	for op, want := range map[OpCode]Record{OpFilteredList: &FilteredListRequest{}, OpRemoveRecursive: &RemoveRecursiveRequest{},
		OpCheckNotExists: &PathVersionRequest{}, OpTryRemove: &PathVersionRequest{}, OpCreateIfNotExists: &CreateRequest{},
		OpCheckStat: &CheckStatRequest{}} {
		assert.Equal(t, want, NewRequest(op), "%v", op)
		assert.Equal(t, want, NewMultiOpRequest(op), "%v", op)
	}
	assert.True(t, IsWrite(OpRemoveRecursive))
	assert.False(t, IsWrite(OpFilteredList))
	assert.Equal(t, "removeRecursive", OpRemoveRecursive.String())
	assert.True(t, IsWrite(OpCheckStat), "a check: through the log")
	assert.True(t, NamesEndpointSessions(&RemoveRecursiveRequest{Path: EndpointSessions}))
}

// TestMultiDialects: a multiRead's watch flags dropped (ZooKeeper's
// dialect), and a multi's create2 results in ZooKeeper's form: a
// create's, the path alone, but a container's, which ZooKeeper answers
// with its stat too.
func TestMultiDialects(t *testing.T) {
	reads := &MultiRequest{Ops: []MultiOp{{Op: OpGetData, Req: &PathWatchRequest{Path: "/a", Watch: true}},
		{Op: OpFilteredList, Req: FilteredList("/b", true, ListAll)}, {Op: OpExists, Req: &PathWatchRequest{Path: "/c"}}}}
	assert.True(t, reads.DropReadWatches())
	assert.Equal(t, &MultiRequest{Ops: []MultiOp{{Op: OpGetData, Req: &PathWatchRequest{Path: "/a"}},
		{Op: OpFilteredList, Req: FilteredList("/b", false, ListAll)}, {Op: OpExists, Req: &PathWatchRequest{Path: "/c"}}}}, reads)
	assert.False(t, reads.DropReadWatches(), "none left")

	ops := []MultiOp{{Op: OpCreate2, Req: &CreateRequest{Path: "/x"}}, {Op: OpCreate2, Req: &CreateRequest{Path: "/y", Flags: FlagContainer}},
		{Op: OpCreate, Req: &CreateRequest{Path: "/z"}}}
	stat := Stat{Czxid: 5, Mzxid: 5, DataLength: 3}
	m := &MultiResponse{Results: []MultiResult{{Op: OpCreate2, Resp: &Create2Response{Path: "/x", Stat: stat}},
		{Op: OpCreate2, Resp: &Create2Response{Path: "/y", Stat: stat}}, {Op: OpCreate, Resp: &PathRequest{Path: "/z"}}}}
	assert.True(t, (&MultiRequest{Ops: ops}).HoldsCreate2())
	assert.Equal(t, []MultiResult{{Op: OpCreate, Resp: &PathRequest{Path: "/x"}}, {Op: OpCreate2, Resp: &Create2Response{Path: "/y", Stat: stat}},
		{Op: OpCreate, Resp: &PathRequest{Path: "/z"}}}, m.ZooKeeperForm(ops).Results)
	failed := FailedMulti(3, 0, ErrNodeExists)
	assert.Equal(t, FailedMulti(3, 0, ErrNodeExists), failed.ZooKeeperForm(ops), "a failed multi's results stay")
}
