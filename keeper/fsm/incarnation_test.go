package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// TestDecisionOfAForgottenRunLeavesALaterRecord (issue 38, item 8): a
// transaction commits and is deleted; once the shard forgot it, a retry
// of its id prepares a new record. A decision of the first run that
// arrives late (a resend after a lost reply, a driver that ran on) names
// the first run's deadline and leaves the new record alone; before, such
// a commit applied the new record's ops, which the retry was about to
// refuse (TestLateRetryAfterCoordinatorForgot failed about once in 20
// runs). A decision of the new run applies, also one of a second driver
// whose deadline had passed when the record was made (an independent
// review found a rule that dropped it: the run then committed on one
// shard alone), and one that names no deadline applies as before.
func TestDecisionOfAForgottenRunLeavesALaterRecord(t *testing.T) {
	decide := func(op proto.OpCode, deadline int64) Request {
		return Request{Op: op, Body: proto.Marshal(&proto.XIDRequest{ID: txA, Deadline: deadline})}
	}
	assert.Equal(t, entryIncarnation, EncodeEntry(nil, 1, []Request{decide(proto.OpXCommit, 5)})[1], "a decision that names a deadline")
	assert.Equal(t, entryCommitStamps, EncodeEntry(nil, 1, []Request{decide(proto.OpXCommit, 0)})[1], "one that names none")

	h := newHarness(t)
	first := coordinatorPrepare(txA, "/x")
	first.Deadline = h.wall + 60_000
	require.Equal(t, proto.XPending, h.applyXAt(0, proto.OpXPrepare, first).Status)
	h.applyXAt(0, proto.OpXCommitDelete, &proto.XIDRequest{ID: txA, Deadline: first.Deadline})
	require.NotNil(t, h.s.Node("/x"))

	h.wall += OutcomeRetention + 1_000
	retry := coordinatorPrepare(txA, "/y")
	retry.Deadline = h.wall + 60_000
	require.Equal(t, proto.XPending, h.applyXAt(0, proto.OpXPrepare, retry).Status, "the shard forgot the first run")

	for _, op := range []proto.OpCode{proto.OpXCommitDelete, proto.OpXCommit, proto.OpXFail, proto.OpXDelete} {
		reply := h.applyXAt(0, op, &proto.XIDRequest{ID: txA, Deadline: first.Deadline})
		assert.Equal(t, proto.XUnknown, reply.Status, "%v of the first run", op)
		rec := h.s.XRecord(txA)
		require.NotNil(t, rec, "%v of the first run deleted the retry's record", op)
		assert.Equal(t, proto.XPending, rec.Status, "%v of the first run decided the retry's record", op)
		assert.Nil(t, h.s.Node("/y"), "%v of the first run applied the retry's ops", op)
	}
	xc, _, _ := h.s.XStats()
	assert.EqualValues(t, 4, xc.Stale)

	created := h.s.XRecord(txA).Created
	other := h.applyXAt(0, proto.OpXCommit, &proto.XIDRequest{ID: txA, Deadline: created - 60_000})
	assert.Equal(t, proto.XCommitted, other.Status,
		"a second driver of the same run, whose own deadline passed a minute before the record was made (its prepare came late)")
	assert.NotNil(t, h.s.Node("/y"))
	h.applyXAt(0, proto.OpXCommitDelete, &proto.XIDRequest{ID: txA})
	assert.Nil(t, h.s.XRecord(txA), "a decision that names no deadline applies as before")

	h.wall += 10
	old := EncodeEntry(nil, h.wall, []Request{decide(proto.OpXDelete, 5)})
	old[1] = entryCheckStat
	res, _, err := h.s.Apply(old)
	require.NoError(t, err)
	assert.Equal(t, proto.ErrMarshallingError, res[0].Err, "an older entry could not hold a deadline")
}

