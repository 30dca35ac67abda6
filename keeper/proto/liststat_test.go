package proto

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListWithStatsAndDataRecords: the list with stat and data in the
// bytes ClickHouse 26.7 writes and reads (docs/clickhouse-keeper-layouts.md):
// the request is a filteredList's then one byte each for with_stat and
// with_data; the reply is names, the parent's stat, a vector of stats and
// a vector of data, both always there.
func TestListWithStatsAndDataRecords(t *testing.T) {
	req := &ListWithStatsAndDataRequest{FilteredListRequest: *FilteredList("/l", true, ListPersistentOnly), WithData: true}
	wire := []byte{0, 0, 0, 2, '/', 'l', 1, 1, 0, 1}
	assert.Equal(t, wire, Marshal(req))
	var got ListWithStatsAndDataRequest
	require.NoError(t, Unmarshal(wire, &got))
	assert.Equal(t, *req, got)
	assert.Equal(t, &ListWithStatsAndDataRequest{}, NewRequest(OpFilteredListWithStatsAndData))
	assert.Equal(t, &ListWithStatsAndDataRequest{}, NewMultiOpRequest(OpFilteredListWithStatsAndData))
	assert.True(t, IsMultiRead(OpFilteredListWithStatsAndData))
	assert.False(t, IsWrite(OpFilteredListWithStatsAndData))
	assert.Equal(t, []string{"/l"}, Paths(req))
	require.Error(t, Unmarshal(wire[:8], &got), "a request cut short is refused")

	parent := Stat{Czxid: 1, Version: 2, NumChildren: 2, Pzxid: 3}
	resp := &ListWithStatsAndDataResponse{Children: []string{"a", "b"}, Stat: parent,
		Stats: []Stat{{Czxid: 4}, {Czxid: 5, EphemeralOwner: 6}}, Data: [][]byte{[]byte("x"), nil}}
	b := Marshal(resp)
	var want []byte
	want = append(want, 0, 0, 0, 2, 0, 0, 0, 1, 'a', 0, 0, 0, 1, 'b')
	want = append(want, Marshal(&parent)...)
	want = binary.BigEndian.AppendUint32(want, 2)
	want = append(want, Marshal(&resp.Stats[0])...)
	want = append(want, Marshal(&resp.Stats[1])...)
	want = append(want, 0, 0, 0, 2, 0, 0, 0, 1, 'x', 0xff, 0xff, 0xff, 0xff)
	assert.Equal(t, want, b)
	assert.Len(t, Marshal(&parent), StatBytes, "a stat is 68 bytes")
	var back ListWithStatsAndDataResponse
	require.NoError(t, Unmarshal(b, &back))
	assert.Equal(t, resp.Children, back.Children)
	assert.Equal(t, resp.Stats, back.Stats)
	assert.Equal(t, []byte("x"), back.Data[0])
	assert.Nil(t, back.Data[1])

	empty := Marshal(&ListWithStatsAndDataResponse{Children: []string{"a"}})
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0}, empty[len(empty)-8:], "unasked vectors are sent empty, never absent")
}
