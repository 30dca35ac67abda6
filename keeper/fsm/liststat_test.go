package fsm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestListWithStatsAndData: the children's names, the parent's stat and,
// as asked, each listed child's stat and data in the names' order; READ
// on every child as soon as more than names is shown; a held child
// answers ErrLocked; the answer is bounded; in a multiRead, the op's own
// record; the system nodes too.
func TestListWithStatsAndData(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	h.ok(c.create("/l", []byte("L"), 0))
	h.ok(c.create("/l/p", []byte("pp"), 0))
	h.ok(c.create("/l/e", []byte("e"), proto.FlagEphemeral))
	h.ok(c.create("/l/p/deeper", nil, 0))
	list := func(r *proto.ListWithStatsAndDataRequest, ids ...proto.ID) (*proto.ListWithStatsAndDataResponse, proto.Code) {
		resp, code, _ := h.read(proto.OpFilteredListWithStatsAndData, r, ids...)
		if code != proto.ErrOK {
			return nil, code
		}
		return resp.(*proto.ListWithStatsAndDataResponse), code
	}

	got, code := list(proto.ListWithStatsAndData("/l", false, proto.ListAll, true, true))
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, []string{"e", "p"}, got.Children)
	assert.Equal(t, h.stat("/l"), got.Stat, "the parent's stat")
	assert.Equal(t, []proto.Stat{h.stat("/l/e"), h.stat("/l/p")}, got.Stats)
	assert.Equal(t, [][]byte{[]byte("e"), []byte("pp")}, got.Data)

	got, code = list(proto.ListWithStatsAndData("/l", false, proto.ListPersistentOnly, false, true))
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, []string{"p"}, got.Children)
	assert.Empty(t, got.Stats, "stats not asked for")
	assert.Equal(t, [][]byte{[]byte("pp")}, got.Data)

	got, code = list(proto.ListWithStatsAndData("/l", false, proto.ListEphemeralOnly, true, false))
	require.Equal(t, proto.ErrOK, code)
	assert.Equal(t, []string{"e"}, got.Children)
	require.Len(t, got.Stats, 1)
	assert.NotZero(t, got.Stats[0].EphemeralOwner)
	assert.Empty(t, got.Data, "data not asked for")

	_, code = list(proto.ListWithStatsAndData("/missing", false, proto.ListAll, true, true))
	assert.Equal(t, proto.ErrNoNode, code)

	_, code, w := h.read(proto.OpFilteredListWithStatsAndData, proto.ListWithStatsAndData("/l", true, proto.ListAll, false, true))
	assert.Equal(t, proto.ErrOK, code)
	assert.Equal(t, WatchChild, w, "a watch is a child watch on the parent")

	_, code, _ = h.s.ReadBounded(proto.OpFilteredListWithStatsAndData, proto.ListWithStatsAndData("/l", false, proto.ListAll, true, true), 0, nil, 100)
	assert.Equal(t, proto.ErrMarshallingError, code, "an answer past the bound is refused")

	m := &proto.MultiRequest{Ops: []proto.MultiOp{
		{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData("/l", false, proto.ListAll, false, true)},
		{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData("/missing", false, proto.ListAll, false, true)},
		{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData(proto.KeeperSystemPath, false, proto.ListAll, true, true)},
	}}
	resp, code, _ := h.read(proto.OpMultiRead, m)
	require.Equal(t, proto.ErrOK, code)
	res := resp.(*proto.MultiResponse).Results
	require.Len(t, res, 3)
	assert.Equal(t, proto.OpFilteredListWithStatsAndData, res[0].Op, "answered with its own record")
	assert.Equal(t, [][]byte{[]byte("e"), []byte("pp")}, res[0].Resp.(*proto.ListWithStatsAndDataResponse).Data)
	assert.Equal(t, proto.MultiResult{Op: proto.OpError, Err: proto.ErrNoNode}, res[1])
	sys := res[2].Resp.(*proto.ListWithStatsAndDataResponse)
	assert.Equal(t, []string{"api_version", "feature_flags"}, sys.Children)
	assert.Equal(t, [][]byte{[]byte("3"), proto.FeatureBitmap(proto.Features...)}, sys.Data)
	assert.Equal(t, int32(1), sys.Stats[0].DataLength)

	h.ok(c.createACL("/l/s", aliceAll, 0))
	for _, r := range []*proto.ListWithStatsAndDataRequest{proto.ListWithStatsAndData("/l", false, proto.ListAll, false, true),
		proto.ListWithStatsAndData("/l", false, proto.ListAll, true, false), proto.ListWithStatsAndData("/l", false, proto.ListPersistentOnly, false, false)} {
		_, code = list(r)
		assert.Equal(t, proto.ErrNoAuth, code, "a child it may not read: %+v", *r)
	}
	got, code = list(proto.ListWithStatsAndData("/l", false, proto.ListAll, false, false))
	require.Equal(t, proto.ErrOK, code, "names alone need READ on the parent only")
	assert.Equal(t, []string{"e", "p", "s"}, got.Children)
	_, code = list(proto.ListWithStatsAndData("/l", false, proto.ListAll, true, true), aliceID)
	assert.Equal(t, proto.ErrOK, code, "alice may read them all")

	h.s.x.lock("/l/p", exclusive, "tx1")
	_, code = list(proto.ListWithStatsAndData("/l", false, proto.ListAll, false, true), aliceID)
	assert.Equal(t, proto.ErrLocked, code, "a held child's data is not shown")
	_, code = list(proto.ListWithStatsAndData("/l", false, proto.ListAll, false, false), aliceID)
	assert.Equal(t, proto.ErrOK, code, "its name is, as getChildren shows it")
	assert.Equal(t, []pathAccess{{"/l", subtree}}, opAccesses(proto.OpFilteredListWithStatsAndData, proto.ListWithStatsAndData("/l", false, proto.ListAll, false, true), false))
	h.s.x.unlock("tx1")
	h.s.x.lock("/l", exclusive, "tx2")
	_, code = list(proto.ListWithStatsAndData("/l", false, proto.ListAll, false, false), aliceID)
	assert.Equal(t, proto.ErrLocked, code, "a held parent answers as filteredList does")
}

// TestListWithStatsAndDataNotInAMulti: a list with stat and data belongs
// in a multiRead; in a multi (a write, through the log) it does not
// decode, whatever the entry's version, as before xkeeper knew it, so
// that members old and new apply such an entry alike.
func TestListWithStatsAndDataNotInAMulti(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	h.ok(c.create("/l", nil, 0))
	res, _ := h.write(c.multi(proto.MultiOp{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData("/l", false, proto.ListAll, true, true)}))
	assert.Equal(t, proto.ErrMarshallingError, res.Err)
	res, _ = h.write(c.multi(opCreate("/l/a", 0), proto.MultiOp{Op: proto.OpFilteredListWithStatsAndData, Req: proto.ListWithStatsAndData("/l", false, proto.ListAll, true, true)}))
	assert.Equal(t, proto.ErrMarshallingError, res.Err, "mixed with writes: ZooKeeper's answer to a multi that mixes reads and writes")
	assert.Nil(t, h.s.Node("/l/a"))
}
