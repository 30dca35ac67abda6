package fsm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// snapshotMagic begins a snapshot; version 02 added the sessions' held
// writes, version 03 the zxid of each record's prepare that fixed its
// results, version 04 the sessions' last numbered writes, version 05 the
// digest of each remembered outcome's ops and the closed sessions whose
// ephemerals are still reaped (State.Reaping), version 06 the deadline and
// the caller's digest of each remembered outcome; snapshots of versions 01 to 05 still
// restore.
const (
	snapshotMagic   = "XKSNAP06"
	snapshotMagicV5 = "XKSNAP05"
	snapshotMagicV4 = "XKSNAP04"
	snapshotMagicV3 = "XKSNAP03"
	snapshotMagicV2 = "XKSNAP02"
	snapshotMagicV1 = "XKSNAP01"
)

// Snapshot is a point-in-time copy of a State. Taking it is O(1) in the
// number of nodes (the tree is shared copy-on-write); Write streams it
// while the State goes on applying.
type Snapshot struct {
	tree        tree
	acls        []*ACLList
	sessions    []Session
	reaping     []int64 // closed sessions whose ephemerals are left to reap
	zxid, time  int64
	nextSession int64
	xrecords    []proto.XRecord
	prepared    map[string]int64
	outcomes    []outcomeAt
	outcomeOf   map[string]outcome
}

// Snapshot captures the state. The caller must hold the write lock while
// it runs; Write needs no lock.
func (s *State) Snapshot() *Snapshot {
	snap := &Snapshot{tree: s.tree.copy(), acls: s.acls.live(),
		zxid: s.zxid, time: s.time, nextSession: s.nextSession}
	s.tree = s.tree.copy() // both sides now clone on write
	snap.xrecords = s.XRecords()
	snap.prepared = maps.Clone(s.x.prepared)
	snap.outcomes = slices.Clone(s.x.expiry)
	snap.outcomeOf = maps.Clone(s.x.outcomes)
	for _, ss := range s.Sessions() {
		snap.sessions = append(snap.sessions, Session{ID: ss.ID, Timeout: ss.Timeout, Passwd: ss.Passwd, Owner: ss.Owner, hold: ss.hold, last: ss.last})
	}
	snap.reaping = s.Reaping()
	return snap
}

// Zxid returns the zxid the snapshot was taken at.
func (snap *Snapshot) Zxid() int64 { return snap.zxid }

// Time returns the shard's official time when the snapshot was taken, in
// Unix milliseconds.
func (snap *Snapshot) Time() int64 { return snap.time }

