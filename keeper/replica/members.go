package replica

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Member is a member of the shard as the replicated configuration knows
// it.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Voter    bool   `json:"voter"` // a non-voter receives the log but does not count for quorum
}

// Members returns the shard's replicated configuration as this member
// last applied it.
func (r *Replica) Members() ([]Member, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// ErrNotLeader is returned by a membership change asked of a member that
// does not lead the shard.
var ErrNotLeader = errors.New("replica: this member does not lead the shard")

// membershipTimeout bounds one configuration change.
const membershipTimeout = 30 * time.Second

// AddMember adds a member to the shard's configuration, or changes its
// suffrage: first as a non-voter that catches up, then (voter) as a voter.
// Only the leader can, and only if the voters after the change have a
// majority it hears from now (checkQuorum); it returns once the change has
// committed.
func (r *Replica) AddMember(id, raftAddr string, voter bool) error {
	sid := raft.ServerID(id)
	plan := func(c raft.Configuration) ([]raft.ServerID, error) {
		return votersAfter(c, sid, voter, false), nil
	}
	add := func() raft.IndexFuture {
		if voter {
			return r.raft.AddVoter(sid, raft.ServerAddress(raftAddr), 0, membershipTimeout)
		}
		return r.raft.AddNonvoter(sid, raft.ServerAddress(raftAddr), 0, membershipTimeout)
	}
	added := func(c raft.Configuration) bool {
		return slices.ContainsFunc(c.Servers, func(s raft.Server) bool {
			return s.ID == sid && (s.Suffrage == raft.Voter) == voter
		})
	}
	return r.change("add "+id, plan, add, added)
}

// RemoveMember removes a member from the shard's configuration. Only the
// leader can, and only if the voters left have a majority it hears from
// now (checkQuorum); it returns once the change has committed. A leader
// that removes itself steps down once the change is committed, and its
// Raft shuts down (raft's ShutdownOnRemove), as any removed member's does.
func (r *Replica) RemoveMember(id string) error {
	sid := raft.ServerID(id)
	plan := func(c raft.Configuration) ([]raft.ServerID, error) {
		next := votersAfter(c, sid, false, true)
		switch {
		case !slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return s.ID == sid }):
			return nil, fmt.Errorf("replica: %s is not a member of the shard", id)
		case len(next) == 0:
			return nil, fmt.Errorf("replica: %s is the shard's last voter", id)
		}
		return next, nil
	}
	remove := func() raft.IndexFuture { return r.raft.RemoveServer(sid, 0, membershipTimeout) }
	removed := func(c raft.Configuration) bool {
		return !slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return s.ID == sid })
	}
	return r.change("remove "+id, plan, remove, removed)
}

// change makes one membership change, what, on the leader, one at a time
// (ErrChangeBusy): plan checks the configuration in force and returns the
// voters after the change, which must have a majority the leader hears
// from (checkQuorum); then start makes the change, and change waits until
// it has committed (settled: what the configuration looks like once it
// has; see waitChange). Nothing changes if plan or the check refuses.
func (r *Replica) change(what string, plan func(raft.Configuration) ([]raft.ServerID, error),
	start func() raft.IndexFuture, settled func(raft.Configuration) bool) error {
	if !r.IsLeader() {
		return ErrNotLeader
	}
	if !r.changing.TryLock() {
		return fmt.Errorf("%w; %s: try again once it is done", ErrChangeBusy, what)
	}
	defer r.changing.Unlock()
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	next, err := plan(f.Configuration())
	if err != nil {
		return err
	}
	if err := r.checkQuorum(what, next); err != nil {
		return err
	}
	since := r.committedIndex()
	if err := r.waitChange(start(), func() bool { return r.committedSince(since, settled) }); err != nil {
		return fmt.Errorf("replica: %s: %w", what, err)
	}
	return nil
}

// errSettling refuses a handover while writes relayed at the last change of
// leader still wait: handing on again at once could bring a later write of
// a connection round before an earlier one still on its way.
var errSettling = errors.New("replica: writes relayed at the last change of leader still wait for their outcome; try again in a moment")

// TransferLeadership hands this member's leadership to the member id at
// raftAddr, a voter of the shard, and waits for the outcome. Only the
// leader can. The handover loses no write: it stops proposing, waits
// until every entry in flight has its outcome (an entry still in flight
// when the leader steps down has none known here, and its client would
// lose its connection), hands on, and then relays what waited meanwhile,
// its clients' and its followers', to the new leader in order
// (proposeLoop, relay). It refuses (errSettling) while writes relayed at
// the last change of leader still wait.
func (r *Replica) TransferLeadership(id, raftAddr string) error {
	if !r.IsLeader() {
		return ErrNotLeader
	}
	r.gate.Lock()
	defer r.gate.Unlock()
	if r.forwarded.Load() > 0 || r.relays.pending.Load() > 0 {
		return errSettling
	}
	r.flights.Wait()
	if err := r.waitChange(r.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(raftAddr)), nil); err != nil {
		return fmt.Errorf("replica: hand leadership to %s: %w", id, err)
	}
	return nil
}

