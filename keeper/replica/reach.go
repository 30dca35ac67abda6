package replica

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// contacts records when each peer last answered this member's appends: on
// a leader, which of its followers are alive and reachable now.
//
// hashicorp/raft (v1.7.3) keeps each follower's last contact in its
// replication state but shows it to no caller (Stats has only a member's
// own contact with its leader). What it does show is its transport: the
// leader sends every follower, voter or not, a heartbeat through
// AppendEntries every HeartbeatTimeout/10, and one at least every
// HeartbeatTimeout/2 while they fail, whatever the pipeline carries. A
// heartbeat answered is the follower's main loop answering (no fast path:
// SetHeartbeatHandler), so a follower that is dead, cut off or stuck in a
// log write that hangs is not heard; nor is any while this member's own
// log is stalled, when its appends do not go out at all. etcd's strict
// reconfiguration check counts its transport's active peers the same way.
type contacts struct {
	mu   sync.Mutex
	last map[raft.ServerID]time.Time
}

// heard records that id answered now.
func (c *contacts) heard(id raft.ServerID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[raft.ServerID]time.Time{}
	}
	c.last[id] = time.Now()
}

// within reports whether id answered less than d ago.
func (c *contacts) within(id raft.ServerID, d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.last[id]
	return ok && time.Since(last) < d
}

// since reports whether id answered after t.
func (c *contacts) since(id raft.ServerID, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.last[id]
	return ok && last.After(t)
}

// ever reports whether id answered at all since this member started.
func (c *contacts) ever(id raft.ServerID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.last[id]
	return ok
}

// ErrNoQuorum refuses a membership change whose new configuration would
// not have a majority of voters that answer the leader now: the change
// could not commit before they answer, and meanwhile the shard would have
// no leader and take no write.
var ErrNoQuorum = errors.New("replica: no majority of the new configuration's voters answers the leader")

// ErrChangeBusy refuses a membership change while another one is under way
// on the leader: each change is checked against the configuration the one
// before it left.
var ErrChangeBusy = errors.New("replica: another membership change of the shard is under way")

// heardFrom reports whether this member has heard from id within an
// election timeout (contacts; itself always).
func (r *Replica) heardFrom(id raft.ServerID) bool {
	return id == raft.ServerID(r.cfg.ID) || r.trans.contacts.within(id, r.electionTimeout())
}

// Unheard returns, on the leader, the members of the configuration it has
// not heard from within an election timeout (dead, cut off, or stalled);
// nothing on a follower.
func (r *Replica) Unheard() []string {
	members, err := r.Members()
	if err != nil || !r.IsLeader() {
		return nil
	}
	var out []string
	for _, m := range members {
		if !r.heardFrom(raft.ServerID(m.ID)) {
			out = append(out, m.ID)
		}
	}
	return out
}

// checkQuorum refuses (ErrNoQuorum) a change, what, that would leave the
// voters next, unless a majority of them answer this member, the leader,
// after the check began: it waits for their next heartbeats (every
// HeartbeatTimeout/10), up to an election timeout. An answer from before
// the check will not do, even a recent one: a member that died a moment
// ago was still heard within the last election timeout, and hashicorp/raft
// (v1.7.3) can commit a configuration entry with the old configuration's
// majority (a follower's acknowledgement that comes between the leader's
// write of the entry and its switch to the new configuration counts), so
// a removal checked against such a member could commit and leave the shard
// without a majority. Waiting for fresh answers narrows that window to a
// member dying within the few milliseconds between its answer and the
// change; the rest of it is raft's.
func (r *Replica) checkQuorum(what string, next []raft.ServerID) error {
	began := time.Now()
	answered := func(id raft.ServerID) bool {
		return id == raft.ServerID(r.cfg.ID) || r.trans.contacts.since(id, began)
	}
	deadline := began.Add(r.electionTimeout())
	for {
		unheard := slices.DeleteFunc(slices.Clone(next), answered)
		if len(next)-len(unheard) > len(next)/2 {
			return nil
		}
		if time.Now().After(deadline) {
			return noQuorum(what, next, unheard, r.electionTimeout())
		}
		select {
		case <-r.closed:
			return ErrClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// noQuorum says why a change was refused and what to do.
func noQuorum(what string, next, unheard []raft.ServerID, window time.Duration) error {
	ids := func(s []raft.ServerID) string {
		out := make([]string, len(s))
		for i, id := range s {
			out[i] = string(id)
		}
		return strings.Join(out, ", ")
	}
	return fmt.Errorf("%w: %s refused, nothing changed: the voters after it would be %s, of which %d must answer, "+
		"and the leader has not heard from %s within an election timeout (%v); "+
		"bring %[5]s back (start, or mend the network) and try again, or remove a dead member first",
		ErrNoQuorum, what, ids(next), len(next)/2+1, ids(unheard), window)
}

// votersAfter returns the voters of c once the change is made: id added
// (as a voter if voter; a voter added as a non-voter stays one, as raft
// keeps it) or, if remove, removed.
func votersAfter(c raft.Configuration, id raft.ServerID, voter, remove bool) []raft.ServerID {
	var out []raft.ServerID
	for _, s := range c.Servers {
		if s.ID == id {
			voter = voter || s.Suffrage == raft.Voter
			continue
		}
		if s.Suffrage == raft.Voter {
			out = append(out, s.ID)
		}
	}
	if voter && !remove {
		out = append(out, id)
	}
	return out
}
