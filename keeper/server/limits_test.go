package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// logLines keeps what a member logs at warning level and above.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count returns how many lines hold s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// startMember starts a shard of one member, with the keeper settings tune
// makes, and returns it with the warnings it logs.
func startMember(t *testing.T, tune func(*config.Keeper)) (*keeper.Member, *logLines) {
	t.Helper()
	cfg := testenv.NewClusterConfig(t, t.TempDir(), 1, 1)
	tune(&cfg.Keeper)
	require.NoError(t, cfg.Validate())
	logs := &logLines{}
	m, err := keeper.Start(cfg, cfg.Shards[0].Members[0].ID, keeper.Options{Bootstrap: true,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })

	waitFor(t, 10*time.Second, "a leader", m.Replica.IsLeader)
	return m, logs
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func connectTo(t *testing.T, m *keeper.Member) *client.Client {
	t.Helper()
	cl, err := client.Connect(t.Context(), []string{m.Server.Addr()})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// rawConn is a ZooKeeper session spoken by hand: it reads only when told.
type rawConn struct {
	t   *testing.T
	nc  net.Conn
	br  *bufio.Reader
	xid int32
}

// dialRaw opens a session of the given timeout on addr; a positive rcvbuf
// sets the socket's receive buffer before it connects (and so its window).
func dialRaw(t *testing.T, addr string, timeout time.Duration, rcvbuf int) *rawConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
		}
	}
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	r := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: int32(timeout.Milliseconds()), Passwd: make([]byte, proto.PasswordLen)}))
	require.NoError(t, err)
	_, err = proto.ReadFrame(r.br, 1<<20)
	require.NoError(t, err, "handshake")
	nc.SetDeadline(time.Time{})
	return r
}

// send writes a request without reading anything.
func (r *rawConn) send(op proto.OpCode, req proto.Record) error {
	r.xid++
	recs := []proto.Record{&proto.RequestHeader{Xid: r.xid, OpCode: op}}
	if req != nil {
		recs = append(recs, req)
	}
	r.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := r.nc.Write(proto.AppendFrame(nil, recs...))
	return err
}

// call sends a request and returns its reply's code, skipping
// notifications.
func (r *rawConn) call(op proto.OpCode, req proto.Record) proto.Code {
	r.t.Helper()
	require.NoError(r.t, r.send(op, req))
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range 100_000 {
		frame, err := proto.ReadFrame(r.br, 1<<20)
		require.NoError(r.t, err)
		var h proto.ReplyHeader
		h.Decode(proto.NewDecoder(frame))
		if h.Xid == r.xid {
			return h.Err
		}
	}
	r.t.Fatal("no reply")
	return 0
}

