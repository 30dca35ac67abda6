package xshard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// skewedCluster starts two 3-member shards whose members' clocks run
// ahead by skew[shard], with /x on a and /y on b (data "0").
func skewedCluster(t *testing.T, skew map[string]*atomic.Int64, hook xshard.Hook) (*testenv.Cluster, *xshard.Router) {
	clock := func(member string) func() time.Time {
		off := skew[member[:1]]
		return func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
	}
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, MemberClock: clock, XHook: hook})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	t.Cleanup(r.Close)
	_, err := xshard.CrossShardTransaction(ctxT(t), r, xyOps("0", false))
	require.NoError(t, err)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	return c, r
}

// committedOnce starts a skewed cluster, commits a transaction that sets
// /x and /y to "1", waits until every shard deleted its record, and
// returns the transaction's id.
func committedOnce(t *testing.T, skew map[string]*atomic.Int64, hook xshard.Hook) (*testenv.Cluster, *xshard.Router, string) {
	c, r := skewedCluster(t, skew, hook)
	id := uuid.NewString()
	_, err := xshard.CrossShardTransaction(ctxT(t), r, xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	return c, r, id
}

// xyOps sets /x on a and /y on b to data, unconditionally (a second
// application would show as version 2), or creates them.
func xyOps(data string, set bool) []xshard.MultiRequestForShard {
	op := func(path string) proto.MultiOp {
		if set {
			return setData(path, data, -1)
		}
		return create(path, data)
	}
	return []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{op("/x")}},
		{Shard: "b", Requests: []proto.MultiOp{op("/y")}},
	}
}

// versions returns the data version of path on every member of shard
// (once records drained).
func versions(c *testenv.Cluster, shard, path string) []int32 {
	var out []int32
	for _, m := range c.Shard(shard).Members {
		c.Member(m.ID).Replica.View(func(st *fsm.State) {
			if n := st.Node(path); n != nil {
				out = append(out, n.Version)
			}
		})
	}
	return out
}

// tick makes an entry on shard (a plain write), which moves its official
// time to its leader's clock.
func tick(t *testing.T, r *xshard.Router, shard string) {
	_, err := xshard.CrossShardTransaction(ctxT(t), r, []xshard.MultiRequestForShard{
		{Shard: shard, Requests: []proto.MultiOp{create("/tick-"+uuid.NewString(), "")}}})
	require.NoError(t, err)
}

// forget moves shard's clocks two outcome retentions ahead and makes an
// entry there, so that it forgets every transaction it remembered.
func forget(t *testing.T, skew map[string]*atomic.Int64, r *xshard.Router, shard string) {
	skew[shard].Store(int64(2 * time.Duration(fsm.OutcomeRetention) * time.Millisecond))
	tick(t, r, shard)
}

