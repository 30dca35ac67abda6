package fsm

import (
	"maps"
	"slices"
	"strings"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// access is how a request meets the locks of pending cross-shard
// transactions on one path.
type access uint8

const (
	// exclusive is anything that reads or writes the znode itself, its
	// data, ACL, stat or children list, and a pending sequential create
	// under it, whose name depends on every sibling: it waits for every
	// other transaction's lock on the path.
	exclusive access = iota
	// childIntent is a create or delete of one child: it waits only for
	// an exclusive lock, so sibling creates and deletes go on together.
	childIntent
	// subtree is a read of what lies below the znode (getAllChildrenNumber
	// counts it): it waits for every other transaction's lock on the path
	// or below it, since a pending create or delete anywhere below changes
	// the count once it commits.
	subtree
)

// pathLock is what pending transactions hold on one path: one exclusive
// owner, or any number of child intents.
type pathLock struct {
	owner   string              // the pending transaction holding the path exclusively, or ""
	intents map[string]struct{} // pending transactions that create or delete a child
}

// blocks reports whether l stops access a of a request that is not part of
// transaction self ("" for a plain request).
func (l *pathLock) blocks(a access, self string) bool {
	if l == nil {
		return false
	}
	if l.owner != "" && l.owner != self {
		return true
	}
	if a == exclusive {
		for id := range l.intents {
			if id != self {
				return true
			}
		}
	}
	return false
}

// holder returns a transaction that holds l: the owner, else the first
// intent by id.
func (l *pathLock) holder() string {
	if l.owner != "" || len(l.intents) == 0 {
		return l.owner
	}
	return slices.Min(slices.Collect(maps.Keys(l.intents)))
}

// pathAccess is one path a request touches and how.
type pathAccess struct {
	path string
	a    access
}

// opAccesses lists the paths one op of a write, a read or a multi meets
// locks on; pending says whether the op is a pending transaction's, which
// holds them until it ends, rather than a request that applies at once.
func opAccesses(op proto.OpCode, req proto.Record, pending bool) []pathAccess {
	var path string
	switch r := req.(type) {
	case *proto.CreateRequest:
		return createAccesses(r.Path, r.Flags, pending)
	case *proto.CreateTTLRequest:
		return createAccesses(r.Path, r.Flags, pending)
	case *proto.PathVersionRequest:
		if op == proto.OpDelete || op == proto.OpTryRemove {
			return []pathAccess{{parentOf(r.Path), childIntent}, {r.Path, exclusive}}
		}
		path = r.Path // check, checkNotExists
	case *proto.CheckStatRequest:
		path = r.Path
	case *proto.RemoveRecursiveRequest:
		return []pathAccess{{parentOf(r.Path), childIntent}, {r.Path, subtree}}
	case *proto.FilteredListRequest:
		path = r.Path
	case *proto.ListWithStatsAndDataRequest:
		return listStatAccesses(r)
	case *proto.SetDataRequest:
		path = r.Path
	case *proto.SetACLRequest:
		path = r.Path
	case *proto.PathWatchRequest:
		path = r.Path
	case *proto.PathRequest:
		return []pathAccess{{r.Path, pathReadAccess(op)}}
	default:
		return nil
	}
	return []pathAccess{{path, exclusive}}
}

// pathReadAccess is how a read of one path (getACL,
// getAllChildrenNumber) meets locks.
func pathReadAccess(op proto.OpCode) access {
	if op == proto.OpGetAllChildrenNumber {
		return subtree
	}
	return exclusive
}

func createAccesses(path string, flags int32, pending bool) []pathAccess {
	switch {
	case flags&proto.FlagSequential == 0:
		return []pathAccess{{parentOf(path), childIntent}, {path, exclusive}}
	case pending:
		// The name is fixed when the commit applies: it depends on the
		// parent's child count then, so the parent's children stay still.
		return []pathAccess{{parentOf(path), exclusive}}
	default:
		// The name is known only when it applies, which checks it then.
		return []pathAccess{{parentOf(path), childIntent}}
	}
}

// accesses lists what a request does to which paths; a multi, what each
// of its ops does.
func accesses(op proto.OpCode, req proto.Record) []pathAccess {
	m, ok := req.(*proto.MultiRequest)
	if !ok {
		return opAccesses(op, req, false)
	}
	var out []pathAccess
	for _, o := range m.Ops {
		out = append(out, opAccesses(o.Op, o.Req, false)...)
	}
	return out
}

// blocked reports whether a pending transaction other than self stops
// access a to path ("" is the root, as reads take it).
func (x *xstate) blocked(path string, a access, self string) bool {
	path = lockPath(path)
	if a != subtree {
		return x.locks[path].blocks(a, self) // the common case, without a visit
	}
	found := false
	x.meet(path, a, func(l *pathLock, a access) bool {
		found = l.blocks(a, self)
		return !found
	})
	return found
}

// lockPath is the path whose lock a request naming path meets: reads take
// "" for the root (readNode), so its locks are the root's.
func lockPath(path string) string {
	if path == "" {
		return "/"
	}
	return path
}

// meet calls visit with each lock that access a to path meets and the
// access it meets it with, until visit returns false: the path's own
// lock, or for a subtree read every lock at or below the path, met as
// exclusive.
func (x *xstate) meet(path string, a access, visit func(l *pathLock, a access) bool) {
	path = lockPath(path)
	if a != subtree {
		if l := x.locks[path]; l != nil {
			visit(l, a)
		}
		return
	}
	below := childPrefix(path)
	for p, l := range x.locks {
		if (p == path || strings.HasPrefix(p, below)) && !visit(l, exclusive) {
			return
		}
	}
}

// lock records that pending transaction id holds path for access a.
func (x *xstate) lock(path string, a access, id string) {
	l := x.locks[path]
	if l == nil {
		l = &pathLock{}
		x.locks[path] = l
	}
	if a == exclusive {
		l.owner = id
		return
	}
	if l.intents == nil {
		l.intents = map[string]struct{}{}
	}
	l.intents[id] = struct{}{}
}

// lockAll records every lock of a pending transaction's ops.
func (x *xstate) lockAll(ops *proto.MultiRequest, id string) {
	for _, o := range ops.Ops {
		for _, pa := range opAccesses(o.Op, o.Req, true) {
			x.lock(pa.path, pa.a, id)
		}
	}
}

// unlock drops every lock transaction id holds.
func (x *xstate) unlock(id string) {
	for path, l := range x.locks {
		if l.owner == id {
			l.owner = ""
		}
		delete(l.intents, id)
		if l.owner == "" && len(l.intents) == 0 {
			delete(x.locks, path)
		}
	}
}

// firstBlockedOp returns the index of the first op of ops that a pending
// transaction other than self stops, or -1.
func (x *xstate) firstBlockedOp(ops *proto.MultiRequest, self string) int32 {
	for i, o := range ops.Ops {
		for _, pa := range opAccesses(o.Op, o.Req, true) {
			if x.blocked(pa.path, pa.a, self) {
				return int32(i)
			}
		}
	}
	return -1
}

// Blocked reports whether a pending cross-shard transaction holds a lock
// that stops the request: what the state machine would answer with
// ErrLocked if it applied or read it now.
func (s *State) Blocked(op proto.OpCode, req proto.Record) bool {
	if p, ok := req.(*proto.XPrepareRequest); ok {
		if s.x.records[p.ID] != nil {
			return false // a prepare sent again is answered from its record
		}
		ops := ownOps(&proto.XRecord{Ops: p.Ops}, p.Self)
		return ops != nil && s.x.firstBlockedOp(ops, p.ID) >= 0
	}
	for _, pa := range accesses(op, req) {
		if s.x.blocked(pa.path, pa.a, "") {
			return true
		}
	}
	return false
}

// Stoppers returns the pending transactions whose locks stop a plain
// request (Blocked), and the official time at which the newest of them
// was prepared here; none if nothing stops it. It is for the slow path of
// a request that waited already: a subtree read scans every lock.
func (s *State) Stoppers(op proto.OpCode, req proto.Record) (ids []string, since int64) {
	stopping := func(l *pathLock, a access) bool {
		if !l.blocks(a, "") {
			return true
		}
		held := []string{l.owner}
		if a == exclusive {
			held = append(held, slices.Collect(maps.Keys(l.intents))...)
		}
		for _, id := range held {
			if rec := s.x.records[id]; rec != nil && !slices.Contains(ids, id) {
				ids = append(ids, id)
				since = max(since, rec.Created)
			}
		}
		return true
	}
	for _, pa := range accesses(op, req) {
		s.x.meet(pa.path, pa.a, stopping)
	}
	return ids, since
}

// Pending reports whether transaction id is prepared here and not yet
// decided: whether it still holds its locks.
func (s *State) Pending(id string) bool {
	rec := s.x.records[id]
	return rec != nil && rec.Status == proto.XPending
}

// ErrDelayed answers a write sent with Request.Wait that a pending
// transaction's lock, or an earlier write of its connection held back,
// stops: nothing was applied, and the member sends it again (with the
// connection's later writes, in order) once the lock is gone. It never
// reaches a client.
const ErrDelayed proto.Code = -1001

// behindHold reports whether write r of session sess waits behind a write
// of its connection held back for a lock (ErrDelayed), and ends the hold
// when r is the held write sent again or a newer connection's. A
// connection's writes apply in their order: once one of them is held back,
// every later one is too until it comes again; a write of a newer
// connection of the session ends the hold (the older connection and its
// writes are gone), a stale one of an older connection does not wait.
func (sess *Session) behindHold(r *Request) bool {
	h := sess.hold
	if r.Conn == 0 || h.conn == 0 {
		return false
	}
	switch {
	case r.Conn > h.conn:
		sess.hold = writeRef{}
	case r.Conn < h.conn || r.Seq < h.seq:
	case r.Seq > h.seq:
		return true
	default: // the held write, sent again
		sess.hold = writeRef{}
	}
	return false
}

// holdsBack reports whether write r of session sess, sent with Wait, meets
// a pending transaction's lock, and if so holds it back with every later
// write of its connection.
func (s *State) holdsBack(r *Request, sess *Session, req proto.Record) bool {
	if r.Conn == 0 || !r.Wait || !s.Blocked(r.Op, req) {
		return false
	}
	sess.hold = writeRef{r.Conn, r.Seq}
	return true
}
