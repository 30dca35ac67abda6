package replica

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingPipeline counts what reaches the network transport.
type recordingPipeline struct {
	raft.AppendPipeline
	sent []raft.AppendEntriesRequest
}

func (p *recordingPipeline) AppendEntries(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	p.sent = append(p.sent, *req)
	return nil, nil
}

func (p *recordingPipeline) Close() error { return nil }

// TestQuietPipelineHoldsBackOnlyRepeats checks which appends the quiet
// transport sends: entries, a new commit index, a new term and a new
// previous entry always go out; an empty append that repeats the last one
// goes out only once refresh has passed since it.
func TestQuietPipelineHoldsBackOnlyRepeats(t *testing.T) {
	inner := &recordingPipeline{}
	p := &quietPipeline{AppendPipeline: inner, refresh: time.Hour}
	send := func(req raft.AppendEntriesRequest) {
		f, err := p.AppendEntries(&req, &raft.AppendEntriesResponse{})
		require.NoError(t, err)
		if f != nil {
			assert.NoError(t, f.Error())
		}
	}
	entries := func(from, to uint64) []*raft.Log {
		var out []*raft.Log
		for i := from; i <= to; i++ {
			out = append(out, &raft.Log{Index: i, Term: 2})
		}
		return out
	}

	send(raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 10, LeaderCommitIndex: 10}) // first: sent
	send(raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 10, LeaderCommitIndex: 10}) // repeat: held
	send(raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 10, LeaderCommitIndex: 10,  // entries: sent
		Entries: entries(11, 12)})
	send(raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 12, LeaderCommitIndex: 10}) // nothing new: held
	send(raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 12, LeaderCommitIndex: 12}) // commit moved: sent
	send(raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 12, LeaderCommitIndex: 12}) // held
	send(raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 12, LeaderCommitIndex: 12}) // new term: sent
	send(raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 11, LeaderCommitIndex: 12}) // other previous entry: sent
	require.Len(t, inner.sent, 5)
	assert.Equal(t, []uint64{10, 10, 12, 12, 11}, []uint64{inner.sent[0].PrevLogEntry, inner.sent[1].PrevLogEntry,
		inner.sent[2].PrevLogEntry, inner.sent[3].PrevLogEntry, inner.sent[4].PrevLogEntry})

	p.refresh = 0 // a repeat older than refresh goes out again
	send(raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 11, LeaderCommitIndex: 12})
	assert.Len(t, inner.sent, 6)
}

