package fsm

import "github.com/xkeeper/xkeeper/keeper/proto"

// listWithStatsAndData answers ClickHouse Keeper's list with stat and data
// (LIST_WITH_STAT_AND_DATA): a filteredList's names and the parent's stat,
// then, as asked, each listed child's stat and data, in the names' order.
// It needs READ on the parent, and, as soon as it shows anything of the
// children beyond their names (a kind other than ListAll, stats or
// data), READ on every child (ErrNoAuth otherwise), as filteredList does.
// A child that a pending cross-shard transaction holds answers ErrLocked
// when its stat or data is asked for, as a getData of it would. An
// answer past maxReply bytes (if positive) is refused with
// ErrMarshallingError, as a multiRead's is.
func (s *State) listWithStatsAndData(r *proto.ListWithStatsAndDataRequest, ids []proto.ID, maxReply int) (proto.Record, proto.Code, WatchKind) {
	if s.x.blocked(r.Path, exclusive, "") {
		return nil, proto.ErrLocked, WatchNone
	}
	if sys, ok := s.systemNode(r.Path); ok {
		return s.listSystem(r, sys), proto.ErrOK, watchIf(r.Watch, WatchChild)
	}
	path, n := s.readNode(r.Path)
	if n == nil {
		return nil, proto.ErrNoNode, WatchNone
	}
	if !checkACL(s.acls.of(n), proto.PermRead, ids) {
		return nil, proto.ErrNoAuth, WatchNone
	}
	out := &proto.ListWithStatsAndDataResponse{Children: make([]string, 0, n.NumChildren), Stat: n.Stat()}
	perChild := r.Type != proto.ListAll || r.WithStat || r.WithData
	skip := len(childPrefix(path))
	size, code := 0, proto.ErrOK
	s.tree.eachChild(path, func(c *Node) bool {
		if perChild && !checkACL(s.acls.of(c), proto.PermRead, ids) {
			code = proto.ErrNoAuth
			return false
		}
		if !listed(c.IsEphemeral(), r.Type) {
			return true
		}
		if (r.WithStat || r.WithData) && s.x.blocked(c.Path(), exclusive, "") {
			code = proto.ErrLocked
			return false
		}
		name := c.Path()[skip:]
		out.Children = append(out.Children, name)
		size += 4 + len(name)
		if r.WithStat {
			out.Stats = append(out.Stats, c.Stat())
			size += proto.StatBytes
		}
		if r.WithData {
			out.Data = append(out.Data, c.Data())
			size += 4 + len(c.Data())
		}
		if maxReply > 0 && size > maxReply {
			code = proto.ErrMarshallingError
			return false
		}
		return true
	})
	if code != proto.ErrOK {
		return nil, code, WatchNone
	}
	return out, proto.ErrOK, watchIf(r.Watch, WatchChild)
}

// listed reports whether a child, ephemeral or not, is of kind typ (an
// unknown kind lists every child, as ListAll).
func listed(ephemeral bool, typ uint8) bool {
	switch typ {
	case proto.ListPersistentOnly:
		return !ephemeral
	case proto.ListEphemeralOnly:
		return ephemeral
	}
	return true
}

// listSystem answers a list with stat and data of a system node: its
// children are all persistent, with the stat and data they are read with.
func (s *State) listSystem(r *proto.ListWithStatsAndDataRequest, n sysNode) *proto.ListWithStatsAndDataResponse {
	out := &proto.ListWithStatsAndDataResponse{Children: []string{}, Stat: n.stat()}
	if r.Type == proto.ListEphemeralOnly {
		return out
	}
	for _, name := range n.children {
		c, _ := s.systemNode(childPrefix(lockPath(r.Path)) + name)
		out.Children = append(out.Children, name)
		if r.WithStat {
			out.Stats = append(out.Stats, c.stat())
		}
		if r.WithData {
			out.Data = append(out.Data, c.data)
		}
	}
	return out
}

// listStatAccesses is how a list with stat and data meets locks: the
// parent's, and, when it reads the children's stats or data, theirs too
// (a wait for any lock below the parent; the read itself answers
// ErrLocked only for a listed child that is held).
func listStatAccesses(r *proto.ListWithStatsAndDataRequest) []pathAccess {
	if r.WithStat || r.WithData {
		return []pathAccess{{r.Path, subtree}}
	}
	return []pathAccess{{r.Path, exclusive}}
}
