package fsm

import (
	"fmt"
	"slices"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Private opcodes the state machine understands beside ZooKeeper's own.
const (
	// OpSessionOwner moves a session to the member that proposes it (a
	// client reattached there).
	OpSessionOwner proto.OpCode = -1001
)

// entryBatch is the only entry kind so far: the official time and a list
// of requests gathered by group commit.
// Version 2 added each request's connection, write number and delay flag;
// version 3 changed only how the entry moves the official time (see
// nextTime); version 4 is version 3 that may create a session with a given
// id (CreateSession.ID), written only for a batch that does, so that a
// member too old to know it stops instead of leaving the session out;
// version 5, likewise, is version 4 that may hold a prepare that fixes its
// results (XPrepareRequest.FixResults); version 6 is version 5 whose
// createSession seeds a shard's first session id with the shard's tag
// (see SeedSessions), written for a batch that creates a session without a
// given id; version 7 is version 6 that may hold a patient prepare
// (XPrepareRequest.Patient), which records nothing if it meets a lock when
// it applies; version 8 is version 7 whose client writes apply only in
// their connection's order (see Session.inOrder), written for a batch that
// holds a numbered write or creates or moves a session; version 9 is
// version 8 whose client creates meet part fences (see txn.fenced),
// written for a batch that holds a numbered create or multi, and whose
// client creates and setACLs refuse ACLs of more than MaxACLEntries
// entries, written for a numbered setACL too; version 10 is version 9
// whose client writes may be ClickHouse Keeper's (createIfNotExists,
// checkNotExists, tryRemove, removeRecursive, alone or in a multi) and
// refuse to write under its system path (proto.UnderKeeperSystem),
// written for every batch that holds a numbered write; version 11 is
// version 10 that names each distinct list of identities once, in a table
// before its requests (see identityTable), written for a batch of version
// 10 where two requests or more carry the same list (a connection's
// pipelined writes), which the table makes smaller; version 12 is
// version 11 whose cross-shard commits stamp what they change with the
// commit's own zxid and time, not the prepare's (see State.xCommit), and
// whose closeSession waits for the locks of pending transactions (see
// State.closeBlocked), written for every batch that holds a commit or a
// closeSession (with a table, as every version from 11); version 13 is
// version 12 whose cross-shard prepares and commits answer a create2 with
// create2's result, the path and the new node's stat, in the results
// their record keeps (ClickHouse Keeper's CREATE_WITH_STATS; see
// txn.createStats), written for a batch that holds a prepare with a
// create2 among its ops; version 14 is version 13 whose deletes of a
// record remember, with its outcome, a digest of its shards and ops,
// written for every batch that holds a delete of a record: a prepare of
// such an id that names other shards or ops is refused (see
// State.xPrepare), whatever its own entry's version, as only a member that
// applied the version-14 delete holds the digest; version 15 is version
// 14 whose closeSession deletes at most ReapChunk ephemerals and leaves
// the rest to OpReap entries (see State.closeSession), written for every
// batch that holds a closeSession or an OpReap; version 16 is version 15
// whose cross-shard prepares take createContainer and createTTL ops, and
// count as ephemeral only the creates that make one (see
// multiOpAllowed), written for every batch that holds a prepare with such
// an op; version 17 is version 16 whose client writes and cross-shard
// prepares may hold ClickHouse Keeper's checkStat (proto.CheckStatRequest),
// alone or in a multi, written for every batch that holds one (before, a
// checkStat alone was unimplemented and a multi holding one did not
// decode, and so they still are in older entries); version 18 is
// version 17 whose cross-shard decisions (commit, fail and the deletes)
// may name the deadline of the prepare they decide
// (proto.XIDRequest.Deadline), and then apply only to a record of it (see
// decisionFor), and whose deletes remember the record's deadline and its
// caller with its outcome (see outcome.record, OtherCallerRefusal),
// written for every batch that holds such a decision.
// Entries of every version decode and apply as they did.
const (
	entryBatch        byte = 1
	entryVersion      byte = 3
	entryGivenIDs     byte = 4
	entryFixedResults byte = 5
	entryShardSeeds   byte = 6
	entryPatient      byte = 7
	entrySequenced    byte = 8
	entryFenced       byte = 9
	entryExtensions   byte = 10
	entryIdentities   byte = 11
	entryCommitStamps byte = 12
	entryCreateStats  byte = 13
	entryOutcomeOps   byte = 14
	entryReap         byte = 15
	entryXCreateModes byte = 16
	entryCheckStat    byte = 17
	entryIncarnation  byte = 18
	entryNewest            = entryIncarnation
)

// Request is one client request carried in a log entry.
type Request struct {
	ID      uint64       // chosen by the proposing member to find its waiter
	Session int64        // the session it belongs to (0 for createSession)
	Member  string       // the member the session is connected to
	Op      proto.OpCode // ZooKeeper or private opcode
	IDs     []proto.ID   // the caller's identities, for ACL checks
	Body    []byte       // the request record as it came off the wire
	// Conn and Seq name a write: the client connection it came on (ids
	// grow on each member, across restarts) and its number among that
	// connection's numbered writes (Numbered), from 1. Zero for requests
	// not from a client connection; Seq is zero for its unnumbered ones.
	Conn, Seq uint64
	// Wait asks, in delay mode, that a write meeting a pending transaction's
	// lock be held back (answered ErrDelayed, to be sent again), with every
	// later write of its connection, rather than answered with ErrLocked.
	Wait bool
}

// CreateSession is the body of an OpCreateSession request.
type CreateSession struct {
	Timeout int32
	Passwd  []byte
	// ID, if not 0, is the id the session must have: a node's client
	// endpoint gives a client's sessions on every shard the id of its
	// session on the root shard (ephemeralOwner is then the client's
	// session id everywhere). Encoded only when set, so that the entries
	// of shards without endpoints are what they always were.
	ID int64
}

// Encode implements proto.Record.
func (c *CreateSession) Encode(e *proto.Encoder) {
	e.Int32(c.Timeout)
	e.Buffer(c.Passwd)
	if c.ID != 0 {
		e.Int64(c.ID)
	}
}

// Decode implements proto.Record.
func (c *CreateSession) Decode(d *proto.Decoder) {
	c.Timeout = d.Int32()
	c.Passwd = d.Buffer()
	if d.Remaining() > 0 {
		c.ID = d.Int64()
	}
}

// EncodeEntry builds a log entry from the proposing leader's wall clock (ms)
// and a batch of requests.
func EncodeEntry(buf []byte, wallMillis int64, reqs []Request) []byte {
	version := entryVersionOf(reqs)
	switch {
	case version > entryIdentities: // a version after the table's has one, saving or not
		t := newIdentityTable(reqs, true)
		return encodeWithTable(buf, wallMillis, reqs, &t, version)
	case version == entryExtensions:
		if t := newIdentityTable(reqs, false); t.saves() {
			return encodeWithTable(buf, wallMillis, reqs, &t, entryIdentities)
		}
	}
	return encodeEntry(buf, wallMillis, reqs, version)
}

// EncodeForwarded encodes requests that another member is to propose. The
// proposer's own entry decides the version they apply under, so this is
// written as version 7 at most: a leader of an older binary still takes a
// member's forwarded writes during an upgrade.
func EncodeForwarded(reqs []Request) []byte {
	return encodeEntry(nil, 0, reqs, min(entryVersionOf(reqs), entryPatient))
}

// entryVersionOf is the version of an entry holding reqs: the oldest whose
// rules they need.
func entryVersionOf(reqs []Request) byte {
	version := entryVersion
	for i := range reqs {
		switch {
		case reqs[i].Seq != 0, extension(reqs[i].Op):
			version = max(version, entryExtensions) // and so fences (9), bounded ACLs (9) and order (8)
		case reqs[i].Op == proto.OpCreateSession, reqs[i].Op == OpSessionOwner:
			version = max(version, entrySequenced) // and so a session's given id and seed (4, 6)
		case reqs[i].Op == proto.OpXPrepare:
			version = max(version, prepareVersion(&reqs[i]))
		case reqs[i].Op == proto.OpXCommit:
			version = max(version, entryCommitStamps)
		case reqs[i].Op == proto.OpXCommitDelete, reqs[i].Op == proto.OpXDelete:
			version = max(version, entryOutcomeOps)
		}
		if reqs[i].Op == proto.OpCloseSession || reqs[i].Op == OpReap { // numbered or not
			version = max(version, entryReap)
		}
		if holdsCheckStat(&reqs[i]) {
			version = max(version, entryCheckStat)
		}
		if namesIncarnation(&reqs[i]) {
			version = max(version, entryIncarnation)
		}
	}
	return version
}

func encodeEntry(buf []byte, wallMillis int64, reqs []Request, version byte) []byte {
	buf = slices.Grow(buf, entrySize(reqs))
	buf = append(buf, entryBatch, version)
	e := proto.NewEncoder(buf)
	e.Int64(wallMillis)
	e.Int32(int32(len(reqs)))
	for i := range reqs {
		r := &reqs[i]
		encodeRequestHead(e, r)
		encodeIDs(e, r.IDs)
		e.Buffer(r.Body)
	}
	return e.Bytes()
}

// encodeWithTable encodes an entry of version 11 or later: the identity
// table, then the requests, each naming its identities by their place in
// the table (-1: none).
func encodeWithTable(buf []byte, wallMillis int64, reqs []Request, t *identityTable, version byte) []byte {
	buf = slices.Grow(buf, entrySize(reqs)-t.saved)
	buf = append(buf, entryBatch, version)
	e := proto.NewEncoder(buf)
	e.Int64(wallMillis)
	e.Int32(int32(len(t.sets)))
	for _, ids := range t.sets {
		encodeIDs(e, ids)
	}
	e.Int32(int32(len(reqs)))
	for i := range reqs {
		encodeRequestHead(e, &reqs[i])
		e.Int32(t.index[i])
		e.Buffer(reqs[i].Body)
	}
	return e.Bytes()
}

// encodeRequestHead encodes what every version writes of r before its
// identities.
func encodeRequestHead(e *proto.Encoder, r *Request) {
	e.Int64(int64(r.ID))
	e.Int64(r.Session)
	e.String(r.Member)
	e.Int32(int32(r.Op))
	e.Int64(int64(r.Conn))
	e.Int64(int64(r.Seq))
	e.Bool(r.Wait)
}

func encodeIDs(e *proto.Encoder, ids []proto.ID) {
	e.Int32(int32(len(ids)))
	for _, id := range ids {
		e.String(id.Scheme)
		e.String(id.ID)
	}
}

// entrySize is the length of the entry EncodeEntry makes of reqs, so that
// it allocates once (a batch of 64 multis otherwise grew it 10 times).
func entrySize(reqs []Request) int {
	n := 2 + 8 + 4
	for i := range reqs {
		r := &reqs[i]
		n += 8 + 8 + 4 + len(r.Member) + 4 + 8 + 8 + 1 + 4 + 4 + len(r.Body)
		for _, id := range r.IDs {
			n += 4 + len(id.Scheme) + 4 + len(id.ID)
		}
	}
	return n
}

// Numbered reports whether a client connection's write of op takes the
// next number among the connection's writes (Request.Seq), by which the
// state machine applies them only in order: every write on a session, not
// sync (which changes nothing) nor the cross-shard protocol's messages
// (which may come in any order and repeat).
func Numbered(op proto.OpCode) bool {
	return proto.IsWrite(op) && op != proto.OpSync && !isX(op)
}

// prepareVersion returns the entry version prepare r needs.
func prepareVersion(r *Request) byte {
	var p proto.XPrepareRequest
	switch {
	case proto.Unmarshal(r.Body, &p) != nil:
		return entryVersion
	case slices.ContainsFunc(p.Ops, checksStat):
		return entryCheckStat
	case slices.ContainsFunc(p.Ops, createsInMode):
		return entryXCreateModes
	case slices.ContainsFunc(p.Ops, func(s proto.ShardOps) bool { return s.Ops.HoldsCreate2() }):
		return entryCreateStats
	case p.Patient:
		return entryPatient
	case p.FixResults:
		return entryFixedResults
	}
	return entryVersion
}

// DecodeEntry is the inverse of EncodeEntry.
func DecodeEntry(b []byte) (wallMillis int64, reqs []Request, err error) {
	_, wallMillis, reqs, err = decodeEntry(b)
	return wallMillis, reqs, err
}

// nextTime is the official time after an entry of the given version
// stamped wall (ms): the later of the two, so it never goes back. Entries
// before version 3 also moved it on by at least 1 ms each, which ran it
// ahead of every clock whenever a shard applied more than 1,000 entries a
// second (a minute ahead after a few minutes of load, and deadlines and
// ctimes with it); they keep that rule, so an old log replays to the
// state it made.
func nextTime(time, wall int64, version byte) int64 {
	if version < 3 {
		return max(time+1, wall)
	}
	return max(time, wall)
}

func decodeEntry(b []byte) (version byte, wallMillis int64, reqs []Request, err error) {
	if len(b) < 2 || b[0] != entryBatch || b[1] < 1 {
		return 0, 0, nil, fmt.Errorf("fsm: unknown entry kind")
	}
	if b[1] > entryNewest {
		// A newer binary wrote it (README, Installing as a package: restart
		// every member of the shard on the new binary).
		return 0, 0, nil, fmt.Errorf("fsm: entry version %d is newer than this binary knows (%d): run the newer binary that wrote it", b[1], entryNewest)
	}
	version = b[1]
	d := proto.NewDecoder(b[2:])
	wallMillis = d.Int64()
	n := d.Int32()
	var table [][]proto.ID
	if version >= entryIdentities {
		if n < 0 || int(n) > d.Remaining()/4 {
			return 0, 0, nil, fmt.Errorf("fsm: bad identity table size %d", n)
		}
		table = make([][]proto.ID, n)
		for i := range table {
			if table[i], err = decodeIDs(d); err != nil {
				return 0, 0, nil, err
			}
		}
		n = d.Int32()
	}
	if n < 0 || int(n) > d.Remaining()/24 {
		return 0, 0, nil, fmt.Errorf("fsm: bad request count %d", n)
	}
	reqs = make([]Request, n)
	for i := range reqs {
		r := &reqs[i]
		r.ID = uint64(d.Int64())
		r.Session = d.Int64()
		r.Member = d.String()
		r.Op = proto.OpCode(d.Int32())
		if version >= 2 {
			r.Conn, r.Seq, r.Wait = uint64(d.Int64()), uint64(d.Int64()), d.Bool()
		}
		if table == nil {
			if r.IDs, err = decodeIDs(d); err != nil {
				return 0, 0, nil, err
			}
		} else if k := d.Int32(); k >= 0 && int(k) < len(table) {
			r.IDs = table[k]
		} else if k != -1 {
			return 0, 0, nil, fmt.Errorf("fsm: identity list %d of a table of %d", k, len(table))
		}
		r.Body = d.Buffer()
	}
	if d.Err() != nil {
		return 0, 0, nil, fmt.Errorf("fsm: decode entry: %w", d.Err())
	}
	return version, wallMillis, reqs, nil
}

// decodeIDs reads a list of identities; none is nil.
func decodeIDs(d *proto.Decoder) ([]proto.ID, error) {
	k := d.Int32()
	if k < 0 || int(k) > d.Remaining()/8 {
		return nil, fmt.Errorf("fsm: bad id count %d", k)
	}
	var ids []proto.ID
	for j := int32(0); j < k; j++ {
		ids = append(ids, proto.ID{Scheme: d.String(), ID: d.String()})
	}
	return ids, nil
}

// identityTable numbers the distinct identity lists of a batch. A
// connection's requests share its list (one slice, replaced when an auth
// adds to it), so a list is recognised by its slice, or by being equal to
// the previous request's (forwarded requests decode into slices of their
// own); lists beyond maxIdentitySets are not looked up, which only makes
// the table less useful, never wrong.
type identityTable struct {
	sets  [][]proto.ID // the distinct lists, in the order they first come
	index []int32      // for each request, its list's place in sets (-1: none)
	saved int          // bytes the table saves against lists in every request
}

// maxIdentitySets bounds the lists a request's is compared with, so that
// building the table stays linear in the batch.
const maxIdentitySets = 64

// newIdentityTable numbers the lists of reqs; unless whole, it leaves
// the table empty where it cannot save (fewer than two lists).
func newIdentityTable(reqs []Request, whole bool) identityTable {
	var t identityTable
	carrying := 0
	for i := range reqs {
		if len(reqs[i].IDs) > 0 {
			carrying++
		}
	}
	if carrying < 2 && !whole {
		return t
	}
	t.index = make([]int32, len(reqs))
	t.sets = make([][]proto.ID, 0, min(carrying, maxIdentitySets))
	t.saved = -4 // the table's count
	for i := range reqs {
		ids := reqs[i].IDs
		t.index[i] = -1
		if len(ids) == 0 {
			continue
		}
		size := 4
		for _, id := range ids {
			size += 8 + len(id.Scheme) + len(id.ID)
		}
		if k := t.find(reqs, i); k >= 0 {
			t.index[i] = k
			t.saved += size - 4
			continue
		}
		t.index[i] = int32(len(t.sets))
		t.sets = append(t.sets, ids)
		t.saved -= 4 // its place, beside the list moved to the table
	}
	return t
}

// find returns the place in t.sets of request i's list, -1 if not there.
func (t *identityTable) find(reqs []Request, i int) int32 {
	ids := reqs[i].IDs
	if i > 0 && t.index[i-1] >= 0 && slices.Equal(t.sets[t.index[i-1]], ids) {
		return t.index[i-1] // the previous request's list: the common case
	}
	for k, other := range t.sets[:min(len(t.sets), maxIdentitySets)] {
		if len(other) == len(ids) && &other[0] == &ids[0] {
			return int32(k)
		}
	}
	return -1
}

// saves reports whether the table makes the entry smaller.
func (t *identityTable) saves() bool { return t.saved > 0 }
