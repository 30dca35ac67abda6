package keeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// ErrNoLeader is returned when no member of a shard answers as its leader.
var ErrNoLeader = errors.New("keeper: no member of the shard answers as its leader")

// ErrOtherShard is returned by AddMember for a member that belongs to
// another shard, or another incarnation of this one.
var ErrOtherShard = errors.New("keeper: the member belongs to another shard")

// admin sends one request on an admin link to the member at addr.
func admin(ctx context.Context, auth *peerlink.Auth, addr string, req replica.AdminRequest) (replica.AdminReply, error) {
	var reply replica.AdminReply
	conn, closeLink, err := dialLink(ctx, auth, addr, replica.AdminMagic)
	if err != nil {
		return reply, err
	}
	defer closeLink()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return reply, err
	}
	if err := json.NewDecoder(conn).Decode(&reply); err != nil {
		return reply, fmt.Errorf("keeper: no answer from %s: %w", addr, err)
	}
	return reply, reply.Err()
}

// membership reaches the members of one shard for membership changes.
type membership struct {
	shard *config.Shard
	auth  *peerlink.Auth
}

func newMembership(c *config.Cluster, shard string, log *slog.Logger) (*membership, error) {
	sh, err := c.Shard(shard)
	if err != nil {
		return nil, err
	}
	auth, err := PeerAuth(c, log)
	if err != nil {
		return nil, err
	}
	return &membership{shard: sh, auth: auth}, nil
}

// first asks the members of the shard but skip for their status, in the
// cluster file's order, and returns the first whose status is wanted; the
// error says why each that did not answer did not.
func (m *membership) first(ctx context.Context, skip string, wanted func(replica.Status) bool) (config.Member, replica.Status, error) {
	var errs []error
	for _, mem := range m.shard.Members {
		if mem.ID == skip {
			continue
		}
		reply, err := admin(ctx, m.auth, mem.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", mem.ID, err))
			continue
		}
		if wanted(reply.Status) {
			return mem, reply.Status, nil
		}
	}
	return config.Member{}, replica.Status{}, errors.Join(errs...)
}

// leaderWait bounds how long finding a shard's leader waits while no
// member leads: an election takes a few election timeouts at most, and a
// shard that elects none meanwhile is down, which the operator should
// hear at once.
const leaderWait = 10 * time.Second

// leader finds the member that leads the shard, skipping skip, waiting
// out an election (up to leaderWait): a membership change asked just as a
// leader died (to remove it, say) waits for the next one.
func (m *membership) leader(ctx context.Context, skip string) (config.Member, replica.Status, error) {
	wait, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for {
		mem, st, err := m.first(ctx, skip, func(st replica.Status) bool { return st.IsLeader })
		if mem.ID != "" {
			return mem, st, nil
		}
		if perr := pause(wait); perr != nil {
			why := fmt.Errorf("%w %s within %v: is a majority of its members running and reachable?", ErrNoLeader, m.shard.Name, leaderWait)
			if err != nil {
				why = fmt.Errorf("%w (%w)", why, err)
			}
			return mem, st, why
		}
	}
}

// identity asks the other members of the shard (a joining member's) for
// the shard's identity. A member that answers as another shard's (a
// cluster file that gives the shard another shard's addresses) is refused:
// joining through it would make the newcomer a member of that shard.
func (m *membership) identity(ctx context.Context, self string) (string, error) {
	mem, st, err := m.first(ctx, self, func(replica.Status) bool { return true })
	if mem.ID == "" {
		return "", fmt.Errorf("keeper: no member of shard %s told its identity to the joining member: %w", m.shard.Name, err)
	}
	if err := m.sameShard(mem.ID, st); err != nil {
		return "", err
	}
	return st.Identity, nil
}

