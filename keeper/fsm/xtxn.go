package fsm

import (
	"bytes"
	"hash/fnv"
	"slices"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// OutcomeRetention is how long (official time, ms) a shard remembers the
// outcome of a transaction whose record it deleted, so a client retrying
// with the same id gets the outcome instead of a second run.
const OutcomeRetention int64 = 3600_000

// xstate is the cross-shard transaction state of a shard: the records,
// the paths pending records lock, and the outcomes of deleted records.
type xstate struct {
	records  map[string]*proto.XRecord
	locks    map[string]*pathLock // what pending transactions hold, by path
	outcomes map[string]outcome
	expiry   []outcomeAt // outcomes in the order they were recorded, for retention
	// prepared holds, for a record whose prepare fixed its results
	// (XPrepareRequest.FixResults), that prepare's zxid: the commit
	// applies at it and at the record's Created time.
	prepared map[string]int64
	counters XCounters // observability only: not in snapshots
}

type outcome struct {
	status   proto.XStatus
	err      proto.Code
	failedOp int32
	results  proto.MultiResponse
	ops      uint64 // the record's opsDigest (since entry version 14); 0: not known
	deadline int64  // the record's deadline (since entry version 18); 0: not known
	caller   uint64 // callerDigest of the record's identities (since entry version 18); 0: not known
}

// record rebuilds what a shard remembers of a deleted record; it has no
// participants, which tells it apart from a live record. Its deadline,
// where known, names the run it remembers: a coordinator's pending record
// of another deadline is a later run of the id (see xshard's drive).
func (o outcome) record(id string) *proto.XRecord {
	return &proto.XRecord{ID: id, Status: o.status, Err: o.err, FailedOp: o.failedOp, Results: o.results, Deadline: o.deadline}
}

type outcomeAt struct {
	id   string
	time int64
}

func newXState() xstate {
	return xstate{records: map[string]*proto.XRecord{}, locks: map[string]*pathLock{}, outcomes: map[string]outcome{},
		prepared: map[string]int64{}}
}

// XRecords returns every transaction record, by id.
func (s *State) XRecords() []proto.XRecord {
	out := make([]proto.XRecord, 0, len(s.x.records))
	for _, r := range s.x.records {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b proto.XRecord) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out
}

// xList answers xList: every record as a client outside the cluster may
// see it (Redacted), members too, for none needs more from a list, and
// full records of large transactions would not fit one frame.
func (s *State) xList() *proto.XListResponse {
	recs := s.XRecords()
	for i := range recs {
		recs[i] = recs[i].Redacted()
	}
	return &proto.XListResponse{Time: s.time, Records: recs}
}

// XRecord returns a transaction record, or nil.
func (s *State) XRecord(id string) *proto.XRecord { return s.x.records[id] }

// LockCount returns the number of locked paths.
func (s *State) LockCount() int { return len(s.x.locks) }

// LockedBy returns the id of a pending transaction that holds a lock on
// path, or "".
func (s *State) LockedBy(path string) string {
	if l := s.x.locks[path]; l != nil {
		return l.holder()
	}
	return ""
}

// Outcome returns the remembered outcome of a deleted record.
func (s *State) Outcome(id string) (proto.XStatus, bool) {
	o, ok := s.x.outcomes[id]
	return o.status, ok
}

// ownOps returns the ops of a record that run on shard self.
func ownOps(rec *proto.XRecord, self string) *proto.MultiRequest {
	for i := range rec.Ops {
		if rec.Ops[i].Shard == self {
			return &rec.Ops[i].Ops
		}
	}
	return &proto.MultiRequest{}
}

// self returns the shard a record lives on: the coordinator keeps every
// shard's ops, a participant only its own.
func recordShard(rec *proto.XRecord) string {
	if len(rec.Ops) == 1 {
		return rec.Ops[0].Shard
	}
	return rec.Coordinator
}

// XCounters are counts of cross-shard protocol events this replica applied.
type XCounters struct {
	Prepared, Rejected, RejectedLate, Committed, Failed int64
	Stale                                               int64 // decisions of a forgotten run, left unapplied
}

// XStats returns the counters, the number of locked paths and the age (ms
// of official time) of the oldest pending transaction.
func (s *State) XStats() (XCounters, int, int64) {
	var oldest int64
	for _, r := range s.x.records {
		if r.Status == proto.XPending && s.time-r.Created > oldest {
			oldest = s.time - r.Created
		}
	}
	return s.x.counters, len(s.x.locks), oldest
}

// xOutcome answers what the shard knows of transaction id: its record, the
// outcome it remembers of it, or XUnknown.
func (s *State) xOutcome(id string) *proto.XRecord {
	if rec := s.x.records[id]; rec != nil {
		return recordReply(rec)
	}
	if o, ok := s.x.outcomes[id]; ok {
		return o.record(id)
	}
	return &proto.XRecord{ID: id, Status: proto.XUnknown, FailedOp: -1}
}

// recordReply is a record as the shard answers a protocol message or a
// read of one transaction with it: without the ops, which no sender needs
// back and which, beside the identities and the results, would make the
// reply outgrow a member link's frame when the message itself fits.
func recordReply(rec *proto.XRecord) *proto.XRecord {
	c := *rec
	c.Ops = nil
	return &c
}

// applyX applies a cross-shard protocol message. These are not bound to a
// session: they are idempotent messages between shards.
func (s *State) applyX(r *Request, version byte) (proto.Record, proto.Code) {
	s.expireOutcomes()
	switch r.Op {
	case proto.OpXPrepare:
		// From a copy: the record keeps the ops' data, which must not
		// alias, and keep alive, the whole log entry.
		var p proto.XPrepareRequest
		if proto.Unmarshal(bytes.Clone(r.Body), &p) != nil ||
			version < entryCheckStat && slices.ContainsFunc(p.Ops, checksStat) { // it did not decode then
			return nil, proto.ErrMarshallingError
		}
		if p.Patient && version >= entryPatient && s.time <= p.Deadline && s.Blocked(proto.OpXPrepare, &p) {
			// A lock taken after the sender's member looked: nothing is
			// recorded, and the sender sends the prepare again, as if the
			// member had seen the lock (see XPrepareRequest.Patient).
			return nil, proto.ErrLocked
		}
		return s.xPrepare(r, &p, version), proto.ErrOK
	case proto.OpXStatus:
		var q proto.XStatusRequest
		if proto.Unmarshal(r.Body, &q) != nil {
			return nil, proto.ErrMarshallingError
		}
		return s.xStatus(&q), proto.ErrOK
	}
	var q proto.XIDRequest
	if proto.Unmarshal(r.Body, &q) != nil || version < entryIncarnation && q.Deadline != 0 { // it did not decode then
		return nil, proto.ErrMarshallingError
	}
	rec := s.x.records[q.ID]
	if rec == nil {
		return s.xOutcome(q.ID), proto.ErrOK
	}
	if !decisionFor(rec, &q) {
		// A message of an earlier run of the id, which this shard has
		// forgotten since: the record is a later prepare's, not its.
		s.x.counters.Stale++
		return &proto.XRecord{ID: q.ID, Status: proto.XUnknown, FailedOp: -1}, proto.ErrOK
	}
	switch r.Op {
	case proto.OpXCommit:
		s.xCommit(r, rec, version)
	case proto.OpXFail:
		s.xFail(rec)
	case proto.OpXCommitDelete:
		s.xCommit(r, rec, version)
		s.xForget(rec, version)
	case proto.OpXDelete:
		s.xFail(rec)
		s.xForget(rec, version)
	}
	return recordReply(rec), proto.ErrOK
}

// decisionFor reports whether decision q (of an entry of version 18 or
// later, which alone may name a deadline) is meant for record rec: it
// names no deadline (an older sender), rec's own, or that of a run no
// earlier than rec's (EarlierRun; a second driver of the same run, which
// computed its own deadline, is one). A late message of a run the shard
// forgot (a resend of a lost reply, a driver that ran on) leaves a later
// record of its id alone. Before, one committed a late retry's record
// that the retry had just refused, and the ops applied twice.
func decisionFor(rec *proto.XRecord, q *proto.XIDRequest) bool {
	return q.Deadline == 0 || q.Deadline == rec.Deadline || !EarlierRun(q.Deadline, rec.Created)
}

// EarlierRun reports whether a run of a transaction id whose deadline was
// deadline is a run its shards forgot before a record of the id made at
// official time t (or a run whose deadline is t): a shard forgets a run
// OutcomeRetention after deleting its record, and a run's deadline lies
// at most xshard.MaxDeadline (a quarter of the retention) after its
// start, so a forgotten run's deadline lies three quarters of the
// retention before t at least. Half the retention is the line: two
// drivers of one run, whose deadlines differ by the time between their
// starts, are never that far apart, and a quarter is left for clocks of
// shards that disagree.
func EarlierRun(deadline, t int64) bool { return t-deadline > OutcomeRetention/2 }

// namesIncarnation reports whether r is a decision that names the
// deadline of the prepare it decides (entry version 18).
func namesIncarnation(r *Request) bool {
	switch r.Op {
	case proto.OpXCommit, proto.OpXFail, proto.OpXCommitDelete, proto.OpXDelete:
		var q proto.XIDRequest
		return proto.Unmarshal(r.Body, &q) == nil && q.Deadline != 0
	}
	return false
}

// xPrepare records transaction p pending, or rejected, on this shard, and
// answers with the record; a prepare of an id the shard holds or
// remembers answers with what it holds. One that names other shards or
// ops than the remembered transaction of its id (a retry with the same id
// and other ops) is answered OtherOpsRefusal if the outcome has their
// digest: its delete was of entry version 14 (older entries apply as they
// did, and a member that cannot apply version 14 never gets this far).
// One from another caller than the remembered transaction's is answered
// OtherCallerRefusal, first, if its delete was of version 18.
func (s *State) xPrepare(r *Request, p *proto.XPrepareRequest, version byte) *proto.XRecord {
	if rec := s.x.records[p.ID]; rec != nil {
		return recordReply(rec)
	}
	rec := newRecord(p, s.time)
	if o, ok := s.x.outcomes[p.ID]; ok {
		if o.caller != 0 && o.caller != callerDigest(rec) {
			s.x.counters.Rejected++
			return OtherCallerRefusal(p.ID)
		}
		if o.ops != 0 && o.ops != opsDigest(rec) {
			s.x.counters.Rejected++
			return OtherOpsRefusal(p.ID)
		}
		return o.record(p.ID)
	}
	s.x.records[p.ID] = rec
	if s.time > p.Deadline {
		s.x.counters.RejectedLate++
		rec.Status, rec.Err = proto.XRejected, proto.ErrOperationTimeout
		return recordReply(rec)
	}
	defer func() {
		if rec.Status == proto.XPending {
			s.x.counters.Prepared++
		} else {
			s.x.counters.Rejected++
		}
	}()
	ops := ownOps(rec, p.Self)
	for i, op := range ops.Ops {
		if createsEphemeral(op, version) || !multiOpAllowed(op.Op, version) || s.onEphemeral(op) {
			rec.Status, rec.Err, rec.FailedOp = proto.XRejected, proto.ErrBadArguments, int32(i)
			return recordReply(rec)
		}
	}
	if i := s.x.firstBlockedOp(ops, p.ID); i >= 0 {
		rec.Status, rec.Err, rec.FailedOp = proto.XRejected, proto.ErrLocked, i
		return recordReply(rec)
	}
	// Dry run: would every op succeed now? Its changes are undone.
	tx := s.beginX(r, rec, version)
	resp, _ := tx.multi(ops)
	tx.rollback()
	if failed(resp) {
		rec.Status = proto.XRejected
		rec.Err, rec.FailedOp = firstError(resp)
		return recordReply(rec)
	}
	if p.FixResults {
		// The locks keep every path the ops read or change as it is now,
		// so the commit, applied at this zxid and time, gives these results.
		rec.Results = *resp.(*proto.MultiResponse)
		s.x.prepared[p.ID] = s.zxid
	}
	s.x.lockAll(ops, p.ID)
	return recordReply(rec)
}

// newRecord is the record a shard makes of prepare p at official time
// now: pending, with every shard's ops on the coordinator and its own on a
// participant.
func newRecord(p *proto.XPrepareRequest, now int64) *proto.XRecord {
	rec := &proto.XRecord{ID: p.ID, Coordinator: p.Coordinator, Shards: p.Shards, Deadline: p.Deadline,
		Created: now, Status: proto.XPending, FailedOp: -1, Ops: p.Ops, IDs: p.IDs}
	if p.Self != p.Coordinator {
		// A participant keeps only its own ops.
		rec.Ops = []proto.ShardOps{{Shard: p.Self, Ops: *ownOps(rec, p.Self)}}
	} else if !slices.ContainsFunc(rec.Ops, func(o proto.ShardOps) bool { return o.Shard == p.Self }) {
		rec.Ops = append(rec.Ops, proto.ShardOps{Shard: p.Self})
	}
	return rec
}

// opsDigest is a 64-bit FNV-1a digest of what a record is a transaction
// of: its coordinator, shards and ops; 0 for a record without ops (one
// the coordinator made to fail a transaction it never saw prepared).
func opsDigest(rec *proto.XRecord) uint64 {
	if !slices.ContainsFunc(rec.Ops, func(o proto.ShardOps) bool { return len(o.Ops.Ops) > 0 }) {
		return 0
	}
	e := proto.NewEncoder(nil)
	e.String(rec.Coordinator)
	e.Strings(rec.Shards)
	for i := range rec.Ops {
		e.String(rec.Ops[i].Shard)
		rec.Ops[i].Ops.Encode(e)
	}
	return digest(e.Bytes())
}

// digest is a 64-bit FNV-1a digest of b, never 0 (which stands for "not
// known" where a digest is kept).
func digest(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return max(h.Sum64(), 1)
}

// callerDigest is a 64-bit FNV-1a digest of the identities that name the
// caller of a record's transaction (proto.CallerKey), or 0 where they are
// not checked: a caller known by its address alone (a retry may come from
// another address of its host, and was told the outcome then, as it is),
// and a record without ops (made to fail a transaction its coordinator
// never saw prepared).
func callerDigest(rec *proto.XRecord) uint64 {
	key := proto.Authenticated(rec.IDs) // the caller's key where it has any (proto.CallerKey)
	if opsDigest(rec) == 0 || len(key) == 0 {
		return 0
	}
	e := proto.NewEncoder(nil)
	encodeIDs(e, key)
	return digest(e.Bytes())
}

// OtherCallerRefusal is a shard's answer to a prepare of an id it
// remembers as the finished transaction of an authenticated caller, from
// another caller (from entry version 18 on, the outcome keeps its
// caller's digest): NoAuth, without the outcome or the results, as for a
// live record of another caller. Before,
// anyone who knew the id and the ops was told the outcome and the
// results. The prepare recorded nothing.
func OtherCallerRefusal(id string) *proto.XRecord {
	return &proto.XRecord{ID: id, Status: proto.XRejected, Err: proto.ErrNoAuth, FailedOp: -1}
}

// OtherOpsRefusal is a shard's answer to a prepare that names other shards
// or ops than the transaction of its id, which the shard remembers as
// finished: a record without shards, as a remembered outcome has, but
// rejected, which a remembered outcome never is (it is committed or
// failed). The prepare recorded nothing.
func OtherOpsRefusal(id string) *proto.XRecord {
	return &proto.XRecord{ID: id, Status: proto.XRejected, Err: proto.ErrBadArguments, FailedOp: -1}
}

// onEphemeral reports whether op changes or checks an ephemeral node. A
// transaction may not: the node's session can end between prepare and
// commit, and closing it deletes the node whatever locks it.
func (s *State) onEphemeral(op proto.MultiOp) bool {
	var path string
	switch r := op.Req.(type) {
	case *proto.PathVersionRequest:
		path = r.Path
	case *proto.CheckStatRequest:
		path = r.Path
	case *proto.SetDataRequest:
		path = r.Path
	default:
		return false
	}
	n := s.tree.get(path)
	return n != nil && n.IsEphemeral()
}

func isX(op proto.OpCode) bool {
	switch op {
	case proto.OpXPrepare, proto.OpXCommit, proto.OpXFail, proto.OpXCommitDelete, proto.OpXDelete, proto.OpXStatus:
		return true
	}
	return false
}

// multiOpAllowed reports whether a cross-shard transaction takes op in an
// entry of the given version: ZooKeeper's writes and checks of one node,
// and ClickHouse Keeper's (createIfNotExists, checkNotExists, tryRemove:
// ClickHouse 26's table creation multis hold them, and through a node
// endpoint such a multi can span shards). Not removeRecursive: its
// subtree would stay locked whole. No entry older than ClickHouse
// Keeper's ops holds one of them (no member decoded them then), so taking
// them changes no replay. From entry version 16 on, createContainer and
// createTTL too (issue 38): in a multi a create's flags pick its kind, so
// they make a container (which no session owns) or fail as a TTL mode
// does (TTL nodes are off), the same on the shards as in one multi. From
// 17 on, checkStat, as check.
func multiOpAllowed(op proto.OpCode, version byte) bool {
	switch op {
	case proto.OpCreate, proto.OpCreate2, proto.OpDelete, proto.OpSetData, proto.OpCheck,
		proto.OpCreateIfNotExists, proto.OpCheckNotExists, proto.OpTryRemove:
		return true
	case proto.OpCreateContainer, proto.OpCreateTTL:
		return version >= entryXCreateModes
	case proto.OpCheckStat:
		return version >= entryCheckStat
	}
	return false
}

// createsEphemeral reports whether op, in a cross-shard transaction of an
// entry of the given version, creates an ephemeral node, which no
// transaction takes (the transaction has no session to own it). Before
// version 16 any create with the ephemeral bit counted, TTL mode 5 too;
// from 16 on, only the ephemeral modes (1, 3), as a create in a multi
// makes an ephemeral node of those alone.
func createsEphemeral(op proto.MultiOp, version byte) bool {
	var flags int32
	switch r := op.Req.(type) {
	case *proto.CreateRequest:
		flags = r.Flags
	case *proto.CreateTTLRequest:
		flags = r.Flags
	default:
		return false
	}
	if version < entryXCreateModes {
		return flags&proto.FlagEphemeral != 0
	}
	return flags == proto.FlagEphemeral || flags == proto.FlagEphemeral|proto.FlagSequential
}

// createsInMode reports whether a shard's ops of a prepare hold a create
// whose prepare entry version 16 changed: a createContainer, a createTTL,
// or a create in TTL mode 5 (before, refused as ephemeral).
func createsInMode(o proto.ShardOps) bool {
	return slices.ContainsFunc(o.Ops.Ops, func(op proto.MultiOp) bool {
		cr, ok := op.Req.(*proto.CreateRequest)
		return op.Op == proto.OpCreateContainer || op.Op == proto.OpCreateTTL || ok && cr.Flags == proto.ModePersistentTTL
	})
}

func failed(resp proto.Record) bool {
	m, ok := resp.(*proto.MultiResponse)
	return ok && len(m.Results) > 0 && m.Results[0].Op == proto.OpError
}

func firstError(resp proto.Record) (proto.Code, int32) {
	for i, r := range resp.(*proto.MultiResponse).Results {
		if r.Err != proto.ErrOK {
			return r.Err, int32(i)
		}
	}
	return proto.ErrSystemError, -1
}

// beginX starts a txn that runs a record's ops with the client's identities,
// past its own locks, under the rules of the given entry version: from 13
// on, its results, which the record keeps, carry a create2's stat.
func (s *State) beginX(r *Request, rec *proto.XRecord, version byte) *txn {
	return &txn{s: s, r: &Request{ID: r.ID, Member: r.Member, Op: proto.OpMulti, IDs: rec.IDs},
		sess: &Session{}, xid: rec.ID, zxid: s.zxid, time: s.time,
		createStats: version >= entryCreateStats}
}

func (s *State) unlock(rec *proto.XRecord) { s.x.unlock(rec.ID) }

// xCommit applies a pending record's ops. From entry version 12 on they
// are stamped with the commit's zxid and time, as ZooKeeper stamps a
// change with the zxid of the entry that makes it visible: a client whose
// last zxid seen lies between the prepare and the commit re-registers its
// watches with it after a reconnect, and a change stamped with the
// prepare's zxid would not fire them. The record keeps the results its
// prepare fixed, which the client was answered (their stats carry the
// prepare's zxid and time: the one difference from the stored stats).
// Older entries apply at the prepare's zxid and time, as they did.
func (s *State) xCommit(r *Request, rec *proto.XRecord, version byte) {
	if rec.Status != proto.XPending {
		return
	}
	tx := s.beginX(r, rec, version)
	zxid, fixed := s.x.prepared[rec.ID]
	if fixed && version < entryCommitStamps {
		tx.zxid, tx.time = zxid, rec.Created
	}
	resp, _ := tx.multi(ownOps(rec, recordShard(rec)))
	if !fixed || version < entryCommitStamps || failed(resp) {
		rec.Results = *resp.(*proto.MultiResponse)
	}
	if !failed(resp) {
		s.pendingEvents = tx.commit(s.pendingEvents)
	}
	rec.Status = proto.XCommitted
	s.x.counters.Committed++
	s.unlock(rec)
}

func (s *State) xFail(rec *proto.XRecord) {
	if rec.Status == proto.XPending || rec.Status == proto.XRejected {
		rec.Status, rec.Results = proto.XFailed, proto.MultiResponse{} // fixed results, if any, never were
		s.x.counters.Failed++
		s.unlock(rec)
	}
}

// xForget deletes a record and remembers its outcome for a while; from
// version 14 on, with the digest of its ops, from 18 on with its deadline.
func (s *State) xForget(rec *proto.XRecord, version byte) {
	delete(s.x.records, rec.ID)
	delete(s.x.prepared, rec.ID)
	o := outcome{status: rec.Status, err: rec.Err, failedOp: rec.FailedOp, results: rec.Results}
	if version >= entryOutcomeOps {
		o.ops = opsDigest(rec)
	}
	if version >= entryIncarnation {
		o.deadline = rec.Deadline
		o.caller = callerDigest(rec)
	}
	s.x.outcomes[rec.ID] = o
	s.x.expiry = append(s.x.expiry, outcomeAt{id: rec.ID, time: s.time})
}

func (s *State) expireOutcomes() {
	n := 0
	for n < len(s.x.expiry) && s.x.expiry[n].time+OutcomeRetention < s.time {
		delete(s.x.outcomes, s.x.expiry[n].id)
		n++
	}
	s.x.expiry = s.x.expiry[n:]
}

// xStatus answers a participant that asks the coordinator about a
// transaction pending past its deadline. Without a record, past the
// deadline, the coordinator records it as failed: its own prepare would be
// refused now anyway.
func (s *State) xStatus(q *proto.XStatusRequest) *proto.XRecord {
	if rec := s.x.records[q.ID]; rec != nil {
		return recordReply(rec)
	}
	if o, ok := s.x.outcomes[q.ID]; ok {
		return o.record(q.ID)
	}
	if s.time <= q.Deadline {
		return &proto.XRecord{ID: q.ID, Status: proto.XUnknown, FailedOp: -1}
	}
	rec := &proto.XRecord{ID: q.ID, Coordinator: q.Coordinator, Shards: q.Shards, Deadline: q.Deadline,
		Created: s.time, Status: proto.XFailed, Err: proto.ErrOperationTimeout, FailedOp: -1,
		Ops: []proto.ShardOps{{Shard: q.Coordinator}}}
	s.x.records[q.ID] = rec
	return recordReply(rec)
}
