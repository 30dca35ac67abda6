package keeper

import (
	"context"
	"log/slog"
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
// node that leads the fewest, once that member answers and follows it.
// Each node decides only about the leaderships it holds, so nodes never
// undo each other's moves. A raft address stands for its node.
type balancer struct {
	c       *config.Cluster
	self    string // the peer port's address
	members []*Member
	auth    *peerlink.Auth
	log     *slog.Logger
}

// run balances every interval until stop closes.
func (b *balancer) run(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		b.round(ctx)
		cancel()
	}
}

// led is a shard this node leads, with its replicated configuration.
type led struct {
	m      *Member
	voters []replica.Member
}

// round hands at most one leadership on; it reports whether it did.
func (b *balancer) round(ctx context.Context) bool {
	leads := map[string]int{} // node → leaderships among this node's shards
	var mine []led
	for _, m := range b.members {
		members, err := m.Replica.Members()
		leader := m.Replica.Leader()
		if err != nil || leader == "" {
			return false // an election is on: wait for the next round
		}
		var voters []replica.Member
		for _, v := range members {
			if v.Voter {
				voters = append(voters, v)
				leads[v.RaftAddr] += 0
				if v.ID == leader {
					leads[v.RaftAddr]++
				}
			}
		}
		if m.Replica.IsLeader() {
			mine = append(mine, led{m, voters})
		}
	}
	share := (len(b.members) + len(leads) - 1) / max(len(leads), 1)
	if leads[b.self] <= share {
		return false
	}
	var from *Member
	var to replica.Member
	for _, l := range mine {
		for _, v := range l.voters {
			if v.RaftAddr != b.self && leads[v.RaftAddr] < share && (to.ID == "" || leads[v.RaftAddr] < leads[to.RaftAddr]) && b.follows(ctx, v.ID, l.m.Replica.ID()) {
				from, to = l.m, v
			}
		}
	}
	if from == nil {
		return false
	}
	b.log.Info("handing on a leadership: this node leads more than its share of its shards",
		"shard", from.Replica.Status().Shard, "from", from.Replica.ID(), "to", to.ID, "leads", leads[b.self], "share", share)
	if err := from.Replica.TransferLeadership(to.ID, to.RaftAddr); err != nil {
		b.log.Warn("leadership not handed on", "to", to.ID, "err", err)
		return false
	}
	return true
}

// follows reports whether member id answers on its client port and
// follows leader.
func (b *balancer) follows(ctx context.Context, id, leader string) bool {
	_, m, err := b.c.Member(id)
	if err != nil {
		return false
	}
	reply, err := admin(ctx, b.auth, m.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
	return err == nil && reply.Status.Leader == leader
}
