package proto

import "slices"

// xkeeper's private opcodes, for cross-shard transactions. They live in
// 1000–1099, a range ZooKeeper does not use; a plain ZooKeeper server
// answers them with ErrUnimplemented.
const (
	// OpXTransaction asks a coordinator shard's leader to run a whole
	// cross-shard transaction (XTransactionRequest → XTransactionResponse).
	OpXTransaction OpCode = 1000
	// OpXPrepare records a transaction on a shard as pending or rejected
	// (XPrepareRequest → XRecordResponse).
	OpXPrepare OpCode = 1001
	// OpXCommit applies a pending transaction's ops and unlocks them.
	OpXCommit OpCode = 1002
	// OpXFail unlocks a pending transaction without applying it.
	OpXFail OpCode = 1003
	// OpXCommitDelete commits if still pending, then forgets the record.
	OpXCommitDelete OpCode = 1004
	// OpXDelete fails if still pending, then forgets the record.
	OpXDelete OpCode = 1005
	// OpXStatus asks the coordinator shard for a transaction's outcome; with
	// no record past the deadline the coordinator records it as failed.
	OpXStatus OpCode = 1006
	// OpXList lists a shard's transaction records (a read).
	OpXList OpCode = 1007
	// OpXOutcome reads one transaction's record, or the outcome the shard
	// remembers of a finished one (XIDRequest → XRecord; XUnknown if
	// neither). A read: it changes nothing.
	OpXOutcome OpCode = 1008
)

// MemberOnly reports whether op is a message of the cross-shard protocol
// between members: refused on client connections, accepted only on links
// whose other end proved it is a member. xTransaction, xList and xOutcome
// are the client-facing opcodes.
func MemberOnly(op OpCode) bool {
	switch op {
	case OpXPrepare, OpXCommit, OpXFail, OpXCommitDelete, OpXDelete, OpXStatus:
		return true
	}
	return false
}

// ErrLocked answers a request that touches a znode locked by a pending
// cross-shard transaction.
const ErrLocked Code = -1000

// ErrTooLarge answers a cross-shard transaction that a member link cannot
// carry: one of its messages or replies would exceed the link's frame (see
// XTransactionRequest.Fit). It is refused before anything is prepared.
const ErrTooLarge Code = -1001

func init() {
	for op, name := range map[OpCode]string{
		OpXTransaction: "xTransaction", OpXPrepare: "xPrepare", OpXCommit: "xCommit", OpXFail: "xFail",
		OpXCommitDelete: "xCommitDelete", OpXDelete: "xDelete", OpXStatus: "xStatus", OpXList: "xList",
		OpXOutcome: "xOutcome",
	} {
		opNames[op] = name
	}
	codeNames[ErrLocked] = "locked by a cross-shard transaction"
	codeNames[ErrTooLarge] = "transaction too large"
}

// XStatus is the state of a transaction record.
type XStatus int32

// Transaction states. XUnknown answers a question about a record that does
// not exist (yet, or any more).
const (
	XUnknown   XStatus = 0
	XPending   XStatus = 1
	XRejected  XStatus = 2
	XCommitted XStatus = 3
	XFailed    XStatus = 4
)

func (s XStatus) String() string {
	switch s {
	case XPending:
		return "pending"
	case XRejected:
		return "rejected"
	case XCommitted:
		return "committed"
	case XFailed:
		return "failed"
	}
	return "unknown"
}

// ShardOps is the multi a transaction runs on one shard.
type ShardOps struct {
	Shard string
	Ops   MultiRequest
}

func encodeShardOps(e *Encoder, v []ShardOps) {
	e.Int32(int32(len(v)))
	for i := range v {
		e.String(v[i].Shard)
		v[i].Ops.Encode(e)
	}
}

func decodeShardOps(d *Decoder) []ShardOps {
	n, ok := d.length(4)
	if !ok || n < 0 {
		return nil
	}
	v := make([]ShardOps, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var s ShardOps
		s.Shard = d.String()
		s.Ops.Decode(d)
		v = append(v, s)
	}
	return v
}

// XTransactionRequest is a whole cross-shard transaction, sent to the
// coordinator shard's leader. ID is a UUID chosen by the client: a retry
// with the same ID returns the recorded outcome instead of running again.
type XTransactionRequest struct {
	ID          string
	Coordinator string
	Shards      []ShardOps
	TimeoutMs   int32 // deadline distance in official time; 0 = the shard's default
}