// sameShard returns ErrOtherShard unless st, the status member id of the
// cluster file's shard answered with, is of that shard.
func (m *membership) sameShard(id string, st replica.Status) error {
	if st.Shard == m.shard.Name && (st.ID == "" || st.ID == id) {
		return nil
	}
	return fmt.Errorf("%w: the cluster file places member %s in shard %s, but the member at its address answers as member %s of shard %s: "+
		"check the addresses of shard %s in the cluster file", ErrOtherShard, id, m.shard.Name, st.ID, st.Shard, m.shard.Name)
}

// change asks the leader for a membership change, finding it again if
// leadership moves on the way, and asking again while another change is
// under way (the leader makes one at a time, each checked against the
// configuration the one before left).
func (m *membership) change(ctx context.Context, req replica.AdminRequest, skip string) (replica.Status, error) {
	for {
		leader, _, err := m.leader(ctx, skip)
		if err != nil {
			return replica.Status{}, err
		}
		reply, err := admin(ctx, m.auth, leader.ClientAddr, req)
		if !reply.NotLeader && !errors.Is(err, replica.ErrChangeBusy) {
			return reply.Status, err
		}
		if perr := pause(ctx); perr != nil {
			return replica.Status{}, fmt.Errorf("%w: %w", perr, err)
		}
	}
}

func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(100 * time.Millisecond):
		return nil
	}
}

// MemberStatus is one member in a shard's membership listing.
type MemberStatus struct {
	ID          string          `json:"id"`
	InFile      bool            `json:"in_cluster_file"`
	Replicated  *replica.Member `json:"replicated,omitempty"` // its place in the replicated configuration; nil if none
	Reachable   bool            `json:"reachable"`
	Status      *replica.Status `json:"status,omitempty"`
	Unreachable string          `json:"unreachable,omitempty"` // why, when it is not
	Unheard     bool            `json:"unheard,omitempty"`     // the leader has not heard from it within an election timeout
}

// Membership is a shard's membership as its leader and its members tell it.
type Membership struct {
	Shard         string         `json:"shard"`
	Leader        string         `json:"leader"`
	Members       []MemberStatus `json:"members"`
	Disagreements []string       `json:"disagreements,omitempty"` // cluster file against the replicated configuration
}

