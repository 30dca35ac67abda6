package replica

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// SinceLeaderContact returns how long ago this member last heard from its
// shard's leader (an append or a heartbeat): 0 while it leads, the time
// since its start if it never heard one. A member cut off from the
// majority (or removed, which its leader then stops replicating to) sees
// it grow; so may a member during an election, for about an election
// timeout.
func (r *Replica) SinceLeaderContact() time.Duration {
	if !r.started.Load() {
		return 0
	}
	if r.raft.State() == raft.Leader {
		return 0
	}
	last := r.raft.LastContact()
	if last.IsZero() {
		last = r.bootedAt
	}
	return time.Since(last)
}

// Removed reports whether the shard's configuration, as this member last
// knows it, no longer lists the member although an earlier one it saw did:
// it was removed, and no leader will replicate to it again. A member that
// joins replays the configurations from before it was added first, and is
// not taken for removed meanwhile.
func (r *Replica) Removed() bool {
	if !r.started.Load() {
		return false
	}
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	if slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == r.cfg.ID }) {
		r.listed.Store(true)
		return false
	}
	return r.listed.Load()
}
