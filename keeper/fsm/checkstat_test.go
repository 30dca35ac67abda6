package fsm

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

func checkStat(path string, version int32, stat proto.Stat) (proto.OpCode, proto.Record) {
	return proto.OpCheckStat, &proto.CheckStatRequest{Path: path, Version: version, Stat: stat}
}

// statFields returns, for each field of proto.Stat, a copy of s with only
// that field changed by delta (named by the field).
func statFields(s proto.Stat, delta int64) map[string]proto.Stat {
	out := map[string]proto.Stat{}
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		c := s
		f := reflect.ValueOf(&c).Elem().Field(i)
		f.SetInt(f.Int() + delta)
		out[v.Type().Field(i).Name] = c
	}
	return out
}

// onlyField returns, for each field of proto.Stat, a stat of wildcards
// but for that field, which is s's.
func onlyField(s proto.Stat) map[string]proto.Stat {
	out := map[string]proto.Stat{}
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		c := proto.AnyStat()
		reflect.ValueOf(&c).Elem().Field(i).Set(v.Field(i))
		out[v.Type().Field(i).Name] = c
	}
	return out
}

// TestCheckStat is the differential of checkStat against ClickHouse
// Keeper's ("Check with only stat"): every field given must equal the
// node's, -1 is a wildcard, the version as check's; a mismatch is
// ZBADVERSION, a missing node ZNONODE; READ as check, locks as check.
func TestCheckStat(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	h.ok(c.create("/n", []byte("abc"), 0))
	h.ok(c.setData("/n", []byte("abcd"), -1))
	h.ok(c.create("/n/child", nil, 0))
	h.ok(c.setACL("/n", openACL, -1))
	h.ok(c.create("/n/e", nil, proto.FlagEphemeral))
	noRead := []proto.ACL{{Perms: proto.PermAll &^ proto.PermRead, ID: proto.ID{Scheme: "world", ID: "anyone"}}}
	h.ok(c.createACL("/secret", noRead, 0))
	stat := h.stat("/n")
	require.NotZero(t, stat.Aversion)
	eph := h.stat("/n/e")
	require.NotZero(t, eph.EphemeralOwner)

	check := func(op proto.OpCode, req proto.Record) proto.Code {
		t.Helper()
		res, events := h.write(c.req(op, req))
		assert.Empty(t, events, "a check fires nothing")
		return res.Err
	}
	assert.Equal(t, proto.ErrOK, check(checkStat("/n", -1, proto.AnyStat())), "all wildcards")
	assert.Equal(t, proto.ErrOK, check(checkStat("/n", stat.Version, stat)), "the node's own stat")
	assert.Equal(t, proto.ErrOK, check(checkStat("/n/e", -1, eph)), "an ephemeral's, owner included")
	for name, s := range onlyField(stat) {
		assert.Equal(t, proto.ErrOK, check(checkStat("/n", -1, s)), "%s alone given, the others wildcards", name)
	}
	for name, s := range statFields(stat, 1) {
		assert.Equal(t, proto.ErrBadVersion, check(checkStat("/n", -1, s)), "%s differs", name)
		assert.Equal(t, proto.ErrBadVersion, check(checkStat("/n", stat.Version, s)), "%s differs, the version matches", name)
	}
	assert.Equal(t, proto.ErrBadVersion, check(checkStat("/n", stat.Version+1, proto.AnyStat())), "the version, as check's")
	assert.Equal(t, proto.ErrBadVersion, check(checkStat("/n", stat.Version+1, stat)), "the version, the stat matching")
	assert.Equal(t, proto.ErrNoNode, check(checkStat("/missing", -1, proto.AnyStat())))
	assert.Equal(t, proto.ErrNoAuth, check(checkStat("/secret", -1, proto.AnyStat())), "READ, as check")
	assert.Equal(t, proto.ErrNoAuth, check(pathVersion(proto.OpCheck, "/secret", -1)), "which check answers")
	assert.Equal(t, proto.ErrBadArguments, check(checkStat("bad", -1, proto.AnyStat())))
	assert.Equal(t, proto.ErrBadArguments, check(checkStat(proto.KeeperFeatureFlagsPath, -1, proto.AnyStat())),
		"under /keeper, as every ClickHouse Keeper write")

	h.s.x.lock("/n", exclusive, "tx1")
	op, req := checkStat("/n", -1, proto.AnyStat())
	assert.True(t, h.s.Blocked(op, req), "a pending transaction's lock stops it (delay mode waits)")
	assert.Equal(t, proto.ErrLocked, check(op, req))
	h.s.x.unlock("tx1")
	assert.Equal(t, proto.ErrOK, check(op, req))
	checkInvariants(t, h.s)
}

