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
		if h.Type == OpGetData || h.Type == OpGetChildren {
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
// multi, or nil.
func NewMultiOpRequest(op OpCode) Record {
	switch op {
	case OpCreate, OpCreate2, OpCreateContainer:
		return &CreateRequest{}
	case OpCreateTTL:
		return &CreateTTLRequest{}
	case OpDelete, OpCheck:
		return &PathVersionRequest{}
	case OpSetData:
		return &SetDataRequest{}
	case OpGetChildren, OpGetData:
		return &PathWatchRequest{} // as on the wire, though multiRead sets no watch
	}
	return nil
}

// MultiResult is the outcome of one op of a multi. Err is non-zero for a
// failed op (encoded as type -1 with an error record); Resp is the op's
// reply record otherwise (nil for delete and check).
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

// Encode implements Record.
func (m *MultiResponse) Encode(e *Encoder) {
	for _, r := range m.Results {
		if r.Op == OpError {
			h := multiHeader{Type: OpError, Err: r.Err}
			h.encode(e)
			e.Int32(int32(r.Err))
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
		switch h.Type {
		case OpError:
			r.Err = Code(d.Int32())
		case OpCreate:
			r.Resp = &PathRequest{}
		case OpCreate2, OpCreateContainer, OpCreateTTL:
			r.Resp = &Create2Response{}
		case OpSetData:
			r.Resp = &StatResponse{}
		case OpGetData:
			r.Resp = &GetDataResponse{}
		case OpGetChildren:
			r.Resp = &ChildrenResponse{}
		case OpDelete, OpCheck:
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