// TestOutcomeNamesItsRun (issue 38, item 8): a record deleted by an entry
// of version 18 is remembered with its deadline, which a prepare of its
// id is answered with, also after a snapshot; one deleted by an older
// entry names none (the driver then falls back to whether the
// coordinator held a record before the try).
func TestOutcomeNamesItsRun(t *testing.T) {
	for _, k := range []struct {
		version byte // of the delete's entry (0: the newest)
		named   bool // whether the delete names the deadline
		want    func(p *proto.XPrepareRequest) int64
	}{
		{0, true, func(p *proto.XPrepareRequest) int64 { return p.Deadline }},
		{entryOutcomeOps, false, func(*proto.XPrepareRequest) int64 { return 0 }},
	} {
		h := newHarness(t)
		p := coordinatorPrepare(txA, "/x")
		require.Equal(t, proto.XPending, h.applyXAt(0, proto.OpXPrepare, p).Status)
		del := &proto.XIDRequest{ID: txA}
		if k.named {
			del.Deadline = p.Deadline
		}
		h.applyXAt(k.version, proto.OpXCommitDelete, del)
		again := h.applyXAt(0, proto.OpXPrepare, p)
		assert.Equal(t, proto.XCommitted, again.Status)
		assert.Empty(t, again.Shards, "remembered, not a record")
		assert.Equal(t, k.want(p), again.Deadline, "the delete's entry version %d", k.version)

		restored, err := Restore(bytes.NewReader(snapshotBytes(t, h.s)))
		require.NoError(t, err)
		h.s = restored
		assert.Equal(t, k.want(p), h.applyXAt(0, proto.OpXPrepare, p).Deadline, "after a snapshot")
	}
}

// TestRetryByAnotherCallerOfAFinishedTransaction (issue 38, item 8): a
// record deleted by an entry of version 18 remembers its caller. A
// prepare of its id from another caller is refused (NoAuth) without the
// outcome or the results, and records nothing; the same caller from
// another address is told the outcome, also after a snapshot. An outcome
// deleted by an older entry, or of a caller known by its address alone,
// is told to anyone, as before.
func TestRetryByAnotherCallerOfAFinishedTransaction(t *testing.T) {
	alice := []proto.ID{{Scheme: "ip", ID: "10.0.0.1"}, {Scheme: "digest", ID: "alice:x"}}
	from := func(ids ...proto.ID) *proto.XPrepareRequest {
		p := coordinatorPrepare(txA, "/x")
		p.IDs = ids
		return p
	}
	h := newHarness(t)
	p := from(alice...)
	require.Equal(t, proto.XPending, h.applyXAt(0, proto.OpXPrepare, p).Status)
	h.applyXAt(0, proto.OpXCommitDelete, &proto.XIDRequest{ID: txA, Deadline: p.Deadline})

	for round := range 2 {
		bob := h.applyXAt(0, proto.OpXPrepare, from(proto.ID{Scheme: "ip", ID: "10.0.0.1"}, proto.ID{Scheme: "digest", ID: "bob:y"}))
		assert.Equal(t, OtherCallerRefusal(txA), bob, "another identity, round %d", round)
		anonymous := h.applyXAt(0, proto.OpXPrepare, from(proto.ID{Scheme: "ip", ID: "10.0.0.1"}))
		assert.Equal(t, OtherCallerRefusal(txA), anonymous, "the same address without the identity, round %d", round)
		assert.Nil(t, h.s.XRecord(txA), "a refusal records nothing")
		again := h.applyXAt(0, proto.OpXPrepare, from(proto.ID{Scheme: "ip", ID: "10.0.0.9"}, alice[1]))
		assert.Equal(t, proto.XCommitted, again.Status, "the same caller from another address, round %d", round)
		assert.Empty(t, again.Shards)

		restored, err := Restore(bytes.NewReader(snapshotBytes(t, h.s)))
		require.NoError(t, err)
		h.s = restored
	}

	old := newHarness(t)
	require.Equal(t, proto.XPending, old.applyXAt(0, proto.OpXPrepare, p).Status)
	old.applyXAt(entryOutcomeOps, proto.OpXCommitDelete, &proto.XIDRequest{ID: txA})
	assert.Equal(t, proto.XCommitted, old.applyXAt(0, proto.OpXPrepare, from(proto.ID{Scheme: "digest", ID: "bob:y"})).Status,
		"an outcome deleted by an older entry names no caller")

	anonymous := newHarness(t)
	a := from(proto.ID{Scheme: "ip", ID: "10.0.0.1"})
	require.Equal(t, proto.XPending, anonymous.applyXAt(0, proto.OpXPrepare, a).Status)
	anonymous.applyXAt(0, proto.OpXCommitDelete, &proto.XIDRequest{ID: txA, Deadline: a.Deadline})
	assert.Equal(t, proto.XCommitted, anonymous.applyXAt(0, proto.OpXPrepare, from(proto.ID{Scheme: "ip", ID: "10.0.0.2"})).Status,
		"a caller known by its address alone retries from another address of its host")
}
