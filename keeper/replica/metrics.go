package replica

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a replica's timings for monitoring.
type metrics struct {
	appends       prometheus.Histogram // log store appends, each with its fsync
	snapshots     prometheus.Histogram // snapshots written to the snapshot store
	leaderChanges atomic.Int64         // leaders this member has seen take over
	linksRefused  atomic.Int64         // raft links with members of another shard or incarnation
	restores      atomic.Int64         // states replaced by a snapshot (a leader's installed, or the member's own at start)
}

func newMetrics() *metrics {
	return &metrics{
		appends: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xkeeper_raft_log_append_duration_seconds",
			Help:    "Appends of entries to the Raft log store, including the fsync.",
			Buckets: prometheus.ExponentialBucketsRange(0.00002, 2, 18),
		}),
		snapshots: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xkeeper_snapshot_duration_seconds",
			Help:    "Snapshots of the state written to the snapshot store.",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 600, 14),
		}),
	}
}

// Collectors returns the replica's histograms for a Prometheus registry,
// and the counters of the node log that holds its Raft log, if it has one.
func (r *Replica) Collectors() []prometheus.Collector {
	refused := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "xkeeper_raft_links_refused_total",
		Help: "Raft links refused because the other end belongs to another shard, or to another incarnation of this one (a shard restored from a backup).",
	}, func() float64 { return float64(r.metrics.linksRefused.Load()) })
	stalled := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "xkeeper_raft_log_stall_seconds",
		Help: "How long the Raft log write under way has run, once longer than keeper.log_stall_timeout (a disk that stopped answering; the member then sends no append); 0 otherwise.",
	}, func() float64 { return r.LogStall().Seconds() })
	failed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "xkeeper_raft_log_failed",
		Help: "1 while the member's last Raft log write failed (a disk error: the member can neither lead nor keep up; the node log takes no write after a failed one until the process restarts), 0 otherwise.",
	}, func() float64 {
		if r.LogFailed() != nil {
			return 1
		}
		return 0
	})
	restores := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "xkeeper_snapshot_restores_total",
		Help: "Times the member's state was replaced by a snapshot: its own at start, or a leader's it installed because it lagged past the leader's log.",
	}, func() float64 { return float64(r.metrics.restores.Load()) })
	cs := []prometheus.Collector{r.metrics.appends, r.metrics.snapshots, refused, stalled, failed, restores}
	if r.nodeLog != nil {
		cs = append(cs, r.nodeLog.Collectors()...)
	}
	return cs
}

// RefusedLinks returns how many raft links this member refused, or saw
// refused, because the two ends belong to different shards or
// incarnations.
func (r *Replica) RefusedLinks() int64 { return r.metrics.linksRefused.Load() }

// LeaderChanges returns how many times this member has seen a new leader
// take over since it started.
func (r *Replica) LeaderChanges() int64 { return r.metrics.leaderChanges.Load() }

// countLeaders counts raft's leader observations; it sends none on.
func (m *metrics) countLeaders(o *raft.Observation) bool {
	if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" {
		m.leaderChanges.Add(1)
	}
	return false
}

// timedLogStore times the appends of the log store it wraps, tells stall
// when one starts and ends, and fault how each write went.
type timedLogStore struct {
	raft.LogStore
	hist  prometheus.Histogram
	stall *stallWatch
	fault *logFault
}

func (t timedLogStore) StoreLog(l *raft.Log) error { return t.StoreLogs([]*raft.Log{l}) }

// IsMonotonic passes on the wrapped store's raft.MonotonicLogStore: raft
// empties such a log when it installs a snapshot instead of compacting it,
// since the entries after the snapshot may not leave a gap behind the old
// ones (raft-wal and the node log refuse one).
func (t timedLogStore) IsMonotonic() bool {
	m, ok := t.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (t timedLogStore) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	t.stall.begin()
	err := t.LogStore.StoreLogs(logs)
	t.stall.end()
	t.hist.Observe(time.Since(start).Seconds())
	t.fault.record(err)
	return err
}

// GetLog refuses the entries below the log's first index: raft-wal v0.4.0
// still hands out entries a compaction removed while they sit in its open
// segment, and a leader then sent them to a lagging follower instead of
// its snapshot, as if it still had them.
func (t timedLogStore) GetLog(index uint64, l *raft.Log) error {
	if first, err := t.LogStore.FirstIndex(); err == nil && index < first {
		return raft.ErrLogNotFound
	}
	return t.LogStore.GetLog(index, l)
}

func (t timedLogStore) DeleteRange(min, max uint64) error {
	err := t.LogStore.DeleteRange(min, max)
	if err != nil {
		t.fault.record(err) // only an append that succeeds clears it
	}
	return err
}