// errChangeUnknown is returned for a configuration change whose outcome
// did not come in time: it may still commit.
var errChangeUnknown = errors.New("replica: no outcome in time; the change may still commit (xkeeper member list tells)")

// waitChange waits for a configuration change's outcome, at most
// membershipTimeout: hashicorp/raft leaves some futures unanswered (a
// leader that loses leadership or shuts down with the change in flight),
// and an admin request must not hold its connection, and so the member's
// close, forever. The future is released when the replica closes. A
// change's future is answered once the change has committed and this
// member has applied it (raft answers configuration futures from its FSM
// goroutine). With settled (whether a configuration entry applied since
// the change began has it: committedSince), the change also counts as
// done once one has, whatever its future says: a leader that removes
// itself steps down as the change commits, and its future may then never
// be answered, or be answered with lost leadership (a rare failure of
// TestMembershipGrowShrinkAndReplace). A future that fails is believed
// only after settleWait without a settled configuration. The latest
// configuration (GetConfiguration) will not do: it has the change as soon
// as the leader appends it, and hashicorp/raft (v1.7.3) tells no index
// with it (Index is always 0), so every change looked done on append.
func (r *Replica) waitChange(f raft.Future, settled func() bool) error {
	unblockOnClose(f, r.closed)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	timeout := time.After(membershipTimeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var failed error
	var failedAt <-chan time.Time // settleWait after the future failed
	for {
		select {
		case err := <-done:
			if err == nil || settled == nil {
				return err
			}
			failed, failedAt = err, time.After(settleWait)
		case <-tick.C:
			if settled != nil && settled() {
				return nil
			}
		case <-failedAt:
			if errors.Is(failed, raft.ErrLeadershipLost) {
				return fmt.Errorf("%w; the change may still commit under the next leader (xkeeper member list tells)", failed)
			}
			return failed
		case <-timeout:
			return errChangeUnknown
		case <-r.closed:
			return ErrClosed
		}
	}
}

// settleWait is how long a failed configuration change is watched for a
// configuration that has it after all.
const settleWait = 2 * time.Second

// appliedConf is a configuration entry of the log that a member applied.
type appliedConf struct {
	index uint64
	conf  raft.Configuration
}

// committedIndex returns the index of the configuration entry this member
// applied last (committedConf), 0 if none.
func (r *Replica) committedIndex() uint64 {
	if c := r.committedConf.Load(); c != nil {
		return c.index
	}
	return 0
}

// committedSince reports whether this member has applied a configuration
// entry after index since, and the last one it applied satisfies ok.
func (r *Replica) committedSince(since uint64, ok func(raft.Configuration) bool) bool {
	c := r.committedConf.Load()
	return c != nil && c.index > since && ok(c.conf)
}

// Disagreements lists how the members of the cluster file (peers) and the
// replicated configuration differ, one sentence each; none when they
// agree.
func Disagreements(peers []Peer, members []Member) []string {
	var out []string
	inFile := map[string]string{}
	for _, p := range peers {
		inFile[p.ID] = p.RaftAddr
	}
	replicated := map[string]bool{}
	for _, m := range members {
		replicated[m.ID] = true
		addr, ok := inFile[m.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("member %s (%s) is in the replicated configuration but not in the cluster file", m.ID, m.RaftAddr))
		case addr != m.RaftAddr:
			out = append(out, fmt.Sprintf("member %s is at %s in the replicated configuration but at %s in the cluster file", m.ID, m.RaftAddr, addr))
		case !m.Voter:
			out = append(out, fmt.Sprintf("member %s is a non-voter still catching up", m.ID))
		}
	}
	for _, p := range peers {
		if !replicated[p.ID] {
			out = append(out, fmt.Sprintf("member %s is in the cluster file but not in the replicated configuration", p.ID))
		}
	}
	return out
}

// checkConfiguration says, at start, where the cluster file and the
// replicated configuration disagree: the replicated one rules.
func (r *Replica) checkConfiguration() {
	members, err := r.Members()
	if err != nil || len(members) == 0 {
		return
	}
	if diffs := Disagreements(r.cfg.Peers, members); len(diffs) > 0 {
		r.log.Warn("the cluster file disagrees with the shard's replicated configuration, which is the one in force: "+
			"update the cluster file, or change the membership with xkeeper member add|remove",
			"differences", strings.Join(diffs, "; "))
	}
}
