package xshard_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// cutDialer is a client's dialer that a test can cut off: cut closes the
// client's connections and refuses new ones until resume.
type cutDialer struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

var errCut = errors.New("test: connections cut")

func (d *cutDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return nil, errCut
	}
	nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.conns = append(d.conns, nc)
	}
	return nc, err
}

func (d *cutDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = true
	for _, nc := range d.conns {
		nc.Close()
	}
	d.conns = nil
}

func (d *cutDialer) resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = false
}

// clientAddrs returns the client addresses of a shard's members.
func clientAddrs(c *testenv.Cluster, shard string) []string {
	var out []string
	for _, m := range c.Shard(shard).Members {
		out = append(out, m.ClientAddr)
	}
	return out
}

// waitEvent waits (bounded) for a watch's event.
func waitEvent(t *testing.T, ch <-chan client.Event, typ proto.EventType, path, what string) {
	t.Helper()
	select {
	case ev := <-ch:
		require.Equal(t, typ, ev.Type, "%s: %+v", what, ev)
		require.Equal(t, path, ev.Path, what)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no event", what)
	}
}

// TestWatchAfterReconnectSeesTransaction (issue 38, item 6): a client
// watches /x (data and children), then, after a cross-shard transaction
// changing both was answered but before its commit landed, sees a newer
// zxid on the same shard (its own write elsewhere) and loses its
// connection. The commit lands while it is away; it reconnects and
// re-registers its watches with the last zxid it saw (setWatches), and
// they fire: the change is stamped with the zxid of the commit that made
// it visible, not the prepare's, which the client's last zxid is past.
func TestWatchAfterReconnectSeesTransaction(t *testing.T) {
	g := newGate(xshard.StepAnswered)
	c, r := xyCluster(t, g.hook, func(k *config.Keeper) { k.LockGrace = time.Minute })
	ctx := ctxT(t)
	release := sync.OnceFunc(func() { close(g.release) })
	defer release() // a failing test must not leave the driver held: Stop waits for it

	d := &cutDialer{}
	cl, err := client.Connect(ctx, clientAddrs(c, "a"), client.WithDialer(d.dial),
		client.WithSessionTimeout(20*time.Second), client.WithLogger(testenv.TestLogger(t)))
	require.NoError(t, err)
	defer cl.Close()
	_, _, data, err := cl.GetW(ctx, "/x")
	require.NoError(t, err)
	_, _, kids, err := cl.ChildrenW(ctx, "/x")
	require.NoError(t, err)

	g.arm()
	res, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{setData("/x", "1", 0), create("/x/kid", "k")}},
		{Shard: "b", Requests: []proto.MultiOp{setData("/y", "1", 0)}},
	}, xshard.Options{ID: uuid.NewString()})
	require.NoError(t, err)
	<-g.reached
	prepared := res[0].Results[0].Resp.(*proto.StatResponse).Stat.Mzxid
	_, err = cl.Create(ctx, "/elsewhere", nil, 0, nil)
	require.NoError(t, err)
	require.Greater(t, cl.LastZxid(), prepared, "the client saw a zxid past the prepare's")

	d.cut()
	release()
	for _, m := range c.Shard("a").Members {
		require.Eventually(t, func() bool {
			committed := false
			c.Member(m.ID).Replica.View(func(st *fsm.State) {
				n := st.Node("/x/kid")
				committed = n != nil && st.LockedBy("/x") == ""
			})
			return committed
		}, 20*time.Second, 10*time.Millisecond, "%s applies the commit", m.ID)
	}
	select {
	case ev := <-data:
		t.Fatalf("event while the client was away: %+v", ev)
	default:
	}
	d.resume()
	waitEvent(t, data, proto.EventNodeDataChanged, "/x", "the data watch re-registered after the commit")
	waitEvent(t, kids, proto.EventNodeChildrenChanged, "/x", "the child watch re-registered after the commit")
}
