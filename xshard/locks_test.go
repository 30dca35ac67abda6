package xshard_test

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// gate holds the first transaction's driver that reaches a step after
// arm until released.
type gate struct {
	step    string
	mu      sync.Mutex
	armed   bool
	id      string
	reached chan struct{}
	release chan struct{}
}

func (g *gate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func newGate(step string) *gate {
	return &gate{step: step, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) hook(step, id, _ string) error {
	g.mu.Lock()
	match := g.armed && step == g.step && (g.id == "" || g.id == id)
	first := match && g.id == ""
	if first {
		g.id = id
	}
	g.mu.Unlock()
	if first {
		close(g.reached)
		<-g.release
	}
	return nil
}

// waitLocked polls until every member of shard has path locked.
func waitLocked(t *testing.T, c *testenv.Cluster, shard, path string) {
	waitFor(t, func() bool {
		for _, m := range c.Shard(shard).Members {
			locked := false
			c.Member(m.ID).Replica.View(func(st *fsm.State) { locked = st.LockedBy(path) != "" })
			if !locked {
				return false
			}
		}
		return true
	})
}

// rawSession is a bare ZooKeeper connection for pipelining requests.
type rawSession struct {
	t  *testing.T
	nc net.Conn
}

func dialRaw(t *testing.T, addr string) *rawSession {
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.Write(proto.AppendFrame(nil, &proto.ConnectRequest{Timeout: 10000, Passwd: make([]byte, 16)}))
	r := &rawSession{t: t, nc: nc}
	var resp proto.ConnectResponse
	if err := proto.Unmarshal(r.frame(), &resp); err != nil || resp.SessionID == 0 {
		t.Fatalf("handshake: %v %+v", err, resp)
	}
	return r
}

func (r *rawSession) frame() []byte {
	r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := proto.ReadFrame(r.nc, 1<<20)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

func (r *rawSession) send(xid int32, op proto.OpCode, req proto.Record) {
	r.nc.Write(proto.AppendFrame(nil, &proto.RequestHeader{Xid: xid, OpCode: op}, req))
}

// reply reads the next reply that is not a notification.
func (r *rawSession) reply() (proto.ReplyHeader, []byte) {
	for {
		b := r.frame()
		d := proto.NewDecoder(b)
		var h proto.ReplyHeader
		h.Decode(d)
		if h.Xid != proto.XidNotification {
			return h, d.Rest()
		}
	}
}

// gatedCluster starts two 3-member shards whose drivers stop at the gate
// after every prepare, and a router to them.
func gatedCluster(t *testing.T) (*gate, *testenv.Cluster, *xshard.Router) {
	g := newGate(xshard.StepAllPrepared)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, XHook: g.hook})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	t.Cleanup(r.Close)
	return g, c, r
}

func TestLocksRefuseThenRelease(t *testing.T) {
	g, c, r := gatedCluster(t)
	ctx := ctxT(t)
	if _, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/x", "1"), create("/free", "")}},
		{Shard: "b", Requests: []proto.MultiOp{create("/y", "1")}},
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	g.arm()
	go func() {
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{setData("/x", "2", 0), create("/x/kid", "")}},
			{Shard: "b", Requests: []proto.MultiOp{setData("/y", "2", 0)}},
		})
		done <- err
	}()
	<-g.reached
	waitLocked(t, c, "a", "/x")
	ca, err := r.Client(ctx, "a")
	require.NoError(t, err)
	// Every member refuses reads and writes of the locked paths.
	for _, addr := range c.Servers("a") {
		s := dialRaw(t, addr)
		s.send(1, proto.OpGetData, &proto.PathWatchRequest{Path: "/x"})
		s.send(2, proto.OpGetChildren, &proto.PathWatchRequest{Path: "/x"})
		s.send(3, proto.OpSetData, &proto.SetDataRequest{Path: "/x", Data: []byte("3"), Version: -1})
		s.send(4, proto.OpGetData, &proto.PathWatchRequest{Path: "/free"})
		for i, want := range []proto.Code{proto.ErrLocked, proto.ErrLocked, proto.ErrLocked, proto.ErrOK} {
			if h, _ := s.reply(); h.Err != want {
				t.Fatalf("%s request %d: %v, want %v", addr, i+1, h.Err, want)
			}
		}
	}
	// A conflicting transaction is rejected at prepare.
	_, err = xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/other", "")}},
		{Shard: "b", Requests: []proto.MultiOp{setData("/y", "9", -1)}},
	})
	if !errors.Is(err, proto.ErrLocked) {
		t.Fatalf("conflicting transaction: %v, want locked", err)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Do(ctx, proto.OpGetData, &proto.PathWatchRequest{Path: "/x"}, &proto.GetDataResponse{}); err != nil {
		t.Fatalf("read after commit: %v", err)
	}
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
}