// TestLateRetryAfterParticipantForgot (issue 38, item 8): a transaction
// commits and is cleaned up; its participant's official time then moves
// past the outcome's retention, so it forgets the transaction, while the
// coordinator still remembers it. A retry with the same id is answered
// committed, the true outcome, and the participant does not apply its ops
// a second time. Two cases: the participant's clock alone jumps ahead (it
// then refused the retry's fresh deadline, and the retry was told
// "failed"), and a participant whose clock lagged the coordinator's by
// 30 s when it deleted its record, both clocks then moving on by the
// same span (it then took the retry as new and applied its ops twice);
// the same with the retry's driver gone once every shard answered its
// prepare, so that the participant's recovery asks the coordinator about
// its new record (it committed it, on the outcome the coordinator
// remembers of the old one).
func TestLateRetryAfterParticipantForgot(t *testing.T) {
	retention := time.Duration(fsm.OutcomeRetention) * time.Millisecond
	for _, k := range []struct {
		name         string
		before       map[string]time.Duration // skews from the start
		after        map[string]time.Duration // skews once the transaction is cleaned up
		participants []string
		abandon      bool
	}{
		{"fast-participant", nil, map[string]time.Duration{"b": 2 * retention}, []string{"b"}, false},
		{"slow-participant", map[string]time.Duration{"b": -30 * time.Second},
			map[string]time.Duration{"a": retention - 20*time.Second, "b": retention - 20*time.Second}, []string{"a", "b"}, false},
		{"slow-participant-driver-gone", map[string]time.Duration{"b": -30 * time.Second},
			map[string]time.Duration{"a": retention - 20*time.Second, "b": retention - 20*time.Second}, []string{"a", "b"}, true},
	} {
		t.Run(k.name, func(t *testing.T) {
			skew := map[string]*atomic.Int64{"a": {}, "b": {}}
			for sh, d := range k.before {
				skew[sh].Store(int64(d))
			}
			var abandon atomic.Bool
			hook := func(step, _, _ string) error {
				if step == xshard.StepAllPrepared && abandon.Load() {
					return errors.New("test: driver gone")
				}
				return nil
			}
			c, r, id := committedOnce(t, skew, hook)
			ctx := ctxT(t)
			for sh, d := range k.after {
				skew[sh].Store(int64(d))
			}
			for _, sh := range k.participants {
				tick(t, r, sh)
			}

			abandon.Store(k.abandon)
			var err error
			if k.abandon {
				short, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = xshard.CrossShardTransaction(short, r, xyOps("1", true), xshard.Options{ID: id})
				cancel()
				require.Error(t, err, "the retry's driver is gone")
			} else {
				_, err = xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
				require.NoError(t, err, "the retry gets the outcome the coordinator remembers")
			}
			waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
			assert.Equal(t, []int32{1, 1, 1}, versions(c, "a", "/x"), "the coordinator applied its ops once")
			assert.Equal(t, []int32{1, 1, 1}, versions(c, "b", "/y"), "the participant applied its ops once")
		})
	}
}

// TestLateRetryAfterCoordinatorForgot (issue 38, item 8): the mirror
// case: the coordinator's official time moves past the retention while
// the participant still remembers the outcome. The coordinator takes the
// retry for a new transaction; seeing the participant's memory of the
// finished one, it refuses the retry instead of applying its own ops a
// second time.
func TestLateRetryAfterCoordinatorForgot(t *testing.T) {
	skew := map[string]*atomic.Int64{"a": {}, "b": {}}
	c, r, id := committedOnce(t, skew, nil)
	ctx := ctxT(t)
	forget(t, skew, r, "a")

	_, err := xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	var xe *xshard.Error
	require.ErrorAs(t, err, &xe, "a retry whose outcome the coordinator forgot is refused")
	assert.ErrorIs(t, err, proto.ErrBadArguments)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "a", "/x"), "the coordinator applied its ops once")
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "b", "/y"), "the participant applied its ops once")
}

// TestRecoveryRefusesARetryTheCoordinatorForgot (issue 38, item 8): as
// TestLateRetryAfterCoordinatorForgot, and the retry's driver dies once
// every shard answered its prepare: the coordinator holds a pending
// record the retry made anew. Either the client's router sends the retry
// again, and a second drive finds that record ("driver"), or the client
// gives up and recovery takes the record over ("recovery"). The
// participant remembers the first run's deadline, not the record's, so
// both refuse it. Before, both took the record for one restored from a
// backup, committed it, and /x went to version 2 (the client was told
// "committed").
func TestRecoveryRefusesARetryTheCoordinatorForgot(t *testing.T) {
	for _, gives := range []bool{false, true} {
		name := map[bool]string{false: "driver", true: "recovery"}[gives]
		t.Run(name, func(t *testing.T) {
			var crash atomic.Bool
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			hook := func(step, _, _ string) error {
				if step == xshard.StepAllPrepared && crash.CompareAndSwap(true, false) {
					if gives {
						cancel() // the client stops retrying
					}
					return errors.New("test: the retry's driver dies")
				}
				return nil
			}
			skew := map[string]*atomic.Int64{"a": {}, "b": {}}
			c, r, id := committedOnce(t, skew, hook)
			forget(t, skew, r, "a")

			crash.Store(true)
			_, err := xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
			require.False(t, crash.Load(), "the driver reached the crash")
			if gives {
				var unknown *xshard.UnknownOutcomeError
				require.ErrorAs(t, err, &unknown)
			} else {
				require.ErrorIs(t, err, proto.ErrBadArguments, "the second drive refuses the retry")
			}
			waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
			assert.Equal(t, []int32{1, 1, 1}, versions(c, "a", "/x"), "the coordinator applied its ops once")
			assert.Equal(t, []int32{1, 1, 1}, versions(c, "b", "/y"), "the participant applied its ops once")
			for _, m := range c.Shard("a").Members {
				c.Member(m.ID).Replica.View(func(st *fsm.State) {
					status, ok := st.Outcome(id)
					assert.True(t, ok && status == proto.XFailed, "%s remembers the retry failed, not %v", m.ID, status)
				})
			}
		})
	}
}

