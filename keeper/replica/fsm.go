package replica

import (
	"fmt"
	"io"
	"slices"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// raftFSM adapts the replica to raft.FSM.
type raftFSM Replica

// Apply implements raft.FSM. A log entry that does not decode means a
// corrupt log: the member stops rather than diverge. A configuration entry
// (ApplyBatch gets those too) is noted as the committed configuration.
func (f *raftFSM) Apply(l *raft.Log) interface{} {
	r := (*Replica)(f)
	if l.Type == raft.LogConfiguration {
		conf := raft.DecodeConfiguration(l.Data)
		r.committedConf.Store(&appliedConf{index: l.Index, conf: conf})
		if slices.ContainsFunc(conf.Servers, func(s raft.Server) bool { return string(s.ID) == r.cfg.ID }) {
			r.listed.Store(true) // a member that joined is listed from here on (Removed), however soon it is removed
		}
	}
	if l.Type != raft.LogCommand {
		r.stateIndex.Store(l.Index)
		return nil
	}
	r.mu.Lock()
	results, events, err := r.state.Apply(l.Data)
	if err != nil {
		r.mu.Unlock()
		panic(fmt.Sprintf("replica %s: log entry %d: %v", r.cfg.ID, l.Index, err))
	}
	r.stateIndex.Store(l.Index) // with the state, under its lock
	if r.hook != nil {
		r.hook(r.state, results, events, false)
	}
	r.applied.Broadcast()
	r.mu.Unlock()
	for _, res := range results {
		r.deliver(res)
	}
	return nil
}

// ApplyBatch implements raft.BatchingFSM: it applies each entry, then has
// the transport tell the followers that the batch is committed (the
// pipelines of the leader that wrote its last entry do; see
// quietTransport.commitAdvanced).
func (f *raftFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	for i, l := range logs {
		out[i] = f.Apply(l)
	}
	if n := len(logs); n > 0 {
		f.trans.commitAdvanced(logs[n-1].Index, logs[n-1].Term)
	}
	return out
}

// Snapshot implements raft.FSM: O(1), the copy-on-write tree is shared.
func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	r := (*Replica)(f)
	r.mu.Lock()
	defer r.mu.Unlock()
	return snapshot{r.state.Snapshot(), r.metrics.snapshots}, nil
}

// Restore implements raft.FSM.
func (f *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := fsm.Restore(rc)
	if err != nil {
		return err
	}
	r := (*Replica)(f)
	st.SeedSessions(r.cfg.Shard)
	st.SetAvailabilityZone(r.cfg.AvailabilityZone)
	r.committedConf.Store(nil) // the snapshot's configuration is not told here
	r.mu.Lock()
	r.state = st
	if r.hook != nil {
		r.hook(st, nil, nil, true)
	}
	r.applied.Broadcast()
	r.mu.Unlock()
	r.metrics.restores.Add(1)
	return nil
}

type snapshot struct {
	s    *fsm.Snapshot
	hist prometheus.Histogram // how long writing it took
}

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	defer prometheus.NewTimer(s.hist).ObserveDuration()
	if err := s.s.Write(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}