// TestCommitNoticeTellsWhatTheFollowerCanUse checks the commit notices: a
// follower is told each commit index once, never past the newest entry
// sent on its pipeline, not while a later entry for its state machine is
// on its way, and as raft itself would tell it (same term and header, the
// newest entry sent as the previous one); raft's own tick after a notice
// is then held back.
func TestCommitNoticeTellsWhatTheFollowerCanUse(t *testing.T) {
	inner := &recordingPipeline{}
	tr := newQuietTransport(nil, time.Hour)
	p := newQuietPipeline(inner, tr)
	tr.pipes[p] = struct{}{}
	tell := func(index uint64) { // what tellCommits does, in this goroutine
		tr.commitAdvanced(index, 4)
		select {
		case <-p.wake:
			p.notice(p.commit.Load())
		default:
		}
	}

	tell(5) // nothing sent yet: nothing known of the follower
	require.Empty(t, inner.sent)

	header := raft.RPCHeader{ID: []byte("a1"), Addr: []byte("127.0.0.1:1")}
	_, err := p.AppendEntries(&raft.AppendEntriesRequest{RPCHeader: header, Term: 4, PrevLogEntry: 10, PrevLogTerm: 3,
		LeaderCommitIndex: 10, Entries: []*raft.Log{{Index: 11, Term: 4}, {Index: 12, Term: 4}}}, &raft.AppendEntriesResponse{})
	require.NoError(t, err)

	tr.commitAdvanced(12, 3) // an entry of another term: not this leader's to tell
	select {
	case <-p.wake:
		t.Fatal("a pipeline of term 4 was woken for an entry of term 3")
	default:
	}

	tell(11) // entry 12 is on its way: its commit will tell 11 too
	require.Len(t, inner.sent, 1)

	tell(13) // entry 13 never went to this follower: it learns 12
	require.Len(t, inner.sent, 2)
	n := inner.sent[1]
	assert.Equal(t, header, n.RPCHeader)
	assert.Equal(t, uint64(4), n.Term)
	assert.Equal(t, uint64(12), n.PrevLogEntry)
	assert.Equal(t, uint64(4), n.PrevLogTerm)
	assert.Equal(t, uint64(12), n.LeaderCommitIndex)
	assert.Empty(t, n.Entries)

	_, err = p.AppendEntries(&raft.AppendEntriesRequest{RPCHeader: header, Term: 4, PrevLogEntry: 12, PrevLogTerm: 4,
		LeaderCommitIndex: 12, Entries: []*raft.Log{{Index: 13, Term: 4, Type: raft.LogCommand},
			{Index: 14, Term: 4, Type: raft.LogBarrier}}}, &raft.AppendEntriesResponse{})
	require.NoError(t, err)
	tell(13) // a barrier after it is nothing the follower's state machine waits for
	require.Len(t, inner.sent, 4)
	assert.Equal(t, uint64(13), inner.sent[3].LeaderCommitIndex)
	assert.Equal(t, uint64(14), inner.sent[3].PrevLogEntry)

	tell(13) // told all it can use
	_, err = p.AppendEntries(&raft.AppendEntriesRequest{RPCHeader: header, Term: 4, PrevLogEntry: 14, PrevLogTerm: 4,
		LeaderCommitIndex: 13}, &raft.AppendEntriesResponse{}) // raft's tick repeats it: held back
	require.NoError(t, err)
	assert.Len(t, inner.sent, 4)

	require.NoError(t, p.Close())
	assert.Empty(t, tr.pipes, "a closed pipeline carries no notice")
}

// fakeFuture is a finished append as the network pipeline delivers it.
type fakeFuture struct {
	req  *raft.AppendEntriesRequest
	resp *raft.AppendEntriesResponse
}

func (f fakeFuture) Error() error                          { return nil }
func (f fakeFuture) Start() time.Time                      { return time.Time{} }
func (f fakeFuture) Request() *raft.AppendEntriesRequest   { return f.req }
func (f fakeFuture) Response() *raft.AppendEntriesResponse { return f.resp }

// consumingPipeline delivers the futures the test puts in done.
type consumingPipeline struct {
	recordingPipeline
	done chan raft.AppendFuture
}

func (p *consumingPipeline) Consumer() <-chan raft.AppendFuture { return p.done }

// TestForwardStopsAtAFailedAppend checks what raft's decoder gets: every
// response up to the first that fails, that one included, and nothing
// after (raft's decoder stops there, and a response it never reads must
// not hold the pipeline up); once one has failed, no notice is sent.
func TestForwardStopsAtAFailedAppend(t *testing.T) {
	inner := &consumingPipeline{done: make(chan raft.AppendFuture)}
	tr := newQuietTransport(nil, time.Hour)
	p := newQuietPipeline(inner, tr)
	go p.forward()
	defer func() { require.NoError(t, p.Close()) }()

	req := &raft.AppendEntriesRequest{Term: 4}
	ok := fakeFuture{req, &raft.AppendEntriesResponse{Term: 4, Success: true}}
	refused := fakeFuture{req, &raft.AppendEntriesResponse{Term: 4}}
	inner.done <- ok
	assert.Equal(t, ok, <-p.Consumer())
	inner.done <- refused
	assert.Equal(t, refused, <-p.Consumer())
	inner.done <- ok // dropped: the forwarder takes it although nobody reads
	inner.done <- ok
	select {
	case f := <-p.Consumer():
		t.Fatalf("a response after the failed one reached raft's decoder: %v", f)
	default:
	}

	_, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 4, PrevLogEntry: 10, LeaderCommitIndex: 9,
		Entries: []*raft.Log{{Index: 11, Term: 4}}}, &raft.AppendEntriesResponse{})
	require.NoError(t, err)
	p.notice(11)
	assert.Len(t, inner.sent, 1, "a notice went out on a failed pipeline")
}

