package fsm

import (
	"bytes"
	"hash/fnv"
	"slices"
	"sort"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Session is a client session as replicated in the state machine.
type Session struct {
	ID         int64
	Timeout    int32 // negotiated, milliseconds
	Passwd     []byte
	Owner      string // member the session is connected to
	ephemerals ephemeralSet
	hold       writeRef // in delay mode, the write held back for a lock, with every later one of its connection
	last       writeRef // the last numbered write applied from its owner's connections (unnumbered: not known)
}

// writeRef names a client's write: its connection and its number there.
type writeRef struct{ conn, seq uint64 }

// unnumbered is Session.last while the session's order is not known: after
// entries older than version 8 (which do not check it), and so after a
// snapshot that did not keep it. The session's next write is then taken as
// it comes.
var unnumbered = writeRef{seq: ^uint64(0)}

// ErrOutOfOrder answers, from entry version 8 on, a client write that would
// apply after a gap in its connection's writes or after a newer connection's
// (see Session.inOrder): an earlier write of the connection never applied,
// so this one must not either, nor any later one. It is connection loss, so
// the member drops the client as for any write whose fate it lost.
const ErrOutOfOrder = proto.ErrConnectionLoss

// inOrder reports whether numbered write r of an entry of the given
// version may apply: whether it is the next write of the connection that
// wrote last, or the first of a newer connection (the session reconnected;
// the older connection's later writes are then refused). A connection's
// writes so apply as a prefix of what it sent, whichever members proposed
// them and in whatever order their entries reached the log (a leader lost
// or handed on while they were in flight). Connection ids grow on each
// member, across restarts (from its clock, and above LastConn for a
// connection that takes the session over); the order is the owner's, and
// starts again when the session moves. Writes that another member
// proposes for the session are not its owner's: they are answered
// ErrSessionMoved (a close applies).
func (sess *Session) inOrder(r *Request, version byte) bool {
	l := sess.last
	if version < entrySequenced || r.Seq == 0 || r.Member != sess.Owner || l == unnumbered {
		return true
	}
	if r.Conn == l.conn {
		return r.Seq == l.seq+1
	}
	return r.Conn > l.conn && r.Seq == 1
}

// LastConn returns the connection of the session's last numbered write
// recorded, 0 if none or not known: a member gives a connection that takes
// the session over an id above it, so that its writes are in order even if
// the member's clock went back across a restart (connection ids come from
// it).
func (sess *Session) LastConn() uint64 {
	if sess.last == unnumbered {
		return 0
	}
	return sess.last.conn
}

// wrote records numbered write r of the session's owner, applied by an
// entry of the given version, as its last; an older entry, which does not
// check the order, leaves it unknown, as a snapshot of its time would.
func (sess *Session) wrote(r *Request, version byte) {
	switch {
	case r.Seq == 0 || r.Member != sess.Owner:
	case version < entrySequenced:
		sess.last = unnumbered
	default:
		sess.last = writeRef{r.Conn, r.Seq}
	}
}

// firstWrite is Session.last of a session created or moved by an entry of
// the given version: none yet, or not known before version 8.
func firstWrite(version byte) writeRef {
	if version < entrySequenced {
		return unnumbered
	}
	return writeRef{}
}

// Ephemerals returns the session's ephemeral paths, sorted.
func (s *Session) Ephemerals() []string {
	return s.ephemerals.first(s.ephemerals.len())
}

// Event is a change that fires watches: NodeCreated, NodeDeleted and
// NodeDataChanged fire data watches on Path, NodeDeleted also child
// watches on Path, NodeChildrenChanged fires child watches on Path.
type Event struct {
	Type proto.EventType
	Path string
	Zxid int64
	// acl is the ACL a watcher needs READ in to hear of the event, as
	// ZooKeeper 3.8 delivers it: the node's own, the parent's for children
	// changed (an interned ACL's entries, never written). Nil lets anyone
	// hear.
	acl []proto.ACL
}

// ReadableBy reports whether a connection with ids hears of the event:
// ZooKeeper 3.8 drops an event for a watcher without READ on the node
// (the watch is used up all the same).
func (e Event) ReadableBy(ids []proto.ID) bool { return checkACLs(e.acl, proto.PermRead, ids) }

// Result is the outcome of one request of an entry.
type Result struct {
	ID      uint64
	Member  string // the member that proposed the request
	Session int64
	Op      proto.OpCode
	Zxid    int64
	Err     proto.Code
	Resp    proto.Record // nil when Err is set or the reply has no body
}

// State is the replicated state of one keeper shard.
type State struct {
	tree          tree
	acls          *aclTable
	sessions      map[int64]*Session
	reaping       map[int64]*Session // closed sessions whose ephemerals are left to OpReap (reap.go)
	reapLeft      int                // how many more ephemerals the entry being applied may delete by closes and reaps (reap.go)
	zxid          int64
	time          int64 // official time, ms: max(last+1, entry time)
	nextSession   int64
	sessionTag    int64   // the shard's tag, in new sessions' top bits (seedSessions)
	dataSize      int64   // bytes of paths and data, ZooKeeper's approximate data size
	x             xstate  // cross-shard transactions
	pendingEvents []Event // events of a cross-shard commit, collected by applyRequest
	probe         []byte  // the probe of the apply's lookups (txn.get)
	children      childCache
	zone          string // the member's availability zone (SetAvailabilityZone), never stored
}

// New returns the state of a new shard: the root, /zookeeper,
// /zookeeper/quota and the world-readable /zookeeper/config, as in
// ZooKeeper.
func New() *State {
	s := &State{tree: newTree(), acls: newACLTable(), sessions: map[int64]*Session{}, reaping: map[int64]*Session{}, x: newXState()}
	open := s.acls.intern(proto.WorldACL(proto.PermAll))
	for _, p := range []string{"/", "/zookeeper", "/zookeeper/quota"} {
		n := newNode(keyOf(p), []byte{})
		n.acl = open.id
		s.tree.put(n)
	}
	config := newNode(keyOf("/zookeeper/config"), []byte{})
	config.acl = s.acls.intern(proto.WorldACL(proto.PermRead)).id
	s.tree.put(config)
	root, zk := s.tree.get("/").clone(), s.tree.get("/zookeeper").clone()
	root.NumChildren, zk.NumChildren = 1, 2
	s.tree.put(root)
	s.tree.put(zk)
	s.recount()
	return s
}

// recount sums the data size and counts the ACLs' users over the whole
// tree, after a restore or an import.
func (s *State) recount() {
	s.dataSize = 0
	s.tree.bt.Scan(func(n *Node) bool { s.dataSize += n.size(); return true })
	s.acls.recount(s.tree)
}

// putNode stores n in the live tree and returns the node it replaced, nil
// if none, counting their ACLs' users.
func (s *State) putNode(n *Node) *Node {
	prev := s.tree.put(n)
	s.acls.replaced(prev, n)
	return prev
}

// removeNode deletes the node of key from the live tree and returns it,
// nil if there was none, counting its ACL's users.
func (s *State) removeNode(key string) *Node {
	prev := s.tree.remove(key)
	s.acls.replaced(prev, nil)
	return prev
}

// DataSize returns the bytes of every znode's path and data: ZooKeeper's
// approximate data size.
func (s *State) DataSize() int64 { return s.dataSize }

// Zxid returns the zxid of the last applied write.
func (s *State) Zxid() int64 { return s.zxid }

// Time returns the shard's official time in milliseconds.
func (s *State) Time() int64 { return s.time }

// NodeCount returns the number of znodes.
func (s *State) NodeCount() int { return s.tree.len() }

// CountBelow returns how many znodes are exactly depth levels below path
// (1: its children). It reads every znode above that level, so it is for
// shallow counts of bounded directories.
func (s *State) CountBelow(path string, depth int) int {
	n := s.tree.get(path)
	switch {
	case n == nil || depth < 1:
		return 0
	case depth == 1:
		return int(n.NumChildren)
	}
	count := 0
	s.tree.eachChild(path, func(c *Node) bool {
		count += s.CountBelow(c.Path(), depth-1)
		return true
	})
	return count
}

// Node returns the node at path, or nil.
func (s *State) Node(path string) *Node { return s.tree.get(path) }

// ACL returns the ACL of a node of the state. The slice is shared: it must
// not be modified.
func (s *State) ACL(n *Node) []proto.ACL { return s.acls.of(n).List }

// Session returns a live session, or nil.
func (s *State) Session(id int64) *Session { return s.sessions[id] }

// Sessions returns every live session, by id.
func (s *State) Sessions() []*Session {
	out := make([]*Session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		out = append(out, ss)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// EachSession calls f with every live session, in no order, until f
// returns false: what a sweep over all sessions needs, without the copy
// and sort of Sessions.
func (s *State) EachSession(f func(*Session) bool) {
	for _, ss := range s.sessions {
		if !f(ss) {
			return
		}
	}
}

// SessionCount returns the number of live sessions.
func (s *State) SessionCount() int { return len(s.sessions) }

// EphemeralCount returns the number of ephemeral nodes.
func (s *State) EphemeralCount() int {
	n := 0
	for _, ss := range s.sessions {
		n += ss.ephemerals.len()
	}
	for _, ss := range s.reaping {
		n += ss.ephemerals.len()
	}
	return n
}

// Apply applies one log entry and returns each request's result and the
// watch events it caused, in order. An entry that does not decode is a
// corrupt log: the error must stop the replica.
func (s *State) Apply(entry []byte) ([]Result, []Event, error) {
	version, wall, reqs, err := decodeEntry(entry)
	if err != nil {
		return nil, nil, err
	}
	s.time = nextTime(s.time, wall, version)
	s.reapLeft = ReapChunk
	results := make([]Result, len(reqs))
	var events []Event
	for i := range reqs {
		results[i], events = s.applyRequest(&reqs[i], version, events)
	}
	s.acls.sweep()
	return results, events, nil
}

func (s *State) applyRequest(r *Request, version byte, events []Event) (Result, []Event) {
	s.zxid++
	res := Result{ID: r.ID, Member: r.Member, Session: r.Session, Op: r.Op, Zxid: s.zxid}
	switch r.Op {
	case proto.OpCreateSession:
		res.Session, res.Err = s.createSession(r, version)
		return res, events
	case proto.OpSync:
		var p proto.PathRequest
		if proto.Unmarshal(r.Body, &p) != nil {
			res.Err = proto.ErrMarshallingError
		} else {
			res.Resp = &p
		}
		return res, events
	}
	if isX(r.Op) {
		res.Resp, res.Err = s.applyX(r, version)
		events = append(events, s.pendingEvents...)
		s.pendingEvents = nil
		return res, events
	}
	if r.Op == OpReap && version >= entryReap { // older entries never held one
		res.Err, events = s.reap(r.Session, events)
		return res, events
	}
	sess := s.sessions[r.Session]
	if sess == nil {
		res.Err = proto.ErrSessionExpired
		return res, events
	}
	if r.Op == OpSessionOwner {
		sess.Owner, sess.hold, sess.last = r.Member, writeRef{}, firstWrite(version)
		return res, events
	}
	var req proto.Record
	if r.Op != proto.OpCloseSession { // a close applies from any member
		if sess.Owner != r.Member {
			res.Err = proto.ErrSessionMoved
			return res, events
		}
		req, res.Err = decodeWrite(r, version)
		if res.Err != proto.ErrOK && version < entrySequenced {
			// Older entries answered a write that does not decode before
			// they looked at holds; they still do, so they replay as they
			// applied.
			sess.wrote(r, version)
			return res, events
		}
	}
	switch {
	case sess.behindHold(r):
		res.Err = ErrDelayed
		return res, events
	case !sess.inOrder(r, version):
		res.Err = ErrOutOfOrder
		return res, events
	case res.Err == proto.ErrOK:
		res, events = s.applySessionWrite(r, sess, req, res, version, events)
	}
	if res.Err != ErrDelayed {
		sess.wrote(r, version)
	}
	return res, events
}

// decodeWrite decodes the body of write r (not a close) of an entry of
// the given version. Before version 10, ClickHouse Keeper's requests are
// unknown (a multi holding one did not decode), as they were then; before
// version 17, so is its checkStat.
func decodeWrite(r *Request, version byte) (proto.Record, proto.Code) {
	req := proto.NewRequest(r.Op)
	if req == nil || !proto.IsWrite(r.Op) || version < entryExtensions && extension(r.Op) ||
		version < entryCheckStat && r.Op == proto.OpCheckStat {
		return nil, proto.ErrUnimplemented
	}
	if proto.Unmarshal(r.Body, req) != nil {
		return nil, proto.ErrMarshallingError
	}
	if m, ok := req.(*proto.MultiRequest); ok && slices.ContainsFunc(m.Ops, func(o proto.MultiOp) bool { return !knownInMulti(o.Op, version) }) {
		return nil, proto.ErrMarshallingError
	}
	return req, proto.ErrOK
}

// knownInMulti reports whether a write multi of an entry of the given
// version holds op as it decoded then: a multi holding another did not
// decode, and still answers so.
func knownInMulti(op proto.OpCode, version byte) bool {
	switch op {
	case proto.OpFilteredListWithStatsAndData:
		return false // a read of multiRead alone, unknown to a multi as before it was known
	case proto.OpCheckStat:
		return version >= entryCheckStat
	case proto.OpExists, proto.OpGetChildren2:
		return version >= entryExtensions
	}
	return version >= entryExtensions || !extension(op)
}

// applySessionWrite applies write req of live session sess, its owner's
// (or a close, req nil), in its order, under the rules of entry version.
func (s *State) applySessionWrite(r *Request, sess *Session, req proto.Record, res Result, version byte, events []Event) (Result, []Event) {
	if r.Op == proto.OpCloseSession { // after the connection's held writes (behindHold)
		res.Err, events = s.closeSession(sess, version, events)
		return res, events
	}
	if s.holdsBack(r, sess, req) {
		res.Err = ErrDelayed
		return res, events
	}
	tx := s.begin(r, sess)
	tx.fences = version >= entryFenced
	tx.boundACLs = version >= entryFenced
	tx.extensions = version >= entryExtensions
	tx.createStats = true // results of a client's write are its answer alone: no state
	if r.Op == proto.OpMulti {
		res.Resp, res.Err = tx.multi(req.(*proto.MultiRequest))
	} else {
		res.Resp, res.Err = tx.op(r.Op, req)
	}
	if res.Err != proto.ErrOK {
		res.Resp = nil
		return res, events
	}
	return res, tx.commit(events)
}

// SeedSessions sets the tag of the shard this state belongs to from its
// name; every member of a shard must set the same. The shard's first
// session id, and so all its own ids, then carry the tag in their top bits,
// so that shards started in the same millisecond do not give out the same
// ids: a node's endpoint gives a client's root-shard session id to its
// sessions on the other shards, which would be refused if that shard had
// given the id to a session of its own.
func (s *State) SeedSessions(shard string) {
	h := fnv.New32a()
	h.Write([]byte(shard))
	s.sessionTag = 1 + int64(h.Sum32()%127) // 7 bits: ids stay positive
}

func (s *State) createSession(r *Request, version byte) (int64, proto.Code) {
	var c CreateSession
	if proto.Unmarshal(r.Body, &c) != nil {
		return 0, proto.ErrMarshallingError
	}
	id := c.ID
	switch {
	case id < 0:
		return 0, proto.ErrBadArguments
	case id > 0 && s.sessionIDTaken(id):
		return 0, proto.ErrNodeExists // another session has the id
	case id == 0:
		if s.nextSession == 0 {
			// Like ZooKeeper, seed ids from the time so a rebuilt shard does
			// not reuse the ids of an old one, and with the shard's tag where
			// ZooKeeper puts its server id. Older entries seeded without it.
			s.nextSession = int64(uint64(s.time<<24) >> 8)
			if version >= entryShardSeeds {
				s.nextSession |= s.sessionTag << 56
			}
		}
		s.nextSession++
		for s.sessionIDTaken(s.nextSession) { // taken by a session given its id
			s.nextSession++
		}
		id = s.nextSession
	}
	// The password is copied: c's aliases the whole log entry, which a
	// session must not keep alive.
	s.sessions[id] = &Session{ID: id, Timeout: c.Timeout, Passwd: bytes.Clone(c.Passwd), Owner: r.Member,
		last: firstWrite(version)}
	return id, proto.ErrOK
}
