package keeper

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/peerlink"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// balancer spreads the leadership of the shards whose members share one
// peer port (a node) over the nodes that host those shards, so that each
// shard's single-threaded apply runs on a different machine. A node that
// leads more than its share (its shards over the nodes voting in them,
// rounded up) hands one leadership per round to that shard's member on the
// node that leads the fewest, if that node leads at least two fewer than
// this one, and once that member answers, follows this node's member and
// has caught up with it. Each node decides only about the leaderships it
// holds, and it balances only when every node votes in the same shards (a
// node that hosts other shards than this one leads some it cannot see, and
// two such nodes could hand one leadership back and forth). A shard whose
// first members have not all started yet keeps its first leader
// (replica.AwaitsFirstMembers). A raft address stands for its node.
type balancer struct {
	c       *config.Cluster
	self    string // the peer port's address
	members []*Member
	auth    *peerlink.Auth
	log     *slog.Logger
	failed  map[string]time.Time // targets of failed transfers, left alone for a while
	warned  bool                 // about a placement it does not balance
}

// transferBackoff is how long a member a transfer failed to is left alone.
const transferBackoff = time.Minute

// caughtUp is how far behind the leader's commit index a member's state
// may be (replica.Status.Applied, not raft's applied index, which runs
// ahead of the state by whatever is queued) and still be given the
// leadership.
const caughtUp = 64

// run balances every interval until ctx ends.
func (b *balancer) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		round, cancel := context.WithTimeout(ctx, interval)
		b.round(round)
		cancel()
	}
}

// led is a shard this node leads, with its replicated configuration.
type led struct {
	m      *Member
	voters []replica.Member
}

// round hands at most one leadership on.
func (b *balancer) round(ctx context.Context) {
	leads := map[string]int{} // node → leaderships among this node's shards
	var mine []led
	placement := ""
	for i, m := range b.members {
		members, err := m.Replica.Members()
		leader := m.Replica.Leader()
		if err != nil || leader == "" {
			return // an election is on: wait for the next round
		}
		var voters []replica.Member
		var nodes []string
		for _, v := range members {
			if v.Voter {
				voters = append(voters, v)
				nodes = append(nodes, v.RaftAddr)
				leads[v.RaftAddr] += 0
				if v.ID == leader {
					leads[v.RaftAddr]++
				}
			}
		}
		slices.Sort(nodes)
		if p := strings.Join(nodes, ","); i == 0 {
			placement = p
		} else if p != placement {
			if !b.warned {
				b.warned = true
				b.log.Info("leaders are not balanced: the shards of this node are not all on the same nodes")
			}
			return
		}
		if m.Replica.IsLeader() && !m.Replica.AwaitsFirstMembers() {
			// A shard still waiting for first members keeps its leader:
			// they take the identity only while no other member has led.
			mine = append(mine, led{m, voters})
		}
	}
	share := (len(b.members) + len(leads) - 1) / max(len(leads), 1)
	if leads[b.self] <= share {
		return
	}
	var from *Member
	var to replica.Member
	for _, l := range mine {
		for _, v := range l.voters {
			if v.RaftAddr == b.self || leads[v.RaftAddr]+2 > leads[b.self] || time.Since(b.failed[v.ID]) < transferBackoff {
				continue
			}
			if (to.ID == "" || leads[v.RaftAddr] < leads[to.RaftAddr]) && b.ready(ctx, v.ID, l.m.Replica) {
				from, to = l.m, v
			}
		}
	}
	if from == nil {
		return
	}
	b.log.Info("handing on a leadership: this node leads more than its share of its shards",
		"shard", from.Replica.Status().Shard, "from", from.Replica.ID(), "to", to.ID, "leads", leads[b.self], "share", share)
	if err := from.Replica.TransferLeadership(to.ID, to.RaftAddr); err != nil {
		b.failed[to.ID] = time.Now()
		b.log.Warn("leadership not handed on", "to", to.ID, "err", err)
	}
}

// ready reports whether member id of leader's shard answers on its client
// port, belongs to the same incarnation of the shard, follows leader, has
// applied nearly all that leader has committed, and its log writes neither
// hang nor fail (an idle shard does not show that in the indexes).
func (b *balancer) ready(ctx context.Context, id string, leader *replica.Replica) bool {
	_, m, err := b.c.Member(id)
	if err != nil {
		return false
	}
	reply, err := admin(ctx, b.auth, m.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
	if err != nil {
		return false
	}
	st, ls := reply.Status, leader.Status()
	return st.Identity == ls.Identity && st.Leader == ls.ID && st.Applied()+caughtUp >= ls.CommitIndex && !st.LogStalled && st.LogFailed == ""
}
