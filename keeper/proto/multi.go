package proto

import "fmt"

// MultiOp is one operation of a multi request.
type MultiOp struct {
	Op  OpCode
	Req Record
}

// MultiRequest is an all-or-nothing list of write operations (or of reads,
// for multiRead).
type MultiRequest struct{ Ops []MultiOp }

// multiHeader precedes each op and result; Done marks the end.
type multiHeader struct {
	Type OpCode
	Done bool
	Err  Code
}

func (h *multiHeader) encode(e *Encoder) {
	e.Int32(int32(h.Type))
	e.Bool(h.Done)
	e.Int32(int32(h.Err))
}
func (h *multiHeader) decode(d *Decoder) {
	h.Type = OpCode(d.Int32())
	h.Done = d.Bool()
	h.Err = Code(d.Int32())
}

var multiEnd = multiHeader{Type: -1, Done: true, Err: -1}

// Encode implements Record.
func (m *MultiRequest) Encode(e *Encoder) {
	for _, op := range m.Ops {
		h := multiHeader{Type: op.Op, Err: -1}
		h.encode(e)
		op.Req.Encode(e)
	}
	multiEnd.encode(e)
}

// Decode implements Record. An op type that cannot appear in a multi, or
// reads mixed with writes, is a marshalling error, as in ZooKeeper.
func (m *MultiRequest) Decode(d *Decoder) {
	m.Ops = m.Ops[:0]
	reads := 0
	for d.err == nil {
		var h multiHeader
		h.decode(d)
		if d.err != nil || h.Done {
			return
		}
		req := NewMultiOpRequest(h.Type)
		if req == nil {
			d.err = fmt.Errorf("proto: %v cannot appear in a multi", h.Type)
			return
		}
		if IsMultiRead(h.Type) {
			reads++
		}
		if reads != 0 && reads != len(m.Ops)+1 {
			d.err = fmt.Errorf("proto: a multi mixes reads and writes")
			return
		}
		req.Decode(d)
		m.Ops = append(m.Ops, MultiOp{Op: h.Type, Req: req})
	}
}

// NewMultiOpRequest returns an empty request record for an op allowed in a
// multi, or nil: ZooKeeper's, and ClickHouse Keeper's (createIfNotExists,
// checkNotExists, tryRemove, removeRecursive, checkStat among writes, exists,
// getChildren2 and filteredList among reads).
func NewMultiOpRequest(op OpCode) Record {
	switch op {
	case OpCreate, OpCreate2, OpCreateContainer, OpCreateIfNotExists:
		return &CreateRequest{}
	case OpCreateTTL:
		return &CreateTTLRequest{}
	case OpDelete, OpCheck, OpCheckNotExists, OpTryRemove:
		return &PathVersionRequest{}
	case OpCheckStat:
		return &CheckStatRequest{}
	case OpRemoveRecursive:
		return &RemoveRecursiveRequest{}
	case OpSetData:
		return &SetDataRequest{}
	case OpGetChildren, OpGetChildren2, OpGetData, OpExists:
		return &PathWatchRequest{} // as on the wire, watch flag included (DropReadWatches)
	case OpFilteredList:
		return &FilteredListRequest{}
	case OpFilteredListWithStatsAndData:
		return &ListWithStatsAndDataRequest{}
	}
	return nil
}

// IsMultiRead reports whether op is a read a multiRead may hold.
func IsMultiRead(op OpCode) bool {
	switch op {
	case OpGetData, OpGetChildren, OpGetChildren2, OpExists, OpFilteredList, OpFilteredListWithStatsAndData:
		return true
	}
	return false
}

// MultiResult is the outcome of one op of a multi. Err is non-zero for a
// failed op: of Op OpError in ZooKeeper's form (type -1 with an error
// record), of the op's own type in ClickHouse Keeper's answer to a
// multiRead (ClickHouseKeeperForm; no record). Resp is the op's reply
// record otherwise (nil for delete and check).
type MultiResult struct {
	Op   OpCode
	Err  Code
	Resp Record
}

// MultiResponse is the reply of multi and multiRead.
type MultiResponse struct{ Results []MultiResult }

// FailedMulti is ZooKeeper's answer to a multi of n ops whose op failed
// refused with code: 0 for the ops before it, its code, then
// ErrRuntimeInconsistency for the rest (under a header error of 0).
func FailedMulti(n, failed int, code Code) *MultiResponse {
	results := make([]MultiResult, n)
	for j := range results {
		results[j] = MultiResult{Op: OpError, Err: ErrOK}
		if j == failed {
			results[j].Err = code
		} else if j > failed {
			results[j].Err = ErrRuntimeInconsistency
		}
	}
	return &MultiResponse{Results: results}
}

