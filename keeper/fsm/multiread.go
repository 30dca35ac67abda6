package fsm

import "github.com/xkeeper/xkeeper/keeper/proto"

// ReadWatch is a one-shot watch a read leaves: its path and kind.
type ReadWatch struct {
	Path string
	Kind WatchKind
}

// MultiRead answers multiRead m as ReadBounded does, and returns the
// watches its reads leave where their own watch flags ask, each as the
// read alone would leave it (ClickHouse Keeper's MULTI_WATCHES): on
// success, and for exists on a missing node too; none where the read is
// refused (no READ, locked). ReadBounded, as ZooKeeper 3.8, leaves none.
func (s *State) MultiRead(m *proto.MultiRequest, ids []proto.ID, maxReply int) (proto.Record, proto.Code, []ReadWatch) {
	return s.multiRead(m, ids, maxReply)
}

// multiRead answers each read of m on its own: ZooKeeper's getData and
// getChildren, ClickHouse Keeper's exists, getChildren2 and filteredList
// (answered with getChildren2's record, as ClickHouse Keeper does). A
// failed read is its code alone, in ZooKeeper's form (type -1), which
// ClickHouse's client reads as well. It returns the watches the reads'
// flags ask for (MultiRead). Answers past maxReply bytes (if positive)
// refuse the whole multiRead with ErrMarshallingError, and leave none.
func (s *State) multiRead(m *proto.MultiRequest, ids []proto.ID, maxReply int) (proto.Record, proto.Code, []ReadWatch) {
	out := &proto.MultiResponse{Results: make([]proto.MultiResult, 0, len(m.Ops))}
	var watches []ReadWatch
	size := 0
	for _, op := range m.Ops {
		res, w := s.multiReadOp(op, ids)
		if size += multiResultBytes; res.Resp != nil {
			size += len(proto.Marshal(res.Resp))
		}
		if maxReply > 0 && size > maxReply {
			return nil, proto.ErrMarshallingError, nil
		}
		out.Results = append(out.Results, res)
		if w.Kind != WatchNone {
			watches = append(watches, w)
		}
	}
	return out, proto.ErrOK, watches
}

// multiResultBytes is what a result of a multi takes beside its record: its
// header and a failed one's code.
const multiResultBytes = 13

// multiReadOp answers one read of a multiRead, and returns the watch it
// leaves if its flag asks (Kind WatchNone if none).
func (s *State) multiReadOp(op proto.MultiOp, ids []proto.ID) (proto.MultiResult, ReadWatch) {
	var resp proto.Record
	code, kind, w := proto.ErrBadArguments, op.Op, ReadWatch{}
	switch r := op.Req.(type) {
	case *proto.PathWatchRequest: // as decoded off the wire
		if proto.IsMultiRead(op.Op) && op.Op != proto.OpFilteredList {
			resp, code, w.Kind = s.readPath(op.Op, r, ids)
			w.Path = r.Path
		}
	case *proto.PathRequest: // as built in code
		if op.Op == proto.OpGetData || op.Op == proto.OpGetChildren {
			resp, code, _ = s.readPath(op.Op, &proto.PathWatchRequest{Path: r.Path}, ids)
		}
	case *proto.FilteredListRequest:
		resp, code, w.Kind = s.filteredList(r, ids)
		w.Path, kind = r.Path, proto.OpGetChildren2
	case *proto.ListWithStatsAndDataRequest:
		resp, code, w.Kind = s.listWithStatsAndData(r, ids, 0)
		w.Path = r.Path
	}
	if code != proto.ErrOK {
		return proto.MultiResult{Op: proto.OpError, Err: code}, w
	}
	return proto.MultiResult{Op: kind, Resp: resp}, w
}

// filteredList answers ClickHouse Keeper's filteredList: getChildren2 of
// the children of the kind asked for (an unknown kind asks for all). Any
// kind but ListAll shows whether a child is ephemeral, so, as ClickHouse
// Keeper, it needs READ on every child (ErrNoAuth otherwise).
func (s *State) filteredList(r *proto.FilteredListRequest, ids []proto.ID) (proto.Record, proto.Code, WatchKind) {
	if s.x.blocked(r.Path, exclusive, "") {
		return nil, proto.ErrLocked, WatchNone
	}
	if resp, code, ok := s.readSystem(proto.OpFilteredList, r.Path, r.Type); ok {
		return resp, code, watchIf(r.Watch, WatchChild)
	}
	path, n := s.readNode(r.Path)
	if n == nil {
		return nil, proto.ErrNoNode, WatchNone
	}
	if !checkACL(s.acls.of(n), proto.PermRead, ids) {
		return nil, proto.ErrNoAuth, WatchNone
	}
	if r.Type == proto.ListAll {
		return s.childResponse(path, n, true), proto.ErrOK, watchIf(r.Watch, WatchChild)
	}
	names := make([]string, 0, n.NumChildren)
	skip := len(childPrefix(path))
	code := proto.ErrOK
	s.tree.eachChild(path, func(c *Node) bool {
		if !checkACL(s.acls.of(c), proto.PermRead, ids) {
			code = proto.ErrNoAuth
			return false
		}
		if listed(c.IsEphemeral(), r.Type) {
			names = append(names, c.Path()[skip:])
		}
		return true
	})
	if code != proto.ErrOK {
		return nil, code, WatchNone
	}
	return &proto.ChildrenResponse{Children: names, Stat: n.Stat(), WithStat: true}, proto.ErrOK, watchIf(r.Watch, WatchChild)
}

// watchOf is the watch a successful read of op leaves, if asked.
func watchOf(op proto.OpCode) WatchKind {
	switch op {
	case proto.OpExists, proto.OpGetData:
		return WatchData
	case proto.OpGetChildren, proto.OpGetChildren2, proto.OpFilteredList:
		return WatchChild
	}
	return WatchNone
}
