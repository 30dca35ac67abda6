package keeper_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestBadFramesCloseOnlyTheirConnection sends malformed, truncated and
// oversized frames on their own connections: the server closes each one
// by itself (only a truncated frame needs the client's end of input to
// show it is cut short) and counts each as one malformed packet; a write
// that frames but does not decode is answered instead, as ZooKeeper does.
// A healthy session on the same member carries on.
func TestBadFramesCloseOnlyTheirConnection(t *testing.T) {
	c := testenv.StartShard(t, 1)
	addr := c.Servers("a")[0]
	good := connectZK(t, []string{addr}, 10*time.Second)
	handshake := proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, 16)})
	header := func(op proto.OpCode, body []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
		b = binary.BigEndian.AppendUint32(b, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(op))
		return append(b, body...)
	}
	cases := []struct {
		name      string
		bytes     []byte
		truncated bool // the frame is cut short: only the end of input shows it
		answered  bool // a marshalling error, and the connection stays
	}{
		{name: "oversized connect frame", bytes: []byte{0x7f, 0xff, 0xff, 0xff, 0, 0}},
		{name: "negative frame length", bytes: []byte{0xff, 0xff, 0xff, 0xf0}},
		{name: "truncated connect", bytes: []byte{0, 0, 0, 44, 0, 0, 0}, truncated: true},
		{name: "connect with bad password length", bytes: append(append([]byte{0, 0, 0, 28}, make([]byte, 24)...), 0, 0, 0, 100)},
		{name: "oversized request", bytes: append(append([]byte{}, handshake...), 0x10, 0, 0, 0)},
		{name: "request body cut short", bytes: append(append([]byte{}, handshake...), header(proto.OpGetData, []byte{0, 0, 0, 200, '/'})...)},
		{name: "request header cut short", bytes: append(append([]byte{}, handshake...), 0, 0, 0, 2, 0, 0)},
		{name: "multi with a read op", answered: true, bytes: append(append([]byte{}, handshake...),
			header(proto.OpMulti, []byte{0, 0, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, '/', 0})...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			malformed := mntrValue(t, addr, "zk_malformed_packets")
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer nc.Close()
			_, err = nc.Write(tc.bytes)
			require.NoError(t, err)
			if tc.truncated {
				require.NoError(t, nc.(*net.TCPConn).CloseWrite())
			}
			require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
			if tc.answered {
				br := bufio.NewReader(nc)
				_, err := proto.ReadFrame(br, 1<<20)
				require.NoError(t, err, "handshake")
				reply, err := proto.ReadFrame(br, 1<<20)
				require.NoError(t, err, "the connection stays")
				var h proto.ReplyHeader
				h.Decode(proto.NewDecoder(reply))
				assert.Equal(t, proto.ErrMarshallingError, h.Err)
				assert.Equal(t, malformed, mntrValue(t, addr, "zk_malformed_packets"), "nothing counted as malformed")
				return
			}
			// The server answers at most a handshake (41 bytes) and, for a
			// request it could frame but not decode, one error reply
			// header (20 bytes), then closes (a close with input unread
			// may reach the client as a reset).
			rest, err := io.ReadAll(nc)
			if !errors.Is(err, syscall.ECONNRESET) {
				require.NoError(t, err, "the server did not close the connection")
			}
			assert.LessOrEqual(t, len(rest), 41+20, "bytes sent to a bad client")
			assert.Equal(t, malformed+1, mntrValue(t, addr, "zk_malformed_packets"), "one malformed packet counted")
			_, err = good.Create("/ok-"+strings.ReplaceAll(tc.name, " ", "-"), nil, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err, "the healthy session carries on")
		})
	}
}