// ClickHouseKeeperForm turns m, the answer to a multiRead of ops, into
// ClickHouse Keeper's form: a failed read named by its own op, with its
// code and no body, where ZooKeeper names it OpError. ClickHouse's client
// reads an OpError result as an error response and then fails to take it
// for the read's own response (std::bad_cast); ZooKeeper's Java client
// needs OpError. It changes m and returns it.
func (m *MultiResponse) ClickHouseKeeperForm(ops []MultiOp) *MultiResponse {
	for i := range m.Results {
		if r := &m.Results[i]; r.Op == OpError && r.Err != ErrOK && i < len(ops) {
			r.Op = ops[i].Op
		}
	}
	return m
}

// DropReadWatches clears the watch flags of m's reads and reports whether
// any was set. ZooKeeper 3.8 sets no watch for a multiRead's reads (its
// MultiOperationRecord keeps their paths alone); ClickHouse Keeper sets
// each as the read alone would (MULTI_WATCHES).
func (m *MultiRequest) DropReadWatches() bool {
	dropped := false
	for _, op := range m.Ops {
		switch r := op.Req.(type) {
		case *PathWatchRequest:
			dropped, r.Watch = dropped || r.Watch, false
		case *FilteredListRequest:
			dropped, r.Watch = dropped || r.Watch, false
		case *ListWithStatsAndDataRequest:
			dropped, r.Watch = dropped || r.Watch, false
		}
	}
	return dropped
}

// ZooKeeperForm turns m, the answer to a multi of ops, into ZooKeeper
// 3.8's: a create2 (not of a container) answered by a create's result,
// the path alone, where ClickHouse Keeper, and xkeeper's state machine,
// answer create2's, the path and the new node's stat (CREATE_WITH_STATS).
// ZooKeeper reads every create of a multi as a plain create. It changes m
// and returns it.
func (m *MultiResponse) ZooKeeperForm(ops []MultiOp) *MultiResponse {
	for i := range m.Results {
		r := &m.Results[i]
		c2, ok := r.Resp.(*Create2Response)
		if !ok || r.Op != OpCreate2 || i >= len(ops) || ops[i].Op != OpCreate2 {
			continue
		}
		if cr, ok := ops[i].Req.(*CreateRequest); ok && cr.Flags == FlagContainer {
			continue // a container: ZooKeeper too answers create2's
		}
		r.Op, r.Resp = OpCreate, &PathRequest{Path: c2.Path}
	}
	return m
}

// ZooKeeperFormOf decodes body, an encoded answer to a multi of ops, and
// returns it in ZooKeeper's form (ZooKeeperForm); false if it does not
// decode.
func ZooKeeperFormOf(body []byte, ops []MultiOp) (*MultiResponse, bool) {
	var m MultiResponse
	if Unmarshal(body, &m) != nil {
		return nil, false
	}
	return m.ZooKeeperForm(ops), true
}

// HoldsCreate2 reports whether m holds a create2, answered in a multi in
// two dialects (MultiResponse.ZooKeeperForm).
func (m *MultiRequest) HoldsCreate2() bool { return m.HoldsOp(OpCreate2) }

// Encode implements Record.
func (m *MultiResponse) Encode(e *Encoder) {
	for _, r := range m.Results {
		if r.Op == OpError {
			h := multiHeader{Type: OpError, Err: r.Err}
			h.encode(e)
			e.Int32(int32(r.Err))
			continue
		}
		if r.Err != ErrOK { // ClickHouse Keeper's failed read
			h := multiHeader{Type: r.Op, Err: r.Err}
			h.encode(e)
			continue
		}
		h := multiHeader{Type: r.Op, Err: 0}
		h.encode(e)
		if r.Resp != nil {
			r.Resp.Encode(e)
		}
	}
	multiEnd.encode(e)
}

// Decode implements Record.
func (m *MultiResponse) Decode(d *Decoder) {
	m.Results = m.Results[:0]
	for d.err == nil {
		var h multiHeader
		h.decode(d)
		if d.err != nil || h.Done {
			return
		}
		r := MultiResult{Op: h.Type}
		if h.Type != OpError && h.Err != ErrOK { // ClickHouse Keeper's failed read
			r.Err = h.Err
			m.Results = append(m.Results, r)
			continue
		}
		switch h.Type {
		case OpError:
			r.Err = Code(d.Int32())
		case OpCreate, OpCreateIfNotExists:
			r.Resp = &PathRequest{}
		case OpCreate2, OpCreateContainer, OpCreateTTL:
			r.Resp = &Create2Response{}
		case OpSetData, OpExists:
			r.Resp = &StatResponse{}
		case OpGetData:
			r.Resp = &GetDataResponse{}
		case OpGetChildren:
			r.Resp = &ChildrenResponse{}
		case OpGetChildren2:
			r.Resp = &ChildrenResponse{WithStat: true}
		case OpFilteredListWithStatsAndData:
			r.Resp = &ListWithStatsAndDataResponse{}
		case OpDelete, OpCheck, OpCheckNotExists, OpTryRemove, OpRemoveRecursive, OpCheckStat:
		default:
			d.err = fmt.Errorf("proto: unexpected %v in a multi response", h.Type)
			return
		}
		if r.Resp != nil {
			r.Resp.Decode(d)
		}
		m.Results = append(m.Results, r)
	}
}