// TestSiblingCreatesDoNotBlockEachOther: while one transaction that creates
// a child of /dir is held between prepare and decision, another
// transaction creating a sibling commits, and no member lists /dir's
// children until the first has ended.
func TestSiblingCreatesDoNotBlockEachOther(t *testing.T) {
	g, c, r := gatedCluster(t)
	ctx := ctxT(t)
	tx := func(name string) []xshard.MultiRequestForShard {
		return []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{create("/dir/"+name, name)}},
			{Shard: "b", Requests: []proto.MultiOp{create("/"+name, name)}},
		}
	}
	_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/dir", "")}},
		{Shard: "b", Requests: []proto.MultiOp{create("/other", "")}},
	})
	require.NoError(t, err)
	held := make(chan error, 1)
	g.arm()
	go func() {
		_, err := xshard.CrossShardTransaction(ctx, r, tx("held"))
		held <- err
	}()
	<-g.reached
	waitLocked(t, c, "a", "/dir")

	// Another router: the held request stops its session's later requests.
	r2 := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	defer r2.Close()
	_, err = xshard.CrossShardTransaction(ctx, r2, tx("sibling"))
	require.NoError(t, err, "a sibling create commits while the other is undecided")
	for _, addr := range c.Servers("a") {
		s := dialRaw(t, addr)
		s.send(1, proto.OpGetChildren, &proto.PathWatchRequest{Path: "/dir"})
		s.send(2, proto.OpGetData, &proto.PathWatchRequest{Path: "/dir/sibling"})
		for i, want := range []proto.Code{proto.ErrLocked, proto.ErrOK} {
			h, _ := s.reply()
			assert.Equal(t, want, h.Err, "%s request %d", addr, i+1)
		}
	}
	close(g.release)
	require.NoError(t, <-held)
	ca, err := r.Client(ctx, "a")
	require.NoError(t, err)
	var kids proto.ChildrenResponse
	_, err = ca.Do(ctx, proto.OpGetChildren, &proto.PathWatchRequest{Path: "/dir"}, &kids)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"held", "sibling"}, kids.Children)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
}

// TestDelayModeKeepsSessionOrder: in delay mode a write to a locked path
// waits for the lock, and the session's next request waits behind it.
func TestDelayModeKeepsSessionOrder(t *testing.T) {
	g := newGate(xshard.StepAllPrepared)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1, XHook: g.hook,
		Keeper: func(k *config.Keeper) { k.LockWait, k.LockWaitMax = "delay", 20*time.Second }})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	defer r.Close()
	ctx := ctxT(t)
	if _, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/x", "0")}},
		{Shard: "b", Requests: []proto.MultiOp{create("/y", "0")}},
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	g.arm()
	go func() {
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{setData("/x", "tx", 0)}},
			{Shard: "b", Requests: []proto.MultiOp{setData("/y", "tx", 0)}},
		})
		done <- err
	}()
	<-g.reached
	s := dialRaw(t, c.Servers("a")[0])
	s.send(1, proto.OpSetData, &proto.SetDataRequest{Path: "/x", Data: []byte("client"), Version: -1})
	s.send(2, proto.OpCreate, &proto.CreateRequest{Path: "/after", ACL: proto.WorldACL(proto.PermAll)})
	close(g.release)
	for i := 1; i <= 2; i++ {
		if h, _ := s.reply(); h.Err != proto.ErrOK || h.Xid != int32(i) {
			t.Fatalf("reply %d: %+v", i, h)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Member("a1").Replica.View(func(st *fsm.State) {
		x, after := st.Node("/x"), st.Node("/after")
		if string(x.Data()) != "client" || x.Version != 2 {
			t.Errorf("/x = %q v%d: the delayed write must apply after the transaction's", x.Data(), x.Version)
		}
		if after.Czxid <= x.Mzxid {
			t.Errorf("/after (czxid %d) overtook the delayed write (mzxid %d)", after.Czxid, x.Mzxid)
		}
	})
}

// TestDeadlinePassedWhileParticipantUnreachable: a participant that is down
// past the deadline makes the transaction fail everywhere; back up, it
// refuses the late prepare.
func TestDeadlinePassedWhileParticipantUnreachable(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	defer r.Close()
	ctx := ctxT(t)
	for _, m := range c.Shard("b").Members {
		c.Kill(m.ID)
	}
	done := make(chan error, 1)
	go func() {
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{create("/late", "")}},
			{Shard: "b", Requests: []proto.MultiOp{create("/late", "")}},
		}, xshard.Options{Deadline: 500 * time.Millisecond})
		done <- err
	}()
	// Wait until a's official time is past the transaction's deadline.
	var deadline int64
	waitFor(t, func() bool {
		ok := false
		c.Member(c.Leader("a")).Replica.View(func(st *fsm.State) {
			for _, rec := range st.XRecords() {
				deadline = rec.Deadline
				ok = st.Time() > rec.Deadline
			}
		})
		return ok
	})
	for _, m := range c.Shard("b").Members {
		c.Restart(m.ID)
	}
	err := <-done
	var xe *xshard.Error
	if !errors.As(err, &xe) || xe.Shard != "b" || !errors.Is(err, proto.ErrOperationTimeout) {
		t.Fatalf("want a deadline failure on b, got %v", err)
	}
	if _, ok := node(t, c, "a", "/late"); ok {
		t.Fatal("a applied a failed transaction")
	}
	if _, ok := node(t, c, "b", "/late"); ok {
		t.Fatal("b applied a late prepare")
	}
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	t.Logf("deadline %d refused", deadline)
}

