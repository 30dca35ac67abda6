package client

import (
	"context"
	"fmt"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Op is one operation of a multi: the codec's own record, so a list built
// for one shard (as the cross-shard coordinator does) goes out unchanged.
type Op = proto.MultiOp

// CreateOp creates a znode in a multi (nil acl: world:anyone, all).
func CreateOp(path string, data []byte, flags int32, acl []proto.ACL) Op {
	return Op{Op: proto.OpCreate, Req: createRequest(path, data, flags, acl)}
}

// DeleteOp deletes a znode in a multi if its version matches (-1: any).
func DeleteOp(path string, version int32) Op {
	return Op{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: path, Version: version}}
}

// SetOp sets a znode's data in a multi if its version matches (-1: any).
func SetOp(path string, data []byte, version int32) Op {
	return Op{Op: proto.OpSetData, Req: &proto.SetDataRequest{Path: path, Data: data, Version: version}}
}

// CheckOp fails the multi unless the znode exists with this version.
func CheckOp(path string, version int32) Op {
	return Op{Op: proto.OpCheck, Req: &proto.PathVersionRequest{Path: path, Version: version}}
}

// OpResult is the outcome of one op of a multi.
type OpResult struct {
	Op   proto.OpCode // the op as sent
	Err  proto.Code   // ErrOK, or why the multi failed here
	Path string       // create: the created path
	Stat *proto.Stat  // create2 and setData: the znode's new Stat
}

// MultiError is the error of a multi that applied nothing because op
// Index failed; it unwraps to the op's code, so errors.Is(err,
// proto.ErrNodeExists) works.
type MultiError struct {
	Index int
	Op    proto.OpCode
	Path  string
	Err   proto.Code
}

// Error names the failing op and its code.
func (e *MultiError) Error() string {
	return fmt.Sprintf("client: multi op %d (%v %s): %v", e.Index, e.Op, e.Path, e.Err)
}

// Unwrap returns the failing op's code.
func (e *MultiError) Unwrap() error { return e.Err }

// Multi applies ops all or nothing. It returns one result per op; when
// the multi failed, nothing applied, the results carry ZooKeeper's per-op
// codes (ErrOK before the failing op, ErrRuntimeInconsistency after it)
// and the error is a *MultiError naming the failing op.
func (c *Client) Multi(ctx context.Context, ops ...Op) ([]OpResult, error) {
	var resp proto.MultiResponse
	if _, err := c.Do(ctx, proto.OpMulti, &proto.MultiRequest{Ops: ops}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(ops) {
		return nil, fmt.Errorf("%w: a multi of %d ops answered with %d results",
			proto.ErrMarshallingError, len(ops), len(resp.Results))
	}
	out := make([]OpResult, len(ops))
	var failed *MultiError
	for i, r := range resp.Results {
		res := OpResult{Op: ops[i].Op, Err: r.Err}
		switch v := r.Resp.(type) {
		case *proto.PathRequest:
			res.Path = v.Path
		case *proto.Create2Response:
			res.Path, res.Stat = v.Path, &v.Stat
		case *proto.StatResponse:
			res.Stat = &v.Stat
		}
		if r.Op == proto.OpError && r.Err != proto.ErrOK && failed == nil {
			failed = &MultiError{Index: i, Op: ops[i].Op, Path: opPath(ops[i].Req), Err: r.Err}
		}
		out[i] = res
	}
	if failed != nil {
		return out, failed
	}
	return out, nil
}

// opPath returns the path an op names, for error messages.
func opPath(req proto.Record) string {
	switch r := req.(type) {
	case *proto.CreateRequest:
		return r.Path
	case *proto.CreateTTLRequest:
		return r.Path
	case *proto.PathVersionRequest:
		return r.Path
	case *proto.SetDataRequest:
		return r.Path
	case *proto.PathRequest:
		return r.Path
	}
	return ""
}
