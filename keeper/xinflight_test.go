package keeper_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// drivers counts the goroutines driving a connection's cross-shard
// transaction on a member of this process.
func drivers() int {
	buf := make([]byte, 1<<24)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "server.(*conn).xtransaction.func")
}

// TestConnectionRunsBoundedTransactions: one connection pipelining 300
// cross-shard transactions that cannot end soon (every member of the other
// shard is down) makes its member run at most 64 drivers at once, not a
// goroutine or two each.
func TestConnectionRunsBoundedTransactions(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})
	c.WaitLeader("a")
	c.WaitLeader("b")
	for _, m := range c.Shard("b").Members {
		c.Kill(m.ID)
	}
	nc, _ := handshake(t, c.Servers("a")[0], proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, proto.PasswordLen)})
	var frames []byte
	create := func(path string) proto.MultiRequest {
		return proto.MultiRequest{Ops: []proto.MultiOp{{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll)}}}}
	}
	for i := range 300 {
		req := &proto.XTransactionRequest{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Coordinator: "a", TimeoutMs: 10_000,
			Shards: []proto.ShardOps{{Shard: "a", Ops: create(fmt.Sprintf("/x%d", i))}, {Shard: "b", Ops: create(fmt.Sprintf("/y%d", i))}}}
		frames = proto.AppendFrame(frames, &proto.RequestHeader{Xid: int32(i + 1), OpCode: proto.OpXTransaction}, req)
	}
	_, err := nc.Write(frames)
	require.NoError(t, err)
	most := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		most = max(most, drivers())
	}
	t.Logf("at most %d drivers at once", most)
	require.Positive(t, most, "the transactions reach the member")
	require.LessOrEqual(t, most, 64, "drivers at once for one connection")
}
