package fsm

import (
	"fmt"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// txn applies the writes of one request to the live tree. A single op
// checks everything before it changes anything; a multi changes the tree
// op by op and, if one fails, undoes what the others did. (A copy-on-write
// copy of the tree per multi, as before, made every write after it clone
// the B-tree nodes on its path: garbage that cost a busy leader a fifth of
// its CPU in the collector.)
type txn struct {
	s      *State
	undo   []change // every change of the tree, in order
	r      *Request
	sess   *Session
	eph    []ephemeralRef // ephemerals created and deleted, in order
	events []Event
	xid    string // the cross-shard transaction this txn applies, whose locks it passes
	size   int64  // change of the state's data size
	// zxid and time stamp the nodes the txn creates and changes: the
	// entry's, or, in entries before version 11, those of the prepare that
	// fixed a transaction's results.
	// A parent's pzxid and the watch events always get the entry's zxid.
	zxid, time int64
	// fences says whether the txn's creates meet part fences (a client
	// write of entry version 9 or newer).
	fences bool
	// boundACLs says whether the txn refuses ACLs of more than
	// MaxACLEntries entries (a client write of entry version 9 or newer).
	boundACLs bool
	// extensions says whether the txn refuses writes under ClickHouse
	// Keeper's system path (a client write of entry version 10 or newer).
	extensions bool
	// createStats says whether the txn's multis answer a create2 with
	// create2's result, the path and the new node's stat, as ClickHouse
	// Keeper does (CREATE_WITH_STATS), where ZooKeeper 3.8 answers a
	// create's, the path alone (a member converts for a client not in
	// ClickHouse Keeper's dialect: proto.MultiResponse.ZooKeeperForm).
	// Every client multi; a cross-shard prepare or commit of entry version
	// 13 or newer, whose record keeps its results.
	createStats bool
}

// blocked reports whether a pending cross-shard transaction other than the
// txn's own stops access a to path.
func (tx *txn) blocked(path string, a access) bool { return tx.s.x.blocked(path, a, tx.xid) }

// change is one change of the tree: the node that was at key before it
// and the one after it, nil if none.
type change struct {
	key      string
	was, now *Node
}

// get returns the node of path. The txn runs alone (apply holds the
// state), so its lookups share one probe, the state's.
func (tx *txn) get(path string) *Node { return tx.s.tree.getWith(&tx.s.probe, path) }

// put stores n in the tree, to be undone by rollback.
func (tx *txn) put(n *Node) { tx.undo = append(tx.undo, change{n.key(), tx.s.putNode(n), n}) }

// remove deletes the node of path, to be undone by rollback.
func (tx *txn) remove(path string) {
	key := keyOf(path)
	tx.undo = append(tx.undo, change{key, tx.s.removeNode(key), nil})
}

// mine returns n to change and put back: n itself if the txn made it
// lately (no snapshot, earlier state or undo record holds it as it is),
// else a clone. The ops of a multi under one parent so change one copy of
// it, not one each.
func (tx *txn) mine(n *Node) *Node {
	for i := len(tx.undo) - 1; i >= max(0, len(tx.undo)-8); i-- {
		if tx.undo[i].now == n {
			return n
		}
	}
	return n.clone()
}

// rollback undoes every change of the txn, newest first, and forgets what
// it staged.
func (tx *txn) rollback() {
	for i := len(tx.undo) - 1; i >= 0; i-- {
		if c := tx.undo[i]; c.was != nil {
			tx.s.putNode(c.was)
		} else {
			tx.s.removeNode(c.key)
		}
	}
	tx.undo, tx.eph, tx.events, tx.size = nil, nil, nil, 0
}

// ephemeralRef is an ephemeral the txn created (for its session) or
// deleted (for its owner).
type ephemeralRef struct {
	owner   int64
	path    string
	created bool
}

func (s *State) begin(r *Request, sess *Session) *txn {
	return &txn{s: s, r: r, sess: sess, zxid: s.zxid, time: s.time}
}

// commit keeps the txn's changes and records ephemerals and events.
func (tx *txn) commit(events []Event) []Event {
	tx.s.dataSize += tx.size
	for _, e := range tx.eph {
		if e.created {
			tx.sess.ephemerals.add(e.path)
		} else if owner := tx.s.ephemeralOwner(e.owner); owner != nil {
			owner.ephemerals.remove(e.path)
		}
	}
	return append(events, tx.events...)
}

// childZxid is the pzxid a change of parent's children gives it: the
// entry's zxid, unless the txn's own transaction holds the parent
// exclusively (its stat may then be among the results its prepare fixed,
// and nobody else can have moved the pzxid since) in an entry before
// version 11 (tx.zxid is the prepare's only there).
func (tx *txn) childZxid(parent string) int64 {
	if l := tx.s.x.locks[parent]; tx.xid != "" && l != nil && l.owner == tx.xid {
		return tx.zxid
	}
	return tx.s.zxid
}

// event records an event of the txn; acl is the one a watcher needs READ
// in to hear of it (Event.ReadableBy).
func (tx *txn) event(t proto.EventType, path string, acl *ACLList) {
	tx.events = append(tx.events, Event{Type: t, Path: path, Zxid: tx.s.zxid, acl: acl.List})
}

// op applies one write.
func (tx *txn) op(op proto.OpCode, req proto.Record) (proto.Record, proto.Code) {
	if tx.extensions && writesSystem(req) {
		return nil, proto.ErrBadArguments // as ClickHouse Keeper answers
	}
	switch r := req.(type) {
	case *proto.CreateRequest:
		if op == proto.OpCreateIfNotExists {
			return tx.createIfNotExists(r)
		}
		return tx.create(op, r, 0)
	case *proto.CreateTTLRequest:
		return tx.create(op, &r.CreateRequest, r.TTL)
	case *proto.PathVersionRequest:
		switch op {
		case proto.OpCheck:
			return nil, tx.check(r)
		case proto.OpCheckNotExists:
			return nil, tx.checkNotExists(r)
		case proto.OpTryRemove:
			return nil, tx.tryRemove(r)
		}
		return nil, tx.delete(r)
	case *proto.CheckStatRequest:
		return nil, tx.checkStat(r)
	case *proto.RemoveRecursiveRequest:
		return nil, tx.removeRecursive(r)
	case *proto.SetDataRequest:
		return tx.setData(r)
	case *proto.SetACLRequest:
		return tx.setACL(r)
	}
	return nil, proto.ErrUnimplemented
}

// multi applies ops in order, all or nothing. A failed
// multi still answers with per-op results: 0 before the failing op, its
// code, then ErrRuntimeInconsistency, under a header error of 0.
func (tx *txn) multi(m *proto.MultiRequest) (proto.Record, proto.Code) {
	results := make([]proto.MultiResult, 0, len(m.Ops))
	for i, op := range m.Ops {
		kind, resp, code := tx.multiOp(op)
		if code != proto.ErrOK {
			tx.rollback()
			return proto.FailedMulti(len(m.Ops), i, code), proto.ErrOK
		}
		results = append(results, proto.MultiResult{Op: kind, Resp: resp})
	}
	return &proto.MultiResponse{Results: results}, proto.ErrOK
}

// multiOp applies one op of a multi and returns the type its result has.
// Inside a multi ZooKeper picks the kind of a create by its flags, not
// its opcode (MultiOperationRecord reads every create as Op.create): the
// container flag makes a container, reported as create2 with a stat;
// anything else is a plain create reported by path alone, a TTL ignored.
// With createStats a create2 is reported as create2, with its stat.
func (tx *txn) multiOp(op proto.MultiOp) (proto.OpCode, proto.Record, proto.Code) {
	if tx.extensions && writesSystem(op.Req) {
		return op.Op, nil, proto.ErrBadArguments
	}
	switch op.Op {
	case proto.OpCreateIfNotExists, proto.OpCheckNotExists, proto.OpTryRemove, proto.OpRemoveRecursive:
		resp, code := tx.op(op.Op, op.Req)
		return op.Op, resp, code
	case proto.OpCreate, proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL:
		r, ok := op.Req.(*proto.CreateRequest)
		if t, isTTL := op.Req.(*proto.CreateTTLRequest); isTTL {
			r, ok = &t.CreateRequest, true
		}
		if !ok {
			return op.Op, nil, proto.ErrBadArguments
		}
		if r.Flags == proto.FlagContainer {
			resp, code := tx.create(proto.OpCreateContainer, r, 0)
			return proto.OpCreate2, resp, code
		}
		if op.Op == proto.OpCreate2 && tx.createStats {
			resp, code := tx.create(proto.OpCreate2, r, 0)
			return proto.OpCreate2, resp, code
		}
		resp, code := tx.create(proto.OpCreate, r, 0)
		return proto.OpCreate, resp, code
	case proto.OpDelete, proto.OpSetData, proto.OpCheck, proto.OpCheckStat:
		resp, code := tx.op(op.Op, op.Req)
		return op.Op, resp, code
	}
	return op.Op, nil, proto.ErrBadArguments
}

func (tx *txn) create(op proto.OpCode, r *proto.CreateRequest, ttl int64) (proto.Record, proto.Code) {
	flags := r.Flags
	if flags < 0 || flags > proto.ModePersistentSequentialTTL {
		return nil, proto.ErrBadArguments
	}
	if flags == proto.ModePersistentTTL || flags == proto.ModePersistentSequentialTTL {
		return nil, proto.ErrUnimplemented // TTL nodes are off, as in a default ZooKeeper
	}
	if op == proto.OpCreateTTL {
		return nil, proto.ErrBadArguments // a TTL for a mode that has none
	}
	// As in ZooKeeper, createContainer makes a container whatever the flags
	// (the sequential flag still names it), and create with the container
	// flag makes a plain persistent node.
	container := op == proto.OpCreateContainer
	ephemeral := flags&proto.FlagEphemeral != 0 && !container
	sequential := flags&proto.FlagSequential != 0
	path := r.Path
	slash := lastSlash(path)
	if slash < 0 {
		return nil, proto.ErrBadArguments
	}
	acl, code := fixupACL(r.ACL, tx.r.IDs, tx.boundACLs)
	if code != proto.ErrOK {
		return nil, code
	}
	parentPath := "/"
	if slash > 0 {
		parentPath = path[:slash]
	}
	parent := tx.get(parentPath)
	if parent == nil {
		return nil, proto.ErrNoNode
	}
	if tx.blocked(parentPath, childIntent) || !sequential && tx.blocked(path, exclusive) {
		return nil, proto.ErrLocked
	}
	if !checkACL(tx.s.acls.of(parent), proto.PermCreate, tx.r.IDs) {
		return nil, proto.ErrNoAuth
	}
	if tx.fenced(path, r.Data) {
		return nil, proto.ErrLocked
	}
	if sequential {
		path += fmt.Sprintf("%010d", parent.Cversion)
		if tx.blocked(path, exclusive) { // a pending transaction creates that very name
			return nil, proto.ErrLocked
		}
	}
	if !validPath(path) {
		return nil, proto.ErrBadArguments
	}
	if tx.get(path) != nil {
		return nil, proto.ErrNodeExists
	}
	if parent.IsEphemeral() {
		return nil, proto.ErrNoChildrenForEphemerals
	}
	zxid, now := tx.zxid, tx.time
	// Data is copied (newNode): the request's bytes alias the whole log
	// entry, which a stored node must not keep alive.
	n := newNode(keyOf(path), r.Data)
	interned := tx.s.acls.intern(acl)
	n.acl = interned.id
	n.Czxid, n.Mzxid, n.Pzxid, n.Ctime, n.Mtime = zxid, zxid, zxid, now, now
	switch {
	case container:
		n.Owner = ContainerOwner
	case ephemeral:
		n.Owner = tx.sess.ID
		tx.eph = append(tx.eph, ephemeralRef{owner: n.Owner, path: path, created: true})
	}
	parent = tx.mine(parent)
	parent.Cversion++
	parent.NumChildren++
	parent.Pzxid = tx.childZxid(parentPath)
	tx.put(parent)
	tx.put(n)
	tx.size += n.size()
	tx.event(proto.EventNodeCreated, path, interned)
	tx.event(proto.EventNodeChildrenChanged, parentPath, tx.s.acls.of(parent))
	if op == proto.OpCreate {
		return &proto.PathRequest{Path: path}, proto.ErrOK
	}
	return &proto.Create2Response{Path: path, Stat: n.Stat()}, proto.ErrOK
}

func lastSlash(path string) int {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == 0 {
			return -1
		}
	}
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return i
		}
	}
	return -1
}

