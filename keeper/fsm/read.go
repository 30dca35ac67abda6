package fsm

import (
	"strings"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// WatchKind says which watch a read leaves behind.
type WatchKind int

// Watch kinds.
const (
	WatchNone  WatchKind = iota
	WatchData            // exists, getData: fired by create, delete, setData
	WatchChild           // getChildren: fired by child changes and delete
)

// Read answers a read request for a caller with the given identities. The
// returned WatchKind is where to register the watch, if the request asked
// for one and ZooKeeper would register it (exists leaves a watch on a
// missing node; getData and getChildren only on success).
func (s *State) Read(op proto.OpCode, req proto.Record, session int64, ids []proto.ID) (proto.Record, proto.Code, WatchKind) {
	return s.ReadBounded(op, req, session, ids, 0)
}

// ReadBounded is Read whose multiRead answers at most maxReply bytes (if
// positive): one that would answer more is refused with
// ErrMarshallingError, having built no more than that.
func (s *State) ReadBounded(op proto.OpCode, req proto.Record, session int64, ids []proto.ID, maxReply int) (proto.Record, proto.Code, WatchKind) {
	if op == proto.OpXList {
		return s.xList(), proto.ErrOK, WatchNone
	}
	if op == proto.OpXOutcome {
		return s.xOutcome(req.(*proto.XIDRequest).ID), proto.ErrOK, WatchNone
	}
	switch r := req.(type) {
	case *proto.PathWatchRequest:
		return s.readPath(op, r, ids)
	case *proto.PathRequest:
		return s.readOther(op, r.Path, session, ids)
	case *proto.FilteredListRequest:
		return s.filteredList(r, ids)
	case *proto.ListWithStatsAndDataRequest:
		return s.listWithStatsAndData(r, ids, maxReply)
	case *proto.MultiRequest:
		if op == proto.OpMultiRead {
			resp, code, _ := s.multiRead(r, ids, maxReply) // no watches, as ZooKeeper 3.8 (MultiRead sets them)
			return resp, code, WatchNone
		}
	}
	return nil, proto.ErrUnimplemented, WatchNone
}

func watchIf(watch bool, k WatchKind) WatchKind {
	if watch {
		return k
	}
	return WatchNone
}

// readNode finds the node a read names. As in ZooKeeper, reads do not
// validate the path: a malformed one is just not there, and "" names the
// root (DataTree keeps the root under "" as well as "/").
func (s *State) readNode(path string) (string, *Node) {
	if path == "" {
		path = "/"
	}
	return path, s.tree.get(path)
}

func (s *State) readPath(op proto.OpCode, r *proto.PathWatchRequest, ids []proto.ID) (proto.Record, proto.Code, WatchKind) {
	if op == proto.OpExists && strings.IndexByte(r.Path, 0) >= 0 {
		return nil, proto.ErrBadArguments, WatchNone // exists alone checks for NUL
	}
	if s.x.blocked(r.Path, exclusive, "") {
		return nil, proto.ErrLocked, WatchNone
	}
	if resp, code, ok := s.readSystem(op, r.Path, proto.ListAll); ok {
		return resp, code, watchIf(r.Watch && code == proto.ErrOK, watchOf(op))
	}
	path, n := s.readNode(r.Path)
	if op == proto.OpExists {
		w := watchIf(r.Watch, WatchData)
		if n == nil {
			return nil, proto.ErrNoNode, w
		}
		return &proto.StatResponse{Stat: n.Stat()}, proto.ErrOK, w
	}
	if n == nil {
		return nil, proto.ErrNoNode, WatchNone
	}
	if !checkACL(s.acls.of(n), proto.PermRead, ids) {
		return nil, proto.ErrNoAuth, WatchNone
	}
	switch op {
	case proto.OpGetData:
		return &proto.GetDataResponse{Data: n.Data(), Stat: n.Stat()}, proto.ErrOK, watchIf(r.Watch, WatchData)
	case proto.OpGetChildren, proto.OpGetChildren2:
		return s.childResponse(path, n, op == proto.OpGetChildren2), proto.ErrOK, watchIf(r.Watch, WatchChild)
	}
	return nil, proto.ErrUnimplemented, WatchNone
}

func (s *State) readOther(op proto.OpCode, path string, session int64, ids []proto.ID) (proto.Record, proto.Code, WatchKind) {
	if op == proto.OpGetEphemerals {
		var out []string
		if sess := s.sessions[session]; sess != nil {
			for _, p := range sess.Ephemerals() {
				if path == "" || path == "/" || strings.HasPrefix(p, path) {
					out = append(out, p)
				}
			}
		}
		if out == nil {
			out = []string{}
		}
		return &proto.ChildrenResponse{Children: out}, proto.ErrOK, WatchNone
	}
	if s.x.blocked(path, pathReadAccess(op), "") {
		return nil, proto.ErrLocked, WatchNone
	}
	if resp, code, ok := s.readSystem(op, path, proto.ListAll); ok {
		return resp, code, WatchNone
	}
	asked := path
	path, n := s.readNode(path)
	if n == nil {
		return nil, proto.ErrNoNode, WatchNone
	}
	switch op {
	case proto.OpGetACL:
		l := s.acls.of(n)
		if !checkACL(l, proto.PermRead|proto.PermAdmin, ids) {
			return nil, proto.ErrNoAuth, WatchNone
		}
		acl := l.List
		if !checkACL(l, proto.PermAdmin, ids) {
			acl = redactDigests(acl)
		}
		return &proto.GetACLResponse{ACL: acl, Stat: n.Stat()}, proto.ErrOK, WatchNone
	case proto.OpGetAllChildrenNumber:
		if !checkACL(s.acls.of(n), proto.PermRead, ids) {
			return nil, proto.ErrNoAuth, WatchNone
		}
		count := s.tree.descendants(path)
		if asked == "" {
			count++ // ZooKeeper counts the keys under "" + "/": "/" itself too
		}
		return &proto.CountResponse{Count: int32(count)}, proto.ErrOK, WatchNone
	}
	return nil, proto.ErrUnimplemented, WatchNone
}

// SetWatchesResult is what a re-registered watch needs: fire now with the
// event, or register.
type SetWatchesResult struct {
	Path  string
	Kind  WatchKind
	Fire  proto.EventType // EventNone: register the watch instead
	Exist bool            // an exists watch (registered as a data watch)
}

// ResolveWatches decides, for watches a client re-sends after reconnecting,
// which fire at once because the node changed after relativeZxid and which
// are registered again.
func (s *State) ResolveWatches(r *proto.SetWatchesRequest) []SetWatchesResult {
	var out []SetWatchesResult
	for _, p := range r.DataWatches {
		res := SetWatchesResult{Path: p, Kind: WatchData, Fire: proto.EventNone}
		if n := s.tree.get(p); n == nil && !s.isSystemNode(p) {
			res.Fire = proto.EventNodeDeleted
		} else if n != nil && n.Mzxid > r.RelativeZxid {
			res.Fire = proto.EventNodeDataChanged
		}
		out = append(out, res)
	}
	for _, p := range r.ExistWatches {
		res := SetWatchesResult{Path: p, Kind: WatchData, Fire: proto.EventNone, Exist: true}
		if s.tree.get(p) != nil || s.isSystemNode(p) {
			res.Fire = proto.EventNodeCreated
		}
		out = append(out, res)
	}
	for _, p := range r.ChildWatches {
		res := SetWatchesResult{Path: p, Kind: WatchChild, Fire: proto.EventNone}
		if n := s.tree.get(p); n == nil && !s.isSystemNode(p) {
			res.Fire = proto.EventNodeDeleted
		} else if n != nil && n.Pzxid > r.RelativeZxid {
			res.Fire = proto.EventNodeChildrenChanged
		}
		out = append(out, res)
	}
	return out
}
