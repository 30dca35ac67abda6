package keeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	if reply.Error != "" {
		return reply, errors.New(reply.Error)
	}
	return reply, nil
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

// leader finds the member that leads the shard, skipping skip.
func (m *membership) leader(ctx context.Context, skip string) (config.Member, replica.Status, error) {
	mem, st, err := m.first(ctx, skip, func(st replica.Status) bool { return st.IsLeader })
	if mem.ID == "" {
		return mem, st, fmt.Errorf("%w %s: %w", ErrNoLeader, m.shard.Name, err)
	}
	return mem, st, nil
}

// identity asks the other members of the shard (a joining member's) for
// the shard's identity.
func (m *membership) identity(ctx context.Context, self string) (string, error) {
	mem, st, err := m.first(ctx, self, func(replica.Status) bool { return true })
	if mem.ID == "" {
		return "", fmt.Errorf("keeper: no member of shard %s told its identity to the joining member: %w", m.shard.Name, err)
	}
	return st.Identity, nil
}

// change asks the leader for a membership change, finding it again if
// leadership moves on the way.
func (m *membership) change(ctx context.Context, req replica.AdminRequest, skip string) (replica.Status, error) {
	for {
		leader, _, err := m.leader(ctx, skip)
		if err != nil {
			return replica.Status{}, err
		}
		reply, err := admin(ctx, m.auth, leader.ClientAddr, req)
		if !reply.NotLeader {
			return reply.Status, err
		}
		if err := pause(ctx); err != nil {
			return replica.Status{}, err
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
		add(rm.ID).Replicated = &rm
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
// member must be running, started with `serve --join`.
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
	_, leader, err := m.leader(ctx, id)
	if err != nil {
		return replica.Status{}, err
	}
	if newcomer.Status.Identity != leader.Identity {
		return replica.Status{}, fmt.Errorf("%w: member %s belongs to another shard (identity %s, shard %s has %s): was it started without --join? Stop it, empty its data directory, start it with --join",
			ErrOtherShard, id, newcomer.Status.Identity, sh.Name, leader.Identity)
	}
	st, err := m.change(ctx, replica.AdminRequest{Op: replica.AdminAdd, ID: id, RaftAddr: self.RaftAddr}, id)
	if err != nil {
		return st, err
	}
	target := st.CommitIndex
	for {
		reply, err := admin(ctx, m.auth, self.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
		if err == nil && reply.Status.AppliedIndex >= target {
			break
		}
		if err := pause(ctx); err != nil {
			// Take the non-voter out again: nothing is left half done.
			undo, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, uerr := m.change(undo, replica.AdminRequest{Op: replica.AdminRemove, ID: id}, id); uerr != nil {
				return st, fmt.Errorf("keeper: member %s did not catch up with the leader (index %d) and stays a non-voter (remove it with xkeeper member remove): %w", id, target, errors.Join(err, uerr))
			}
			return st, fmt.Errorf("keeper: member %s did not catch up with the leader (index %d); it was taken out again: %w", id, target, err)
		}
	}
	return m.change(ctx, replica.AdminRequest{Op: replica.AdminAdd, ID: id, RaftAddr: self.RaftAddr, Voter: true}, id)
}

// RemoveMember removes the member id from its shard's replicated
// configuration; it may be dead. Removing the leader makes it step down.
func RemoveMember(ctx context.Context, c *config.Cluster, shard, id string, log *slog.Logger) (replica.Status, error) {
	m, err := newMembership(c, shard, log)
	if err != nil {
		return replica.Status{}, err
	}
	return m.change(ctx, replica.AdminRequest{Op: replica.AdminRemove, ID: id}, "")
}
