package replica

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/peerlink"
)

// startShard opens a shard of n members on free loopback ports, waits
// until one leads, and returns the leader and the followers; every member
// is closed when the test ends.
func startShard(t *testing.T, n int) (leader *Replica, followers []*Replica) {
	auth, err := peerlink.New(peerlink.Config{Secret: "members-test"}, nil)
	require.NoError(t, err)
	var peers []Peer
	for i := range n {
		peers = append(peers, Peer{ID: fmt.Sprintf("m%d", i+1), RaftAddr: freeAddr(t)})
	}
	var all []*Replica
	identity := NewIdentity() // every member bootstraps the same configuration, as one incarnation
	for _, p := range peers {
		r, err := Open(Config{
			Shard: "a", ID: p.ID, DataDir: t.TempDir(), Peers: peers, Auth: auth, Bootstrap: true, Identity: identity,
			HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
			LeaderLeaseTimeout: 250 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		all = append(all, r)
	}
	require.Eventually(t, func() bool {
		leader, followers = nil, nil
		for _, r := range all {
			if r.IsLeader() {
				leader = r
			} else {
				followers = append(followers, r)
			}
		}
		return leader != nil
	}, 20*time.Second, 10*time.Millisecond, "no leader")
	return leader, followers
}

// TestChangeIsDoneOnlyOnceCommitted: the leader believes a dead follower
// answers (its contact record is refreshed all along, as a transport that
// has not noticed the death yet would), so removing the other follower
// passes the check; the new configuration's majority needs the dead one.
// RemoveMember must answer done only if the change committed (it answered
// done on append when it took the configuration the leader had appended
// for a committed one). Usually it fails once the leader gives up its
// leadership, and no member has committed the change; hashicorp/raft may
// also commit it with the old configuration's majority (the removed
// follower's acknowledgement, when it comes before the leader's switch to
// the new configuration), and then done is the truth.
func TestChangeIsDoneOnlyOnceCommitted(t *testing.T) {
	leader, followers := startShard(t, 3)
	healthy, dead := followers[0], followers[1]
	require.Eventually(t, func() bool {
		return leader.committedConf.Load() != nil && healthy.committedConf.Load() != nil
	}, 10*time.Second, 10*time.Millisecond, "the leader and the healthy follower apply the bootstrap configuration")
	require.NoError(t, dead.Close())
	stop := make(chan struct{})
	believed := make(chan struct{})
	go func() { // the dead member's answers, as the leader still believes in them
		defer close(believed)
		for {
			leader.trans.contacts.heard(raft.ServerID(dead.ID()))
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err := leader.RemoveMember(healthy.ID())
	close(stop)
	<-believed

	committed := leader.committedConf.Load()
	require.NotNil(t, committed)
	if err == nil {
		t.Log("the removal committed with the old configuration's majority: done is true")
		assert.Len(t, committed.conf.Servers, 2, "done, but the leader's committed configuration does not have the removal")
		return
	}
	assert.NotErrorIs(t, err, ErrNoQuorum, "the check passed: the dead member's answers were believed")
	for _, r := range []*Replica{leader, healthy} {
		c := r.committedConf.Load()
		require.NotNil(t, c)
		assert.Len(t, c.conf.Servers, 3, "member %s committed the removal, but the leader said it failed", r.ID())
	}
}

// TestQuorumCheckWantsFreshAnswers: a follower heard from a moment before
// it died does not count for a membership change's check; only answers
// that come after the check began do. Removing the healthy follower with
// the other one just dead is refused, and nothing changes.
func TestQuorumCheckWantsFreshAnswers(t *testing.T) {
	leader, followers := startShard(t, 3)
	healthy, dead := followers[0], followers[1]
	require.NoError(t, dead.Close())
	leader.trans.contacts.heard(raft.ServerID(dead.ID())) // heard from just before it died

	err := leader.RemoveMember(healthy.ID())
	require.ErrorIs(t, err, ErrNoQuorum)
	members, err := leader.Members()
	require.NoError(t, err)
	assert.Len(t, members, 3, "the refused change is in no configuration")
}

// TestChangesOneAtATime: while a membership change is under way on the
// leader, another is refused with ErrChangeBusy and changes nothing; once
// that one is done, the next is made, and has committed when it returns.
func TestChangesOneAtATime(t *testing.T) {
	leader, followers := startShard(t, 3)
	leader.changing.Lock() // a change under way
	err := leader.RemoveMember(followers[0].ID())
	require.ErrorIs(t, err, ErrChangeBusy)
	members, err := leader.Members()
	require.NoError(t, err)
	assert.Len(t, members, 3, "the refused change is in no configuration")
	leader.changing.Unlock()

	require.NoError(t, leader.RemoveMember(followers[0].ID()))
	c := leader.committedConf.Load()
	require.NotNil(t, c)
	assert.Len(t, c.conf.Servers, 2)
}

// TestAdminReplyNamesItsCause: the causes a caller acts on (another
// leader, no majority, another change under way) cross the admin link.
func TestAdminReplyNamesItsCause(t *testing.T) {
	for _, cause := range []error{ErrNotLeader, ErrNoQuorum, ErrChangeBusy} {
		var sent AdminReply
		sent.failed(fmt.Errorf("replica: remove m2: %w", cause))
		b, err := json.Marshal(sent)
		require.NoError(t, err)
		var got AdminReply
		require.NoError(t, json.Unmarshal(b, &got))
		assert.ErrorIs(t, got.Err(), cause)
		assert.Equal(t, "replica: remove m2: "+cause.Error(), got.Err().Error())
	}
	assert.NoError(t, AdminReply{}.Err())
}
