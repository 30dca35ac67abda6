package keeper_test

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestPipelinedRequestsAnsweredInOrder sends a burst of requests in one
// write, reads and writes mixed, then a request cut in two writes, to a
// follower and to the leader: every reply comes back in request order,
// each read sees the session's writes before it, and the cut request is
// answered once its second half arrives (the reader sends its own replies;
// a burst's go out together, and a partly buffered request must not hold
// them back).
func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	c := testenv.StartShard(t, 3)
	for i, addr := range c.Servers("a") {
		nc, resp := handshake(t, addr, proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)})
		require.NotZero(t, resp.SessionID)
		path := "/pipelined-" + string(rune('a'+i))
		type step struct {
			op   proto.OpCode
			req  proto.Record
			code proto.Code
			data string // getData's expected data
		}
		steps := []step{
			{proto.OpCreate, &proto.CreateRequest{Path: path, Data: []byte("v0"), ACL: proto.WorldACL(proto.PermAll)}, proto.ErrOK, ""},
			{proto.OpGetData, &proto.PathWatchRequest{Path: path}, proto.ErrOK, "v0"},
			{proto.OpExists, &proto.PathWatchRequest{Path: path + "/none"}, proto.ErrNoNode, ""},
		}
		for v := 1; v <= 20; v++ {
			data := []byte{'v', byte('0' + v%10)}
			steps = append(steps,
				step{proto.OpSetData, &proto.SetDataRequest{Path: path, Data: data, Version: -1}, proto.ErrOK, ""},
				step{proto.OpGetData, &proto.PathWatchRequest{Path: path}, proto.ErrOK, string(data)},
				step{proto.OpGetData, &proto.PathWatchRequest{Path: path}, proto.ErrOK, string(data)})
		}
		var burst []byte
		for x, s := range steps {
			burst = proto.AppendFrame(burst, &proto.RequestHeader{Xid: int32(x + 1), OpCode: s.op}, s.req)
		}
		last := proto.AppendFrame(nil, &proto.RequestHeader{Xid: int32(len(steps) + 1), OpCode: proto.OpGetData},
			&proto.PathWatchRequest{Path: path})
		steps = append(steps, step{proto.OpGetData, nil, proto.ErrOK, steps[len(steps)-1].data})
		// The burst and the first half of the last request in one write.
		_, err := nc.Write(append(burst, last[:7]...))
		require.NoError(t, err)
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		for x, s := range steps {
			if x == len(steps)-1 {
				_, err := nc.Write(last[7:])
				require.NoError(t, err)
			}
			h, body := readReply(t, nc)
			require.Equal(t, int32(x+1), h.Xid, "reply out of order at member %d", i)
			require.Equal(t, s.code, h.Err, "request %d (%v) at member %d", x+1, s.op, i)
			if s.op == proto.OpGetData {
				var r proto.GetDataResponse
				require.NoError(t, proto.Unmarshal(body, &r))
				require.Equal(t, s.data, string(r.Data), "request %d at member %d", x+1, i)
			}
		}
	}
}

