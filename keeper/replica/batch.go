package replica

import (
	"time"

	"github.com/hashicorp/raft-wal/segment"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// MaxBatchBytes bounds the requests group-committed into one log entry,
// counted as the entry holds them (fsm.EntryBytes: bodies, identities and
// fixed fields), so that neither the request count nor the callers'
// identities make an entry larger; a request larger than that goes alone.
// Entries stay small enough to replicate and store in one piece, whatever
// clients pipeline.
const MaxBatchBytes = 4 << 20

// MaxEntryBytes bounds a log entry: every log store reads it back.
// raft-wal reads none above segment.MaxEntrySize (64 MiB, its codec's
// fields included: 64 KiB are left for them); raft-boltdb takes values up
// to 2 GiB, the node log records up to 1 GiB. Group commit makes entries
// of MaxBatchBytes or of one request, and config.MaxPacketBytesLimit
// keeps one request far below this; a leader refuses to propose an entry
// above it, failing its requests, rather than store what no member could
// read back.
const MaxEntryBytes = segment.MaxEntrySize - 64<<10

// lazy reports whether a request of op may be held back: a cross-shard
// transaction's decision or cleanup. None is on a client's latency path
// (the driver has answered already), but proposed alone each took an
// entry, and the next transaction's prepare waited behind its store and
// replication: at one client that was 2.7 entries per shard per
// transaction. A held request goes with the next request of any kind,
// when a request meets a lock (Replica.Locked: the commit that frees it
// may be held), or once the batcher's hold has passed.
func lazy(op proto.OpCode) bool {
	return op == proto.OpXCommit || op == proto.OpXCommitDelete || op == proto.OpXDelete
}

// batcher makes the leader's group commit: each batch is every request
// waiting, in order, up to max requests and maxBytes (one request alone
// may be larger), with the lazy ones held back until a request of another
// kind comes, until unhold, or for hold at most (0: not held). For hold
// after an unhold, lazy requests are not held at all: a request met a
// lock, and the decision that frees it may still be on its way here (the
// one who met it asked once and now waits for the state to change).
type batcher struct {
	proposals <-chan proposal
	unhold    <-chan struct{}
	closed    <-chan struct{}
	max       int
	maxBytes  int
	hold      time.Duration

	holding []proposal  // lazy requests held back, in their order
	heldLen int         // their bytes (fsm.EntryBytes)
	timer   *time.Timer // runs while holding is not empty
	eager   time.Time   // until then lazy requests are not held (a lock was met)
	next    proposal    // a request that did not fit the last batch
	held    bool        // next is set
}

// batch waits for the next batch; it returns nil once closed closes (stop
// then returns what was left).
func (b *batcher) batch() []proposal {
	if b.timer == nil {
		b.timer = time.NewTimer(b.hold)
		b.timer.Stop()
	}
	var batch []proposal
	if b.held { // nothing is holding: the last batch took it all
		batch, b.held = []proposal{b.next}, false
	}
	for batch == nil {
		select {
		case p := <-b.proposals:
			if b.mayHold(p) {
				if len(b.holding) == 0 {
					b.timer.Reset(b.hold)
				}
				b.holding = append(b.holding, p)
				b.heldLen += entryBytes(p)
				continue
			}
			batch = b.join(p)
		case <-b.timer.C:
			batch = b.holding
		case <-b.unhold:
			b.eager = time.Now().Add(b.hold)
			batch = b.holding
		case <-b.closed:
			return nil
		}
	}
	b.holding, b.heldLen = nil, 0
	b.timer.Stop()
	if !b.held {
		batch, b.next, b.held = gather(batch, b.proposals, b.max, b.maxBytes)
	}
	return batch
}

// mayHold reports whether p is to be held back: a lazy request, while the
// batcher holds, with room among those held for it.
func (b *batcher) mayHold(p proposal) bool {
	return b.hold > 0 && lazy(p.req.Op) && len(b.holding) < b.max/2 &&
		b.heldLen+entryBytes(p) <= b.maxBytes && time.Now().After(b.eager)
}

// join returns the held requests followed by p; if p would take them past
// maxBytes, the held requests alone, p starting the next batch.
func (b *batcher) join(p proposal) []proposal {
	if len(b.holding) > 0 && b.heldLen+entryBytes(p) > b.maxBytes {
		b.next, b.held = p, true
		return b.holding
	}
	return append(b.holding, p)
}

// stop returns the requests the batcher still holds.
func (b *batcher) stop() []proposal {
	left := b.holding
	if b.held {
		left = append(left, b.next)
	}
	b.holding, b.held = nil, false
	return left
}

// gather adds to batch (not empty) the proposals waiting in more, up to n
// requests in all and maxBytes (entryBytes), except that a batch's first
// request may be larger. A proposal that would go over maxBytes is taken
// from more but left out: it is returned as next (held true), to start the
// next batch.
func gather(batch []proposal, more <-chan proposal, n, maxBytes int) (_ []proposal, next proposal, held bool) {
	total := 0
	for _, p := range batch {
		total += entryBytes(p)
	}
	for len(batch) < n {
		select {
		case p := <-more:
			if total+entryBytes(p) > maxBytes {
				return batch, p, true
			}
			batch = append(batch, p)
			total += entryBytes(p)
		default:
			return batch, proposal{}, false
		}
	}
	return batch, proposal{}, false
}

// entryBytes is what p's request adds to an entry.
func entryBytes(p proposal) int { return fsm.EntryBytes(&p.req) }