// TestLateDecisionOfTheForgottenRun (issue 38, item 8): as
// TestLateRetryAfterCoordinatorForgot, and a commit-and-delete of the
// first run reaches the coordinator shard after the retry's prepare made
// its record anew (as a resend after a lost reply did, now and then, in
// that test). It names the first run's deadline, so it leaves the new
// record alone: the retry is refused and nothing applies twice. Before,
// it committed the new record, /x went to version 2, and the retry was
// told "committed" or refused with its ops applied.
func TestLateDecisionOfTheForgottenRun(t *testing.T) {
	var (
		c        *testenv.Cluster
		member   *xshard.Router // speaks the protocol, as a member does
		id       = uuid.NewString()
		first    atomic.Int64 // the first run's deadline
		retrying atomic.Bool
		late     = make(chan *proto.XRecord, 1)
	)
	hook := func(step, tx, _ string) error {
		switch {
		case tx != id:
		case step == xshard.StepBeforeCleanup && first.Load() == 0:
			for _, m := range c.Shard("a").Members {
				c.Member(m.ID).Replica.View(func(st *fsm.State) {
					if rec := st.XRecord(id); rec != nil {
						first.Store(rec.Deadline)
					}
				})
			}
		case step == xshard.StepAllPrepared && retrying.CompareAndSwap(true, false):
			rec := &proto.XRecord{}
			if err := member.Do(context.Background(), "a", proto.OpXCommitDelete, &proto.XIDRequest{ID: id, Deadline: first.Load()}, rec); err != nil {
				return err
			}
			late <- rec
		}
		return nil
	}
	skew := map[string]*atomic.Int64{"a": {}, "b": {}}
	c, r := skewedCluster(t, skew, hook)
	member = c.MemberRouter()
	ctx := ctxT(t)
	_, err := xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	require.NotZero(t, first.Load(), "the first run's deadline was seen")
	forget(t, skew, r, "a")

	retrying.Store(true)
	_, err = xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	assert.ErrorIs(t, err, proto.ErrBadArguments, "the retry is refused")
	require.Len(t, late, 1, "the late decision was sent")
	assert.Equal(t, proto.XUnknown, (<-late).Status, "the late decision found no record of its run")
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "a", "/x"), "the coordinator applied its ops once")
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "b", "/y"), "the participant applied its ops once")
}

// TestRetryByAnotherCallerAfterCleanup (issue 38, item 8): once every
// shard deleted a committed transaction's record, a retry of its id and
// ops by another identity is refused (NoAuth) and is told neither the
// outcome nor the results, while its own caller, from another address,
// is told it committed. Nothing applies twice. Before, anyone who knew
// the id and the ops was answered "committed" with the results.
func TestRetryByAnotherCallerAfterCleanup(t *testing.T) {
	c, _ := xyCluster(t, nil, nil)
	ctx := ctxT(t)
	router := func(identity string, opts ...client.Option) *xshard.Router {
		r := xshard.NewRouter(c.Config, testenv.TestLogger(t), append(opts, client.WithAuth("digest", []byte(identity)))...)
		t.Cleanup(r.Close)
		return r
	}
	id := uuid.NewString()
	first, err := xshard.CrossShardTransaction(ctx, router("alice:x"), xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })

	res, err := xshard.CrossShardTransaction(ctx, router("bob:y"), xyOps("1", true), xshard.Options{ID: id})
	var xe *xshard.Error
	require.ErrorAs(t, err, &xe, "another caller's retry")
	assert.Equal(t, proto.ErrNoAuth, xe.Code)
	assert.Nil(t, res, "no results for another caller")

	again, err := xshard.CrossShardTransaction(ctx, router("alice:x", client.WithDialer(loopback2)), xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err, "the caller's own retry from 127.0.0.2")
	assert.Equal(t, first, again, "the same results")
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "a", "/x"))
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "b", "/y"))
}

