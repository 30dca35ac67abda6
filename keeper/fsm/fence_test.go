package fsm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// logEntry is an entry of a ReplicatedMergeTree table's replication log as
// ClickHouse 18.16 writes it.
func logEntry(body string) []byte {
	return []byte("format version: 4\ncreate_time: 2024-01-01 00:00:00\nsource replica: r1\nblock_id: 202401_123_456\n" + body)
}

// TestPartFenceRefusesNewRowsOfThePartition: while a fence of partition
// 202401 of /t exists, no replica may add an insert's, a merge's or a
// mutation's entry for a part of it to the table's log; fetches (parts
// nodes alone), DROP and REPLACE entries, other partitions, other tables
// and entries of older versions are not fenced, and the fence goes with
// its node.
func TestPartFenceRefusesNewRowsOfThePartition(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	var seq uint64
	send := func(r Request) proto.Code {
		t.Helper()
		seq++
		r.Conn, r.Seq = 1, seq
		res, _ := h.do(r)
		return res.Err
	}
	for _, p := range []string{"/t", "/t/log", "/t/replicas", "/t/replicas/r1", "/t/replicas/r1/parts", "/u", "/u/log", "/u/replicas", "/u/replicas/r1", "/u/replicas/r1/parts",
		"/xkeeper", proto.PartFencesDir, proto.PartFenceTable("/t")} {
		require.Equal(t, proto.ErrOK, send(c.create(p, nil, 0)), p)
	}
	entry := func(table, body string) Request {
		return c.create(table+"/log/log-", logEntry(body), proto.FlagSequential)
	}
	insert := func(table, part string) Request {
		return c.multi(proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: table + "/log/log-", Data: logEntry("get\n" + part), ACL: openACL, Flags: proto.FlagSequential}},
			opCreate(table+"/replicas/r1/parts/"+part, 0))
	}
	require.Equal(t, proto.ErrOK, multiErr(t, h, send, insert("/t", "202401_1_1_0")), "no fence yet")
	require.Equal(t, proto.ErrOK, send(c.create(proto.PartFencePath("/t", "202401_"), nil, 0)))

	assert.Equal(t, proto.ErrLocked, multiErr(t, h, send, insert("/t", "202401_2_2_0")), "an insert through any replica")
	assert.Equal(t, proto.ErrLocked, send(entry("/t", "merge\n202401_1_1_0\n202401_3_3_0\ninto\n202401_1_3_1\n")), "a merge")
	assert.Equal(t, proto.ErrLocked, send(entry("/t", "mutate\n202401_1_1_0\nto\n202401_1_1_0_4\n")), "a mutation")
	assert.Equal(t, proto.ErrOK, send(c.create("/t/replicas/r1/parts/202401_3_3_0", nil, 0)), "a fetch of a committed part")
	assert.Equal(t, proto.ErrOK, send(entry("/t", "drop\n202401_0_9_999999999\n")), "DROP PARTITION")
	assert.Equal(t, proto.ErrOK, send(entry("/t", "REPLACE_RANGE\ndrop_range_name: 202401_0_9_999999999\nfrom_database: db\n")), "REPLACE PARTITION")
	assert.Equal(t, proto.ErrOK, multiErr(t, h, send, insert("/t", "202402_4_4_0")), "another partition")
	assert.Equal(t, proto.ErrOK, multiErr(t, h, send, insert("/u", "202401_1_1_0")), "another table")

	old, _ := h.do(entry("/t", "get\n202401_6_6_0\n"))
	assert.Equal(t, proto.ErrOK, old.Err, "an entry older than version 9 applies as it did")

	require.Equal(t, proto.ErrOK, send(c.delete(proto.PartFencePath("/t", "202401_"), -1)))
	assert.Equal(t, proto.ErrOK, multiErr(t, h, send, insert("/t", "202401_7_7_0")), "the fence is gone")
}

// multiErr applies multi r through send and returns ErrOK if it applied,
// else the code its failing op met (ErrLocked, the only one these meet).
func multiErr(t *testing.T, h *harness, send func(Request) proto.Code, r Request) proto.Code {
	t.Helper()
	before := h.s.NodeCount()
	require.Equal(t, proto.ErrOK, send(r))
	if h.s.NodeCount() > before {
		return proto.ErrOK
	}
	return proto.ErrLocked
}

func TestAddsRows(t *testing.T) {
	for body, want := range map[string]bool{
		"get\n202401_1_1_0": true,
		"get\n202402_1_1_0": false,
		"merge\n202401_1_1_0\n202401_2_2_0\ninto\n202401_1_2_1\ndeduplicate: 0\n": true,
		"drop\n202401_0_9_999999999":                           false,
		"detach\n202401_0_9_999999999":                         false,
		"REPLACE_RANGE\ndrop_range_name: 202401_0_9_999999999": false,
	} {
		assert.Equal(t, want, proto.AddsRows(logEntry(body), "202401_"), body)
	}
	assert.True(t, proto.AddsRows(logEntry("get\n20240101_20240131_1_1_0"), "202401"), "a table of the legacy syntax")
	assert.False(t, proto.AddsRows([]byte("get\n202401_1_1_0"), "202401_"), "not a log entry")
}
