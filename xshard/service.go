package xshard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// MaxDeadline is the longest deadline a transaction may have: well within
// the time (fsm.OutcomeRetention) a shard remembers an outcome, so that a
// retry, which keeps its transaction's deadline, reaches a shard that
// forgot the transaction only past that deadline, and is refused there.
const MaxDeadline = time.Duration(fsm.OutcomeRetention/4) * time.Millisecond

// Local is the member's own shard, as the service needs it.
type Local interface {
	// Shard returns the shard's name.
	Shard() string
	// Submit applies a protocol message through the shard's Raft log and
	// returns its reply record.
	Submit(ctx context.Context, op proto.OpCode, req proto.Record) (*proto.XRecord, error)
	// Time returns the shard's official time (ms) as this member knows it.
	Time() int64
	// Now returns the wall clock (ms) this member stamps on the entries it
	// proposes as leader: the official time of the next entry is at least
	// that of the leader's clock, and Time lags behind it while the shard
	// is idle.
	Now() int64
	// Records returns the shard's transaction records.
	Records() []proto.XRecord
	// Record returns the shard's record of transaction id, or nil.
	Record(id string) *proto.XRecord
	// IsLeader reports whether this member leads the shard.
	IsLeader() bool
	// AwaitUnlocked blocks until no pending transaction's lock stops
	// prepare p on the shard as this member knows it, until deadline, or
	// until ctx ends.
	AwaitUnlocked(ctx context.Context, p *proto.XPrepareRequest, deadline time.Time)
}

// Hook lets fault tests stop a driver at a named step (see Steps). A hook
// that returns an error abandons the transaction there, as a crash would.
type Hook func(step, id, shard string) error

// Steps a driver passes, in order, for fault injection. Hooks at a
// per-shard step get the shard's name; the coordinator's own prepare and
// decision are the steps with shard == coordinator.
const (
	StepBeforePrepare   = "before-prepare"    // nothing sent yet
	StepPrepared        = "prepared"          // shard applied prepare and answered
	StepAllPrepared     = "all-prepared"      // every shard answered prepare
	StepAnswered        = "answered"          // the client has its commit; no decision sent yet
	StepDecisionSent    = "decision-sent"     // shard applied the decision (commit or fail)
	StepBeforeCleanup   = "before-cleanup"    // every shard has the decision
	StepCleaned         = "cleaned"           // a participant's record is deleted
	StepBeforeOwnDelete = "before-own-delete" // only the coordinator's record is left
)

// ErrLostReply, returned by a hook, makes the driver act as if the reply
// it just got was lost (a leader that applied the message and died before
// answering): it sends the message again.
var ErrLostReply = errors.New("xshard: reply lost")

// Service runs in every keeper member: it drives the transactions this
// member is asked to coordinate, and on the leader recovers the shard's
// unfinished ones.
type Service struct {
	local    Local
	router   *Router
	log      *slog.Logger
	Deadline time.Duration // default distance of the deadline in official time
	// LockGrace is how long a prepare that meets a lock is sent again
	// before the transaction counts as refused (keeper.lock_grace).
	LockGrace time.Duration
	// Takeover is how long (official time) a transaction this shard
	// coordinates may stay pending before the leader drives it itself,
	// although its deadline has not passed: its driver's member may have
	// died after answering, and its locks would otherwise stay until the
	// deadline. A driver still at work meanwhile does no harm: every
	// message is idempotent and the outcome follows from the records; it
	// only costs messages, so Takeover stays well above LockGrace, for
	// which a healthy driver sends a prepare that meets a lock again.
	Takeover time.Duration
	// MaxMessage is the largest frame a member link carries, in bytes:
	// the least of the member router's request limit and the shards'
	// keeper.max_packet_bytes. A transaction any of whose messages or
	// replies would exceed it is refused before it is prepared.
	MaxMessage int
	Hook       Hook

	mu     sync.Mutex
	active map[string]chan struct{} // transactions being driven here → closed when done
	// finishing counts, per transaction, the commits this member sends
	// after answering: recovery leaves those to it, as it leaves active.
	finishing map[string]int
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	lastTime int64       // official time at the previous recovery round (recovery loop only)
	ticking  atomic.Bool // a tick entry is in flight
}

