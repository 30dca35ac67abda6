package replica

import (
	"time"

	"github.com/hashicorp/raft"
)

// quietTransport is raft's network transport with one change: on an
// idle shard it does not send the empty AppendEntries that hashicorp/raft
// pipelines to every follower each CommitTimeout (1–2 ms) whether or not
// anything changed. Those ticks exist so that a follower learns a new
// commit index soon after the last write; once one tick has carried the
// current commit index, the next ones tell the follower nothing, and at a
// 1 ms commit timeout they cost an idle 3-member shard a third of a core.
//
// A request is held back only if it carries no entries and the same term,
// previous entry and commit index as the last request sent on the same
// pipeline, and that one left less than refresh ago. Everything else goes
// out as before, so a follower learns each new commit index at the same
// moment as without this transport, and a pipeline whose connection died
// while idle is found out within refresh. Heartbeats do not use the
// pipeline and are never held back.
type quietTransport struct {
	*raft.NetworkTransport
	refresh time.Duration
}

// AppendEntriesPipeline returns the transport's pipeline to target,
// wrapped so that it holds back repeated empty appends.
func (t *quietTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &quietPipeline{AppendPipeline: p, refresh: t.refresh}, nil
}

// quietPipeline is one follower's pipeline; raft uses it from one
// goroutine, so it needs no lock.
type quietPipeline struct {
	raft.AppendPipeline
	refresh time.Duration

	sent               bool
	at                 time.Time
	term, last, commit uint64
}

// AppendEntries sends req unless it would repeat what the follower
// already knows; a held-back request gets a future that is never
// consumed, which raft's pipeline does not wait for.
func (p *quietPipeline) AppendEntries(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if len(req.Entries) == 0 && p.sent && req.Term == p.term && req.PrevLogEntry == p.last &&
		req.LeaderCommitIndex == p.commit && time.Since(p.at) < p.refresh {
		return heldBack{req: req, resp: resp}, nil
	}
	f, err := p.AppendPipeline.AppendEntries(req, resp)
	if err != nil {
		return nil, err
	}
	p.sent, p.at, p.term, p.commit = true, time.Now(), req.Term, req.LeaderCommitIndex
	p.last = req.PrevLogEntry
	if n := len(req.Entries); n > 0 {
		p.last = req.Entries[n-1].Index
	}
	return f, nil
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