// Write streams the snapshot to w.
func (snap *Snapshot) Write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	e := proto.NewEncoder(make([]byte, 0, 4096))
	flush := func() error {
		_, err := bw.Write(e.Bytes())
		e = proto.NewEncoder(e.Bytes()[:0])
		return err
	}
	e = proto.NewEncoder(append(e.Bytes(), snapshotMagic...))
	e.Int64(snap.zxid)
	e.Int64(snap.time)
	e.Int64(snap.nextSession)
	acls, place := canonicalACLs(snap.acls)
	e.Int32(int32(len(acls)))
	for _, l := range acls {
		e.Int32(int32(len(l.List)))
		for _, a := range l.List {
			e.Int32(a.Perms)
			e.String(a.Scheme)
			e.String(a.ID.ID)
		}
	}
	e.Int32(int32(len(snap.sessions)))
	for _, ss := range snap.sessions {
		e.Int64(ss.ID)
		e.Int32(ss.Timeout)
		e.Buffer(ss.Passwd)
		e.String(ss.Owner)
		e.Int64(int64(ss.hold.conn))
		e.Int64(int64(ss.hold.seq))
		e.Int64(int64(ss.last.conn))
		e.Int64(int64(ss.last.seq))
	}
	e.Int32(int32(len(snap.reaping)))
	for _, id := range snap.reaping {
		e.Int64(id)
	}
	e.Int64(int64(snap.tree.len()))
	var err error
	snap.tree.scan(func(n *Node) bool {
		e.String(n.Path())
		e.Buffer(n.Data())
		e.Int32(place[n.acl])
		for _, v := range [...]int64{n.Czxid, n.Mzxid, n.Pzxid, n.Ctime, n.Mtime, n.Owner} {
			e.Int64(v)
		}
		for _, v := range [...]int32{n.Version, n.Cversion, n.Aversion, n.NumChildren} {
			e.Int32(v)
		}
		if len(e.Bytes()) > 64<<10 {
			err = flush()
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	e.Int32(int32(len(snap.xrecords)))
	for i := range snap.xrecords {
		e.Buffer(proto.Marshal(&snap.xrecords[i]))
		e.Int64(snap.prepared[snap.xrecords[i].ID])
	}
	e.Int32(int32(len(snap.outcomes)))
	for _, o := range snap.outcomes {
		e.String(o.id)
		e.Int64(o.time)
		oc := snap.outcomeOf[o.id]
		e.Int32(int32(oc.status))
		e.Int32(int32(oc.err))
		e.Int32(oc.failedOp)
		e.Buffer(proto.Marshal(&oc.results))
		e.Int64(int64(oc.ops))
		e.Int64(oc.deadline)
		e.Int64(int64(oc.caller))
	}
	if err := flush(); err != nil {
		return err
	}
	return bw.Flush()
}

// Restore reads a snapshot written by Write into a new State.
func Restore(r io.Reader) (*State, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	rd := &reader{r: br}
	magic := rd.bytes(len(snapshotMagic))
	version := slices.Index([]string{snapshotMagicV1, snapshotMagicV2, snapshotMagicV3, snapshotMagicV4, snapshotMagicV5, snapshotMagic}, string(magic)) + 1
	if rd.err == nil && version == 0 {
		return nil, fmt.Errorf("fsm: not a snapshot")
	}
	s := &State{tree: newTree(), acls: newACLTable(), sessions: map[int64]*Session{}, reaping: map[int64]*Session{}}
	s.zxid, s.time, s.nextSession = rd.i64(), rd.i64(), rd.i64()
	for i, n := 0, rd.i32(); i < int(n) && rd.err == nil; i++ {
		acl := make([]proto.ACL, rd.i32())
		for j := range acl {
			acl[j] = proto.ACL{Perms: rd.i32(), ID: proto.ID{Scheme: rd.str(), ID: rd.str()}}
		}
		s.acls.add(aclKey(acl), acl) // at id i, a repeat too
	}
	for i, n := 0, rd.i32(); i < int(n) && rd.err == nil; i++ {
		ss := &Session{ID: rd.i64(), Timeout: rd.i32(), Passwd: rd.buf(), Owner: rd.str()}
		if version >= 2 {
			ss.hold = writeRef{uint64(rd.i64()), uint64(rd.i64())}
		}
		ss.last = unnumbered
		if version >= 4 {
			ss.last = writeRef{uint64(rd.i64()), uint64(rd.i64())}
		}
		s.sessions[ss.ID] = ss
	}
	if version >= 5 {
		for i, n := 0, rd.i32(); i < int(n) && rd.err == nil; i++ {
			id := rd.i64()
			s.reaping[id] = &Session{ID: id}
		}
	}
	count := rd.i64()
	for i := int64(0); i < count && rd.err == nil; i++ {
		n := newNode(keyOf(rd.str()), rd.buf())
		if id := rd.i32(); id >= 0 && int(id) < len(s.acls.byID) {
			n.acl = uint32(id)
		} else if rd.err == nil {
			rd.err = fmt.Errorf("fsm: node %q has unknown acl %d", n.Path(), id)
		}
		n.Czxid, n.Mzxid, n.Pzxid, n.Ctime, n.Mtime, n.Owner = rd.i64(), rd.i64(), rd.i64(), rd.i64(), rd.i64(), rd.i64()
		n.Version, n.Cversion, n.Aversion, n.NumChildren = rd.i32(), rd.i32(), rd.i32(), rd.i32()
		s.tree.bt.Load(n)
		if n.IsEphemeral() {
			if ss := s.ephemeralOwner(n.Owner); ss != nil {
				ss.ephemerals.add(n.Path())
			}
		}
	}
	for id, ss := range s.reaping {
		if ss.ephemerals.len() == 0 { // none left: nothing to reap
			delete(s.reaping, id)
		}
	}
	s.x = newXState()
	for i, n := 0, rd.i32(); i < int(n) && rd.err == nil; i++ {
		var rec proto.XRecord
		rd.record(&rec)
		s.x.records[rec.ID] = &rec
		if version >= 3 {
			if zxid := rd.i64(); zxid != 0 {
				s.x.prepared[rec.ID] = zxid
			}
		}
		if rec.Status == proto.XPending {
			s.x.lockAll(ownOps(&rec, recordShard(&rec)), rec.ID)
		}
	}
	for i, n := 0, rd.i32(); i < int(n) && rd.err == nil; i++ {
		o := outcomeAt{id: rd.str(), time: rd.i64()}
		oc := outcome{status: proto.XStatus(rd.i32()), err: proto.Code(rd.i32()), failedOp: rd.i32()}
		rd.record(&oc.results)
		if version >= 5 {
			oc.ops = uint64(rd.i64())
		}
		if version >= 6 {
			oc.deadline, oc.caller = rd.i64(), uint64(rd.i64())
		}
		s.x.expiry = append(s.x.expiry, o)
		s.x.outcomes[o.id] = oc
	}
	if rd.err != nil {
		return nil, fmt.Errorf("fsm: restore snapshot: %w", rd.err)
	}
	s.recount()
	return s, nil
}

// reader decodes the snapshot stream; the first error sticks.
type reader struct {
	r   *bufio.Reader
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	b := make([]byte, n)
	_, r.err = io.ReadFull(r.r, b)
	return b
}

func (r *reader) i32() int32 {
	b := r.bytes(4)
	if r.err != nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

func (r *reader) i64() int64 {
	b := r.bytes(8)
	if r.err != nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

func (r *reader) buf() []byte {
	n := r.i32()
	if n < 0 || r.err != nil {
		return nil
	}
	if n > 1<<30 {
		r.err = fmt.Errorf("fsm: snapshot field of %d bytes", n)
		return nil
	}
	return r.bytes(int(n))
}

func (r *reader) str() string { return string(r.buf()) }

// record reads one length-prefixed jute record.
func (r *reader) record(rec proto.Record) {
	b := r.buf()
	if r.err == nil {
		r.err = proto.Unmarshal(b, rec)
	}
}
