package proto

import "fmt"

// Bytes a frame adds to its record, beside the length prefix that a
// packet limit does not count: a request's header (xid, opcode) and a
// reply's (xid, zxid, error).
const (
	requestHeaderBytes = 8
	replyHeaderBytes   = 16
)

// StatBytes is a Stat's size on the wire.
const StatBytes = 68

// Sizes of a multi result's parts beside a stat: its header, and the most
// a sequential create adds to its path (a signed 32-bit counter, %010d).
const (
	resultHeaderBytes = 9
	sequenceBytes     = 11
)

// Fit reports whether every message and reply of the cross-shard protocol
// for r, run for a caller with identities ids, fits a member link whose
// frames hold at most limit bytes: each shard's prepare, the record a
// shard answers any protocol message with (its results as large as its
// ops can make them) and the answer to the client. Nothing else the
// protocol sends grows with the transaction. The error wraps ErrTooLarge
// and says what does not fit.
func (r *XTransactionRequest) Fit(ids []ID, limit int) error {
	shards := make([]string, len(r.Shards))
	answer := &XTransactionResponse{Results: make([]XShardResult, len(r.Shards))}
	for i := range r.Shards {
		shards[i] = r.Shards[i].Shard
		answer.Results[i].Shard = shards[i]
	}
	reply := replyHeaderBytes + len(Marshal(&XRecord{ID: r.ID, Coordinator: r.Coordinator, Shards: shards, IDs: ids, Acked: shards}))
	all := replyHeaderBytes + len(Marshal(answer))
	prep := &XPrepareRequest{ID: r.ID, Coordinator: r.Coordinator, Shards: shards, IDs: ids, FixResults: true, Patient: true}
	for i, sh := range shards {
		// The coordinator's own prepare, with every shard's ops, goes
		// through its own log; this one is the largest a link carries.
		prep.Self, prep.Ops = sh, r.Shards[i:i+1]
		if err := fits("the prepare for shard "+sh, requestHeaderBytes+len(Marshal(prep)), limit); err != nil {
			return err
		}
		results := maxResultsBytes(r.Shards[i].Ops.Ops)
		if err := fits("a reply of shard "+sh, reply+results, limit); err != nil {
			return err
		}
		all += results
	}
	return fits("the answer to the client", all, limit)
}

// fits returns an error wrapping ErrTooLarge if n bytes exceed limit.
func fits(what string, n, limit int) error {
	if n > limit {
		return fmt.Errorf("%w: %s takes up to %d bytes, more than the %d of a member link's frame", ErrTooLarge, what, n, limit)
	}
	return nil
}

// maxResultsBytes returns the most bytes the results of ops take in a
// multi response, beside its end marker.
func maxResultsBytes(ops []MultiOp) int {
	n := 0
	for _, op := range ops {
		n += maxResultBytes(op)
	}
	return n
}

// maxResultBytes returns the most bytes op's result takes in a multi
// response: its reply record, or the code it failed with.
func maxResultBytes(op MultiOp) int {
	failed := resultHeaderBytes + 4
	var c *CreateRequest
	switch r := op.Req.(type) {
	case *CreateRequest:
		c = r
	case *CreateTTLRequest:
		c = &r.CreateRequest
	case *SetDataRequest:
		return resultHeaderBytes + StatBytes
	default:
		return failed
	}
	n := resultHeaderBytes + 4 + len(c.Path)
	if c.Flags&FlagSequential != 0 {
		n += sequenceBytes
	}
	if op.Op != OpCreate || c.Flags == FlagContainer {
		// A multi answers a container's create with a stat, any other
		// create with its path alone, as ZooKeeper does; a create2 is
		// counted with a stat all the same.
		n += StatBytes
	}
	return max(n, failed)
}
