package keeper_test

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestBadFramesCloseOnlyTheirConnection sends malformed, truncated and
// oversized frames on their own connections: each is closed, the server
// counts it, and a healthy session on the same member carries on.
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
		name  string
		bytes []byte
	}{
		{"oversized connect frame", []byte{0x7f, 0xff, 0xff, 0xff, 0, 0}},
		{"negative frame length", []byte{0xff, 0xff, 0xff, 0xf0}},
		{"truncated connect", []byte{0, 0, 0, 44, 0, 0, 0}},
		{"connect with bad password length", append(append([]byte{0, 0, 0, 28}, make([]byte, 24)...), 0, 0, 0, 100)},
		{"oversized request", append(append([]byte{}, handshake...), 0x10, 0, 0, 0)},
		{"request body cut short", append(append([]byte{}, handshake...), header(proto.OpGetData, []byte{0, 0, 0, 200, '/'})...)},
		{"request header cut short", append(append([]byte{}, handshake...), 0, 0, 0, 2, 0, 0)},
		{"multi with a read op", append(append([]byte{}, handshake...),
			header(proto.OpMulti, []byte{0, 0, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, '/', 0})...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer nc.Close()
			nc.Write(tc.bytes)
			nc.(*net.TCPConn).CloseWrite() // a truncated frame ends here
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			// The server answers at most a handshake (41 bytes) and, for a
			// request it could frame but not decode, one error reply
			// header (20 bytes), then closes.
			rest, err := io.ReadAll(nc)
			require.NoError(t, err, "connection not closed by the server")
			if len(rest) > 41+20 {
				t.Fatalf("server sent %d bytes to a bad client", len(rest))
			}
			if _, err := good.Create("/ok-"+strings.ReplaceAll(tc.name, " ", "-"), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatalf("healthy session broken after %s: %v", tc.name, err)
			}
		})
	}
	mntr, err := testenv.FourLetterWord(t.Context(), addr, "mntr")
	require.NoError(t, err)
	if !strings.Contains(mntr, "zk_malformed_packets\t") || strings.Contains(mntr, "zk_malformed_packets\t0\n") {
		t.Fatalf("malformed packets not counted:\n%s", mntr)
	}
}