// TestRetryWithOtherOpsIsRefused (issue 38, item 8): while a transaction
// is answered and its commits are held back, a retry with its id but
// other ops is refused with a clear error, and the transaction commits as
// it was sent.
func TestRetryWithOtherOpsIsRefused(t *testing.T) {
	g := newGate(xshard.StepAnswered)
	c, r := xyCluster(t, g.hook, func(k *config.Keeper) { k.LockGrace = time.Minute })
	ctx := ctxT(t)
	release := sync.OnceFunc(func() { close(g.release) })
	defer release()
	g.arm()
	id := uuid.NewString()
	_, err := xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err)
	<-g.reached
	waitLocked(t, c, "a", "/x") // every member of the coordinator shard holds the record

	_, err = xshard.CrossShardTransaction(ctx, r, xyOps("2", true), xshard.Options{ID: id})
	require.Error(t, err, "a retry with other ops")
	assert.ErrorIs(t, err, proto.ErrBadArguments)
	var unknown *xshard.UnknownOutcomeError
	assert.False(t, errors.As(err, &unknown))

	release()
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	x, _ := node(t, c, "a", "/x")
	y, _ := node(t, c, "b", "/y")
	assert.Equal(t, []string{"1", "1"}, []string{x, y}, "the transaction commits as first sent")
}

// TestDeadlineBeyondRetentionIsRefused (issue 38, item 8): a deadline a
// retry could carry past the time the shards remember an outcome is
// refused before anything is prepared.
func TestDeadlineBeyondRetentionIsRefused(t *testing.T) {
	_, r := xyCluster(t, nil, nil)
	_, err := xshard.CrossShardTransaction(ctxT(t), r, xyOps("1", true), xshard.Options{Deadline: 24 * time.Hour})
	assert.ErrorIs(t, err, proto.ErrBadArguments)
}

// TestLateRetryWhileCoordinatorKeepsItsRecord (issue 38, item 8): the
// coordinator still holds its committed record (its own delete keeps
// failing) while the participant, whose clock lagged by 30 s when it
// deleted its record, forgot the transaction once both clocks moved on
// by the retention less 20 s. A retry keeps the transaction's deadline,
// long passed, so the participant refuses it rather than take it as new
// (with a fresh deadline it took it, and the coordinator's commit applied
// its ops again), and the coordinator's record decides the answer:
// committed, not "failed" for the participant's refusal.
func TestLateRetryWhileCoordinatorKeepsItsRecord(t *testing.T) {
	skew := map[string]*atomic.Int64{"a": {}, "b": {}}
	skew["b"].Store(int64(-30 * time.Second))
	var keep atomic.Bool
	hook := func(step, _, _ string) error {
		if step == xshard.StepBeforeOwnDelete && keep.Load() {
			return errors.New("test: the coordinator's own delete fails")
		}
		return nil
	}
	c, r := skewedCluster(t, skew, hook)
	ctx := ctxT(t)
	keep.Store(true)
	id := uuid.NewString()
	_, err := xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err)
	waitFor(t, func() bool { return records(c, "b") == 0 })
	later := int64(time.Duration(fsm.OutcomeRetention)*time.Millisecond - 20*time.Second)
	skew["a"].Store(later)
	skew["b"].Store(later)
	tick(t, r, "a")
	tick(t, r, "b")

	_, err = xshard.CrossShardTransaction(ctx, r, xyOps("1", true), xshard.Options{ID: id})
	require.NoError(t, err, "the retry gets the outcome the coordinator's record holds")
	keep.Store(false)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "a", "/x"))
	assert.Equal(t, []int32{1, 1, 1}, versions(c, "b", "/y"))
}
