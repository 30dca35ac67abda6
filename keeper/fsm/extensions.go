package fsm

import "github.com/xkeeper/xkeeper/keeper/proto"

// ClickHouse Keeper's writes (its src/Coordination/KeeperStorage.cpp), as
// a txn applies them: each answers what ClickHouse Keeper answers, and
// meets ACLs, locks and fences as the plain writes it is made of do.

// MaxRemoveRecursive bounds the nodes one removeRecursive deletes, whatever
// limit its entry carries: the apply is linear in them on every member,
// and so are its undo records and watch events. ClickHouse asks for far
// fewer (its limit is a setting, 1000 by default); a larger subtree is
// refused as one over the request's limit is. Members lower a request's
// limit to proto.MaxRemoveRecursive, far below, where it enters; this
// bound is for entries written before they did, which apply as they did.
const MaxRemoveRecursive = 1 << 20

// extension reports whether op is one of ClickHouse Keeper's writes, which
// entries before version 10 do not know.
func extension(op proto.OpCode) bool {
	switch op {
	case proto.OpCreateIfNotExists, proto.OpCheckNotExists, proto.OpTryRemove, proto.OpRemoveRecursive:
		return true
	}
	return false
}

// writesSystem reports whether write req names a node under ClickHouse
// Keeper's system path, which ClickHouse Keeper refuses (a sequential
// create of /keeper itself makes /keeperNNNNNNNNNN, which is not).
func writesSystem(req proto.Record) bool {
	switch r := req.(type) {
	case *proto.CreateRequest:
		return proto.UnderKeeperSystem(r.Path) && (r.Flags&proto.FlagSequential == 0 || r.Path != proto.KeeperSystemPath)
	case *proto.CreateTTLRequest:
		return writesSystem(&r.CreateRequest)
	case *proto.PathVersionRequest:
		return proto.UnderKeeperSystem(r.Path)
	case *proto.CheckStatRequest:
		return proto.UnderKeeperSystem(r.Path)
	case *proto.RemoveRecursiveRequest:
		return proto.UnderKeeperSystem(r.Path)
	case *proto.SetDataRequest:
		return proto.UnderKeeperSystem(r.Path)
	case *proto.SetACLRequest:
		return proto.UnderKeeperSystem(r.Path)
	}
	return false
}

// createIfNotExists is a create that answers ZOK, with the path asked for
// and no change, where the node is already there. A sequential one is
// refused: its name is never there.
func (tx *txn) createIfNotExists(r *proto.CreateRequest) (proto.Record, proto.Code) {
	if r.Flags&proto.FlagSequential != 0 {
		return nil, proto.ErrBadArguments
	}
	resp, code := tx.create(proto.OpCreate, r, 0)
	if code == proto.ErrNodeExists {
		return &proto.PathRequest{Path: r.Path}, proto.ErrOK
	}
	return resp, code
}

// checkNotExists succeeds unless the node is there (with the version
// asked for, unless -1): then ErrNodeExists. A node the caller may not
// read is ErrNoAuth, as its version would otherwise show.
func (tx *txn) checkNotExists(r *proto.PathVersionRequest) proto.Code {
	if !validPath(r.Path) {
		return proto.ErrBadArguments
	}
	if tx.blocked(r.Path, exclusive) {
		return proto.ErrLocked
	}
	n := tx.get(r.Path)
	switch {
	case n == nil:
		return proto.ErrOK
	case !checkACL(tx.s.acls.of(n), proto.PermRead, tx.r.IDs):
		return proto.ErrNoAuth
	case r.Version == -1 || r.Version == n.Version:
		return proto.ErrNodeExists
	}
	return proto.ErrOK
}

// tryRemove is a delete that answers ZOK, changing nothing, where a delete
// would find no node, another version or children. Permissions, locks and
// bad paths are refused as for a delete.
func (tx *txn) tryRemove(r *proto.PathVersionRequest) proto.Code {
	switch code := tx.delete(r); code {
	case proto.ErrNoNode, proto.ErrBadVersion, proto.ErrNotEmpty:
		return proto.ErrOK
	default:
		return code
	}
}