// Encode implements Record.
func (r *XTransactionRequest) Encode(e *Encoder) {
	e.String(r.ID)
	e.String(r.Coordinator)
	encodeShardOps(e, r.Shards)
	e.Int32(r.TimeoutMs)
}

// Decode implements Record.
func (r *XTransactionRequest) Decode(d *Decoder) {
	r.ID = d.String()
	r.Coordinator = d.String()
	r.Shards = decodeShardOps(d)
	r.TimeoutMs = d.Int32()
}

// XPrepareRequest records a transaction on the shard Self. The coordinator's
// own record carries every shard's ops; a participant's only its own.
type XPrepareRequest struct {
	ID          string
	Coordinator string
	Self        string
	Shards      []string // every participant, coordinator included
	Deadline    int64    // official time, ms, after which prepare is refused
	Ops         []ShardOps
	IDs         []ID // the client's identities, for ACL checks of the ops
	// FixResults asks the shard to fix its results when it prepares: the
	// record's Results are then the ops' results, and the commit applies
	// the ops at the prepare's zxid and official time, so that the
	// coordinator can answer once every shard holds the transaction
	// pending. Encoded only when set: prepares without it are what they
	// always were.
	FixResults bool
	// Patient says the sender sends the prepare again if it meets a lock:
	// the member then answers ErrLocked without applying it, and the
	// shard records nothing; so does the shard when the prepare meets a
	// lock only as it applies (taken after the member looked). Encoded
	// only when set, after FixResults.
	Patient bool
}

// Encode implements Record.
func (r *XPrepareRequest) Encode(e *Encoder) {
	e.String(r.ID)
	e.String(r.Coordinator)
	e.String(r.Self)
	e.Strings(r.Shards)
	e.Int64(r.Deadline)
	encodeShardOps(e, r.Ops)
	encodeIDs(e, r.IDs)
	if r.FixResults || r.Patient {
		e.Bool(r.FixResults)
	}
	if r.Patient {
		e.Bool(true)
	}
}

// Decode implements Record.
func (r *XPrepareRequest) Decode(d *Decoder) {
	r.ID = d.String()
	r.Coordinator = d.String()
	r.Self = d.String()
	r.Shards = d.Strings()
	r.Deadline = d.Int64()
	r.Ops = decodeShardOps(d)
	r.IDs = decodeIDs(d)
	if d.Remaining() > 0 {
		r.FixResults = d.Bool()
	}
	if d.Remaining() > 0 {
		r.Patient = d.Bool()
	}
}

func encodeIDs(e *Encoder, ids []ID) {
	e.Int32(int32(len(ids)))
	for _, id := range ids {
		e.String(id.Scheme)
		e.String(id.ID)
	}
}

func decodeIDs(d *Decoder) []ID {
	n, ok := d.length(8)
	if !ok || n < 0 {
		return nil
	}
	ids := make([]ID, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		ids = append(ids, ID{Scheme: d.String(), ID: d.String()})
	}
	return ids
}

// CallerKey returns the identities that name the caller of a
// transaction: its authenticated ones, whatever address it came from (a
// client that reconnects from another address and retries is the one
// that sent it), or its address alone if it has no other. Two callers
// are the same where their keys are equal.
func CallerKey(ids []ID) []ID {
	if key := Authenticated(ids); len(key) > 0 {
		return key
	}
	return ids
}

// Authenticated returns the identities of ids other than the caller's
// address (scheme "ip"), which the caller proved.
func Authenticated(ids []ID) []ID {
	return slices.DeleteFunc(slices.Clone(ids), func(id ID) bool { return id.Scheme == "ip" })
}

// XIDRequest names a transaction (commit, fail, commit-and-delete, delete;
// the outcome read). Deadline, when not 0, is the deadline of the
// transaction's prepare the sender drives: a shard applies a decision only
// to a record of that prepare (see fsm's decisionFor), so a message of a
// run the shard has since forgotten cannot decide a later record of the
// same id. It is encoded only when set, after the id.
type XIDRequest struct {
	ID       string
	Deadline int64
}

// Encode implements Record.
func (r *XIDRequest) Encode(e *Encoder) {
	e.String(r.ID)
	if r.Deadline != 0 {
		e.Int64(r.Deadline)
	}
}

// Decode implements Record.
func (r *XIDRequest) Decode(d *Decoder) {
	r.ID = d.String()
	if d.Remaining() > 0 {
		r.Deadline = d.Int64()
	}
}

// XStatusRequest asks the coordinator shard for an outcome. It carries what
// the asking participant knows, so a coordinator without a record can
// record the failure and clean every participant up.
type XStatusRequest struct {
	ID          string
	Coordinator string
	Shards      []string
	Deadline    int64
}