// special paths cannot be deleted, as in ZooKeeper.
func special(path string) bool {
	switch path {
	case "/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config":
		return true
	}
	return false
}

func (tx *txn) delete(r *proto.PathVersionRequest) proto.Code {
	slash := lastSlash(r.Path)
	if slash < 0 || special(r.Path) {
		return proto.ErrBadArguments
	}
	parentPath := "/"
	if slash > 0 {
		parentPath = r.Path[:slash]
	}
	parent := tx.get(parentPath)
	if parent == nil {
		return proto.ErrNoNode
	}
	if tx.blocked(parentPath, childIntent) || tx.blocked(r.Path, exclusive) {
		return proto.ErrLocked
	}
	if !checkACL(tx.s.acls.of(parent), proto.PermDelete, tx.r.IDs) {
		return proto.ErrNoAuth
	}
	n := tx.get(r.Path)
	if n == nil {
		return proto.ErrNoNode
	}
	if r.Version != -1 && r.Version != n.Version {
		return proto.ErrBadVersion
	}
	if n.NumChildren > 0 {
		return proto.ErrNotEmpty
	}
	tx.remove(r.Path)
	tx.size -= n.size()
	if n.IsEphemeral() {
		tx.eph = append(tx.eph, ephemeralRef{owner: n.Owner, path: r.Path})
	}
	parent = tx.mine(parent)
	parent.NumChildren--
	parent.Pzxid = tx.childZxid(parentPath)
	tx.put(parent)
	tx.event(proto.EventNodeDeleted, r.Path, tx.s.acls.of(n))
	tx.event(proto.EventNodeChildrenChanged, parentPath, tx.s.acls.of(parent))
	return proto.ErrOK
}