// TestClientThatNeverReadsIsDropped pipelines reads of a large znode and
// never reads a reply: the member stops reading from it once its replies
// back up (their backlog stays in the socket buffers), ends the
// connection about a session timeout later, and serves a healthy session
// all along.
func TestClientThatNeverReadsIsDropped(t *testing.T) {
	c := testenv.StartShard(t, 1)
	addr := c.Servers("a")[0]
	good := connectZK(t, []string{addr}, 10*time.Second)
	_, err := good.Create("/big", make([]byte, 512<<10), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	// The member's connections: the healthy session's and mntr's own
	// (once an earlier mntr's has gone), plus the stalled one while it lasts.
	const healthy = 2
	connections := func() int { return mntrValue(t, addr, "zk_num_alive_connections") }

	nc, resp := handshake(t, addr, proto.ConnectRequest{Timeout: 2000, Passwd: make([]byte, proto.PasswordLen)})
	require.EqualValues(t, 2000, resp.Timeout)
	// 400 reads of 512 KiB: 200 MiB of replies, far beyond what the
	// socket buffers hold.
	var burst []byte
	for x := 1; x <= 400; x++ {
		burst = proto.AppendFrame(burst, &proto.RequestHeader{Xid: int32(x), OpCode: proto.OpGetData}, &proto.PathWatchRequest{Path: "/big"})
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	runtime.GC()
	base := heap()
	_, err = nc.Write(burst)
	require.NoError(t, err)

	deadline := time.Now().Add(20 * time.Second)
	for n := 0; connections() != healthy; n++ {
		require.True(t, time.Now().Before(deadline), "the stalled connection was not dropped")
		// The cluster runs in this process: the unread replies must not
		// pile up in its heap (all of them would be 200 MiB).
		require.Less(t, heap(), base+64<<20, "replies to a client that does not read pile up")
		_, err := good.Create(fmt.Sprintf("/while-stalled-%d", n), nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err, "healthy session not served while another client stalls")
	}
}

// mntrValue returns one number of the member's mntr.
func mntrValue(t *testing.T, addr, key string) int {
	t.Helper()
	mntr, err := testenv.FourLetterWord(t.Context(), addr, "mntr")
	require.NoError(t, err)
	for line := range strings.SplitSeq(mntr, "\n") {
		if v, ok := strings.CutPrefix(line, key+"\t"); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in mntr:\n%s", key, mntr)
	return 0
}

// TestPipelinedWritesAreBounded: a client that pipelines 64 writes of
// 256 KiB in one burst (16 MiB) has at most 4 MiB of them open on the
// member at any time (zk_outstanding_requests stays at 16 writes and the
// one the reader holds); the rest wait in its socket, and every write is
// answered, in order.
func TestPipelinedWritesAreBounded(t *testing.T) {
	c := testenv.StartShard(t, 1)
	addr := c.Servers("a")[0]
	nc, _ := handshake(t, addr, proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)})
	r := &rawEndpoint{t: t, nc: nc}
	h, _ := r.do(proto.OpCreate, &proto.CreateRequest{Path: "/big", ACL: proto.WorldACL(proto.PermAll)})
	require.Equal(t, proto.ErrOK, h.Err)
	const writes = 64
	var burst []byte
	for x := 1; x <= writes; x++ {
		data := make([]byte, 256<<10)
		data[0] = byte(x)
		burst = proto.AppendFrame(burst, &proto.RequestHeader{Xid: int32(1000 + x), OpCode: proto.OpSetData},
			&proto.SetDataRequest{Path: "/big", Data: data, Version: -1})
	}
	sent := make(chan error, 1)
	go func() { _, err := nc.Write(burst); sent <- err }()
	replies := make(chan proto.ReplyHeader, writes)
	go func() {
		for range writes {
			frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
			if err != nil {
				close(replies)
				return
			}
			var h proto.ReplyHeader
			h.Decode(proto.NewDecoder(frame))
			replies <- h
		}
	}()
	most := 0
	deadline := time.Now().Add(60 * time.Second)
	for len(replies) < writes {
		require.True(t, time.Now().Before(deadline), "%d of %d writes answered", len(replies), writes)
		most = max(most, mntrValue(t, addr, "zk_outstanding_requests"))
	}
	require.NoError(t, <-sent)
	assert.LessOrEqual(t, most, 17, "open writes of one connection")
	for x := 1; x <= writes; x++ {
		h := <-replies
		require.EqualValues(t, 1000+x, h.Xid, "replies in order")
		require.Equal(t, proto.ErrOK, h.Err)
	}
	h, body := r.do(proto.OpGetData, &proto.PathWatchRequest{Path: "/big"})
	require.Equal(t, proto.ErrOK, h.Err)
	var got proto.GetDataResponse
	require.NoError(t, proto.Unmarshal(body, &got))
	assert.EqualValues(t, writes, got.Data[0], "the last write is the znode's data")
}

// readReply reads one reply frame and returns its header and body.
func readReply(t *testing.T, nc net.Conn) (proto.ReplyHeader, []byte) {
	frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	require.NoError(t, err)
	return decodeReply(t, frame)
}

// decodeReply decodes a reply frame into its header and body.
func decodeReply(t *testing.T, frame []byte) (proto.ReplyHeader, []byte) {
	h, body, err := parseReply(frame)
	require.NoError(t, err)
	return h, body
}

// parseReply is decodeReply for a goroutine that cannot fail the test.
func parseReply(frame []byte) (proto.ReplyHeader, []byte, error) {
	d := proto.NewDecoder(frame)
	var h proto.ReplyHeader
	h.Decode(d)
	return h, d.Rest(), d.Err()
}