// removeRecursive deletes r.Path and its subtree, children before their
// parent, as the deletes a client would send for it, and so with their
// events; none if the subtree holds more than r.Limit nodes (ErrNotEmpty)
// or the caller may not delete one of them: as ClickHouse Keeper, it
// needs DELETE on the parent and on every node of the subtree
// (ErrNoAuth). A missing node is ZOK. A pending cross-shard transaction's
// lock anywhere in the subtree refuses it (ErrLocked).
func (tx *txn) removeRecursive(r *proto.RemoveRecursiveRequest) proto.Code {
	if !validPath(r.Path) || special(r.Path) {
		return proto.ErrBadArguments
	}
	parent := tx.get(parentOf(r.Path))
	if parent == nil {
		return proto.ErrOK
	}
	if tx.blocked(parentOf(r.Path), childIntent) || tx.blocked(r.Path, subtree) {
		return proto.ErrLocked
	}
	if !checkACL(tx.s.acls.of(parent), proto.PermDelete, tx.r.IDs) {
		return proto.ErrNoAuth
	}
	nodes, code := tx.subtree(r.Path, int(min(r.Limit, MaxRemoveRecursive)))
	if code != proto.ErrOK {
		return code
	}
	for i := len(nodes) - 1; i >= 0; i-- {
		if code := tx.delete(&proto.PathVersionRequest{Path: nodes[i], Version: -1}); code != proto.ErrOK {
			tx.rollback()
			return code
		}
	}
	return proto.ErrOK
}

// subtree lists the paths of path's subtree, level by level (a parent
// before its children), checking that the caller may delete each: at most
// limit of them (the root alone passes any limit), else ErrNotEmpty.
func (tx *txn) subtree(path string, limit int) ([]string, proto.Code) {
	root := tx.get(path)
	if root == nil {
		return nil, proto.ErrOK
	}
	if !checkACL(tx.s.acls.of(root), proto.PermDelete, tx.r.IDs) {
		return nil, proto.ErrNoAuth
	}
	nodes := []string{path}
	code := proto.ErrOK
	for next := 0; next < len(nodes) && code == proto.ErrOK; next++ {
		tx.s.tree.eachChild(nodes[next], func(n *Node) bool {
			switch {
			case len(nodes) >= limit:
				code = proto.ErrNotEmpty
			case !checkACL(tx.s.acls.of(n), proto.PermDelete, tx.r.IDs):
				code = proto.ErrNoAuth
			default:
				nodes = append(nodes, n.Path())
			}
			return code == proto.ErrOK
		})
	}
	return nodes, code
}

// checkStat is a check (READ on the node, a pending transaction's lock
// refuses it) that also compares every field of r.Stat that is not -1
// with the node's: ErrBadVersion where one differs, as ClickHouse Keeper.
func (tx *txn) checkStat(r *proto.CheckStatRequest) proto.Code {
	n, code := tx.lookup(r.Path, proto.PermRead)
	if code != proto.ErrOK {
		return code
	}
	if stat := n.Stat(); !r.Matches(&stat) {
		return proto.ErrBadVersion
	}
	return proto.ErrOK
}

// holdsCheckStat reports whether client write r is a checkStat or a multi
// holding one, which entries before version 17 do not know.
func holdsCheckStat(r *Request) bool {
	return r.Op == proto.OpCheckStat || r.Op == proto.OpMulti && proto.MultiBodyHoldsCheckStat(r.Body)
}

// checksStat reports whether a shard's ops of a prepare hold a checkStat,
// which a cross-shard transaction takes from entry version 17 on.
func checksStat(o proto.ShardOps) bool { return o.Ops.HoldsOp(proto.OpCheckStat) }
