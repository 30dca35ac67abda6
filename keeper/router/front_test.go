package router

import (
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// fakeShard is a member as the endpoint sees it, answering every request
// with a header and what the endpoint reads of it: enough to watch which
// requests reach a shard, and to lose a connection under one.
type fakeShard struct {
	mu  sync.Mutex
	got []proto.OpCode // the requests received, pings left out
	// lose, if set, picks the requests whose connection the member drops
	// instead of answering.
	lose func(op proto.OpCode) bool
	// down makes every new connection fail, as a member that is gone.
	down bool
}

func (s *fakeShard) ServeRouted(nc net.Conn, _ net.Addr, _ bool) error {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		return net.ErrClosed
	}
	go s.serve(nc)
	return nil
}

func (s *fakeShard) ServeConn(nc net.Conn, _ net.Addr) error {
	nc.Close()
	return nil
}

// ops returns the requests received so far.
func (s *fakeShard) ops() []proto.OpCode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *fakeShard) serve(nc net.Conn) {
	defer nc.Close()
	frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	var req proto.ConnectRequest
	if err != nil || proto.Unmarshal(frame, &req) != nil {
		return
	}
	id := req.SessionID
	if id == 0 {
		id = 0x5e55
	}
	resp := &proto.ConnectResponse{Timeout: req.Timeout, SessionID: id, Passwd: make([]byte, proto.PasswordLen), HasReadOnly: req.HasReadOnly}
	if _, err := nc.Write(proto.AppendFrame(nil, resp)); err != nil {
		return
	}
	for {
		frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
		if err != nil {
			return
		}
		d := proto.NewDecoder(frame)
		var h proto.RequestHeader
		h.Decode(d)
		if h.OpCode != proto.OpPing {
			s.mu.Lock()
			s.got = append(s.got, h.OpCode)
			lose := s.lose != nil && s.lose(h.OpCode)
			s.mu.Unlock()
			if lose {
				return
			}
		}
		rh := &proto.ReplyHeader{Xid: h.Xid, Zxid: 1}
		var body proto.Record
		switch h.OpCode {
		case proto.OpExists, proto.OpGetData:
			rh.Err = proto.ErrNoNode // no mount point yet, no session record
		case proto.OpSync:
			body = &proto.PathRequest{Path: "/"}
		case proto.OpMultiRead:
			var m proto.MultiRequest
			proto.Unmarshal(d.Rest(), &m)
			r := &proto.MultiResponse{}
			for range m.Ops {
				r.Results = append(r.Results, proto.MultiResult{Op: proto.OpError, Err: proto.ErrNoNode})
			}
			body = r
		}
		recs := []proto.Record{rh}
		if body != nil {
			recs = append(recs, body)
		}
		if _, err := nc.Write(proto.AppendFrame(nil, recs...)); err != nil {
			return
		}
	}
}

// startFakes runs an endpoint over fake shards a (the root), b and c,
// with mounts /m on b and /m/n on c.
func startFakes(t *testing.T) (*Router, map[string]*fakeShard) {
	shards := map[string]*fakeShard{"a": {}, "b": {}, "c": {}}
	members := map[string]Member{}
	for name, s := range shards {
		members[name] = s
	}
	r, err := Listen(Config{Addr: "127.0.0.1:0", Root: "a", Shards: members,
		Mounts: []config.Mount{{Path: "/m", Shard: "b"}, {Path: "/m/n", Shard: "c"}}})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint did not prepare its mounts")
	}
	return r, shards
}

// client is a raw client connection to an endpoint.
type client struct {
	t       *testing.T
	nc      net.Conn
	xid     int32
	session int64
}

func dialClient(t *testing.T, addr string, session int64) *client {
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, SessionID: session, Passwd: make([]byte, proto.PasswordLen)}))
	require.NoError(t, err)
	frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	require.NoError(t, err)
	var resp proto.ConnectResponse
	require.NoError(t, proto.Unmarshal(frame, &resp))
	require.NotZero(t, resp.SessionID)
	return &client{t: t, nc: nc, session: resp.SessionID}
}

// send sends a request and returns its reply's header, or the error that
// ended the connection first.
func (c *client) send(op proto.OpCode, req proto.Record) (proto.ReplyHeader, error) {
	c.xid++
	if _, err := c.nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: c.xid, OpCode: op}, req)); err != nil {
		return proto.ReplyHeader{}, err
	}
	for {
		frame, err := proto.ReadFrame(c.nc, proto.DefaultMaxPacket)
		if err != nil {
			return proto.ReplyHeader{}, err
		}
		var h proto.ReplyHeader
		d := proto.NewDecoder(frame)
		h.Decode(d)
		require.NoError(c.t, d.Err())
		if h.Xid == c.xid {
			return h, nil
		}
	}
}

