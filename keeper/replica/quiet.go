package replica

import (
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// quietTransport is raft's network transport with two changes that let an
// idle shard sleep while followers still learn each commit at once.
//
// Held-back repeats: hashicorp/raft pipelines an empty AppendEntries to
// every follower each CommitTimeout whether or not anything changed, so
// that a follower learns a new commit index soon after the last write.
// Once one request has carried the current commit index, the next ones
// tell the follower nothing; a request is held back if it carries no
// entries, the same term and previous entry as the last request sent on
// the same pipeline and no newer commit index, and that one left less than
// refresh ago. A pipeline whose connection died while idle is still found out
// within refresh. Heartbeats do not use the pipeline and are never held.
//
// Commit notices: raft wakes its replication loops only for new entries or
// at CommitTimeout, so a follower learns the commit index of the last
// entries of a burst a CommitTimeout late, and a short CommitTimeout keeps
// an idle leader's loops busy. Instead, the leader calls commitAdvanced as
// it applies, and each of its pipelines whose follower has not been told
// that commit index sends the empty append that raft's own loop would send
// at its next tick: the same term and previous entry (the newest sent),
// the new commit index, or the previous entry's if that is lower.
// CommitTimeout is then only the fallback (see DESIGN-NOTES, Replication).
//
// No heartbeat fast path: see SetHeartbeatHandler. No appends or
// snapshots at all while the member's log write is stalled (stallWatch).
// And a leadership transfer's TimeoutNow gives up after transferWait.
type quietTransport struct {
	*raft.NetworkTransport
	refresh      time.Duration
	stall        *stallWatch   // nil: never stalled
	transferWait time.Duration // how long TimeoutNow waits for its answer; 0: the transport's timeout
	contacts     contacts      // when each follower last answered an append outside a pipeline (heartbeats)

	mu    sync.Mutex
	pipes map[*quietPipeline]struct{} // the leader's open pipelines
}

func newQuietTransport(inner *raft.NetworkTransport, refresh time.Duration) *quietTransport {
	return &quietTransport{NetworkTransport: inner, refresh: refresh, pipes: map[*quietPipeline]struct{}{}}
}

// SetHeartbeatHandler refuses raft's heartbeat fast path, so that every
// heartbeat reaches raft's main loop like any other request.
//
// hashicorp/raft (v1.7.3, issue #695) handles a heartbeat on the
// connection's goroutine, outside its main loop, and a heartbeat of a
// newer term changes the member's term and state there. A leader that had
// been paused (SIGSTOP, a long GC, a stalled VM) and wakes to find a new
// leader's heartbeat among its first messages can then, in the same
// instant, store a proposal that it takes from its main loop before it
// notices it is a follower: stamped with the new term (dispatchLogs reads
// the current term), at the very index where the new leader put its own
// first entry. The two entries have the same index and term, so when the
// new leader's log reaches the old one the follower takes its own entry
// for the new leader's and keeps it; the commit index then covers it and
// the member applies an entry that no other member has. The bank on node
// processes found exactly that: a deposed leader a zxid ahead of its
// shard from then on. Through the main loop, a heartbeat cannot change
// the term between the loop's check that the member leads and its
// dispatch. A heartbeat now waits behind whatever the loop is doing (a
// log write of a few milliseconds), far below the heartbeat timeout.
func (t *quietTransport) SetHeartbeatHandler(func(raft.RPC)) {}

// errTransferUnanswered fails a TimeoutNow that had no answer within
// transferWait.
var errTransferUnanswered = errors.New("replica: the leadership transfer's target did not answer in time")

// TimeoutNow asks target to stand for election at once (the last step of a
// leadership transfer), and fails if it has not answered within
// transferWait.
//
// hashicorp/raft (v1.7.3, issue #696) keeps refusing proposals after a
// transfer has timed out (an election timeout) until its TimeoutNow call
// returns, and the network transport waits up to its timeout (5 s) for a
// target that stopped answering (a paused or cut-off process): the
// shard's writes would fail that long. The call itself goes on in the
// background until the transport gives up; its answer is then dropped.
// Giving up early keeps Raft safe: a TimeoutNow that arrives late starts an
// election, as a transfer would have. It is one that skips pre-vote, so it
// can depose a leader that still hears its followers: at worst one more
// leader change, which the balancer's next round may undo.
func (t *quietTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, req *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if t.transferWait <= 0 {
		return t.NetworkTransport.TimeoutNow(id, target, req, resp)
	}
	type answer struct {
		resp raft.TimeoutNowResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.err = t.NetworkTransport.TimeoutNow(id, target, req, &a.resp)
		done <- a
	}()
	wait := time.NewTimer(t.transferWait)
	defer wait.Stop()
	select {
	case a := <-done:
		*resp = a.resp
		return a.err
	case <-wait.C:
		return errTransferUnanswered
	}
}

// AppendEntries sends an append outside a pipeline (raft's heartbeats and
// its appends while it has no pipeline), unless the log is stalled, and
// notes the follower's answer (contacts).
func (t *quietTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.stall.stalled() {
		return errLogStalled
	}
	err := t.NetworkTransport.AppendEntries(id, target, req, resp)
	if err == nil {
		t.contacts.heard(id)
	}
	return err
}

// InstallSnapshot sends a snapshot, unless the log is stalled: the
// follower would spend the transfer on it, then count it as word from its
// leader and refuse its vote to the others.
func (t *quietTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, req *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if t.stall.stalled() {
		return errLogStalled
	}
	return t.NetworkTransport.InstallSnapshot(id, target, req, resp, data)
}

// AppendEntriesPipeline returns the transport's pipeline to target,
// wrapped so that it holds back repeated empty appends and carries commit
// notices.
func (t *quietTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	q := newQuietPipeline(p, t)
	t.mu.Lock()
	t.pipes[q] = struct{}{}
	t.mu.Unlock()
	go q.tellCommits()
	go q.forward()
	return q, nil
}

// commitAdvanced tells every follower that index, an entry of the given
// term, is committed, where the follower holds that entry and has not been
// told (see quietTransport). Only the pipelines of that term's leader
// tell: that leader wrote the entry, so the committed log up to index is
// the log its pipelines sent, even after it stepped down. A pipeline of
// another term (a leader deposed while its pipelines close) may have sent
// entries that were never committed, and tells nothing. It never waits
// for a follower: each pipeline's own goroutine sends.
func (t *quietTransport) commitAdvanced(index, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := range t.pipes {
		if p.term.Load() == term {
			p.committed(index)
		}
	}
}

// quietPipeline is one follower's pipeline. Raft sends on it from one
// goroutine and the pipeline's tellCommits from another, so mu orders
// them: requests reach the connection, and the follower, in the order
// they were sent. A third, forward, hands the responses to raft.
type quietPipeline struct {
	raft.AppendPipeline
	refresh time.Duration
	owner   *quietTransport
	stall   *stallWatch // the owner's

	term   atomic.Uint64          // the term of the requests sent (one per pipeline), 0 before the first
	commit atomic.Uint64          // the newest commit index to tell the follower
	failed atomic.Bool            // raft's decoder saw a failed append and stopped: tell nothing more
	wake   chan struct{}          // commit moved (capacity 1)
	out    chan raft.AppendFuture // responses for raft's decoder (see forward)
	closed chan struct{}          // the pipeline is closed
	once   sync.Once

	mu                 sync.Mutex
	sent               bool
	at                 time.Time
	last               raft.AppendEntriesRequest // the newest request sent, without its entries
	lastIndex, lastLog uint64                    // the newest entry sent and its term
	lastApplied        uint64                    // the newest entry sent that the state machine sees
}

func newQuietPipeline(p raft.AppendPipeline, t *quietTransport) *quietPipeline {
	return &quietPipeline{AppendPipeline: p, refresh: t.refresh, owner: t, stall: t.stall,
		wake: make(chan struct{}, 1), out: make(chan raft.AppendFuture), closed: make(chan struct{})}
}

// Consumer returns the responses for raft's pipeline decoder.
func (p *quietPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// forward passes the network pipeline's responses to raft's decoder until
// one fails (an error, a refused append or a newer term). Raft's decoder
// stops at that one and never reads again, and the network pipeline's
// reader would then block and, with it, every later send: a commit notice
// would block holding mu, and raft's own send wait for mu, so raft would
// never reach the pipeline's Close (hashicorp/raft#612). After it, forward drops the responses instead,
// and no notice is sent.
func (p *quietPipeline) forward() {
	in := p.AppendPipeline.Consumer()
	for {
		var f raft.AppendFuture
		select {
		case f = <-in:
		case <-p.closed:
			return
		}
		if p.failed.Load() {
			continue
		}
		if req, resp := f.Request(), f.Response(); !resp.Success || resp.Term > req.Term {
			p.failed.Store(true)
		}
		select {
		case p.out <- f:
		case <-p.closed:
			return
		}
	}
}

// committed records that index is committed and wakes tellCommits.
func (p *quietPipeline) committed(index uint64) {
	for {
		cur := p.commit.Load()
		if index <= cur || p.commit.CompareAndSwap(cur, index) {
			break
		}
	}
	p.poke()
}

// poke wakes tellCommits, if it is not awake already.
func (p *quietPipeline) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// tellCommits sends the commit notices until the pipeline closes.
func (p *quietPipeline) tellCommits() {
	for {
		select {
		case <-p.closed:
			return
		case <-p.wake:
			p.notice(p.commit.Load())
		}
	}
}

// AppendEntries sends req unless it would repeat what the follower
// already knows; a held-back request gets a future that is never
// consumed, which raft's pipeline does not wait for.
func (p *quietPipeline) AppendEntries(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if p.stall.stalled() {
		return nil, errLogStalled // raft closes the pipeline and goes on without one
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(req.Entries) == 0 && p.sent && req.Term == p.last.Term && req.PrevLogEntry == p.lastIndex &&
		req.LeaderCommitIndex <= p.last.LeaderCommitIndex && time.Since(p.at) < p.refresh {
		return heldBack{req: req, resp: resp}, nil
	}
	return p.send(req, resp)
}

// notice tells the follower that index is committed, or as much of it as
// it can use: the newest entry sent to it on this pipeline, if that is
// below index. It sends nothing when the follower already knows as much,
// nor while a later entry that the state machine sees is on its way: the
// commit of that one will be told, and until then raft's own appends
// carry the commit index. The response comes back to raft's pipeline
// decoder like any other: an append of no entries that succeeds changes
// nothing there.
func (p *quietPipeline) notice(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	index = min(index, p.lastIndex)
	if !p.sent || p.failed.Load() || index < p.lastApplied || index <= p.last.LeaderCommitIndex || p.stall.stalled() {
		return
	}
	req := p.last // the same header, term and leader as raft's own
	req.PrevLogEntry, req.PrevLogTerm, req.LeaderCommitIndex = p.lastIndex, p.lastLog, index
	_, _ = p.send(&req, new(raft.AppendEntriesResponse)) // a dead connection is raft's to find
}

// send hands req to the network pipeline and records it; mu is held.
func (p *quietPipeline) send(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f, err := p.AppendPipeline.AppendEntries(req, resp)
	if err != nil {
		return nil, err
	}
	p.sent, p.at = true, time.Now()
	p.last = *req
	p.last.Entries = nil
	p.lastIndex, p.lastLog = req.PrevLogEntry, req.PrevLogTerm
	if n := len(req.Entries); n > 0 {
		p.lastIndex, p.lastLog = req.Entries[n-1].Index, req.Entries[n-1].Term
	}
	for _, e := range slices.Backward(req.Entries) {
		if e.Type == raft.LogCommand || e.Type == raft.LogConfiguration {
			p.lastApplied = e.Index
			break
		}
	}
	p.term.Store(req.Term)
	if p.commit.Load() > p.last.LeaderCommitIndex {
		p.poke() // a commit told while these entries were not yet sent
	}
	return f, nil
}

// Close closes the network pipeline, which also ends a notice waiting on
// it, and stops tellCommits.
func (p *quietPipeline) Close() error {
	p.owner.mu.Lock()
	delete(p.owner.pipes, p)
	p.owner.mu.Unlock()
	err := p.AppendPipeline.Close()
	p.once.Do(func() { close(p.closed) })
	return err
}

// heldBack is the future of a request that was not sent.
type heldBack struct {
	req  *raft.AppendEntriesRequest
	resp *raft.AppendEntriesResponse
}

func (heldBack) Error() error                            { return nil }
func (heldBack) Start() time.Time                        { return time.Time{} }
func (h heldBack) Request() *raft.AppendEntriesRequest   { return h.req }
func (h heldBack) Response() *raft.AppendEntriesResponse { return h.resp }