// TestProtocolMessagesAreIdempotent sends duplicate, late and reordered
// protocol messages straight to the shards: nothing applies twice, and a
// stray prepare with no coordinator record is resolved as failed.
func TestProtocolMessagesAreIdempotent(t *testing.T) {
	id := "0f3c2a8e-1111-4c3b-9d1e-6f2b1a7c9e01"
	var (
		c      *testenv.Cluster
		caller atomic.Pointer[[]proto.ID] // the identities the coordinator sent b
	)
	hook := func(step, tx, shard string) error {
		if step == xshard.StepPrepared && tx == id && shard == "b" {
			for _, m := range c.Shard("b").Members {
				c.Member(m.ID).Replica.View(func(st *fsm.State) {
					if rec := st.XRecord(id); rec != nil {
						caller.Store(&rec.IDs)
					}
				})
			}
		}
		return nil
	}
	c = testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, XHook: hook})
	r := c.MemberRouter() // the protocol's messages are for members alone
	ctx := ctxT(t)
	tx := []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/idem", "")}},
		{Shard: "b", Requests: []proto.MultiOp{{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/idem-seq-",
			ACL: proto.WorldACL(proto.PermAll), Flags: proto.FlagSequential}}}},
	}
	if _, err := xshard.CrossShardTransaction(ctx, r, tx, xshard.Options{ID: id}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	// Replays of every message of the finished transaction, the prepare
	// with its caller's identities (another caller's is refused).
	far := time.Now().Add(time.Hour).UnixMilli()
	require.NotNil(t, caller.Load(), "b's record was seen")
	prep := &proto.XPrepareRequest{ID: id, Coordinator: "a", Self: "b", Shards: []string{"a", "b"}, Deadline: far,
		Ops: []proto.ShardOps{{Shard: "b", Ops: proto.MultiRequest{Ops: tx[1].Requests}}}, IDs: *caller.Load()}
	for _, m := range []struct {
		op  proto.OpCode
		req proto.Record
	}{{proto.OpXPrepare, prep}, {proto.OpXCommit, &proto.XIDRequest{ID: id}}, {proto.OpXCommitDelete, &proto.XIDRequest{ID: id}}} {
		var rec proto.XRecord
		if err := r.Do(ctx, "b", m.op, m.req, &rec); err != nil || rec.Status != proto.XCommitted {
			t.Fatalf("replayed %v: %v %v", m.op, rec.Status, err)
		}
	}
	// A client retry is answered from the outcome.
	if _, err := xshard.CrossShardTransaction(ctx, r, tx, xshard.Options{ID: id}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	var kids proto.ChildrenResponse
	cb, _ := r.Client(ctx, "b")
	if _, err := cb.Do(ctx, proto.OpGetChildren, &proto.PathWatchRequest{Path: "/"}, &kids); err != nil {
		t.Fatal(err)
	}
	seq := 0
	for _, k := range kids.Children {
		if len(k) > 9 && k[:9] == "idem-seq-" {
			seq++
		}
	}
	if seq != 1 {
		t.Fatalf("sequential node created %d times, want once: %v", seq, kids.Children)
	}
	if err := r.Do(ctx, "b", proto.OpXDelete, &proto.XIDRequest{ID: id}, &proto.XRecord{}); err != nil {
		t.Fatal(err)
	}
	// Reordered: a fail before its prepare, then a stray prepare whose
	// coordinator never recorded anything. The participant holds it past the
	// deadline, asks the coordinator, which records it failed and cleans up.
	stray := "0f3c2a8e-2222-4c3b-9d1e-6f2b1a7c9e02"
	if err := r.Do(ctx, "b", proto.OpXFail, &proto.XIDRequest{ID: stray}, &proto.XRecord{}); err != nil {
		t.Fatal(err)
	}
	var rec proto.XRecord
	soon := time.Now().Add(300 * time.Millisecond).UnixMilli()
	p2 := &proto.XPrepareRequest{ID: stray, Coordinator: "a", Self: "b", Shards: []string{"a", "b"}, Deadline: soon,
		Ops: []proto.ShardOps{{Shard: "b", Ops: proto.MultiRequest{Ops: []proto.MultiOp{create("/stray", "")}}}}}
	if err := r.Do(ctx, "b", proto.OpXPrepare, p2, &rec); err != nil || rec.Status != proto.XPending {
		t.Fatalf("stray prepare: %v %v", rec.Status, err)
	}
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	if _, ok := node(t, c, "b", "/stray"); ok {
		t.Fatal("stray transaction applied")
	}
	if st, err := xshard.Outcome(ctx, r, "a", stray); err != nil || st != proto.XFailed {
		t.Fatalf("stray outcome: %v %v", st, err)
	}
}

// TestDelayModeNeverAnswersLocked: in delay mode a write that meets a lock
// taken after the member's own check (between its check and its apply) is
// waited out too, not answered with ErrLocked, and a session's pipelined
// writes still apply in order. Transactions lock /x over and over while a
// session pipelines versioned writes to /x.
func TestDelayModeNeverAnswersLocked(t *testing.T) {
	c, r := xyCluster(t, nil, func(k *config.Keeper) { k.LockWait, k.LockWaitMax = "delay", 20*time.Second })
	ctx := ctxT(t)
	stop := make(chan struct{})
	txDone := make(chan int, 1)
	go func() {
		n := 0
		defer func() { txDone <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
				{Shard: "a", Requests: []proto.MultiOp{{Op: proto.OpCheck, Req: &proto.PathVersionRequest{Path: "/x", Version: -1}}}},
				{Shard: "b", Requests: []proto.MultiOp{setData("/y", "tx", -1)}},
			})
			if err == nil {
				n++
			}
		}
	}()
	const rounds, depth = 150, 4
	for _, addr := range c.Servers("a") {
		s := dialRaw(t, addr)
		for round := range rounds {
			for i := range depth {
				s.send(int32(i+1), proto.OpSetData, &proto.SetDataRequest{Path: "/x", Data: []byte(fmt.Sprint(round, i)), Version: -1})
			}
			last := int32(-1)
			for i := range depth {
				h, body := s.reply()
				require.Equal(t, proto.ErrOK, h.Err, "%s round %d reply %d", addr, round, i+1)
				require.Equal(t, int32(i+1), h.Xid)
				var st proto.Stat
				st.Decode(proto.NewDecoder(body))
				if last >= 0 {
					require.Equal(t, last+1, st.Version, "the session's writes apply in order: %s round %d reply %d", addr, round, i+1)
				}
				last = st.Version
			}
		}
	}
	close(stop)
	assert.Positive(t, <-txDone, "transactions ran alongside")
}

