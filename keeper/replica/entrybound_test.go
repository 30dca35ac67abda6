package replica

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// identitiesAtBound are proto.MaxIdentities digest identities of
// proto.MaxIdentityBytes in all: the most a connection holds.
func identitiesAtBound() []proto.ID {
	ids := make([]proto.ID, proto.MaxIdentities)
	each := proto.MaxIdentityBytes / proto.MaxIdentities
	for i := range ids {
		ids[i] = proto.ID{Scheme: "digest", ID: fmt.Sprintf("%0*d", each-len("digest"), i)}
	}
	return ids
}

// TestLargestEntryFitsEveryLogStore: the largest entry a legal request
// makes (a write of the largest keeper.max_packet_bytes, by a connection
// holding every identity it may, from a member whose id is as long as a
// directory name) is within MaxEntryBytes, as is a batch; an entry of
// MaxEntryBytes is stored by raft-wal, raft-boltdb and the node log, and
// read back after they are closed and reopened.
func TestLargestEntryFitsEveryLogStore(t *testing.T) {
	largest := fsm.Request{ID: 1 << 63, Session: 1 << 62, Member: strings.Repeat("m", 255), Op: proto.OpSetData,
		IDs: identitiesAtBound(), Body: make([]byte, config.MaxPacketBytesLimit), Conn: 1 << 63, Seq: 1 << 63, Wait: true}
	assert.LessOrEqual(t, len(fsm.EncodeEntry(nil, 0, []fsm.Request{largest})), MaxEntryBytes, "one request")
	assert.Less(t, MaxBatchBytes+len(fsm.EncodeEntry(nil, 0, nil)), MaxEntryBytes, "a batch")

	data := bytes.Repeat([]byte("0123456789abcdef"), MaxEntryBytes/16)
	for _, store := range []string{LogStoreWAL, LogStoreBolt, LogStoreNode} {
		t.Run(store, func(t *testing.T) {
			if store == LogStoreBolt && raceEnabled {
				t.Skip("bolt reads back values up to 2 GiB; one of 64 MiB takes minutes under the race detector")
			}
			dir := t.TempDir()
			st, err := openStores(Config{DataDir: dir, LogStore: store}, nil)
			require.NoError(t, err)
			require.NoError(t, st.log.StoreLogs([]*raft.Log{
				{Index: 1, Term: 1, Type: raft.LogCommand, Data: data},
				{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("next")},
			}))
			closeAll(t, st)
			st, err = openStores(Config{DataDir: dir, LogStore: store}, nil)
			require.NoError(t, err, "reopen")
			defer closeAll(t, st)
			var got raft.Log
			require.NoError(t, st.log.GetLog(1, &got))
			assert.True(t, bytes.Equal(data, got.Data), "the entry read back differs (%d bytes of %d)", len(got.Data), len(data))
			require.NoError(t, st.log.GetLog(2, &got))
			assert.Equal(t, "next", string(got.Data))
		})
	}
}

// closeAll closes stores opened by openStores, last opened first.
func closeAll(t *testing.T, st *stores) {
	for i := len(st.closers) - 1; i >= 0; i-- {
		require.NoError(t, st.closers[i].Close())
	}
}

// TestEntryAboveTheBoundIsNotProposed: a request that would make an entry
// above MaxEntryBytes (none a client can send) fails with connection loss
// instead of going into a log no member could read back: the member goes
// on, and restarts from its log.
func TestEntryAboveTheBoundIsNotProposed(t *testing.T) {
	m := newSoloMember(t)
	r := m.mustOpen(LogStoreWAL)
	sess := session(t, r)
	res := r.Do(fsm.Request{Session: sess, Member: r.ID(), Op: proto.OpSetData, Body: make([]byte, MaxEntryBytes)})
	assert.Equal(t, proto.ErrConnectionLoss, res.Err)
	last := create(t, r, sess, "/after")
	require.NoError(t, r.Close())

	r = m.mustOpen(LogStoreWAL)
	waitZxid(t, r, last)
}
