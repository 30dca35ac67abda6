package fsm

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestIdentitiesOncePerBatch: a batch of a connection's pipelined writes
// names the connection's identities once (version 11), not once per
// request: with a 100 KB identity list, 64 writes make an entry of about
// 100 KB, not 6.4 MB. It decodes to the same requests, its size is known
// before it is encoded, and lists are recognised by their slice and, for
// forwarded requests that decoded into slices of their own, by equality
// with the previous request's.
func TestIdentitiesOncePerBatch(t *testing.T) {
	big := []proto.ID{localIP, {Scheme: "digest", ID: "u:" + strings.Repeat("h", 100_000)}}
	other := []proto.ID{localIP, aliceID}
	c := testClient{sess: 1, member: m1}
	var reqs []Request
	for i := range 64 {
		ids := big
		if i%8 == 7 {
			ids = other
		}
		r := c.as(ids...).create("/x", []byte("data"), 0)
		reqs = append(reqs, r)
	}
	reqs = append(reqs, c.as().create("/none", nil, 0))
	forwarded := append([]proto.ID(nil), other...) // equal to the previous list, another slice
	reqs = append(reqs, c.as(other...).create("/a", nil, 0), c.as(forwarded...).create("/b", nil, 0))
	reqs = numbered(reqs...)

	entry := EncodeEntry(nil, 5, reqs)
	assert.Equal(t, entryIdentities, entry[1])
	assert.Less(t, len(entry), 110_000, "the 100 KB list once, not 64 times")
	table := newIdentityTable(reqs, false)
	assert.Equal(t, entrySize(reqs)-table.saved, len(entry), "the entry's size is known before it is encoded")
	assert.Equal(t, 2, len(table.sets), "one list per connection")
	wall, got, err := DecodeEntry(entry)
	require.NoError(t, err)
	assert.Equal(t, int64(5), wall)
	assert.True(t, reflect.DeepEqual(reqs, got), "decodes to the requests encoded")
	assert.Nil(t, got[64].IDs, "a request without identities has none")
}

// TestIdentityTableOnlyWhereItSaves: a batch whose lists are all
// different, or that carries one list once, or whose version is below 10
// (no numbered write: touches, closes, the cross-shard protocol's
// messages) keeps its lists in its requests, as before.
func TestIdentityTableOnlyWhereItSaves(t *testing.T) {
	c := testClient{sess: 1, member: m1}
	for name, reqs := range map[string][]Request{
		"distinct lists": numbered(c.as(aliceID).create("/a", nil, 0), c.as(localIP).create("/b", nil, 0)),
		"one list":       numbered(c.as(aliceID).create("/a", nil, 0), c.as().create("/b", nil, 0)),
		"unnumbered":     {c.as(aliceID).req(proto.OpSync, &proto.PathRequest{Path: "/"}), c.as(aliceID).req(proto.OpSync, &proto.PathRequest{Path: "/"})},
	} {
		entry := EncodeEntry(nil, 5, reqs)
		assert.Less(t, entry[1], entryIdentities, name)
		assert.Len(t, entry, entrySize(reqs), name)
		_, got, err := DecodeEntry(entry)
		require.NoError(t, err, name)
		assert.Equal(t, reqs, got, name)
	}
}

// TestBadIdentityTablesRefused: a version 11 entry whose table count or
// list number is out of range is an error that changes nothing.
func TestBadIdentityTablesRefused(t *testing.T) {
	c := testClient{sess: 1, member: m1}
	reqs := numbered(c.as(aliceID).create("/a", nil, 0), c.as(aliceID).create("/b", nil, 0))
	good := EncodeEntry(nil, 5, reqs)
	require.Equal(t, entryIdentities, good[1])
	tableCount := 2 + 8 // after kind, version and wall time
	head := 8 + 8 + 4 + len(m1) + 4 + 8 + 8 + 1
	firstIndex := tableCount + 4 + 4 + 8 + len(aliceID.Scheme) + len(aliceID.ID) + 4 + head // the first request's list number
	require.Equal(t, []byte{0, 0, 0, 0}, good[firstIndex:firstIndex+4], "the offset names the first request's list")
	for name, mutate := range map[string]func([]byte){
		"negative table":  func(b []byte) { copy(b[tableCount:], []byte{0xff, 0xff, 0xff, 0xff}) },
		"huge table":      func(b []byte) { copy(b[tableCount:], []byte{0x7f, 0xff, 0xff, 0xff}) },
		"list past table": func(b []byte) { copy(b[firstIndex:], []byte{0, 0, 0, 1}) },
		"list below -1":   func(b []byte) { copy(b[firstIndex:], []byte{0xff, 0xff, 0xff, 0xfe}) },
	} {
		entry := append([]byte(nil), good...)
		mutate(entry)
		s := New()
		before := dumpState(s)
		_, _, err := s.Apply(entry)
		assert.Error(t, err, name)
		assert.Empty(t, diffDumps(dumpState(s), before), name)
	}
}
