package replica

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/peerlink"
)

// TestPeerPortRoutesLinksByShard: replicas of two shards on one peer port
// each get the links of their own shard; a link of a shard the port does
// not serve is refused and counted on the port; a second replica of a
// shard is refused; an isolated or closed replica gets no more links while
// the other keeps getting its own.
func TestPeerPortRoutesLinksByShard(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	auth, err := peerlink.New(peerlink.Config{Secret: "peer-port-test"}, log)
	require.NoError(t, err)
	port, err := ListenPeers("127.0.0.1:0", auth, log)
	require.NoError(t, err)
	defer port.Close()
	idA, idB, idX := strings.Repeat("a", identityLen), strings.Repeat("b", identityLen), strings.Repeat("x", identityLen)
	var refusals atomic.Int64
	onPort := func(id string) *stream {
		s, err := newStream(port, "", auth, id, id, log, &refusals, func(c net.Conn) { c.Close() })
		require.NoError(t, err)
		return s
	}
	a, b := onPort(idA), onPort(idB)
	defer b.Close()
	_, err = newStream(port, "", auth, idA, idA, log, &refusals, nil)
	require.ErrorIs(t, err, ErrPortTaken)
	assert.Equal(t, port.Addr(), a.Addr(), "the replica's raft address is the port's")

	// dialer is a replica of shard id with a port of its own.
	dialer := func(id string) *stream {
		s, err := newStream(nil, "127.0.0.1:0", auth, id, id, log, &refusals, nil)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	// link opens a raft link through the port and checks that it reaches
	// the replica to, and none other.
	link := func(from *stream, to *stream) {
		t.Helper()
		c, err := from.dial(port.Addr().String(), linkRaft, time.Second)
		require.NoError(t, err)
		defer c.Close()
		got, err := to.Accept()
		require.NoError(t, err)
		defer got.Close()
		_, err = c.Write([]byte("hello " + to.identity[:1]))
		require.NoError(t, err)
		buf := make([]byte, 7)
		_, err = io.ReadFull(got, buf)
		require.NoError(t, err)
		assert.Equal(t, "hello "+to.identity[:1], string(buf))
	}
	fromA, fromB := dialer(idA), dialer(idB)
	link(fromA, a)
	link(fromB, b)

	_, err = dialer(idX).dial(port.Addr().String(), linkRaft, time.Second)
	require.ErrorIs(t, err, errNotHosted, "a node's port hosts no member of that shard")
	refused := func() bool { return port.Refused() == 1 }
	assert.Eventually(t, refused, 5*time.Second, time.Millisecond, "refused on the shared port")

	b.setIsolated(true)
	_, err = fromB.dial(port.Addr().String(), linkRaft, time.Second)
	require.Error(t, err, "an isolated replica takes no link")
	b.setIsolated(false)
	link(fromB, b)
	assert.True(t, refused(), "isolation is no refusal")

	require.NoError(t, a.Close())
	_, err = a.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = fromA.dial(port.Addr().String(), linkRaft, time.Second)
	require.ErrorIs(t, err, errNotHosted, "a closed replica's shard is no longer served")
	link(fromB, b)

	// A stranger that proves nothing gets nothing, and the port goes on.
	stranger, err := net.Dial("tcp", port.Addr().String())
	require.NoError(t, err)
	stranger.Write([]byte(strings.Repeat("b", 200)))
	stranger.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = stranger.Read(make([]byte, 1))
	assert.Error(t, err, "the port closes on a stranger")
	stranger.Close()
	link(fromB, b)

	// A replica's own port says "another shard", counted on the replica.
	before := refusals.Load()
	_, err = dialer(idX).dial(fromA.Addr().String(), linkRaft, time.Second)
	require.ErrorIs(t, err, errOtherShard)
	assert.Eventually(t, func() bool { return refusals.Load() >= before+2 }, 5*time.Second, time.Millisecond,
		"counted by both ends: the dialler and the replica that owns the port")
}

// TestPeerPortServesMemberSessions: a member's session link names the
// shard it is for and reaches the session server of that shard's replica
// on the port; a shard the port does not serve, or a replica that serves
// no sessions yet, gives ErrNoSession, so that the dialler can go to the
// member's client port instead; a second incarnation of a shard is not
// let on the port; a stranger without the cluster's proof is
// refused before it names anything.
func TestPeerPortServesMemberSessions(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	auth, err := peerlink.New(peerlink.Config{Secret: "peer-port-test"}, log)
	require.NoError(t, err)
	port, err := ListenPeers("127.0.0.1:0", auth, log)
	require.NoError(t, err)
	defer port.Close()
	sessions := map[string]chan net.Conn{}
	for _, shard := range []string{"a", "b"} {
		s, err := newStream(port, "", auth, strings.Repeat(shard, identityLen), shard, log, new(atomic.Int64), nil)
		require.NoError(t, err)
		defer s.Close()
		sessions[shard] = make(chan net.Conn, 1)
		serve := func(c net.Conn) { sessions[shard] <- c }
		s.sessions.Store(&serve)
	}
	ctx := context.Background()
	for _, shard := range []string{"a", "b"} {
		c, err := DialSession(ctx, auth, port.Addr().String(), shard)
		require.NoError(t, err)
		defer c.Close()
		got := <-sessions[shard]
		defer got.Close()
		_, err = c.Write([]byte("to " + shard))
		require.NoError(t, err)
		buf := make([]byte, 4)
		_, err = io.ReadFull(got, buf)
		require.NoError(t, err)
		assert.Equal(t, "to "+shard, string(buf), "the session reached its shard's server")
	}

	_, err = DialSession(ctx, auth, port.Addr().String(), "x")
	require.ErrorIs(t, err, ErrNoSession, "no member of shard x on the port")
	unserved, err := newStream(port, "", auth, strings.Repeat("c", identityLen), "c", log, new(atomic.Int64), nil)
	require.NoError(t, err)
	defer unserved.Close()
	_, err = DialSession(ctx, auth, port.Addr().String(), "c")
	require.ErrorIs(t, err, ErrNoSession, "a replica that serves no sessions yet (its member starting) refuses them")
	_, err = newStream(port, "", auth, strings.Repeat("d", identityLen), "a", log, new(atomic.Int64), nil)
	require.ErrorIs(t, err, ErrPortTaken, "another incarnation of shard a")

	other, err := peerlink.New(peerlink.Config{Secret: "another cluster"}, log)
	require.NoError(t, err)
	_, err = DialSession(ctx, other, port.Addr().String(), "a")
	require.Error(t, err, "a link without the cluster's proof gets no session")
	assert.Empty(t, sessions["a"], "and reaches no server")
}