// TestCheckStatInMulti: in a multi a checkStat guards the writes: one
// that fails fails the multi with the usual results, the create before it
// undone.
func TestCheckStatInMulti(t *testing.T) {
	h := newNumbered(t)
	c := h.session(m1)
	h.ok(c.create("/g", []byte("x"), 0))
	stat := h.stat("/g")
	wrong := stat
	wrong.Mzxid++
	guard := func(s proto.Stat) proto.MultiOp {
		op, req := checkStat("/g", -1, s)
		return proto.MultiOp{Op: op, Req: req}
	}

	res, events := h.write(c.multi(opCreate("/g/new", 0), guard(wrong), opSetData("/g", []byte("y"), -1)))
	require.Equal(t, proto.ErrOK, res.Err)
	assert.Equal(t, proto.FailedMulti(3, 1, proto.ErrBadVersion), res.Resp)
	assert.Empty(t, events)
	assert.Nil(t, h.s.Node("/g/new"), "the create before it is undone")
	assert.Equal(t, stat, h.stat("/g"))

	req := c.multi(guard(stat), opCreate("/g/new", 0))
	assert.Equal(t, entryCheckStat, EncodeEntry(nil, 1, numbered(req))[1], "a multi holding a checkStat is written as version 17")
	res, _ = h.write(req)
	require.Equal(t, proto.ErrOK, res.Err)
	assert.Equal(t, &proto.MultiResponse{Results: []proto.MultiResult{
		{Op: proto.OpCheckStat},
		{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: "/g/new"}},
	}}, res.Resp)
	assert.NotNil(t, h.s.Node("/g/new"))
	checkInvariants(t, h.s)
}

// TestCheckStatNeedsEntryVersion17: EncodeEntry writes a batch holding a
// checkStat, alone, in a multi or in a cross-shard prepare, as version
// 17, and others as before; in an entry of version 16 a checkStat alone
// is unimplemented and a multi or prepare holding one does not decode, as
// before it was known, so an old log replays as it applied.
func TestCheckStatNeedsEntryVersion17(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/x", nil, 0))
	op, req := checkStat("/x", -1, proto.AnyStat())
	guard := proto.MultiOp{Op: op, Req: req}
	alone, inMulti := c.req(op, req), c.multi(opCreate("/x/y", 0), guard)

	assert.Equal(t, entryCheckStat, EncodeEntry(nil, 1, []Request{alone})[1])
	assert.Equal(t, entryCheckStat, EncodeEntry(nil, 1, []Request{inMulti})[1])
	assert.Equal(t, entryExtensions, EncodeEntry(nil, 1, numbered(c.multi(opCreate("/x/y", 0), opCheck("/x", -1))))[1],
		"a multi without one, as before")

	old := func(r Request) Result {
		entry := EncodeEntry(nil, startWall+100, []Request{r})
		entry[1] = entryXCreateModes // the same layout, an older version
		res, _, err := h.s.Apply(entry)
		require.NoError(t, err)
		return res[0]
	}
	assert.Equal(t, proto.ErrUnimplemented, old(alone).Err)
	assert.Equal(t, proto.ErrMarshallingError, old(inMulti).Err)
	assert.Nil(t, h.s.Node("/x/y"))

	res, _, err := h.s.Apply(h.prepareEntry(txA, entryXCreateModes, opCreate("/z", 0), guard))
	require.NoError(t, err)
	assert.Equal(t, proto.ErrMarshallingError, res[0].Err, "a version-16 prepare holding one did not decode")

	entry := h.prepareEntry(txB, 0, opCreate("/z", 0), guard)
	require.Equal(t, entryCheckStat, entry[1])
	res, _, err = h.s.Apply(entry)
	require.NoError(t, err)
	require.Equal(t, proto.ErrOK, res[0].Err)
	require.Equal(t, proto.XPending, res[0].Resp.(*proto.XRecord).Status, "a cross-shard transaction takes it")
	h.decide(txB, true)
	assert.NotNil(t, h.s.Node("/z"))

	wrong := proto.AnyStat()
	wrong.Czxid = 12345
	bad := proto.MultiOp{Op: op, Req: &proto.CheckStatRequest{Path: "/x", Version: -1, Stat: wrong}}
	res, _, err = h.s.Apply(h.prepareEntry(txC, 0, opCreate("/w", 0), bad))
	require.NoError(t, err)
	rec := res[0].Resp.(*proto.XRecord)
	assert.Equal(t, proto.XRejected, rec.Status)
	assert.Equal(t, proto.ErrBadVersion, rec.Err)
	assert.EqualValues(t, 1, rec.FailedOp)

	h.ok(c.create("/x/e", nil, proto.FlagEphemeral))
	onEphemeral := proto.MultiOp{Op: op, Req: &proto.CheckStatRequest{Path: "/x/e", Version: -1, Stat: proto.AnyStat()}}
	res, _, err = h.s.Apply(h.prepareEntry(txD, 0, onEphemeral))
	require.NoError(t, err)
	rec = res[0].Resp.(*proto.XRecord)
	assert.Equal(t, proto.XRejected, rec.Status, "as a check, not of an ephemeral, whose session may end before the commit")
	assert.Equal(t, proto.ErrBadArguments, rec.Err)
}
