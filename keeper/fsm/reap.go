package fsm

import (
	"math"
	"slices"

	"github.com/tidwall/btree"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Closing a session that holds many ephemerals (issue 37: 100,000 took
// up to 600 ms and 100 MB in one apply on every member). From entry
// version 15 a close deletes at most ReapChunk of them, the first in path
// order, and removes the session at once; the closed session is then
// reaping, and the leader proposes OpReap entries that delete the next
// ReapChunk each until none remain. ZooKeeper has no bound on a session's
// ephemerals, and ClickHouse holds many on one session, so there is none
// here either.

// OpReap deletes the next ReapChunk ephemerals of a closed session that
// still has some (State.Reaping): the leader proposes it (Request.Session
// names the closed session) until none remain.
const OpReap proto.OpCode = -1002

// ReapChunk is the most ephemerals the closes and reaps of one entry
// delete together (from entry version 15): 4,096 apply in 4–8 ms of CPU and 3.7 MB on
// the CI machine under load (bench TestMeasureWorstApply, closeSession),
// well inside issue 37's 200 ms for one apply.
const ReapChunk = 4096

// ephemeralSet is a session's ephemeral paths in path order, so that a
// close takes the first ReapChunk without sorting them all. It is made on
// the first add: most sessions hold none.
type ephemeralSet struct{ bt *btree.BTreeG[string] }

func (e *ephemeralSet) add(path string) {
	if e.bt == nil {
		e.bt = btree.NewBTreeGOptions(func(a, b string) bool { return a < b }, btree.Options{NoLocks: true})
	}
	e.bt.Set(path)
}

func (e *ephemeralSet) remove(path string) {
	if e.bt != nil {
		e.bt.Delete(path)
	}
}

func (e *ephemeralSet) len() int {
	if e.bt == nil {
		return 0
	}
	return e.bt.Len()
}

// first returns the first n paths (all if fewer), in order.
func (e *ephemeralSet) first(n int) []string {
	out := make([]string, 0, min(n, e.len()))
	if e.bt != nil && n > 0 {
		e.bt.Scan(func(p string) bool {
			out = append(out, p)
			return len(out) < n
		})
	}
	return out
}

// closeChunk is the most ephemerals a close in an entry of the given
// version deletes: all of them before version 15; from 15, what is left
// of the entry's ReapChunk (reapLeft), so that an entry of many closes
// (a mass expiry) deletes no more than one close may.
func (s *State) closeChunk(version byte) int {
	if version < entryReap {
		return math.MaxInt
	}
	return s.reapLeft
}

// ephemeralOwner returns the session whose ephemerals list those of
// owner id: a live session, or a closed one still reaping; nil if none.
func (s *State) ephemeralOwner(id int64) *Session {
	if ss := s.sessions[id]; ss != nil {
		return ss
	}
	return s.reaping[id]
}

// sessionIDTaken reports whether a new session may not have id: a live
// session has it, or a closed one whose ephemerals are still reaped (they
// are owned by the id).
func (s *State) sessionIDTaken(id int64) bool {
	return s.sessions[id] != nil || s.reaping[id] != nil
}

// Reaping returns the closed sessions whose ephemerals are still being
// deleted, by id: the leader proposes an OpReap for each.
func (s *State) Reaping() []int64 {
	ids := make([]int64, 0, len(s.reaping))
	for id := range s.reaping {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// ReapingCount returns how many closed sessions have ephemerals left to
// delete.
func (s *State) ReapingCount() int { return len(s.reaping) }

// ReapingEphemerals returns how many ephemerals of closed session id are
// left to delete.
func (s *State) ReapingEphemerals(id int64) int {
	if ss := s.reaping[id]; ss != nil {
		return ss.ephemerals.len()
	}
	return 0
}

// closeSession closes sess under the rules of entry version: it deletes
// its first ephemerals (closeChunk) and removes the session, leaving any
// others to OpReap. From version 12 a pending transaction's lock on one of
// them refuses the close (closeBlocked).
func (s *State) closeSession(sess *Session, version byte, events []Event) (proto.Code, []Event) {
	paths := sess.ephemerals.first(s.closeChunk(version))
	if version >= entryCommitStamps && s.closeBlocked(paths) {
		return proto.ErrLocked, events
	}
	events = s.deleteEphemerals(sess, paths, events)
	s.reapLeft -= min(len(paths), s.reapLeft)
	delete(s.sessions, sess.ID)
	if len(paths) < sess.ephemerals.len() {
		for _, p := range paths {
			sess.ephemerals.remove(p)
		}
		s.reaping[sess.ID] = &Session{ID: sess.ID, ephemerals: sess.ephemerals}
	}
	return proto.ErrOK, events
}

// reap applies an OpReap of closed session id: it deletes the next
// ReapChunk of its ephemerals (fewer if closes in the same entry deleted
// some: reapLeft; none if they deleted ReapChunk, and the leader sends it
// again), unless a pending transaction's lock stops
// one of them (ErrLocked, nothing changes: the leader tries again). A
// session with none left answers ErrNoNode.
func (s *State) reap(id int64, events []Event) (proto.Code, []Event) {
	sess := s.reaping[id]
	if sess == nil {
		return proto.ErrNoNode, events
	}
	paths := sess.ephemerals.first(s.reapLeft)
	if s.closeBlocked(paths) {
		return proto.ErrLocked, events
	}
	events = s.deleteEphemerals(sess, paths, events)
	s.reapLeft -= len(paths)
	for _, p := range paths {
		sess.ephemerals.remove(p)
	}
	if sess.ephemerals.len() == 0 {
		delete(s.reaping, id)
	}
	return proto.ErrOK, events
}

// closeBlocked reports whether a pending cross-shard transaction stops
// the delete of one of a closing session's ephemerals paths as it would
// stop a client's: it holds the node's parent whole (its stat, a
// sequential name under it, may be among the results its prepare fixed,
// and its commit would stamp the parent after the close). From entry
// version 12 such a close (and an OpReap) is refused with ErrLocked and
// changes nothing: the leader's expiry sweep sends it again (a client's
// own close leaves the session to expire), so the ephemerals go once the
// transaction is decided. ZooKeeper has no such locks; this keeps what a
// transaction fixed as it was answered.
func (s *State) closeBlocked(paths []string) bool {
	for _, p := range paths {
		if s.x.blocked(parentOf(p), childIntent, "") || s.x.blocked(p, exclusive, "") {
			return true
		}
	}
	return false
}

// deleteEphemerals deletes paths, ephemerals of sess, in order under the
// current zxid, with their events; a path that is no longer sess's
// ephemeral is passed over.
func (s *State) deleteEphemerals(sess *Session, paths []string, events []Event) []Event {
	for _, p := range paths {
		n := s.tree.get(p)
		if n == nil || n.Owner != sess.ID {
			continue
		}
		s.removeNode(keyOf(p))
		s.dataSize -= n.size()
		parent := s.tree.get(parentOf(p)).clone()
		parent.NumChildren--
		parent.Pzxid = s.zxid
		s.putNode(parent)
		events = append(events,
			Event{Type: proto.EventNodeDeleted, Path: p, Zxid: s.zxid, acl: s.acls.of(n).List},
			Event{Type: proto.EventNodeChildrenChanged, Path: parent.Path(), Zxid: s.zxid, acl: s.acls.of(parent).List})
	}
	return events
}