// TestAnswerOnceEveryShardPrepared: the client has its answer, with every
// op's result, while the commits are still held back; until they land
// every member of every shard holds the old state locked, so nobody reads
// it; the answering client's next reads wait for the commits and see the
// results it was given (but for the zxid and time, which are the
// commit's).
func TestAnswerOnceEveryShardPrepared(t *testing.T) {
	g := newGate(xshard.StepAnswered)
	c, r := xyCluster(t, g.hook, func(k *config.Keeper) { k.LockGrace = time.Minute })
	ctx := ctxT(t)

	g.arm()
	release := sync.OnceFunc(func() { close(g.release) })
	defer release() // a failing test must not leave the driver held: Stop waits for it
	id := uuid.NewString()
	res, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{setData("/x", "1", 0), create("/x/kid", "k")}},
		{Shard: "b", Requests: []proto.MultiOp{setData("/y", "1", 0)}},
	}, xshard.Options{ID: id})
	require.NoError(t, err, "answered before any commit")
	<-g.reached
	outcome, err := xshard.Outcome(ctx, r, "a", id)
	require.NoError(t, err)
	assert.Equal(t, proto.XCommitted, outcome, "the outcome looked up by id is the answer's, before any commit")
	answered := map[string]proto.Stat{}
	for _, sr := range res {
		require.NotEmpty(t, sr.Results)
		answered[sr.Shard] = sr.Results[0].Resp.(*proto.StatResponse).Stat
	}
	require.Equal(t, int32(1), answered["a"].Version)
	require.Equal(t, int32(1), answered["b"].Version)
	for sh, path := range map[string]string{"a": "/x", "b": "/y"} {
		waitLocked(t, c, sh, path) // a follower may not have applied the prepare yet
		for _, m := range c.Shard(sh).Members {
			c.Member(m.ID).Replica.View(func(st *fsm.State) {
				assert.Equal(t, "0", string(st.Node(path).Data()), "%s before the commit", m.ID)
				assert.NotEmpty(t, st.LockedBy(path), "%s keeps %s from readers", m.ID, path)
			})
		}
	}

	type read struct {
		shard string
		data  proto.GetDataResponse
		err   error
	}
	reads := make(chan read, 2)
	for sh, path := range map[string]string{"a": "/x", "b": "/y"} {
		cl, err := r.Client(ctx, sh)
		require.NoError(t, err)
		go func() {
			rd := read{shard: sh}
			_, rd.err = cl.Do(ctx, proto.OpGetData, &proto.PathWatchRequest{Path: path}, &rd.data)
			reads <- rd
		}()
	}
	release()
	for range 2 {
		rd := <-reads
		require.NoError(t, rd.err, "the answering client's read of %s", rd.shard)
		assert.Equal(t, "1", string(rd.data.Data))
		want, got := answered[rd.shard], rd.data.Stat
		assert.Equal(t, []any{want.Version, want.DataLength}, []any{got.Version, got.DataLength},
			"the stat the client was answered is the one stored")
		// The commit stamps the change with its own zxid and time (issue
		// 38, item 6): the answer's, fixed by the prepare, are older.
		assert.Greater(t, got.Mzxid, want.Mzxid, "stamped by the commit")
		assert.GreaterOrEqual(t, got.Mtime, want.Mtime)
	}
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
}