// Encode implements Record.
func (r *XStatusRequest) Encode(e *Encoder) {
	e.String(r.ID)
	e.String(r.Coordinator)
	e.Strings(r.Shards)
	e.Int64(r.Deadline)
}

// Decode implements Record.
func (r *XStatusRequest) Decode(d *Decoder) {
	r.ID = d.String()
	r.Coordinator = d.String()
	r.Shards = d.Strings()
	r.Deadline = d.Int64()
}

// XRecord is a transaction record as one shard holds it.
type XRecord struct {
	ID          string
	Coordinator string
	Shards      []string
	Deadline    int64
	Created     int64 // official time of the prepare
	Status      XStatus
	Err         Code  // why it was rejected
	FailedOp    int32 // index of the op that refused, -1 if none
	Ops         []ShardOps
	IDs         []ID
	Results     MultiResponse // this shard's results: once committed, or from the prepare if it fixed them
	Acked       []string      // coordinator: shards that acknowledged cleanup
}

// Redacted returns the record as a client outside the cluster may see it:
// without the caller's identities, the ops or their results, which may
// name and hold data of znodes the reader may not read.
func (r XRecord) Redacted() XRecord {
	r.Ops, r.IDs, r.Results = nil, nil, MultiResponse{}
	return r
}

// Encode implements Record.
func (r *XRecord) Encode(e *Encoder) {
	e.String(r.ID)
	e.String(r.Coordinator)
	e.Strings(r.Shards)
	e.Int64(r.Deadline)
	e.Int64(r.Created)
	e.Int32(int32(r.Status))
	e.Int32(int32(r.Err))
	e.Int32(r.FailedOp)
	encodeShardOps(e, r.Ops)
	encodeIDs(e, r.IDs)
	r.Results.Encode(e)
	e.Strings(r.Acked)
}

// Decode implements Record.
func (r *XRecord) Decode(d *Decoder) {
	r.ID = d.String()
	r.Coordinator = d.String()
	r.Shards = d.Strings()
	r.Deadline = d.Int64()
	r.Created = d.Int64()
	r.Status = XStatus(d.Int32())
	r.Err = Code(d.Int32())
	r.FailedOp = d.Int32()
	r.Ops = decodeShardOps(d)
	r.IDs = decodeIDs(d)
	r.Results.Decode(d)
	r.Acked = d.Strings()
}

// XListResponse lists a shard's transaction records and its official time.
type XListResponse struct {
	Time    int64
	Records []XRecord
}

// Encode implements Record.
func (r *XListResponse) Encode(e *Encoder) {
	e.Int64(r.Time)
	e.Int32(int32(len(r.Records)))
	for i := range r.Records {
		r.Records[i].Encode(e)
	}
}

// Decode implements Record.
func (r *XListResponse) Decode(d *Decoder) {
	r.Time = d.Int64()
	n, ok := d.length(40)
	if !ok || n < 0 {
		return
	}
	r.Records = make([]XRecord, n)
	for i := 0; i < n && d.err == nil; i++ {
		r.Records[i].Decode(d)
	}
}

// XTransactionResponse is the outcome of a whole transaction: committed
// with every shard's results, or failed with the shard and op that refused
// and why.
type XTransactionResponse struct {
	Status      XStatus
	FailedShard string
	FailedOp    int32
	Err         Code
	Results     []XShardResult
}

// XShardResult is one shard's per-op results.
type XShardResult struct {
	Shard   string
	Results MultiResponse
}

// Encode implements Record.
func (r *XTransactionResponse) Encode(e *Encoder) {
	e.Int32(int32(r.Status))
	e.String(r.FailedShard)
	e.Int32(r.FailedOp)
	e.Int32(int32(r.Err))
	e.Int32(int32(len(r.Results)))
	for i := range r.Results {
		e.String(r.Results[i].Shard)
		r.Results[i].Results.Encode(e)
	}
}

// Decode implements Record.
func (r *XTransactionResponse) Decode(d *Decoder) {
	r.Status = XStatus(d.Int32())
	r.FailedShard = d.String()
	r.FailedOp = d.Int32()
	r.Err = Code(d.Int32())
	n, ok := d.length(8)
	if !ok || n < 0 {
		return
	}
	r.Results = make([]XShardResult, n)
	for i := 0; i < n && d.err == nil; i++ {
		r.Results[i].Shard = d.String()
		r.Results[i].Results.Decode(d)
	}
}