// TestEndpointLosesTheConnectionWithAShard (issue 38, item 12): when a
// shard's connection ends under a request, or the shard cannot be
// reached, the outcome is unknown and the client loses its connection, as
// on ZooKeeper, which never answers ZCONNECTIONLOSS (-4): a client takes
// that code for a reply, not for a lost connection. Reconnecting, it gets
// its session back.
func TestEndpointLosesTheConnectionWithAShard(t *testing.T) {
	create := func(path string, flags int32) *proto.CreateRequest {
		return &proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll), Flags: flags}
	}
	for _, tc := range []struct {
		name  string
		shard string
		lose  func(op proto.OpCode) bool
		down  bool
		op    proto.OpCode
		req   proto.Record
	}{
		{"a multiRead's second shard", "b", func(op proto.OpCode) bool { return op == proto.OpMultiRead }, false,
			proto.OpMultiRead, &proto.MultiRequest{Ops: []proto.MultiOp{
				{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: "/x"}},
				{Op: proto.OpGetData, Req: &proto.PathWatchRequest{Path: "/m/y"}}}}},
		{"a cross-shard multi's coordinator", "a", func(op proto.OpCode) bool { return op == proto.OpXTransaction }, false,
			proto.OpMulti, &proto.MultiRequest{Ops: []proto.MultiOp{
				{Op: proto.OpCreate, Req: create("/x", 0)}, {Op: proto.OpCreate, Req: create("/m/y", 0)}}}},
		{"an ephemeral mount point's holder, gone", "b", nil, true, proto.OpCreate, create("/m/n", proto.FlagEphemeral)},
		{"a sync's mounted shard", "b", func(op proto.OpCode) bool { return op == proto.OpSync }, false,
			proto.OpSync, &proto.PathRequest{Path: "/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, shards := startFakes(t)
			c := dialClient(t, r.Addr(), 0)
			if tc.op == proto.OpSync {
				h, err := c.send(proto.OpGetData, &proto.PathWatchRequest{Path: "/m/y"}) // a connection to b
				require.NoError(t, err)
				require.Equal(t, proto.ErrNoNode, h.Err)
			}
			s := shards[tc.shard]
			s.mu.Lock()
			s.lose, s.down = tc.lose, tc.down
			s.mu.Unlock()
			h, err := c.send(tc.op, tc.req)
			require.Error(t, err, "answered %v", h.Err)
			assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err), "%v", err)

			s.mu.Lock()
			s.lose, s.down = nil, false
			s.mu.Unlock()
			again := dialClient(t, r.Addr(), c.session)
			assert.Equal(t, c.session, again.session)
			h, err = again.send(proto.OpGetData, &proto.PathWatchRequest{Path: "/m/y"})
			require.NoError(t, err)
			assert.Equal(t, proto.ErrNoNode, h.Err)
		})
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// TestEndpointSyncReachesTheShardsBelow (issue 38, item 12): sync of a
// path syncs each shard mounted below it that the session reads from, not
// only the path's shard, before it answers: a read under a mount right
// after sync("/") sees what was committed before it.
func TestEndpointSyncReachesTheShardsBelow(t *testing.T) {
	r, shards := startFakes(t)
	c := dialClient(t, r.Addr(), 0)
	h, err := c.send(proto.OpGetData, &proto.PathWatchRequest{Path: "/m/y"})
	require.NoError(t, err)
	require.Equal(t, proto.ErrNoNode, h.Err)
	count := func(shard string) int {
		n := 0
		for _, op := range shards[shard].ops() {
			if op == proto.OpSync {
				n++
			}
		}
		return n
	}
	before := map[string]int{"a": count("a"), "b": count("b"), "c": count("c")}

	h, err = c.send(proto.OpSync, &proto.PathRequest{Path: "/"})
	require.NoError(t, err)
	require.Equal(t, proto.ErrOK, h.Err)
	assert.Equal(t, before["a"]+1, count("a"), "the root shard")
	assert.Equal(t, before["b"]+1, count("b"), "the shard mounted at /m, which the session read")
	assert.Equal(t, before["c"], count("c"), "the shard mounted at /m/n, which the session never used (its session is synced when it opens)")

	h, err = c.send(proto.OpSync, &proto.PathRequest{Path: "/m/y"})
	require.NoError(t, err)
	require.Equal(t, proto.ErrOK, h.Err)
	assert.Equal(t, before["a"]+1, count("a"), "a path with no mount below goes to its shard alone")
	assert.Equal(t, before["b"]+2, count("b"))
}
