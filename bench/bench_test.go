package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

func TestErrNameByCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{zk.ErrNodeExists, "node exists (-110)"},
		{fmt.Errorf("multi: %w", zk.ErrBadVersion), "bad version (-103)"},
		{errors.New("unknown error: -1000"), "locked by a cross-shard transaction (-1000)"},
		{errors.New("unknown error: -4242"), "code -4242"},
		{&xshard.Error{ID: "t", Shard: "b", Op: 1, Code: proto.ErrLocked}, "locked by a cross-shard transaction (-1000)"},
		{proto.ErrNoNode, "no node (-101)"},
		{zk.ErrConnectionClosed, "connection closed"},
		{context.DeadlineExceeded, "context deadline exceeded"},
	} {
		if got := errName(c.err); got != c.want {
			t.Errorf("errName(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestFloors(t *testing.T) {
	fs, err := FsyncLatency(t.TempDir(), 20)
	require.NoError(t, err)
	rtt, err := LoopbackRTT(100)
	require.NoError(t, err)
	for _, r := range []Result{fs, rtt} {
		if r.Requests == 0 || r.P50 <= 0 && r.Max <= 0 || r.P50 > r.Max {
			t.Errorf("%s: %+v", r.Op, r)
		}
	}
	if fs.Requests != 20 || rtt.Requests != 100 || fs.Op != "fsync" || rtt.Op != "loopback" {
		t.Errorf("fsync %+v, loopback %+v", fs, rtt)
	}
}

// TestRunEveryOp runs each op for a fixed number of requests against a
// one-member in-process shard and checks that every request is counted
// and the run leaves no node behind.
func TestRunEveryOp(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Members: 1})
	servers := c.Servers("a")
	for _, op := range Ops {
		r, err := Run(context.Background(), Options{Servers: servers, Op: op, Clients: 3, Requests: 30,
			DataSize: 10, KeySpace: 250, Width: 250, MultiOps: 3})
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if r.Requests != 30 || len(r.Errors) > 0 || r.Op != op || r.Clients != 3 {
			t.Errorf("%s: %+v", op, r)
		}
	}
	conn, err := Connect(servers)
	require.NoError(t, err)
	defer conn.Close()
	if kids, _, err := conn.Children("/xkeeper-bench"); err != nil || len(kids) != 0 {
		t.Errorf("left behind: %v (%v)", kids, err)
	}
}

// TestClosedLoopOutlastsAStall: a server that answers nothing within the
// window still gets its one measured call, so a run reports a low
// throughput instead of none, and the stalled call as its longest.
func TestClosedLoopOutlastsAStall(t *testing.T) {
	measured := time.Now()
	end := measured.Add(20 * time.Millisecond)
	calls := 0
	var stalled time.Duration
	samples, errs, longest := closedLoop(context.Background(), 1, measured, end, func(int) (func() error, func()) {
		return func() error {
			calls++
			if calls == 1 {
				stalled = time.Until(end) + 10*time.Millisecond // the stalled server
				time.Sleep(stalled)
				return zk.ErrConnectionClosed
			}
			return nil
		}, nil
	})
	assert.Len(t, samples, 1, "one call after the window, then the run ends")
	assert.Equal(t, map[string]int{"connection closed": 1}, errs)
	assert.Equal(t, 2, calls)
	assert.GreaterOrEqual(t, longest, stalled, "the stalled call, though not counted")
	assert.Greater(t, longest, samples[0])
}

// TestListeningPortsCountsAListener: a port this process opens is counted,
// and gone once closed.
func TestListeningPortsCountsAListener(t *testing.T) {
	before, err := ListeningPorts(os.Getpid())
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	during, err := ListeningPorts(os.Getpid())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	after, err := ListeningPorts(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, before+1, during)
	assert.Equal(t, before, after)
}