// stuckPipeline sends the first request and blocks every later one until
// it is closed, as raft's network pipeline does once nobody reads its
// responses.
type stuckPipeline struct {
	recordingPipeline
	closed chan struct{}
}

func (p *stuckPipeline) AppendEntries(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if len(p.sent) > 0 {
		<-p.closed
		return nil, raft.ErrPipelineShutdown
	}
	return p.recordingPipeline.AppendEntries(req, resp)
}

func (p *stuckPipeline) Close() error { close(p.closed); return nil }

// TestCloseReleasesAStuckNotice blocks a commit notice in the network
// pipeline, with raft's own next send waiting behind it: closing the
// pipeline must release both, as raft closes a pipeline whose decoder it
// stopped.
func TestCloseReleasesAStuckNotice(t *testing.T) {
	inner := &stuckPipeline{closed: make(chan struct{})}
	tr := newQuietTransport(nil, time.Hour)
	p := newQuietPipeline(inner, tr)
	tr.pipes[p] = struct{}{}
	go p.tellCommits()

	_, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 4, PrevLogEntry: 10, LeaderCommitIndex: 10,
		Entries: []*raft.Log{{Index: 11, Term: 4}}}, &raft.AppendEntriesResponse{})
	require.NoError(t, err)
	tr.commitAdvanced(11, 4)
	require.Eventually(t, func() bool { return parked("chan receive", "(*quietPipeline).notice") },
		10*time.Second, time.Millisecond, "the notice blocks in the network pipeline, holding the pipeline's lock")
	raftSent := make(chan error)
	go func() {
		_, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 4, PrevLogEntry: 11, LeaderCommitIndex: 11,
			Entries: []*raft.Log{{Index: 12, Term: 4}}}, &raft.AppendEntriesResponse{})
		raftSent <- err
	}()
	require.Eventually(t, func() bool { return parked("sync.Mutex.Lock", "(*quietPipeline).AppendEntries") },
		10*time.Second, time.Millisecond, "raft's send waits for the pipeline's lock, behind the notice")
	require.NoError(t, p.Close())
	select {
	case err := <-raftSent:
		assert.ErrorIs(t, err, raft.ErrPipelineShutdown)
	case <-time.After(10 * time.Second):
		t.Fatal("closing the pipeline did not release raft's send")
	}
}

// parked reports whether a goroutine waits, for reason (as a stack trace
// names it: "chan receive", "sync.Mutex.Lock"), inside fn, a function of
// this package.
func parked(reason, fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, " ["+reason) && strings.Contains(g, "/keeper/replica."+fn+"(") {
			return true
		}
	}
	return false
}

// TestWokenLeaderStampsNoEntryWithANewTerm is hashicorp/raft#695 on this
// transport: a leader whose first message after a pause is a newer
// leader's heartbeat must not then store a proposal stamped with that
// leader's term (at the index where that leader puts its own first entry,
// the two would look alike and the member would apply its own). Raft here
// is a single-member group on loopback TCP, so it leads at once; the
// heartbeat comes from a member that claims term T+1. Through raft's
// main loop (see quietTransport.SetHeartbeatHandler) the member has
// stepped down by the time the heartbeat is answered, and the proposal is
// refused or goes into a later term it leads itself; with raft's fast
// path it was stored as an entry of term T+1.
func TestWokenLeaderStampsNoEntryWithANewTerm(t *testing.T) {
	tr := newQuietTransport(newTCPTransport(t), time.Hour)
	rc := raft.DefaultConfig()
	rc.LocalID = "a"
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	rc.BatchApplyCh = true
	logs := raft.NewInmemStore()
	stable, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	require.NoError(t, raft.BootstrapCluster(rc, logs, stable, snaps, tr,
		raft.Configuration{Servers: []raft.Server{{ID: "a", Address: tr.LocalAddr()}}}))
	r, err := raft.NewRaft(rc, nopFSM{}, logs, stable, snaps, tr)
	require.NoError(t, err)
	t.Cleanup(func() { r.Shutdown().Error() })
	require.Eventually(t, func() bool { return r.State() == raft.Leader }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, r.Barrier(5*time.Second).Error())
	term := r.CurrentTerm()

	other := newTCPTransport(t)
	heartbeat := &raft.AppendEntriesRequest{ // what raft's leader of term T+1 sends as a heartbeat
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("b"), Addr: []byte(other.LocalAddr())},
		Term:      term + 1, Leader: []byte(other.LocalAddr())}
	var resp raft.AppendEntriesResponse
	require.NoError(t, other.AppendEntries("a", tr.LocalAddr(), heartbeat, &resp))
	assert.True(t, resp.Success)
	_ = r.Apply([]byte("proposal"), 5*time.Second).Error() // refused, or applied in a term of its own

	first, err := logs.FirstIndex()
	require.NoError(t, err)
	last, err := logs.LastIndex()
	require.NoError(t, err)
	for i := first; i <= last; i++ {
		var e raft.Log
		require.NoError(t, logs.GetLog(i, &e))
		assert.NotEqual(t, term+1, e.Term, "entry %d (%v) carries term %d, which this member never led", i, e.Type, e.Term)
	}
}

