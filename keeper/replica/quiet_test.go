package replica

import (
	"testing"
	"time"

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
