package monitor

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xkeeper/xkeeper/keeper/fsm"
)

// stateCollector reads a member's figures when Prometheus scrapes it.
type stateCollector Monitor

// metric is one figure read at scrape time.
type metric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
}

func newMetric(name, help string, kind prometheus.ValueType) metric {
	return metric{prometheus.NewDesc(name, help, nil, nil), kind}
}

var (
	mZnodes       = newMetric("xkeeper_znodes", "Znodes in the tree.", prometheus.GaugeValue)
	mEphemerals   = newMetric("xkeeper_ephemerals", "Ephemeral znodes.", prometheus.GaugeValue)
	mSessions     = newMetric("xkeeper_sessions", "Live sessions of the shard.", prometheus.GaugeValue)
	mWatches      = newMetric("xkeeper_watches", "Watches set on this member, per connection and path.", prometheus.GaugeValue)
	mConnections  = newMetric("xkeeper_connections", "Open client connections to this member.", prometheus.GaugeValue)
	mReceived     = newMetric("xkeeper_packets_received_total", "Client packets received (srst resets it).", prometheus.CounterValue)
	mSent         = newMetric("xkeeper_packets_sent_total", "Client packets sent (srst resets it).", prometheus.CounterValue)
	mMalformed    = newMetric("xkeeper_malformed_packets_total", "Client packets refused as malformed.", prometheus.CounterValue)
	mEarly        = newMetric("xkeeper_early_replies_total", "Writes answered with the leader's result before this member applied them.", prometheus.CounterValue)
	mZxid         = newMetric("xkeeper_last_zxid", "Zxid of the last applied write.", prometheus.GaugeValue)
	mOutstanding  = newMetric("xkeeper_outstanding_requests", "Client requests received by this member and not answered yet.", prometheus.GaugeValue)
	mDataSize     = newMetric("xkeeper_approximate_data_size_bytes", "Bytes of every znode's path and data.", prometheus.GaugeValue)
	mLeader       = newMetric("xkeeper_raft_leader", "1 if this member is its shard's Raft leader.", prometheus.GaugeValue)
	mTerm         = newMetric("xkeeper_raft_term", "Raft term.", prometheus.GaugeValue)
	mCommit       = newMetric("xkeeper_raft_commit_index", "Raft commit index known to this member.", prometheus.GaugeValue)
	mApplied      = newMetric("xkeeper_raft_applied_index", "Raft index of the last entry the state holds (not raft's own applied index, which counts entries still queued for the state machine).", prometheus.GaugeValue)
	mLastLog      = newMetric("xkeeper_raft_last_log_index", "Last index in this member's Raft log.", prometheus.GaugeValue)
	mLeaderChange = newMetric("xkeeper_raft_leader_changes_total", "Leaders this member has seen take over.", prometheus.CounterValue)
	mPrepared     = newMetric("xkeeper_tx_prepared_total", "Cross-shard prepares this shard accepted (pending).", prometheus.CounterValue)
	mRejected     = newMetric("xkeeper_tx_rejected_total", "Cross-shard prepares this shard refused.", prometheus.CounterValue)
	mLate         = newMetric("xkeeper_tx_rejected_late_total", "Cross-shard prepares refused because the deadline had passed.", prometheus.CounterValue)
	mCommitted    = newMetric("xkeeper_tx_committed_total", "Cross-shard transactions committed on this shard.", prometheus.CounterValue)
	mFailed       = newMetric("xkeeper_tx_failed_total", "Cross-shard transactions failed on this shard.", prometheus.CounterValue)
	mStale        = newMetric("xkeeper_tx_stale_decisions_total", "Cross-shard decisions of a run the shard had forgotten, left unapplied to a later record of the same id.", prometheus.CounterValue)
	mLocks        = newMetric("xkeeper_tx_locked_paths", "Paths locked by pending cross-shard transactions.", prometheus.GaugeValue)
	mOldest       = newMetric("xkeeper_tx_oldest_pending_seconds", "Age in official time of the oldest pending cross-shard transaction.", prometheus.GaugeValue)
)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	put := func(m metric, v float64) { ch <- prometheus.MustNewConstMetric(m.desc, m.kind, v) }
	var (
		nodes, ephemerals, sessions, locks int
		zxid, oldest, size                 int64
		xc                                 fsm.XCounters
		dirs                               = make([]int, len(c.dirs))
	)
	r := c.m.Replica
	r.View(func(st *fsm.State) {
		nodes, ephemerals, sessions, zxid, size = st.NodeCount(), st.EphemeralCount(), st.SessionCount(), st.Zxid(), st.DataSize()
		xc, locks, oldest = st.XStats()
		for i, d := range c.dirs {
			dirs[i] = st.CountBelow(d.Dir, d.Depth)
		}
	})
	for i, d := range c.dirs {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(dirs[i]))
	}
	sc := c.m.Server.Counters()
	rs := r.Stats()
	leader := 0.0
	if rs["state"] == "Leader" {
		leader = 1
	}
	for _, v := range []struct {
		m metric
		v float64
	}{
		{mZnodes, float64(nodes)}, {mEphemerals, float64(ephemerals)}, {mSessions, float64(sessions)},
		{mWatches, float64(sc.Watches)}, {mConnections, float64(sc.Connections)},
		{mReceived, float64(sc.Received)}, {mSent, float64(sc.Sent)}, {mMalformed, float64(sc.Malformed)},
		{mEarly, float64(r.EarlyReplies())}, {mZxid, float64(zxid)},
		{mOutstanding, float64(sc.Outstanding)}, {mDataSize, float64(size)},
		{mLeader, leader}, {mTerm, num(rs["term"])}, {mCommit, num(rs["commit_index"])},
		{mApplied, float64(r.StateApplied())}, {mLastLog, num(rs["last_log_index"])},
		{mLeaderChange, float64(r.LeaderChanges())},
		{mPrepared, float64(xc.Prepared)}, {mRejected, float64(xc.Rejected)}, {mLate, float64(xc.RejectedLate)},
		{mCommitted, float64(xc.Committed)}, {mFailed, float64(xc.Failed)}, {mStale, float64(xc.Stale)},
		{mLocks, float64(locks)}, {mOldest, float64(oldest) / 1000},
	} {
		put(v.m, v.v)
	}
}