// nopFSM is a state machine that keeps nothing.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

// TestFailedTransferFreesProposalsSoon hands the leadership to a member
// that takes appends but never answers TimeoutNow (a process paused, or
// cut off one way, between the caught-up check and the hand-over). raft
// refuses proposals until that call returns (hashicorp/raft#696), and the
// network transport waits its full timeout (5 s here, as in production):
// the quiet transport gives up after an election timeout, so the leader
// takes proposals again soon after the transfer fails.
func TestFailedTransferFreesProposalsSoon(t *testing.T) {
	const election = 500 * time.Millisecond
	tr := newQuietTransport(newTCPTransport(t), time.Hour)
	tr.transferWait = election
	mute := newTCPTransport(t)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go answerAllButTimeoutNow(mute, done)

	rc := raft.DefaultConfig()
	rc.LocalID = "a"
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = election, election, election
	logs, stable, snaps := raft.NewInmemStore(), raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	require.NoError(t, raft.BootstrapCluster(rc, logs, stable, snaps, tr, raft.Configuration{Servers: []raft.Server{
		{ID: "a", Address: tr.LocalAddr()}, {ID: "b", Address: mute.LocalAddr()}}}))
	r, err := raft.NewRaft(rc, nopFSM{}, logs, stable, snaps, tr)
	require.NoError(t, err)
	t.Cleanup(func() { r.Shutdown().Error() })
	require.Eventually(t, func() bool { return r.State() == raft.Leader }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, r.Apply([]byte("before"), 5*time.Second).Error())

	require.Error(t, r.LeadershipTransferToServer("b", mute.LocalAddr()).Error(), "b never answers TimeoutNow")
	failed := time.Now()
	require.Eventually(t, func() bool { return r.Apply([]byte("after"), time.Second).Error() == nil },
		2*election, 10*time.Millisecond, "proposals still refused %v after the transfer failed", 2*election)
	t.Logf("a proposal went in %v after the transfer failed", time.Since(failed).Round(time.Millisecond))
}

// answerAllButTimeoutNow plays a follower on tr that takes every append
// and grants every vote, and never answers TimeoutNow, until done closes.
func answerAllButTimeoutNow(tr *raft.NetworkTransport, done <-chan struct{}) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-tr.Consumer():
		case <-done:
			return
		}
		switch req := rpc.Command.(type) {
		case *raft.AppendEntriesRequest:
			rpc.Respond(&raft.AppendEntriesResponse{RPCHeader: req.RPCHeader, Term: req.Term, Success: true,
				LastLog: req.PrevLogEntry + uint64(len(req.Entries))}, nil)
		case *raft.RequestPreVoteRequest:
			rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: req.RPCHeader, Term: req.Term, Granted: true}, nil)
		case *raft.RequestVoteRequest:
			rpc.Respond(&raft.RequestVoteResponse{RPCHeader: req.RPCHeader, Term: req.Term, Granted: true}, nil)
		case *raft.TimeoutNowRequest:
			// never answered
		default:
			rpc.Respond(nil, errors.New("not played"))
		}
	}
}

// newTCPTransport is raft's network transport on a free loopback port,
// with production's 5 s timeout, closed with the test.
func newTCPTransport(t *testing.T) *raft.NetworkTransport {
	tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 2, 5*time.Second, hclog.NewNullLogger())
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}