// closed reports whether the server closed the connection (what it still
// sends before is read and dropped).
func (r *rawConn) closed() bool {
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for range 100_000 {
		if _, err := proto.ReadFrame(r.br, 1<<20); err != nil {
			return !isTimeout(err)
		}
	}
	return false
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

const watchBoundLog = "refusing watches past a bound"

// TestWatchesArePerSessionAndPerMemberBounded: reads that leave a watch,
// addWatch, setWatches and setWatches2 register no more watches than
// keeper.max_watches_per_session for a session and
// keeper.max_watches_per_member for the member (issue 37: any number was
// taken). A read or addWatch past a bound is answered ZQUOTAEXCEEDED and
// the connection serves on; a setWatches past one is refused whole and its
// connection closed (a client ignores the code of its reply); each
// connection logs it once; a watch that fires or a connection that closes
// makes room again; the watches held keep firing.
func TestWatchesArePerSessionAndPerMemberBounded(t *testing.T) {
	m, logs := startMember(t, func(k *config.Keeper) {
		k.MaxWatchesPerSession, k.MaxWatchesPerMember = 50, 120
	})
	ctx := t.Context()
	watches := func() int { return m.Server.Counters().Watches }
	exists := func(cl *client.Client, path string) (<-chan client.Event, error) {
		_, _, ev, err := cl.ExistsW(ctx, path)
		return ev, err
	}

	a := connectTo(t, m)
	var fired <-chan client.Event
	for i := range 50 {
		ev, err := exists(a, fmt.Sprintf("/a%d", i))
		require.NoError(t, err, "watch %d of 50", i)
		if i == 0 {
			fired = ev
		}
	}
	_, err := exists(a, "/a50")
	assert.ErrorIs(t, err, proto.ErrQuotaExceeded, "a session's 51st watch")
	_, err = a.Do(ctx, proto.OpAddWatch, &proto.AddWatchRequest{Path: "/p", Mode: proto.AddWatchPersistent}, nil)
	assert.ErrorIs(t, err, proto.ErrQuotaExceeded, "an addWatch past the session's bound")
	_, err = exists(a, "/a1")
	assert.NoError(t, err, "a watch the session holds is set again")
	_, _, err = a.Get(ctx, "/")
	assert.NoError(t, err, "the session serves on")
	assert.Equal(t, 1, logs.count(watchBoundLog), "logged once for the connection")
	assert.Equal(t, 50, watches())

	b, c := connectTo(t, m), connectTo(t, m)
	for i := range 50 {
		_, err := exists(b, fmt.Sprintf("/b%d", i))
		require.NoError(t, err, "b's watch %d", i)
	}
	for i := range 20 {
		_, err := exists(c, fmt.Sprintf("/c%d", i))
		require.NoError(t, err, "c's watch %d", i)
	}
	_, err = exists(c, "/c20")
	assert.ErrorIs(t, err, proto.ErrQuotaExceeded, "the member's 121st watch")
	_, err = c.Do(ctx, proto.OpAddWatch, &proto.AddWatchRequest{Path: "/c20", Mode: proto.AddWatchPersistentRecursive}, nil)
	assert.ErrorIs(t, err, proto.ErrQuotaExceeded)
	assert.Equal(t, 2, logs.count(watchBoundLog), "logged once for each connection")

	_, err = c.Create(ctx, "/a0", nil, 0, proto.WorldACL(proto.PermAll))
	require.NoError(t, err, "writes go on at the bound")
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("a watch held at the bound did not fire")
	}
	_, err = exists(c, "/c20")
	assert.NoError(t, err, "a watch that fired makes room")
	require.NoError(t, b.Close())
	waitFor(t, 10*time.Second, "room from a closed connection", func() bool { return watches() == 70 })
	_, err = exists(c, "/c21")
	assert.NoError(t, err, "a closed connection's watches make room")

	require.NoError(t, a.Close())
	require.NoError(t, c.Close())
	waitFor(t, 10*time.Second, "no watches", func() bool { return watches() == 0 })

	over := dialRaw(t, m.Server.Addr(), 10*time.Second, 0)
	list := make([]string, 51)
	for i := range list {
		list[i] = fmt.Sprintf("/s%d", i)
	}
	assert.Equal(t, proto.ErrQuotaExceeded, over.call(proto.OpSetWatches, &proto.SetWatchesRequest{ExistWatches: list}))
	assert.True(t, over.closed(), "a setWatches past the bound closes its connection")
	assert.Zero(t, watches(), "a refused setWatches registers none of its watches")

	// 30 exist watches and 10 persistent ones, in both tables: 50.
	fits := dialRaw(t, m.Server.Addr(), 10*time.Second, 0)
	assert.Equal(t, proto.ErrOK, fits.call(proto.OpSetWatches2,
		&proto.SetWatchesRequest{V2: true, ExistWatches: list[:30], PersistentWatches: list[30:40]}))
	assert.Equal(t, 50, watches())
	assert.Equal(t, proto.ErrNoNode, fits.call(proto.OpExists, &proto.PathWatchRequest{Path: "/s30", Watch: true}),
		"a watch the connection holds (persistent) is set again")
	assert.Equal(t, proto.ErrQuotaExceeded, fits.call(proto.OpExists, &proto.PathWatchRequest{Path: "/s40", Watch: true}))
	assert.Equal(t, proto.ErrOK, fits.call(proto.OpPing, nil), "the connection serves on")
	assert.Equal(t, 4, logs.count(watchBoundLog), "logged once for each connection")
}

