package xshard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// MultiRequestForShard is the part of a transaction that runs on one shard:
// ordinary multi ops (create, delete, setData, check).
type MultiRequestForShard struct {
	Shard    string
	Requests []proto.MultiOp
}

// ShardResponses is one shard's per-op results, in request order.
type ShardResponses struct {
	Shard   string
	Results []proto.MultiResult
}

// Error says why a transaction failed: which shard and which op refused,
// and the ZooKeeper code (errors.Is(err, proto.ErrBadVersion) works).
// Locked paths give proto.ErrLocked, a passed deadline
// proto.ErrOperationTimeout, a message the member links cannot carry
// proto.ErrTooLarge.
type Error struct {
	ID    string
	Shard string
	Op    int
	Code  proto.Code
}

func (e *Error) Error() string {
	if e.Op >= 0 {
		return fmt.Sprintf("xshard: transaction %s failed: shard %s op %d: %v", e.ID, e.Shard, e.Op, e.Code)
	}
	return fmt.Sprintf("xshard: transaction %s failed on shard %s: %v", e.ID, e.Shard, e.Code)
}

// Unwrap returns the ZooKeeper code.
func (e *Error) Unwrap() error { return e.Code }

// Options tune a transaction.
type Options struct {
	ID          string        // UUID; a new one if empty. Retrying with the same ID never applies twice.
	Coordinator string        // coordinating shard; the first shard if empty
	Deadline    time.Duration // distance of the deadline in the coordinator's official time; its default if 0
}

// CrossShardTransaction applies every request on every shard, or none.
// Requests touching one shard run as a plain multi. If no answer comes
// before ctx ends, the error is an *UnknownOutcomeError: the transaction
// may still commit, and Outcome tells, by id, once it is decided. One too
// large for the member links (proto.XTransactionRequest.Fit) is refused
// with proto.ErrTooLarge before anything is prepared.
func CrossShardTransaction(ctx context.Context, r *Router, reqs []MultiRequestForShard, opt ...Options) ([]ShardResponses, error) {
	var o Options
	if len(opt) > 0 {
		o = opt[0]
	}
	if len(reqs) == 0 {
		return nil, errors.New("xshard: empty transaction")
	}
	if len(reqs) == 1 {
		return single(ctx, r, reqs[0])
	}
	if o.ID == "" {
		o.ID = uuid.NewString()
	}
	if o.Coordinator == "" {
		o.Coordinator = reqs[0].Shard
	}
	tx := &proto.XTransactionRequest{ID: o.ID, Coordinator: o.Coordinator, TimeoutMs: int32(o.Deadline.Milliseconds())}
	for _, rq := range reqs {
		tx.Shards = append(tx.Shards, proto.ShardOps{Shard: rq.Shard, Ops: proto.MultiRequest{Ops: rq.Requests}})
	}
	// The coordinator checks again with the caller's identities, which
	// only it knows: this says early, and in words, what is too large.
	if err := tx.Fit(nil, proto.DefaultMaxPacket); err != nil {
		return nil, fmt.Errorf("xshard: transaction %s: %w", o.ID, err)
	}
	var resp proto.XTransactionResponse
	shards := make([]string, len(reqs))
	for i, rq := range reqs {
		shards[i] = rq.Shard
	}
	defer r.touched(shards...) // it may have committed, whatever the answer
	if err := r.Do(ctx, o.Coordinator, proto.OpXTransaction, tx, &resp); err != nil {
		if ctx.Err() != nil {
			return nil, &UnknownOutcomeError{ID: o.ID}
		}
		return nil, err
	}
	return responses(o.ID, reqs, &resp)
}

func responses(id string, reqs []MultiRequestForShard, resp *proto.XTransactionResponse) ([]ShardResponses, error) {
	if resp.Status != proto.XCommitted {
		return nil, &Error{ID: id, Shard: resp.FailedShard, Op: int(resp.FailedOp), Code: resp.Err}
	}
	out := make([]ShardResponses, len(reqs))
	for i, rq := range reqs {
		out[i].Shard = rq.Shard
		j := slices.IndexFunc(resp.Results, func(r proto.XShardResult) bool { return r.Shard == rq.Shard })
		if j >= 0 {
			out[i].Results = resp.Results[j].Results.Results
		}
	}
	return out, nil
}

// single runs a one-shard transaction as a plain multi.
func single(ctx context.Context, r *Router, rq MultiRequestForShard) ([]ShardResponses, error) {
	c, err := r.Client(ctx, rq.Shard)
	if err != nil {
		return nil, err
	}
	var resp proto.MultiResponse
	if _, err := c.Do(ctx, proto.OpMulti, &proto.MultiRequest{Ops: rq.Requests}, &resp); err != nil {
		return nil, err
	}
	for i, res := range resp.Results {
		if res.Op == proto.OpError && res.Err != proto.ErrOK {
			return nil, &Error{Shard: rq.Shard, Op: i, Code: res.Err}
		}
	}
	return []ShardResponses{{Shard: rq.Shard, Results: resp.Results}}, nil
}

// Outcome looks up a transaction by id on its coordinator shard:
// committed, failed, pending (still being decided) or unknown. A
// transaction the coordinator still holds pending is committed once every
// shard holds it pending (its outcome is fixed then, and its client may
// have been answered), failed if a shard refused it: the participants are
// asked, as recovery would.
func Outcome(ctx context.Context, r *Router, coordinator, id string) (proto.XStatus, error) {
	rec, err := outcomeOn(ctx, r, coordinator, id)
	if err != nil || rec.Status != proto.XPending {
		return rec.Status, err
	}
	for _, sh := range rec.Shards {
		if sh == coordinator {
			continue
		}
		part, err := outcomeOn(ctx, r, sh, id)
		if err != nil {
			return proto.XUnknown, err
		}
		switch {
		case part.Coordinator != "" && part.Coordinator != coordinator:
			return proto.XPending, nil // another transaction's id there: the driver fails this one
		case part.Status == proto.XRejected || part.Status == proto.XFailed:
			return proto.XFailed, nil
		case part.Status != proto.XPending && part.Status != proto.XCommitted:
			return proto.XPending, nil // not prepared there (yet)
		}
	}
	return proto.XCommitted, nil
}

// outcomeOn reads what shard knows of transaction id: a read, retried
// through unavailability (a lost connection, a moved session, a leader
// change) until ctx ends.
func outcomeOn(ctx context.Context, r *Router, shard, id string) (*proto.XRecord, error) {
	var rec proto.XRecord
	if err := r.Do(ctx, shard, proto.OpXOutcome, &proto.XIDRequest{ID: id}, &rec); err != nil {
		return &proto.XRecord{Status: proto.XUnknown}, err
	}
	return &rec, nil
}