// lookup validates a path and returns its node, checking perm and that
// no other pending transaction holds it.
func (tx *txn) lookup(path string, perm int32) (*Node, proto.Code) {
	if !validPath(path) {
		return nil, proto.ErrBadArguments
	}
	n := tx.get(path)
	if n == nil {
		return nil, proto.ErrNoNode
	}
	if tx.blocked(path, exclusive) {
		return nil, proto.ErrLocked
	}
	if !checkACL(tx.s.acls.of(n), perm, tx.r.IDs) {
		return nil, proto.ErrNoAuth
	}
	return n, proto.ErrOK
}

func (tx *txn) setData(r *proto.SetDataRequest) (proto.Record, proto.Code) {
	n, code := tx.lookup(r.Path, proto.PermWrite)
	if code != proto.ErrOK {
		return nil, code
	}
	if r.Version != -1 && r.Version != n.Version {
		return nil, proto.ErrBadVersion
	}
	tx.size += int64(len(r.Data) - len(n.Data()))
	n = n.withData(r.Data) // null data stays null, as in ZooKeeper; a copy, as in create
	n.Version++
	n.Mzxid = tx.zxid
	n.Mtime = tx.time
	tx.put(n)
	tx.event(proto.EventNodeDataChanged, r.Path, tx.s.acls.of(n))
	return &proto.StatResponse{Stat: n.Stat()}, proto.ErrOK
}

func (tx *txn) setACL(r *proto.SetACLRequest) (proto.Record, proto.Code) {
	if !validPath(r.Path) {
		return nil, proto.ErrBadArguments
	}
	acl, code := fixupACL(r.ACL, tx.r.IDs, tx.boundACLs)
	if code != proto.ErrOK {
		return nil, code
	}
	n, code := tx.lookup(r.Path, proto.PermAdmin)
	if code != proto.ErrOK {
		return nil, code
	}
	if r.Version != -1 && r.Version != n.Aversion {
		return nil, proto.ErrBadVersion
	}
	n = tx.mine(n)
	n.acl = tx.s.acls.intern(acl).id
	n.Aversion++
	tx.put(n)
	return &proto.StatResponse{Stat: n.Stat()}, proto.ErrOK
}

func (tx *txn) check(r *proto.PathVersionRequest) proto.Code {
	n, code := tx.lookup(r.Path, proto.PermRead)
	if code != proto.ErrOK {
		return code
	}
	if r.Version != -1 && r.Version != n.Version {
		return proto.ErrBadVersion
	}
	return proto.ErrOK
}