// NewService returns the service of one member; Start begins recovery.
func NewService(local Local, router *Router, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{local: local, router: router, log: log.With("shard", local.Shard()), Deadline: 5 * time.Second, LockGrace: 200 * time.Millisecond, Takeover: time.Second,
		MaxMessage: proto.DefaultMaxPacket, active: map[string]chan struct{}{}, finishing: map[string]int{}, ctx: ctx, cancel: cancel}
}

// Start runs the recovery loop until Close.
func (s *Service) Start(every time.Duration) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
				if s.local.IsLeader() {
					s.recover()
				}
			}
		}
	}()
}

// Close stops every driver of this member.
func (s *Service) Close() {
	s.mu.Lock()
	s.cancel() // under mu: background starts nothing Wait would miss
	s.mu.Unlock()
	s.wg.Wait()
}

// background runs fn in a goroutine that Close waits for and reports
// whether it did; once Close has begun it runs nothing (a driver of a
// client's request outlives Close until its connection closes, and must
// not start work behind Close).
func (s *Service) background(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

// hook calls the fault-injection hook, if any.
func (s *Service) hook(step, id, shard string) error {
	if s.Hook == nil {
		return nil
	}
	return s.Hook(step, id, shard)
}

// errAbandoned is returned when a hook stopped a driver.
var errAbandoned = errors.New("xshard: driver abandoned the transaction")

// claim marks a transaction as driven here; it returns a channel closed
// when the driver ends, and whether the caller is the driver.
func (s *Service) claim(id string) (chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.active[id]; ok {
		return ch, false
	}
	ch := make(chan struct{})
	s.active[id] = ch
	return ch, true
}

func (s *Service) release(id string) {
	s.mu.Lock()
	ch := s.active[id]
	delete(s.active, id)
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// countFinishing counts a commit round after an answer in (+1) or out
// (-1).
func (s *Service) countFinishing(id string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finishing[id] += n; s.finishing[id] <= 0 {
		delete(s.finishing, id)
	}
}

// finishingHere reports whether this member is sending a transaction's
// commits after its answer.
func (s *Service) finishingHere(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finishing[id] > 0
}

// Run coordinates a transaction that a client sent to this shard and
// returns its outcome. A retry with the same id joins the run in progress
// or returns the recorded outcome.
func (s *Service) Run(ctx context.Context, req *proto.XTransactionRequest, ids []proto.ID) (*proto.XTransactionResponse, error) {
	self := s.local.Shard()
	if req.Coordinator != self {
		return nil, fmt.Errorf("xshard: transaction for coordinator %q sent to shard %q: %w", req.Coordinator, self, proto.ErrBadArguments)
	}
	shards := make([]string, 0, len(req.Shards))
	for _, so := range req.Shards {
		if _, err := s.router.Cluster().Shard(so.Shard); err != nil {
			return nil, fmt.Errorf("%w: %w", err, proto.ErrBadArguments)
		}
		if slices.Contains(shards, so.Shard) {
			return nil, fmt.Errorf("xshard: shard %q appears twice: %w", so.Shard, proto.ErrBadArguments)
		}
		shards = append(shards, so.Shard)
	}
	if !slices.Contains(shards, self) {
		return nil, fmt.Errorf("xshard: coordinator %q is not a participant: %w", self, proto.ErrBadArguments)
	}
	if err := req.Fit(ids, s.MaxMessage); err != nil {
		s.log.Info("xshard: transaction refused", "id", req.ID, "err", err)
		return nil, fmt.Errorf("xshard: transaction %s: %w", req.ID, err)
	}
	slices.Sort(shards)
	deadline := s.Deadline
	if req.TimeoutMs > 0 {
		deadline = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	if deadline > MaxDeadline {
		return nil, fmt.Errorf("xshard: transaction %s: deadline %v is beyond the longest, %v (shards remember an outcome for %v): %w",
			req.ID, deadline, MaxDeadline, time.Duration(fsm.OutcomeRetention)*time.Millisecond, proto.ErrBadArguments)
	}
	// The deadline counts from the official time the prepare will get,
	// not from the last entry's, which is old after an idle spell.
	prep := &proto.XPrepareRequest{ID: req.ID, Coordinator: self, Self: self, Shards: shards,
		Deadline: max(s.local.Time(), s.local.Now()) + deadline.Milliseconds(), Ops: req.Shards, IDs: ids}
	rec := s.record(req.ID)
	if rec != nil {
		// A retry of a transaction this shard holds: it must be the same
		// transaction, and it keeps its deadline, so that a participant
		// that has forgotten it refuses it rather than take it as new.
		if !sameTransaction(rec, prep) {
			s.log.Warn("xshard: retry refused: other shards or ops than the transaction of its id", "id", req.ID)
			return nil, fmt.Errorf("xshard: transaction %s: a retry names other shards or ops than the transaction of that id: %w",
				req.ID, proto.ErrBadArguments)
		}
		prep.Deadline = rec.Deadline
	}
	// A retry of a transaction being driven here waits for that driver, then
	// drives it again: every message is idempotent, so this only collects
	// the recorded outcome and every shard's results.
	for {
		done, mine := s.claim(req.ID)
		if mine {
			defer s.release(req.ID)
			return s.drive(ctx, prep, rec == nil)
		}
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// send delivers one message to a shard, the local one through its own log.
// A patient prepare that meets a lock is answered ErrLocked, and the shard
// records nothing: it is sent again while the lock may be a committed
// transaction's on its way out, the last time not patient, so that the
// shard records the refusal. On the own shard the member first waits for
// the lock against its own state, within the same grace. The own shard
// without a leader is tried again at pauses that double up to
// maxRetryPause (the router does the same for other shards).
func (s *Service) send(ctx context.Context, shard string, op proto.OpCode, req proto.Record) (*proto.XRecord, error) {
	grace := time.Now().Add(s.LockGrace)
	p, prepare := req.(*proto.XPrepareRequest)
	electing := 20 * time.Millisecond
	for {
		if prepare {
			p.Patient = time.Now().Before(grace)
		}
		if prepare && p.Patient && shard == s.local.Shard() {
			s.local.AwaitUnlocked(ctx, p, grace) // the own shard's locks are seen here, before proposing
		}
		rec, err := s.deliver(ctx, shard, op, req)
		pause := 2 * time.Millisecond
		switch {
		case prepare && p.Patient && errors.Is(err, proto.ErrLocked):
		case shard == s.local.Shard() && err != nil && retryable(err):
			pause, electing = electing, min(2*electing, maxRetryPause) // the own shard is electing a leader
		default:
			return rec, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// deliver sends one message to a shard once: the local one through its own
// log, another through the router (which retries through unavailability).
func (s *Service) deliver(ctx context.Context, shard string, op proto.OpCode, req proto.Record) (*proto.XRecord, error) {
	if shard == s.local.Shard() {
		return s.local.Submit(ctx, op, req)
	}
	rec := &proto.XRecord{}
	if err := s.router.Do(ctx, shard, op, req, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// parallel sends a message to every shard at once; fn builds each shard's
// request. It returns the replies and the errors in shard order.
func (s *Service) parallel(ctx context.Context, shards []string, op proto.OpCode, fn func(shard string) proto.Record, step string, id string) ([]*proto.XRecord, []error) {
	recs := make([]*proto.XRecord, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				recs[i], errs[i] = s.send(ctx, sh, op, fn(sh))
				if errs[i] == nil && step != "" {
					errs[i] = s.hook(step, id, sh)
				}
				if !errors.Is(errs[i], ErrLostReply) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return recs, errs
}

// drive takes a transaction from prepare to the end. It is also how
// recovery finishes one: every message is idempotent, so re-sending what
// may have been sent before changes nothing. fresh says that this member
// held no record of it before (a client's first try, or a retry after the
// coordinator forgot it): only then can its prepare have made the
// coordinator's record anew. It decides only where a participant's
// remembered outcome names no run (see otherRun); otherwise a coordinator
// that holds a record of the run a participant remembers (a coordinator
// restored from a backup taken while the transaction was pending) decides
// by it.
func (s *Service) drive(ctx context.Context, prep *proto.XPrepareRequest, fresh bool) (*proto.XTransactionResponse, error) {
	id := prep.ID
	if err := s.hook(StepBeforePrepare, id, ""); err != nil {
		return nil, err
	}
	recs, errs := s.parallel(ctx, prep.Shards, proto.OpXPrepare, func(sh string) proto.Record { return prepareFor(prep, sh) }, StepPrepared, id)
	if err := s.refused(id, prep.Shards, recs, errs); err != nil {
		return nil, err
	}
	if err := s.hook(StepAllPrepared, id, ""); err != nil {
		return nil, err
	}
	if owned := ownedBy(prep, recs); len(owned) < len(prep.Shards) {
		// The id names another transaction on some shard (another caller's,
		// or another set of shards): no decision goes there, and this one
		// fails where it was recorded.
		s.log.Warn("xshard: transaction id in use by another transaction", "id", id)
		resp := &proto.XTransactionResponse{Status: proto.XFailed, FailedOp: -1, Err: proto.ErrNoAuth}
		for i, sh := range prep.Shards {
			if !slices.Contains(owned, sh) {
				resp.FailedShard = prep.Shards[i]
				break
			}
		}
		return s.finish(ctx, id, prep.Deadline, prep.Coordinator, owned, resp)
	}
	ci := slices.Index(prep.Shards, prep.Coordinator)
	if otherOps(recs[ci]) {
		// The coordinator remembers the transaction of this id as
		// finished, with every shard's ops, and the retry names other
		// shards or ops: it is refused, and any record a shard that forgot
		// the transaction made of it is deleted undecided. (A participant
		// knows its own ops only: the coordinator's memory decides.)
		s.log.Warn("xshard: retry refused: other shards or ops than the finished transaction of its id", "id", id)
		if err := s.deleteRetried(ctx, prep, recs); err != nil {
			return nil, err
		}
		return &proto.XTransactionResponse{Status: proto.XFailed, FailedShard: prep.Coordinator, FailedOp: -1, Err: proto.ErrBadArguments}, nil
	}
	if recs[ci].Status == proto.XPending && slices.ContainsFunc(recs, finished) {
		// The replies are of different moments: the coordinator's may
		// predate the decision a participant's deleted record shows. Ask
		// it again, now.
		again, err := s.send(ctx, prep.Coordinator, proto.OpXPrepare, prepareFor(prep, prep.Coordinator))
		if err != nil {
			return nil, err
		}
		recs[ci] = again
	}
	coord := recs[ci]
	switch {
	case finished(coord) && coord.Status == proto.XCommitted:
		return s.remembered(ctx, prep, recs)
	case coord.Status == proto.XCommitted:
		// The coordinator's record decides: a participant that refused
		// this prepare forgot the transaction (a late retry, which keeps
		// the deadline passed long ago), and its commit changes nothing.
		return s.finish(ctx, id, prep.Deadline, prep.Coordinator, prep.Shards, &proto.XTransactionResponse{Status: proto.XCommitted, FailedOp: -1})
	case coord.Status == proto.XPending && slices.ContainsFunc(recs, otherRun(coord, fresh)):
		// A participant deletes its record only once the coordinator's
		// holds the decision, and the coordinator deletes its own last: a
		// shard that remembered another run of the id as finished before
		// the coordinator answered with a live pending record means the
		// coordinator forgot that run (its retention passed) and took this
		// retry as new, and so did any participant still holding it.
		// Refused, before anything of it applies.
		s.log.Warn("xshard: retry refused: the coordinator forgot the transaction of its id", "id", id)
		resp := &proto.XTransactionResponse{Status: proto.XFailed, FailedShard: prep.Shards[slices.IndexFunc(recs, otherRun(coord, fresh))],
			FailedOp: -1, Err: proto.ErrBadArguments}
		live := slices.DeleteFunc(slices.Clone(prep.Shards), func(sh string) bool { return finished(recs[slices.Index(prep.Shards, sh)]) })
		return s.finish(ctx, id, prep.Deadline, prep.Coordinator, live, resp)
	}
	resp := &proto.XTransactionResponse{Status: proto.XCommitted, FailedOp: -1}
	// Any shard not pending (or already committed) fails the transaction;
	// the reason reported is a refusal with a code, not a record that only
	// shows the decision.
	cause := -1
	for i, rec := range recs {
		if rec.Status == proto.XPending || rec.Status == proto.XCommitted {
			continue
		}
		if cause < 0 || (recs[cause].Err == proto.ErrOK && rec.Err != proto.ErrOK) {
			cause = i
		}
	}
	if cause >= 0 {
		rec := recs[cause]
		resp.Status, resp.FailedShard, resp.FailedOp, resp.Err = proto.XFailed, prep.Shards[cause], rec.FailedOp, rec.Err
		return s.finish(ctx, id, prep.Deadline, prep.Coordinator, prep.Shards, resp)
	}
	if !fixed(prep, recs) {
		return s.finish(ctx, id, prep.Deadline, prep.Coordinator, prep.Shards, resp)
	}
	// Every shard holds the transaction pending (or committed): the outcome
	// is fixed, and so are the results. Answer now; the decision and the
	// cleanup follow, and until each shard's commit lands its locks keep
	// readers from the state before the transaction.
	resp.Results = shardResults(prep.Shards, recs)
	s.countFinishing(id, 1) // before Run lets go of the claim: recovery waits for these commits
	if !s.background(func() {
		defer s.countFinishing(id, -1)
		if err := s.hook(StepAnswered, id, ""); err != nil {
			return
		}
		if _, err := s.finish(s.ctx, id, prep.Deadline, prep.Coordinator, prep.Shards, &proto.XTransactionResponse{Status: proto.XCommitted}); err != nil {
			s.log.Debug("xshard: commit left for recovery", "id", id, "err", err)
		}
	}) {
		s.countFinishing(id, -1)
	}
	return resp, nil
}

// remembered answers a retry of a transaction the coordinator remembers
// as committed after deleting its record, which it did only after every
// participant had deleted its own. A participant's reply of a live record
// is older than that (the replies are of different moments), or it is a
// new record of the id: the participant forgot the transaction and took
// the retry's prepare for a new one. Either way a delete sent now finds
// the old record gone, so it deletes only such a new record, undecided
// ops and all, and its reply is what the participant remembers. The
// answer has the results of the shards that remember them.
func (s *Service) remembered(ctx context.Context, prep *proto.XPrepareRequest, recs []*proto.XRecord) (*proto.XTransactionResponse, error) {
	if err := s.deleteRetried(ctx, prep, recs); err != nil {
		return nil, err
	}
	return &proto.XTransactionResponse{Status: proto.XCommitted, FailedOp: -1, Results: shardResults(prep.Shards, recs)}, nil
}

// deleteRetried deletes, on each shard whose reply in recs is a live
// record, the record of a retry's prepare, once the coordinator answered
// that it remembers the transaction as finished: every shard had deleted
// its record of it then, so a live one is new, undecided (see
// remembered). recs then holds what each shard remembers.
func (s *Service) deleteRetried(ctx context.Context, prep *proto.XPrepareRequest, recs []*proto.XRecord) error {
	var live []string
	for i, rec := range recs {
		if !finished(rec) {
			live = append(live, prep.Shards[i])
		}
	}
	if len(live) > 0 {
		deleted, errs := s.parallel(ctx, live, proto.OpXDelete, decision(prep.ID, prep.Deadline), "", prep.ID)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for j, sh := range live {
			i := slices.Index(prep.Shards, sh)
			if recs[i] = deleted[j]; !finished(deleted[j]) {
				s.log.Warn("xshard: a late retry reached a shard that forgot its transaction; its new record is deleted", "id", prep.ID, "shard", sh)
				recs[i] = &proto.XRecord{}
			}
		}
	}
	return nil
}

// otherOps reports whether a shard refused a prepare because it names
// other shards or ops than the finished transaction of its id
// (fsm.OtherOpsRefusal), not because it could never take it (refused:
// too large for the link, or another code).
func otherOps(rec *proto.XRecord) bool {
	return finished(rec) && rec.Status == proto.XRejected && rec.Err == proto.ErrBadArguments
}

// prepareFor returns the prepare of transaction prep that shard sh is
// sent: the coordinator's holds every shard's ops, a participant's its own.
func prepareFor(prep *proto.XPrepareRequest, sh string) *proto.XPrepareRequest {
	p := *prep
	p.Self, p.FixResults = sh, true
	if sh != prep.Coordinator {
		p.Ops = shardOps(prep.Ops, sh)
	}
	return &p
}

// otherRun returns whether a shard's reply shows that it remembers as
// finished an earlier run of the id than the coordinator's pending record
// coord. A remembered outcome names its run's deadline (entry version 18
// on): one of an earlier run (fsm.EarlierRun) means the coordinator forgot
// that run; the same run's (a coordinator restored from a backup taken
// while the transaction was pending still holds it) is decided by coord.
// An outcome without a deadline (deleted by an older entry) tells only
// that the id finished: fresh, the coordinator held no record before this
// try, decides. A refusal (another caller's or other ops' id) is no
// outcome: it fails the transaction with its own code. Before the
// deadline, recovery, and a second driver on another member, took a
// record a retry had just made for the restored kind, and committed it
// (DESIGN-NOTES, "A retry keeps its transaction's deadline").
func otherRun(coord *proto.XRecord, fresh bool) func(*proto.XRecord) bool {
	return func(rec *proto.XRecord) bool {
		switch {
		case !finished(rec) || rec.Status == proto.XRejected:
			return false
		case rec.Deadline != 0:
			return fsm.EarlierRun(rec.Deadline, coord.Deadline)
		}
		return fresh
	}
}

// finished reports whether a record is what a shard remembers of a
// transaction whose record it deleted (it has no participants).
func finished(rec *proto.XRecord) bool { return len(rec.Shards) == 0 }

// record returns this shard's record of transaction id as this member
// knows it, or nil.
func (s *Service) record(id string) *proto.XRecord { return s.local.Record(id) }

// sameTransaction reports whether prep names the shards and ops of the
// coordinator's record rec. A record the coordinator made to fail a
// transaction it never saw prepared (xStatus) has no ops to compare.
func sameTransaction(rec *proto.XRecord, prep *proto.XPrepareRequest) bool {
	if rec.Coordinator != prep.Coordinator || !slices.Equal(rec.Shards, prep.Shards) {
		return false
	}
	if !slices.ContainsFunc(rec.Ops, func(o proto.ShardOps) bool { return len(o.Ops.Ops) > 0 }) {
		return true
	}
	for _, sh := range prep.Shards {
		if !bytes.Equal(proto.Marshal(&shardOps(rec.Ops, sh)[0].Ops), proto.Marshal(&shardOps(prep.Ops, sh)[0].Ops)) {
			return false
		}
	}
	return true
}

// refused turns each prepare that a shard can never take into its
// refusal, so that the transaction fails there instead of waiting for an
// answer that will not come: a message too large for the link, or one the
// shard answered with an error code. The shard recorded nothing either
// way (a prepare that may have been recorded, its reply lost, is sent
// again; the protocol's replies fit the link, Fit sees to that). It
// returns the other errors, which leave the transaction to recovery.
func (s *Service) refused(id string, shards []string, recs []*proto.XRecord, errs []error) error {
	for i, err := range errs {
		if code, ok := refusal(err); ok {
			s.log.Warn("xshard: a shard cannot take a prepare; the transaction fails", "id", id, "to", shards[i], "err", err)
			recs[i], errs[i] = &proto.XRecord{ID: id, Status: proto.XRejected, Err: code, FailedOp: -1}, nil
		}
	}
	return errors.Join(errs...)
}

// refusal reports whether a prepare's error says it can never be taken,
// and the code to fail the transaction with.
func refusal(err error) (proto.Code, bool) {
	var code proto.Code
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, proto.ErrFrameTooLarge):
		return proto.ErrTooLarge, true
	case errors.As(err, &code):
		return code, !retryable(err) && code != proto.ErrLocked
	}
	return 0, false
}

// shardResults pairs each shard with the results its record holds.
func shardResults(shards []string, recs []*proto.XRecord) []proto.XShardResult {
	out := make([]proto.XShardResult, len(recs))
	for i, rec := range recs {
		out[i] = proto.XShardResult{Shard: shards[i], Results: rec.Results}
	}
	return out
}

// fixed reports whether every shard's results are in its prepare answer:
// committed, or pending with the results its prepare fixed (a record
// prepared by a member of before FixResults has none; its results come
// with the commit).
func fixed(prep *proto.XPrepareRequest, recs []*proto.XRecord) bool {
	for i, rec := range recs {
		ops := shardOps(prep.Ops, prep.Shards[i])[0].Ops.Ops
		if rec.Status != proto.XCommitted && len(rec.Results.Results) != len(ops) {
			return false
		}
	}
	return true
}

// ownedBy returns the shards whose prepare answer is prep's own record: a
// live record of the same coordinator, participants and caller, or what a
// shard remembers of a finished one (which has no participants and which
// a decision no longer changes; a refusal of another caller,
// fsm.OtherCallerRefusal, then fails the transaction with NoAuth).
func ownedBy(prep *proto.XPrepareRequest, recs []*proto.XRecord) []string {
	var owned []string
	for i, rec := range recs {
		if finished(rec) || rec.Coordinator == prep.Coordinator && slices.Equal(rec.Shards, prep.Shards) && sameCaller(rec.IDs, prep.IDs) {
			owned = append(owned, prep.Shards[i])
		}
	}
	return owned
}

// sameCaller reports whether two callers' identities name the same
// caller (proto.CallerKey).
func sameCaller(a, b []proto.ID) bool {
	return slices.Equal(proto.CallerKey(a), proto.CallerKey(b))
}

// finish sends the decision to every shard in parallel, answers, and
// leaves cleanup running.
func (s *Service) finish(ctx context.Context, id string, deadline int64, coordinator string, shards []string, resp *proto.XTransactionResponse) (*proto.XTransactionResponse, error) {
	op, cleanup := proto.OpXCommit, proto.OpXCommitDelete
	if resp.Status != proto.XCommitted {
		op, cleanup = proto.OpXFail, proto.OpXDelete
	}
	recs, errs := s.parallel(ctx, shards, op, decision(id, deadline), StepDecisionSent, id)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if resp.Status == proto.XCommitted {
		resp.Results = shardResults(shards, recs)
	}
	s.background(func() {
		if err := s.cleanup(id, deadline, coordinator, shards, cleanup); err != nil {
			s.log.Debug("xshard: cleanup left for recovery", "id", id, "err", err)
		}
	})
	return resp, nil
}

// cleanup deletes the participants' records, then the coordinator's.
func (s *Service) cleanup(id string, deadline int64, coordinator string, shards []string, op proto.OpCode) error {
	ctx := s.ctx
	if err := s.hook(StepBeforeCleanup, id, ""); err != nil {
		return err
	}
	others := slices.DeleteFunc(slices.Clone(shards), func(sh string) bool { return sh == coordinator })
	_, errs := s.parallel(ctx, others, op, decision(id, deadline), StepCleaned, id)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !slices.Contains(shards, coordinator) {
		return nil // the coordinator's record with this id is another transaction's
	}
	if err := s.hook(StepBeforeOwnDelete, id, coordinator); err != nil {
		return err
	}
	_, err := s.send(ctx, coordinator, op, decision(id, deadline)(coordinator))
	return err
}

// decision returns, for parallel, the decision message of the run of
// transaction id whose prepare had the given deadline: a shard applies it
// to a record of that run only (proto.XIDRequest.Deadline), never to one
// a later retry made after the shard forgot this run.
func decision(id string, deadline int64) func(string) proto.Record {
	return func(string) proto.Record { return &proto.XIDRequest{ID: id, Deadline: deadline} }
}

func shardOps(all []proto.ShardOps, shard string) []proto.ShardOps {
	for _, so := range all {
		if so.Shard == shard {
			return []proto.ShardOps{so}
		}
	}
	return []proto.ShardOps{{Shard: shard}}
}