const slowReaderLog = "closing a connection that does not read"

// TestAClientThatDoesNotReadIsClosedAtItsQueuedBytes: what a member queues
// for a connection, notifications and replies alike, is bounded in bytes
// by keeper.max_queued_bytes_per_connection; a client that stops reading
// is disconnected at the bound, long before its write deadline (a session
// timeout), with one log line, and the member serves everyone else (issue
// 37: notifications were capped by count, 100,000 of them of any size,
// and replies not at all once the connection's writer waited on the
// socket).
func TestAClientThatDoesNotReadIsClosedAtItsQueuedBytes(t *testing.T) {
	const bound = 16 << 20
	m, logs := startMember(t, func(k *config.Keeper) {
		k.MaxQueuedBytesPerConnection = bound
		k.MaxSessionTimeout = time.Minute // the write deadline
	})
	other := connectTo(t, m)
	for _, p := range []string{"/n", "/m"} {
		_, err := other.Create(t.Context(), p, nil, 0, proto.WorldACL(proto.PermAll))
		require.NoError(t, err)
	}
	// A name of 60 KB: every reply and notification that names it.
	long := func(dir string, i int) string { return fmt.Sprintf("%s/%s%05d", dir, strings.Repeat("x", 60<<10), i) }
	created := 0
	create := func(t *testing.T) {
		_, err := other.Create(t.Context(), long("/n", created), nil, 0, proto.WorldACL(proto.PermAll))
		require.NoError(t, err, "the others' writes go on")
		created++
	}
	// watching opens a connection that watches what is created under /n,
	// and never reads after.
	watching := func(t *testing.T) *rawConn {
		slow := dialRaw(t, m.Server.Addr(), time.Minute, 4096)
		require.Equal(t, proto.ErrOK, slow.call(proto.OpAddWatch, &proto.AddWatchRequest{Path: "/n", Mode: proto.AddWatchPersistentRecursive}))
		return slow
	}
	// Sent until the member says it closed the connection, at most 1,000
	// of them (60 MB: the bound, the kernel's buffers on both sides, what
	// is in flight, and much to spare), then waited for well within the
	// write deadline.
	const most = 1000
	closedBy := func(t *testing.T, times int, send func(i int) error) {
		t.Helper()
		i := 0
		for ; i < most && logs.count(slowReaderLog) < times; i++ {
			if send(i) != nil {
				break // the member closed it
			}
		}
		t.Logf("%d sent", i)
		waitFor(t, 20*time.Second, "slow reader closed", func() bool { return logs.count(slowReaderLog) >= times })
		assert.Equal(t, times, logs.count(slowReaderLog), "once for each connection")
	}

	t.Run("notifications", func(t *testing.T) {
		slow := watching(t)
		closedBy(t, 1, func(int) error { create(t); return nil })
		assert.True(t, slow.closed())
	})

	t.Run("write replies", func(t *testing.T) {
		slow := watching(t)
		// 7.2 MB of notifications, more than the kernel's buffers take
		// (4 MB at most here): the connection's writer waits on the socket
		// with the rest, and it then reads writes that it does not send.
		for range 120 {
			create(t)
		}
		closedBy(t, 2, func(i int) error {
			return slow.send(proto.OpCreate, &proto.CreateRequest{Path: long("/m", i), ACL: proto.WorldACL(proto.PermAll)})
		})
		assert.True(t, slow.closed())
	})

	// A client that reads is sent more than the bound, as long as it reads.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := other.Create(ctx, "/big", make([]byte, 512<<10), 0, proto.WorldACL(proto.PermAll))
	require.NoError(t, err)
	for i := range 4 * bound / (512 << 10) {
		_, _, err = other.Get(ctx, "/big")
		require.NoError(t, err, "read %d of a client that reads", i)
	}
	assert.Equal(t, 2, logs.count(slowReaderLog))
}