// ListMembers returns the shard's replicated configuration from its
// leader, what every member in it or in the cluster file says of itself,
// and where the cluster file disagrees.
func ListMembers(ctx context.Context, c *config.Cluster, shard string, log *slog.Logger) (Membership, error) {
	m, err := newMembership(c, shard, log)
	if err != nil {
		return Membership{}, err
	}
	_, st, err := m.leader(ctx, "")
	if err != nil {
		return Membership{}, err
	}
	out := Membership{Shard: m.shard.Name, Leader: st.ID, Disagreements: replica.Disagreements(peersOf(m.shard), st.Members)}
	seen := map[string]int{}
	add := func(id string) *MemberStatus {
		if i, ok := seen[id]; ok {
			return &out.Members[i]
		}
		seen[id] = len(out.Members)
		out.Members = append(out.Members, MemberStatus{ID: id})
		return &out.Members[len(out.Members)-1]
	}
	for _, rm := range st.Members {
		ms := add(rm.ID)
		ms.Replicated, ms.Unheard = &rm, slices.Contains(st.Unheard, rm.ID)
	}
	for _, fm := range m.shard.Members {
		ms := add(fm.ID)
		ms.InFile = true
		reply, err := admin(ctx, m.auth, fm.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
		if err != nil {
			ms.Unreachable = err.Error()
			continue
		}
		ms.Reachable, ms.Status = true, &reply.Status
	}
	return out, nil
}

// AddMember adds the member id of the cluster file to its shard's
// replicated configuration: first as a non-voter, until it has applied
// what the leader had committed when it was added, then as a voter, so
// the shard's quorum never counts a member that is still catching up. The
// member must be running, started with `serve --join`. Each step answers
// once committed; a promotion the leader refuses (replica.ErrNoQuorum: the
// voters after it would not have a majority it hears from) takes the
// non-voter out again.
func AddMember(ctx context.Context, c *config.Cluster, id string, log *slog.Logger) (replica.Status, error) {
	sh, self, err := c.Member(id)
	if err != nil {
		return replica.Status{}, err
	}
	m, err := newMembership(c, sh.Name, log)
	if err != nil {
		return replica.Status{}, err
	}
	newcomer, err := admin(ctx, m.auth, self.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
	if err != nil {
		return replica.Status{}, fmt.Errorf("keeper: member %s does not answer at %s (start it first, with xkeeper serve --join): %w", id, self.ClientAddr, err)
	}
	leaderMember, leader, err := m.leader(ctx, id)
	if err != nil {
		return replica.Status{}, err
	}
	for _, who := range []struct {
		id string
		st replica.Status
	}{{id, newcomer.Status}, {leaderMember.ID, leader}} {
		if err := m.sameShard(who.id, who.st); err != nil {
			return replica.Status{}, err
		}
	}
	if newcomer.Status.Identity != leader.Identity {
		return replica.Status{}, fmt.Errorf("%w: member %s belongs to another shard (identity %s, shard %s has %s): was it started without --join? Stop it, empty its data directory, start it with --join",
			ErrOtherShard, id, newcomer.Status.Identity, sh.Name, leader.Identity)
	}
	st, err := m.change(ctx, replica.AdminRequest{Op: replica.AdminAdd, ID: id, RaftAddr: self.RaftAddr}, id)
	if err != nil {
		return st, err
	}
	for {
		reply, err := admin(ctx, m.auth, self.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
		if err == nil && caughtUpWith(reply.Status, st) {
			break
		}
		if err := pause(ctx); err != nil {
			return st, m.takeOut(id, fmt.Errorf("keeper: member %s did not catch up with the leader (index %d): %w", id, st.CommitIndex, err))
		}
	}
	voter, err := m.change(ctx, replica.AdminRequest{Op: replica.AdminAdd, ID: id, RaftAddr: self.RaftAddr, Voter: true}, id)
	if errors.Is(err, replica.ErrNoQuorum) {
		return voter, m.takeOut(id, err)
	}
	return voter, err
}

// caughtUpWith reports whether a newcomer has caught up with the leader as
// the leader was once it added it: raft has handed the newcomer every
// entry the leader had committed, and its state machine has applied all
// that the leader's had. Raft's applied index alone moves before the
// state machine applies (thousands may be queued), and the state's alone
// never reaches an election's trailing no-op, which the state machine
// does not see.
func caughtUpWith(newcomer, leader replica.Status) bool {
	return newcomer.AppliedIndex >= leader.CommitIndex && newcomer.Applied() >= leader.Applied()
}

// takeOut removes the non-voter id again after an add failed (why), so
// that nothing is left half done, and returns why with the outcome.
func (m *membership) takeOut(id string, why error) error {
	undo, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.change(undo, replica.AdminRequest{Op: replica.AdminRemove, ID: id}, id); err != nil {
		return fmt.Errorf("%w; member %s stays a non-voter (remove it with xkeeper member remove): %w", why, id, err)
	}
	return fmt.Errorf("%w; member %s was taken out again", why, id)
}

// RemoveMember removes the member id from its shard's replicated
// configuration; it may be dead. Removing the leader makes it step down.
// The leader refuses (replica.ErrNoQuorum), changing nothing, if the
// members left would not have a majority of voters it hears from now;
// it answers once the change has committed.
func RemoveMember(ctx context.Context, c *config.Cluster, shard, id string, log *slog.Logger) (replica.Status, error) {
	m, err := newMembership(c, shard, log)
	if err != nil {
		return replica.Status{}, err
	}
	return m.change(ctx, replica.AdminRequest{Op: replica.AdminRemove, ID: id}, "")
}