// xyCluster starts two 3-member shards with keeper settings adjusted by
// keeper and hook in their drivers, a router to them, and /x on a and /y
// on b (data "0"), committed everywhere: a hook at a step after the
// answer does not catch the setup's commits.
func xyCluster(t *testing.T, hook xshard.Hook, keeper func(*config.Keeper)) (*testenv.Cluster, *xshard.Router) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, XHook: hook, Keeper: keeper})
	r := xshard.NewRouter(c.Config, testenv.TestLogger(t))
	t.Cleanup(r.Close)
	_, err := xshard.CrossShardTransaction(ctxT(t), r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/x", "0")}},
		{Shard: "b", Requests: []proto.MultiOp{create("/y", "0")}},
	})
	require.NoError(t, err)
	waitFor(t, func() bool { return records(c, "a")+records(c, "b") == 0 })
	return c, r
}

// TestNextTransactionFindsItsOwnWrites: a client that runs transactions
// back to back on the same paths never meets the lock of its previous
// one, whose commits land after its answer: a prepare that meets a lock
// is sent again for keeper.lock_grace before it counts as refused.
func TestNextTransactionFindsItsOwnWrites(t *testing.T) {
	_, r := xyCluster(t, nil, nil)
	ctx := ctxT(t)
	for i := range int32(50) {
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{setData("/x", fmt.Sprint(i+1), i)}},
			{Shard: "b", Requests: []proto.MultiOp{setData("/y", fmt.Sprint(i+1), i)}},
		})
		require.NoError(t, err, "transaction %d", i+1)
	}
}

