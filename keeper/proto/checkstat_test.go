package proto

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckStatRecord: checkStat's request in the bytes ClickHouse 26.7
// writes (docs/clickhouse-keeper-layouts.md): path, int32 version, then
// ZooKeeper's 68-byte Stat; alone and as a multi's op.
func TestCheckStatRecord(t *testing.T) {
	r := &CheckStatRequest{Path: "/c", Version: 7, Stat: Stat{Czxid: 1, Mzxid: 2, Ctime: 3, Mtime: 4, Version: 5,
		Cversion: 6, Aversion: -1, EphemeralOwner: 8, DataLength: 9, NumChildren: 10, Pzxid: 11}}
	want := []byte{0, 0, 0, 2, '/', 'c', 0, 0, 0, 7,
		0, 0, 0, 0, 0, 0, 0, 1, // czxid
		0, 0, 0, 0, 0, 0, 0, 2, // mzxid
		0, 0, 0, 0, 0, 0, 0, 3, // ctime
		0, 0, 0, 0, 0, 0, 0, 4, // mtime
		0, 0, 0, 5, // version
		0, 0, 0, 6, // cversion
		0xff, 0xff, 0xff, 0xff, // aversion
		0, 0, 0, 0, 0, 0, 0, 8, // ephemeralOwner
		0, 0, 0, 9, // dataLength
		0, 0, 0, 10, // numChildren
		0, 0, 0, 0, 0, 0, 0, 11, // pzxid
	}
	require.Len(t, want, 6+4+68)
	assert.Equal(t, want, Marshal(r))
	var back CheckStatRequest
	require.NoError(t, Unmarshal(want, &back))
	assert.Equal(t, r, &back)
	require.Error(t, Unmarshal(want[:len(want)-1], &back), "a short stat does not decode")
	assert.Equal(t, []string{"/c"}, Paths(r))

	m := &MultiRequest{Ops: []MultiOp{{Op: OpCheckStat, Req: r}, {Op: OpDelete, Req: &PathVersionRequest{Path: "/d", Version: -1}}}}
	body := Marshal(m)
	assert.Equal(t, []byte{0, 0, 0x01, 0xf8, 0, 0xff, 0xff, 0xff, 0xff}, body[:9], "the op's header: 504, not done, -1")
	assert.Equal(t, want, body[9:9+len(want)])
	var mback MultiRequest
	require.NoError(t, Unmarshal(body, &mback))
	assert.Equal(t, m, &mback)
	assert.True(t, MultiBodyHoldsCheckStat(body))
	assert.False(t, MultiBodyHoldsCheckStat(Marshal(&MultiRequest{Ops: m.Ops[1:]})))
	assert.False(t, MultiBodyHoldsCheckStat(body[:20]), "a body that does not decode")
	assert.Equal(t, []string{"/c", "/d"}, Paths(m))

	var resp MultiResponse
	require.NoError(t, Unmarshal(Marshal(&MultiResponse{Results: []MultiResult{{Op: OpCheckStat}}}), &resp))
	assert.Equal(t, []MultiResult{{Op: OpCheckStat}}, resp.Results, "its result has no body")
}

// TestCheckStatMatches: every field that is not -1 is compared, the
// version too; -1 matches anything.
func TestCheckStatMatches(t *testing.T) {
	node := Stat{Czxid: 1, Mzxid: 2, Ctime: 3, Mtime: 4, Version: 5, Cversion: 6, Aversion: 7,
		EphemeralOwner: 8, DataLength: 9, NumChildren: 10, Pzxid: 11}
	assert.True(t, (&CheckStatRequest{Version: -1, Stat: AnyStat()}).Matches(&node))
	assert.True(t, (&CheckStatRequest{Version: 5, Stat: node}).Matches(&node))
	assert.False(t, (&CheckStatRequest{Version: 4, Stat: AnyStat()}).Matches(&node))
	fields := []func(*Stat){
		func(s *Stat) { s.Czxid++ }, func(s *Stat) { s.Mzxid++ }, func(s *Stat) { s.Ctime++ }, func(s *Stat) { s.Mtime++ },
		func(s *Stat) { s.Version++ }, func(s *Stat) { s.Cversion++ }, func(s *Stat) { s.Aversion++ },
		func(s *Stat) { s.EphemeralOwner++ }, func(s *Stat) { s.DataLength++ }, func(s *Stat) { s.NumChildren++ },
		func(s *Stat) { s.Pzxid++ },
	}
	for i, change := range fields {
		s := node
		change(&s)
		assert.False(t, (&CheckStatRequest{Version: -1, Stat: s}).Matches(&node), "field %d", i)
	}
}
