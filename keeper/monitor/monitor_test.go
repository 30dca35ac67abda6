package monitor_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/monitor"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// serve starts the monitor of member id on a free loopback port and
// returns its base URL.
func serve(t *testing.T, c *testenv.Cluster, id string) string {
	m := monitor.New(c.Member(id), "a", c.Config.Keeper.ElectionTimeout,
		monitor.DirGauge{Name: "test_dir_children", Help: "Children of /m0.", Dir: "/m0", Depth: 1},
		monitor.DirGauge{Name: "test_dir_grandchildren", Help: "Grandchildren of /m0.", Dir: "/m0", Depth: 2})
	stop, at, err := monitor.Serve("127.0.0.1:0", m, testenv.TestLogger(t))
	require.NoError(t, err)
	t.Cleanup(stop)
	return "http://" + at.String()
}

// scrape fetches /metrics and parses it with Prometheus' own text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// value returns the value of the one series of a gauge or counter, or
// the count of a histogram's series labelled op.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name, op string) float64 {
	f, ok := fams[name]
	require.True(t, ok, "no %s", name)
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		assert.Equal(t, "a", labels["shard"], name)
		switch {
		case m.Histogram != nil && labels["op"] == op:
			return float64(m.Histogram.GetSampleCount())
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		}
	}
	t.Fatalf("%s has no series for %q", name, op)
	return 0
}

// TestMetricsMoveWithTheLoad: /metrics parses, and the znode count, the
// request histograms, the packet counters and the Raft indices move by
// what a client did.
func TestMetricsMoveWithTheLoad(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3})
	leader := c.WaitLeader("a")
	base := serve(t, c, leader)
	before := scrape(t, base)
	assert.Equal(t, 1.0, value(t, before, "xkeeper_raft_leader", ""))
	assert.Contains(t, before, "go_goroutines")

	cl, err := client.Connect(t.Context(), []string{c.Member(leader).Server.Addr()}, client.WithLogger(testenv.TestLogger(t)))
	require.NoError(t, err)
	defer cl.Close()
	const n = 50
	for i := range n {
		_, err := cl.Create(t.Context(), fmt.Sprintf("/m%d", i), nil, 0, proto.WorldACL(proto.PermAll))
		require.NoError(t, err)
	}
	for i := range n {
		_, _, err := cl.Get(t.Context(), fmt.Sprintf("/m%d", i))
		require.NoError(t, err)
	}
	for _, p := range []string{"/m0/a", "/m0/b", "/m0/a/x", "/m0/a/y", "/m0/b/z"} {
		_, err := cl.Create(t.Context(), p, []byte("12345"), 0, proto.WorldACL(proto.PermAll))
		require.NoError(t, err)
	}
	after := scrape(t, base)
	assert.Equal(t, float64(n+5), value(t, after, "xkeeper_znodes", "")-value(t, before, "xkeeper_znodes", ""))
	assert.Equal(t, 2.0, value(t, after, "test_dir_children", ""))
	assert.Equal(t, 3.0, value(t, after, "test_dir_grandchildren", ""))
	sizes := 0
	for i := range n {
		sizes += len(fmt.Sprintf("/m%d", i))
	}
	sizes += len("/m0/a/m0/b/m0/a/x/m0/a/y/m0/b/z") + 5*5
	assert.Equal(t, float64(sizes), value(t, after, "xkeeper_approximate_data_size_bytes", "")-value(t, before, "xkeeper_approximate_data_size_bytes", ""))
	assert.Equal(t, 0.0, value(t, after, "xkeeper_outstanding_requests", ""), "every request answered")
	assert.Equal(t, float64(n+5), value(t, after, "xkeeper_request_duration_seconds", "create"))
	assert.Equal(t, float64(n), value(t, after, "xkeeper_request_duration_seconds", "getData"))
	assert.GreaterOrEqual(t, value(t, after, "xkeeper_packets_received_total", "")-value(t, before, "xkeeper_packets_received_total", ""), float64(2*n))
	assert.GreaterOrEqual(t, value(t, after, "xkeeper_raft_applied_index", "")-value(t, before, "xkeeper_raft_applied_index", ""), 1.0)
	assert.Equal(t, 1.0, value(t, after, "xkeeper_sessions", "")-value(t, before, "xkeeper_sessions", ""))
	assert.Equal(t, 1.0, value(t, after, "xkeeper_connections", ""))
	assert.Positive(t, after["xkeeper_raft_log_append_duration_seconds"].Metric[0].Histogram.GetSampleCount())
	assert.Positive(t, value(t, after, "xkeeper_raft_leader_changes_total", ""))
	assert.NotContains(t, after, "xkeeper_node_log_batches_total", "a member alone keeps raft-wal")
}

// TestNodeLogMetrics: on a node, a member's /metrics counts the node log's
// batches and the requests they carried.
func TestNodeLogMetrics(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Nodes: 3, Fsync: true})
	after := scrape(t, serve(t, c, c.WaitLeader("b")))
	batches := value(t, after, "xkeeper_node_log_batches_total", "")
	assert.Positive(t, batches, "the members' bootstrap and elections were written")
	assert.GreaterOrEqual(t, value(t, after, "xkeeper_node_log_requests_total", ""), batches)
	assert.Positive(t, value(t, after, "xkeeper_node_log_written_bytes_total", ""))
}

// status returns the HTTP status of a GET.
func status(t *testing.T, url string) int {
	resp, err := http.Get(url)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReadyFollowsContactWithTheLeader: a follower cut off from its
// leader stops being ready, and is ready again once it has caught up;
// /live stays up throughout.
func TestReadyFollowsContactWithTheLeader(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3})
	follower := c.Follower("a").ID
	base := serve(t, c, follower)
	ready := func(want int) func() bool { return func() bool { return status(t, base+"/ready") == want } }
	require.Eventually(t, ready(http.StatusOK), 10*time.Second, 20*time.Millisecond, "a follower in touch is ready")
	c.Isolate(follower, true)
	require.Eventually(t, ready(http.StatusServiceUnavailable), 10*time.Second, 20*time.Millisecond, "cut off, not ready")
	assert.Equal(t, http.StatusOK, status(t, base+"/live"))
	c.Isolate(follower, false)
	require.Eventually(t, ready(http.StatusOK), 20*time.Second, 20*time.Millisecond, "back in touch, ready again")
	assert.Equal(t, http.StatusOK, status(t, base+"/debug/pprof/cmdline"))
}

// TestServeExportsMetrics: `xkeeper serve` serves the monitor on each
// member's http_addr; exactly one member reports itself leader, and every
// member becomes ready.
func TestServeExportsMetrics(t *testing.T) {
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 3})
	pc.WaitLeader("a")
	leaders := 0.0
	for _, m := range pc.Config.Shards[0].Members {
		base := "http://" + m.HTTPAddr
		require.Eventually(t, func() bool { return status(t, base+"/ready") == http.StatusOK },
			10*time.Second, 20*time.Millisecond, "%s ready", m.ID)
		leaders += value(t, scrape(t, base), "xkeeper_raft_leader", "")
	}
	assert.Equal(t, 1.0, leaders)
}
