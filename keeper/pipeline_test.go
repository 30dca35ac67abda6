package keeper_test

import (
	"net"
	"testing"
	"time"

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