// TestFollowerReadReleasesAHeldCommit: with commits held back for 2 s
// (keeper.decision_hold), a read through a follower of a path an answered
// transaction wrote meets the transaction's lock; the follower asks its
// leader to release the held commit, and the read sees the write within
// keeper.lock_grace (100 ms), sooner than a recovery round (every 200 ms,
// after one that saw no entry) would have released it. Without the
// follower's request the read is refused with -1000. (After a lock was
// met, the leader holds nothing for a hold's length, so a later round may
// find the commit applied already; the first always meets the lock.)
func TestFollowerReadReleasesAHeldCommit(t *testing.T) {
	c, r := xyCluster(t, nil, func(k *config.Keeper) { k.DecisionHold = 2 * time.Second; k.LockGrace = 100 * time.Millisecond })
	ctx := ctxT(t)
	paths := map[string]string{"a": "/x", "b": "/y"}
	followers := map[string]config.Member{}
	clients := map[string]*client.Client{}
	for sh := range paths {
		followers[sh] = c.Follower(sh)
		cl, err := client.Connect(ctx, []string{followers[sh].ClientAddr})
		require.NoError(t, err)
		t.Cleanup(func() { cl.Close() })
		clients[sh] = cl
	}
	for i := range int32(3) {
		value := fmt.Sprint(i + 1)
		_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
			{Shard: "a", Requests: []proto.MultiOp{setData("/x", value, i)}},
			{Shard: "b", Requests: []proto.MultiOp{setData("/y", value, i)}},
		})
		require.NoError(t, err)
		for sh, path := range paths {
			locked := false
			waitFor(t, func() bool { // the follower has the prepare, or already the commit
				var done bool
				c.Member(followers[sh].ID).Replica.View(func(st *fsm.State) {
					locked, done = st.LockedBy(path) != "", string(st.Node(path).Data()) == value
				})
				return locked || done
			})
			require.True(t, locked || i > 0, "the first commit is held: the follower's read meets its lock")
			var got proto.GetDataResponse
			_, err := clients[sh].Do(ctx, proto.OpGetData, &proto.PathWatchRequest{Path: path}, &got)
			require.NoError(t, err, "read of %s through a follower, transaction %d", path, i+1)
			assert.Equal(t, value, string(got.Data))
		}
	}
}

// TestAbandonedAnswerIsTakenOver: the driver of an answered transaction
// stops before it sends any commit, as if its member died. The
// coordinator's leader takes the transaction over once it has been pending
// for Service.Takeover (1 s), long before its deadline (here 60 s): the
// locks go. The answered client's reads, sent at once in reject mode,
// wait for that and see the writes, where they used to get -1000 after
// keeper.lock_grace; and the paths stayed locked until the deadline.
func TestAbandonedAnswerIsTakenOver(t *testing.T) {
	var abandon sync.Map // ids of transactions whose driver stops once answered
	c, r := xyCluster(t, func(step, id, _ string) error {
		if step != xshard.StepAnswered {
			return nil
		}
		if _, first := abandon.LoadAndDelete(id); first { // recovery's own driver goes on
			return errCrash
		}
		return nil
	}, nil)
	ctx := ctxT(t)
	id := uuid.NewString()
	abandon.Store(id, true)
	answered := time.Now()
	_, err := xshard.CrossShardTransaction(ctx, r, []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{setData("/x", "1", 0)}},
		{Shard: "b", Requests: []proto.MultiOp{setData("/y", "1", 0)}},
	}, xshard.Options{ID: id, Deadline: time.Minute})
	require.NoError(t, err, "answered once both shards prepared")
	// At once, in reject mode: each read meets the lock, waits the grace,
	// then, the transaction still pending, for the takeover.
	for sh, path := range map[string]string{"a": "/x", "b": "/y"} {
		cl, err := r.Client(ctx, sh)
		require.NoError(t, err)
		var got proto.GetDataResponse
		_, err = cl.Do(ctx, proto.OpGetData, &proto.PathWatchRequest{Path: path}, &got)
		require.NoError(t, err, "the answered client's read of %s", path)
		assert.Equal(t, "1", string(got.Data), "the answered write on %s", sh)
	}
	t.Logf("read %v after the answer", time.Since(answered).Round(time.Millisecond))
	require.Eventually(t, func() bool { return records(c, "a")+records(c, "b") == 0 }, 15*time.Second, 10*time.Millisecond,
		"records and locks drain long before the deadline")
}
