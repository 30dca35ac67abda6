package server_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// pipelined opens a session on a one-member shard holding /b (100 bytes)
// and returns a function that sends n requests made by req, then reads
// their replies (and any notification between them).
func pipelined(b *testing.B) func(n int, op proto.OpCode, req func() proto.Record) {
	c := testenv.StartShard(b, 1)
	nc, err := net.Dial("tcp", c.Servers("a")[0])
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	br, bw := bufio.NewReaderSize(nc, 256<<10), bufio.NewWriterSize(nc, 256<<10)
	nc.SetDeadline(time.Now().Add(10 * time.Minute))
	nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 30000, Passwd: make([]byte, proto.PasswordLen)}))
	if _, err := proto.ReadFrame(br, 1<<20); err != nil {
		b.Fatal(err)
	}
	var frame []byte
	xid := int32(0)
	round := func(n int, op proto.OpCode, req func() proto.Record) {
		for range n {
			xid++
			frame = proto.AppendFrame(frame[:0], &proto.RequestHeader{Xid: xid, OpCode: op}, req())
			bw.Write(frame)
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			f, err := proto.ReadFrame(br, 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			var h proto.ReplyHeader
			h.Decode(proto.NewDecoder(f))
			if h.Xid == proto.XidNotification {
				continue
			}
			if h.Err != proto.ErrOK && h.Err != proto.ErrNoNode {
				b.Fatalf("%v: %v", op, h.Err)
			}
			got++
		}
	}
	round(1, proto.OpCreate, func() proto.Record {
		return &proto.CreateRequest{Path: "/b", Data: make([]byte, 100), ACL: proto.WorldACL(proto.PermAll)}
	})
	return round
}

// depth is how many requests the benchmarks keep in flight.
const depth = 64

// BenchmarkPipelinedReads: getData of one znode; per request.
func BenchmarkPipelinedReads(b *testing.B) {
	round := pipelined(b)
	b.ResetTimer()
	for range b.N/depth + 1 {
		round(depth, proto.OpGetData, func() proto.Record { return &proto.PathWatchRequest{Path: "/b"} })
	}
}

// BenchmarkPipelinedWatchedReads: exists with a watch over 1,000 paths
// (new watches, then watches set again); per request.
func BenchmarkPipelinedWatchedReads(b *testing.B) {
	round := pipelined(b)
	paths := make([]string, 1000)
	for i := range paths {
		paths[i] = fmt.Sprintf("/w%d", i)
	}
	n := 0
	b.ResetTimer()
	for range b.N/depth + 1 {
		round(depth, proto.OpExists, func() proto.Record {
			n++
			return &proto.PathWatchRequest{Path: paths[n%len(paths)], Watch: true}
		})
	}
}

// BenchmarkPipelinedWatchedWrites: setData of a znode the session watches
// (persistent): each write's reply and the notification it fires; per
// request.
func BenchmarkPipelinedWatchedWrites(b *testing.B) {
	round := pipelined(b)
	round(1, proto.OpAddWatch, func() proto.Record { return &proto.AddWatchRequest{Path: "/b"} })
	data := make([]byte, 100)
	b.ResetTimer()
	for range b.N/depth + 1 {
		round(depth, proto.OpSetData, func() proto.Record { return &proto.SetDataRequest{Path: "/b", Data: data, Version: -1} })
	}
}
