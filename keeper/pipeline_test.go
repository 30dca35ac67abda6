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
	connections := func() int {
		mntr, err := testenv.FourLetterWord(t.Context(), addr, "mntr")
		require.NoError(t, err)
		for line := range strings.SplitSeq(mntr, "\n") {
			if v, ok := strings.CutPrefix(line, "zk_num_alive_connections\t"); ok {
				n, err := strconv.Atoi(v)
				require.NoError(t, err)
				return n
			}
		}
		t.Fatalf("no connection count in mntr:\n%s", mntr)
		return 0
	}

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

// readReply reads one reply frame and returns its header and body.
func readReply(t *testing.T, nc net.Conn) (proto.ReplyHeader, []byte) {
	frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	require.NoError(t, err)
	d := proto.NewDecoder(frame)
	var h proto.ReplyHeader
	h.Decode(d)
	require.NoError(t, d.Err())
	return h, d.Rest()
}
