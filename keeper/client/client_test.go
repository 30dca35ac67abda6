package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startShard starts a real 3-member shard in process, with Raft timings
// relaxed enough that a loaded machine (these tests run under -race
// beside others) does not trip it into spurious leader elections.
func startShard(t testing.TB) *testenv.Cluster {
	return testenv.StartCluster(t, testenv.ClusterOptions{Members: 3, Keeper: func(k *config.Keeper) {
		k.HeartbeatTimeout, k.ElectionTimeout, k.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	}})
}

// connect opens a session that the test closes at its end.
func connect(t testing.TB, servers []string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts = append([]client.Option{client.WithLogger(testenv.TestLogger(t))}, opts...)
	c, err := client.Connect(ctx, servers, opts...)
	require.NoError(t, err, "connect to %v", servers)
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx bounds each test's requests.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// retry repeats a request that may meet a connection loss while the
// shard fails over, until it succeeds.
func retry(t testing.TB, d time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nextEvent returns the next event of a watch within d.
func nextEvent(t testing.TB, ch <-chan client.Event, d time.Duration) client.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed without an event")
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no event after %v", d)
	}
	return client.Event{}
}

// expectEvent waits for a watch's event and checks it.
func expectEvent(t testing.TB, ch <-chan client.Event, typ proto.EventType, path string) {
	t.Helper()
	if ev := nextEvent(t, ch, 15*time.Second); ev.Type != typ || ev.Path != path {
		t.Fatalf("event %+v, want type %d on %s", ev, typ, path)
	}
}

// change sets path's data and creates child, retrying on connection loss
// while the shard fails over.
func change(t testing.TB, ctx context.Context, c *client.Client, path, child string) {
	t.Helper()
	if err := onLoss(ctx, func() error {
		_, err := c.Set(ctx, path, []byte("changed"), -1)
		return err
	}); err != nil {
		t.Fatalf("set %s: %v", path, err)
	}
	if err := create(ctx, c, child, nil); err != nil {
		t.Fatalf("create %s: %v", child, err)
	}
}

// expectClosed checks that a watch that fired is closed: it fires once.
func expectClosed(t testing.TB, ch <-chan client.Event) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("second event on a one-shot watch: %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch channel not closed after its event")
	}
}

// waitState reads session events until one in state s.
func waitState(t testing.TB, c *client.Client, s client.State, d time.Duration) client.Event {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatalf("events closed before state %v", s)
			}
			if ev.State == s {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event after %v", s, d)
		}
	}
}

// memberAt returns the id of the member serving addr.
func memberAt(t testing.TB, sh *testenv.Cluster, addr string) string {
	t.Helper()
	for _, m := range sh.Shard("a").Members {
		if m.ClientAddr == addr {
			return m.ID
		}
	}
	t.Fatalf("no member at %q", addr)
	return ""
}

// must returns a result, failing the test on its error.
// waitApplied polls until every running member has applied zxid, so a
// kill cannot leave a member that has not yet heard of a new session
// (see TestReattachToLaggingMember).
func waitApplied(t testing.TB, sh *testenv.Cluster, zxid int64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("every member applies zxid %d", zxid), func() bool {
		for _, m := range sh.Shard("a").Members {
			km := sh.Member(m.ID)
			if km == nil {
				continue
			}
			var applied int64
			km.Replica.View(func(st *fsm.State) { applied = st.Zxid() })
			if applied < zxid {
				return false
			}
		}
		return true
	})
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		require.NoError(t, err)
		return v
	}
}

func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func TestOps(t *testing.T) {
	sh := startShard(t)
	ctx := testCtx(t)
	c := connect(t, sh.Servers("a"))

	if p := must[string](t)(c.Create(ctx, "/ops", []byte("v0"), 0, nil)); p != "/ops" {
		t.Fatalf("create = %q", p)
	}
	p, st, err := c.Create2(ctx, "/ops/c2", []byte("x"), 0, proto.WorldACL(proto.PermAll))
	if err != nil || p != "/ops/c2" || st.Czxid == 0 || st.DataLength != 1 {
		t.Fatalf("create2 = %q %+v %v", p, st, err)
	}
	seq := must[string](t)(c.Create(ctx, "/ops/s-", nil, proto.FlagSequential, nil))
	if !strings.HasPrefix(seq, "/ops/s-") || len(seq) != len("/ops/s-")+10 {
		t.Fatalf("sequential create = %q", seq)
	}
	_, err = c.Create(ctx, "/ops", nil, 0, nil)
	wantErr(t, err, proto.ErrNodeExists)
	_, err = c.Create(ctx, "/missing/child", nil, 0, nil)
	wantErr(t, err, proto.ErrNoNode)

	ok, st, err := c.Exists(ctx, "/ops")
	if !ok || err != nil || st.NumChildren != 2 {
		t.Fatalf("exists = %v %+v %v", ok, st, err)
	}
	if ok, st, err := c.Exists(ctx, "/nope"); ok || st != nil || err != nil {
		t.Fatalf("exists on a missing node = %v %+v %v", ok, st, err)
	}

	data, st, err := c.Get(ctx, "/ops")
	if string(data) != "v0" || err != nil {
		t.Fatalf("get = %q %v", data, err)
	}
	_, _, err = c.Get(ctx, "/nope")
	wantErr(t, err, proto.ErrNoNode)

	st2, err := c.Set(ctx, "/ops", []byte("v1"), st.Version)
	if err != nil || st2.Version != st.Version+1 || st2.Mzxid <= st.Mzxid {
		t.Fatalf("set = %+v %v", st2, err)
	}
	_, err = c.Set(ctx, "/ops", []byte("v2"), st.Version)
	wantErr(t, err, proto.ErrBadVersion)

	kids := must[[]string](t)(c.GetChildren(ctx, "/ops"))
	slices.Sort(kids)
	if len(kids) != 2 || kids[0] != "c2" || "/ops/"+kids[1] != seq {
		t.Fatalf("children = %v", kids)
	}
	kids, st, err = c.GetChildren2(ctx, "/ops")
	if len(kids) != 2 || err != nil || st.NumChildren != 2 {
		t.Fatalf("children2 = %v %+v %v", kids, st, err)
	}

	acl, st, err := c.GetACL(ctx, "/ops")
	if err != nil || !slices.Equal(acl, proto.WorldACL(proto.PermAll)) || st.Aversion != 0 {
		t.Fatalf("getACL = %v %+v %v", acl, st, err)
	}
	st, err = c.SetACL(ctx, "/ops", proto.WorldACL(proto.PermRead|proto.PermAdmin), 0)
	if err != nil || st.Aversion != 1 {
		t.Fatalf("setACL = %+v %v", st, err)
	}
	_, err = c.Set(ctx, "/ops", nil, -1)
	wantErr(t, err, proto.ErrNoAuth)
	_, err = c.SetACL(ctx, "/ops", proto.WorldACL(proto.PermAll), 0)
	wantErr(t, err, proto.ErrBadVersion)
	must[*proto.Stat](t)(c.SetACL(ctx, "/ops", proto.WorldACL(proto.PermAll), 1))

	if p := must[string](t)(c.Sync(ctx, "/ops")); p != "/ops" {
		t.Fatalf("sync = %q", p)
	}
	if n := must[int32](t)(c.GetAllChildrenNumber(ctx, "/ops")); n != 2 {
		t.Fatalf("getAllChildrenNumber = %d", n)
	}

	must[string](t)(c.Create(ctx, "/ops/e1", nil, proto.FlagEphemeral, nil))
	must[string](t)(c.Create(ctx, "/ops/e2", nil, proto.FlagEphemeral, nil))
	eph := must[[]string](t)(c.GetEphemerals(ctx, "/ops"))
	slices.Sort(eph)
	if !slices.Equal(eph, []string{"/ops/e1", "/ops/e2"}) {
		t.Fatalf("getEphemerals = %v", eph)
	}
	if eph := must[[]string](t)(c.GetEphemerals(ctx, "/other")); len(eph) != 0 {
		t.Fatalf("getEphemerals(/other) = %v", eph)
	}
	_, st, _ = c.Exists(ctx, "/ops/e1")
	if st.EphemeralOwner != c.SessionID() {
		t.Fatalf("ephemeral owner %x, session %x", st.EphemeralOwner, c.SessionID())
	}

	ids := must[[]proto.ID](t)(c.WhoAmI(ctx))
	if len(ids) != 1 || ids[0].Scheme != "ip" {
		t.Fatalf("whoAmI = %v", ids)
	}
	if err := c.AddAuth(ctx, "digest", []byte("alice:secret")); err != nil {
		t.Fatal(err)
	}
	ids = must[[]proto.ID](t)(c.WhoAmI(ctx))
	if !slices.Contains(ids, proto.ID{Scheme: "digest", ID: "alice"}) {
		t.Fatalf("whoAmI after addAuth = %v", ids)
	}
	must[string](t)(c.Create(ctx, "/ops/private", []byte("s"), 0, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}}))
	if _, _, err := c.Get(ctx, "/ops/private"); err != nil {
		t.Fatal(err)
	}
	other := connect(t, sh.Servers("a"))
	_, _, err = other.Get(ctx, "/ops/private")
	wantErr(t, err, proto.ErrNoAuth)
	// A refused auth drops the connection (as ZooKeeper does), not the
	// session. The member should answer ErrAuthFailed first, but today it
	// closes before the reply goes out (TestRefusedRepliesReachTheClient).
	sid := other.SessionID()
	if err := other.AddAuth(ctx, "bogus", []byte("x")); !errors.Is(err, proto.ErrAuthFailed) && !errors.Is(err, proto.ErrConnectionLoss) {
		t.Fatalf("refused auth: %v", err)
	}
	retry(t, 10*time.Second, "get after a refused auth", func() error {
		_, _, err := other.Get(ctx, "/ops")
		return err
	})
	if other.SessionID() != sid {
		t.Fatalf("session changed from %x to %x after a refused auth", sid, other.SessionID())
	}

	// A multi that applies.
	res, err := c.Multi(ctx,
		client.CreateOp("/ops/m1", []byte("m"), 0, nil),
		client.SetOp("/ops", []byte("v3"), -1),
		client.CheckOp("/ops/c2", 0),
		client.DeleteOp("/ops/c2", -1))
	if err != nil || len(res) != 4 {
		t.Fatalf("multi = %+v %v", res, err)
	}
	if res[0].Path != "/ops/m1" || res[1].Stat == nil || res[1].Stat.DataLength != 2 || res[3].Op != proto.OpDelete {
		t.Fatalf("multi results = %+v", res)
	}
	for _, r := range res {
		if r.Err != proto.ErrOK {
			t.Fatalf("multi result %+v", r)
		}
	}
	if ok, _, _ := c.Exists(ctx, "/ops/c2"); ok {
		t.Fatal("multi delete did not apply")
	}
	// A multi that fails at op 1 applies nothing and says where.
	res, err = c.Multi(ctx,
		client.CreateOp("/ops/m2", nil, 0, nil),
		client.CreateOp("/ops/m1", nil, 0, nil),
		client.DeleteOp("/ops/nope", -1))
	var me *client.MultiError
	if !errors.As(err, &me) || me.Index != 1 || me.Path != "/ops/m1" || !errors.Is(err, proto.ErrNodeExists) {
		t.Fatalf("failed multi err = %v", err)
	}
	codes := []proto.Code{res[0].Err, res[1].Err, res[2].Err}
	if !slices.Equal(codes, []proto.Code{proto.ErrOK, proto.ErrNodeExists, proto.ErrRuntimeInconsistency}) {
		t.Fatalf("failed multi codes = %v", codes)
	}
	if ok, _, _ := c.Exists(ctx, "/ops/m2"); ok {
		t.Fatal("a failed multi applied its first op")
	}

	wantErr(t, c.Delete(ctx, "/ops", -1), proto.ErrNotEmpty)
	wantErr(t, c.Delete(ctx, "/ops/m1", 5), proto.ErrBadVersion)
	if err := c.Delete(ctx, "/ops/m1", 0); err != nil {
		t.Fatal(err)
	}
	wantErr(t, c.Delete(ctx, "/ops/m1", -1), proto.ErrNoNode)

	// Do is the extension point: any opcode with its records.
	var got proto.GetDataResponse
	zxid, err := c.Do(ctx, proto.OpGetData, &proto.PathWatchRequest{Path: "/ops"}, &got)
	if err != nil || string(got.Data) != "v3" || zxid < got.Stat.Mzxid || c.LastZxid() < zxid {
		t.Fatalf("do getData = %q zxid %d (last %d) %v", got.Data, zxid, c.LastZxid(), err)
	}

	// Too large a request is refused before it is sent; the session stays.
	_, err = c.Create(ctx, "/ops/big", make([]byte, proto.DefaultMaxPacket), 0, nil)
	wantErr(t, err, proto.ErrFrameTooLarge)
	// A caller's ctx bounds its request.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = c.Get(done, "/ops")
	wantErr(t, err, context.Canceled)
	if _, _, err := c.Get(ctx, "/ops"); err != nil {
		t.Fatal(err)
	}
	if c.State() != client.StateConnected || c.Server() == "" {
		t.Fatalf("state %v server %q", c.State(), c.Server())
	}
}

// TestPipelining runs 32 goroutines on one client; each sees its own
// requests answered in order and correctly, with a small and the default
// in-flight bound.
func TestPipelining(t *testing.T) {
	sh := startShard(t)
	ctx := testCtx(t)
	for _, inflight := range []int{4, 1024} {
		t.Run(fmt.Sprint(inflight), func(t *testing.T) {
			c := connect(t, sh.Servers("a"), client.WithMaxInFlight(inflight))
			root := fmt.Sprintf("/pipe%d", inflight)
			must[string](t)(c.Create(ctx, root, nil, 0, nil))
			const workers = 32
			each := 40
			if inflight < workers {
				each = 10 // every caller waits for a place: slower under -race
			}
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- pipeWorker(ctx, c, fmt.Sprintf("%s/g%d", root, g), each)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			if n := must[int32](t)(c.GetAllChildrenNumber(ctx, root)); int(n) != workers*(each+1) {
				t.Fatalf("%d znodes under %s, want %d", n, root, workers*(each+1))
			}
		})
	}
}

// pipeWorker creates and reads back its own znodes. A connection loss
// (a leader change drops the connections with writes in flight) is
// retried, as a caller would.
func pipeWorker(ctx context.Context, c *client.Client, dir string, each int) error {
	if err := create(ctx, c, dir, nil); err != nil {
		return err
	}
	var last int64
	for k := range each {
		p := fmt.Sprintf("%s/n%03d", dir, k)
		want := fmt.Sprintf("%s=%d", dir, k)
		if err := create(ctx, c, p, []byte(want)); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
		var data []byte
		var st *proto.Stat
		err := onLoss(ctx, func() (err error) {
			data, st, err = c.Get(ctx, p)
			return err
		})
		if err != nil || string(data) != want {
			return fmt.Errorf("get %s = %q %v", p, data, err)
		}
		if st.Czxid <= last {
			return fmt.Errorf("%s: czxid %d after %d: answers out of order", p, st.Czxid, last)
		}
		last = st.Czxid
	}
	var kids []string
	err := onLoss(ctx, func() (err error) {
		kids, err = c.GetChildren(ctx, dir)
		return err
	})
	if err != nil || len(kids) != each {
		return fmt.Errorf("children of %s: %d %v", dir, len(kids), err)
	}
	return nil
}

// create makes a znode, retrying on connection loss; a retry that finds
// the znode counts as done (the lost try applied).
func create(ctx context.Context, c *client.Client, path string, data []byte) error {
	retried := false
	return onLoss(ctx, func() error {
		_, err := c.Create(ctx, path, data, 0, nil)
		if retried && errors.Is(err, proto.ErrNodeExists) {
			return nil
		}
		retried = true
		return err
	})
}

// onLoss runs fn again while it fails with a connection loss.
func onLoss(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, proto.ErrConnectionLoss) || ctx.Err() != nil {
			return err
		}
	}
}

func TestWatchesFireOnce(t *testing.T) {
	sh := startShard(t)
	ctx := testCtx(t)
	c := connect(t, sh.Servers("a"))
	writer := connect(t, sh.Servers("a"))
	const wait = 10 * time.Second

	ok, _, created, err := c.ExistsW(ctx, "/w")
	if ok || err != nil || created == nil {
		t.Fatalf("existsW on a missing node = %v %v", ok, err)
	}
	must[string](t)(writer.Create(ctx, "/w", []byte("a"), 0, nil))
	if ev := nextEvent(t, created, wait); ev.Type != proto.EventNodeCreated || ev.Path != "/w" {
		t.Fatalf("event %+v", ev)
	}
	expectClosed(t, created)

	_, _, changed1, err := c.GetW(ctx, "/w")
	require.NoError(t, err)
	changed2 := dataWatch(t)(c.GetW(ctx, "/w"))
	kids := childWatch(t)(c.ChildrenW(ctx, "/w"))
	must[*proto.Stat](t)(writer.Set(ctx, "/w", []byte("b"), -1))
	for _, ch := range []<-chan client.Event{changed1, changed2} {
		if ev := nextEvent(t, ch, wait); ev.Type != proto.EventNodeDataChanged || ev.Path != "/w" {
			t.Fatalf("event %+v", ev)
		}
		expectClosed(t, ch)
	}
	must[*proto.Stat](t)(writer.Set(ctx, "/w", []byte("c"), -1)) // no watch left: nothing fires
	must[string](t)(writer.Create(ctx, "/w/k", nil, 0, nil))
	if ev := nextEvent(t, kids, wait); ev.Type != proto.EventNodeChildrenChanged || ev.Path != "/w" {
		t.Fatalf("event %+v", ev)
	}
	expectClosed(t, kids)

	ok, _, gone, err := c.ExistsW(ctx, "/w/k")
	if !ok || err != nil {
		t.Fatalf("existsW = %v %v", ok, err)
	}
	kids = childWatch(t)(c.ChildrenW(ctx, "/w/k"))
	if err := writer.Delete(ctx, "/w/k", -1); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan client.Event{gone, kids} {
		if ev := nextEvent(t, ch, wait); ev.Type != proto.EventNodeDeleted || ev.Path != "/w/k" {
			t.Fatalf("event %+v", ev)
		}
		expectClosed(t, ch)
	}
	// A get on a missing node leaves no watch and returns no channel.
	if _, _, ch, err := c.GetW(ctx, "/w/k"); !errors.Is(err, proto.ErrNoNode) || ch != nil {
		t.Fatalf("getW on a missing node = %v %v", ch, err)
	}
}

// dataWatch and childWatch return the channel of a GetW or ChildrenW
// call, failing the test on its error.
func dataWatch(t testing.TB) func([]byte, *proto.Stat, <-chan client.Event, error) <-chan client.Event {
	return watchOf[[]byte](t)
}

func childWatch(t testing.TB) func([]string, *proto.Stat, <-chan client.Event, error) <-chan client.Event {
	return watchOf[[]string](t)
}

func watchOf[T any](t testing.TB) func(T, *proto.Stat, <-chan client.Event, error) <-chan client.Event {
	return func(_ T, _ *proto.Stat, ch <-chan client.Event, err error) <-chan client.Event {
		t.Helper()
		require.NoError(t, err)
		return ch
	}
}

// TestFailover kills the member the client is connected to, the leader or
// a follower: the client reattaches the same session elsewhere, its
// ephemeral is still there, its auth and watches came along, and it keeps
// working.
func TestFailover(t *testing.T) {
	for _, victim := range []string{"leader", "follower"} {
		t.Run(victim, func(t *testing.T) {
			sh := startShard(t)
			ctx := testCtx(t)
			leader := sh.WaitLeader("a")
			var first string
			var rest []string
			for _, m := range sh.Shard("a").Members {
				if first == "" && (m.ID == leader) == (victim == "leader") {
					first = m.ClientAddr
				} else {
					rest = append(rest, m.ClientAddr)
				}
			}
			c := connect(t, append([]string{first}, rest...), client.WithOrderedServers(),
				client.WithSessionTimeout(8*time.Second), client.WithAuth("digest", []byte("bob:pw")))
			if c.Server() != first {
				t.Fatalf("connected to %q, want %q", c.Server(), first)
			}
			sid := c.SessionID()
			must[string](t)(c.Create(ctx, "/fo", []byte("0"), 0, nil))
			must[string](t)(c.Create(ctx, "/fo/eph", nil, proto.FlagEphemeral, nil))
			if err := c.AddAuth(ctx, "digest", []byte("carol:pw")); err != nil {
				t.Fatal(err)
			}
			changed := dataWatch(t)(c.GetW(ctx, "/fo"))
			kids := childWatch(t)(c.ChildrenW(ctx, "/fo"))

			killed := memberAt(t, sh, first)
			waitApplied(t, sh, c.LastZxid())
			sh.Kill(killed)
			waitState(t, c, client.StateDisconnected, 10*time.Second)
			ev := waitState(t, c, client.StateConnected, 15*time.Second)
			if ev.Server == first || c.SessionID() != sid {
				t.Fatalf("reattached to %q as session %x, want another member and session %x", ev.Server, c.SessionID(), sid)
			}

			ok, st, err := c.Exists(ctx, "/fo/eph")
			if err != nil || !ok || st.EphemeralOwner != sid {
				t.Fatalf("ephemeral after failover: %v %+v %v", ok, st, err)
			}
			ids := must[[]proto.ID](t)(c.WhoAmI(ctx))
			for _, user := range []string{"bob", "carol"} {
				if !slices.Contains(ids, proto.ID{Scheme: "digest", ID: user}) {
					t.Fatalf("auth %s not re-sent on reattach: %v", user, ids)
				}
			}
			change(t, ctx, c, "/fo", "/fo/after")
			expectEvent(t, changed, proto.EventNodeDataChanged, "/fo")
			expectEvent(t, kids, proto.EventNodeChildrenChanged, "/fo")
			sh.Restart(killed)
		})
	}
}

// TestWatchFiresForChangeDuringOutage: a change made while the client was
// away fires its watch on reattach (setWatches with the last zxid seen).
func TestWatchFiresForChangeDuringOutage(t *testing.T) {
	sh := startShard(t)
	ctx := testCtx(t)
	c := connect(t, sh.Servers("a"), client.WithSessionTimeout(8*time.Second))
	must[string](t)(c.Create(ctx, "/out", []byte("0"), 0, nil))
	changed := dataWatch(t)(c.GetW(ctx, "/out"))
	_, _, created, err := c.ExistsW(ctx, "/out/new")
	require.NoError(t, err)
	killed := memberAt(t, sh, c.Server())
	var others []string
	for _, m := range sh.Shard("a").Members {
		if m.ID != killed {
			others = append(others, m.ClientAddr)
		}
	}
	writer := connect(t, others)
	must[string](t)(writer.Sync(ctx, "/"))
	waitApplied(t, sh, writer.LastZxid())
	// Kill the client's member; the writer changes the node while the
	// client is away or reattaching.
	sh.Kill(killed)
	change(t, ctx, writer, "/out", "/out/new")
	expectEvent(t, changed, proto.EventNodeDataChanged, "/out")
	expectEvent(t, created, proto.EventNodeCreated, "/out/new")
	sh.Restart(killed)
}

// TestSessionExpiry stops every member for longer than the session
// timeout: the client reports expiry (event, Err, requests, watches); once
// the members are back, the shard expires the session too.
func TestSessionExpiry(t *testing.T) {
	sh := startShard(t)
	ctx := testCtx(t)
	c := connect(t, sh.Servers("a"), client.WithSessionTimeout(2*time.Second))
	must[string](t)(c.Create(ctx, "/exp", nil, proto.FlagEphemeral, nil))
	watch := dataWatch(t)(c.GetW(ctx, "/exp"))
	for _, m := range sh.Shard("a").Members {
		sh.Kill(m.ID)
	}
	ev := waitState(t, c, client.StateExpired, 15*time.Second)
	wantErr(t, ev.Err, proto.ErrSessionExpired)
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after expiry")
	}
	wantErr(t, c.Err(), proto.ErrSessionExpired)
	_, _, err := c.Get(ctx, "/exp")
	wantErr(t, err, proto.ErrSessionExpired)
	if ev := nextEvent(t, watch, time.Second); ev.Type != proto.EventNone || ev.State != client.StateExpired {
		t.Fatalf("watch after expiry: %+v", ev)
	}
	if _, ok := <-c.Events(); ok {
		t.Fatal("events not closed after expiry")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close after expiry: %v", err)
	}

	for _, m := range sh.Shard("a").Members {
		sh.Restart(m.ID)
	}
	sh.WaitLeader("a")
	c2 := connect(t, sh.Servers("a"))
	waitFor(t, 20*time.Second, "the shard expires the session", func() bool {
		ok, _, err := c2.Exists(ctx, "/exp")
		return err == nil && !ok
	})
}

// TestClose ends the session at once: its ephemerals go, and the client
// refuses further requests.
func TestClose(t *testing.T) {
	sh := startShard(t)
	ctx := testCtx(t)
	c := connect(t, sh.Servers("a"))
	other := connect(t, sh.Servers("a"))
	must[string](t)(c.Create(ctx, "/closing", nil, proto.FlagEphemeral, nil))
	watch := dataWatch(t)(c.GetW(ctx, "/closing"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	must[string](t)(other.Sync(ctx, "/"))
	if ok, _, err := other.Exists(ctx, "/closing"); ok || err != nil {
		t.Fatalf("ephemeral after close: %v %v", ok, err)
	}
	_, _, err := c.Get(ctx, "/")
	wantErr(t, err, client.ErrClosed)
	wantErr(t, c.Err(), client.ErrClosed)
	// The watch learns of the close, or first of the ephemeral's deletion
	// by the closeSession itself.
	if ev := nextEvent(t, watch, time.Second); ev.State != client.StateClosed && ev.Type != proto.EventNodeDeleted {
		t.Fatalf("watch after close: %+v", ev)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if c.State() != client.StateClosed {
		t.Fatalf("state %v", c.State())
	}
}

// TestRefusedRepliesReachTheClient: a member that refuses a request and
// drops the connection (refused auth, unknown opcode) must send the reply
// first, so the caller learns why instead of seeing a connection loss.
func TestRefusedRepliesReachTheClient(t *testing.T) {
	sh := startShard(t)
	ctx := testCtx(t)
	c := connect(t, sh.Servers("a"))
	_, err := c.Do(ctx, proto.OpCode(999), proto.Empty{}, nil)
	wantErr(t, err, proto.ErrUnimplemented)
	// The refusal ends that connection. A request the client writes before
	// it has read the end goes into the closing connection and is lost
	// (ZooKeeper's connection loss: no answer); sent again, it is answered.
	err = c.AddAuth(ctx, "bogus", nil)
	for errors.Is(err, proto.ErrConnectionLoss) && ctx.Err() == nil {
		err = c.AddAuth(ctx, "bogus", nil)
	}
	wantErr(t, err, proto.ErrAuthFailed)
	_, err = client.Connect(ctx, sh.Servers("a"), client.WithAuth("bogus", nil), client.WithLogger(testenv.TestLogger(t)))
	wantErr(t, err, proto.ErrAuthFailed)
}

// TestReattachToLaggingMember: a member that has not yet applied a
// session's creation must not answer the session's reattach with
// "expired". Here the client's first member (the leader) dies right after
// creating the session, and the client, having seen no zxid yet, moves to
// a member that was cut off while the session was created: it stays cut
// off, lacking the session, until the client's handshake has reached it.
func TestReattachToLaggingMember(t *testing.T) {
	sh := startShard(t)
	leader := sh.WaitLeader("a")
	var lagging, third string
	for _, m := range sh.Shard("a").Members {
		switch {
		case m.ID == leader:
		case lagging == "":
			lagging = m.ID
		default:
			third = m.ID
		}
	}
	addr := func(id string) string {
		for _, m := range sh.Shard("a").Members {
			if m.ID == id {
				return m.ClientAddr
			}
		}
		return ""
	}
	// handshakes is closed once the client has written to the lagging member.
	handshakes := make(chan struct{})
	var once sync.Once
	dial := func(ctx context.Context, network, a string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, a)
		if err != nil || a != addr(lagging) {
			return nc, err
		}
		return &notifyingConn{Conn: nc, wrote: func() { once.Do(func() { close(handshakes) }) }}, nil
	}
	sh.Isolate(lagging, true)
	c := connect(t, []string{addr(leader), addr(lagging), addr(third)}, client.WithOrderedServers(),
		client.WithSessionTimeout(8*time.Second), client.WithDialer(dial))
	sh.Kill(leader)
	select {
	case <-handshakes:
	case <-time.After(15 * time.Second):
		t.Fatal("the client never tried the lagging member")
	}
	sh.Member(lagging).Replica.View(func(st *fsm.State) {
		require.Nil(t, st.Session(c.SessionID()), "the lagging member lacks the session when the client reaches it")
	})
	sh.Isolate(lagging, false)
	waitFor(t, 15*time.Second, "reattach after the kill", func() bool {
		if err := c.Err(); err != nil {
			t.Fatalf("session %x ended: %v", c.SessionID(), err)
		}
		s := c.Server()
		return s != "" && s != addr(leader)
	})
	sh.Restart(leader)
}

// notifyingConn calls wrote after each write.
type notifyingConn struct {
	net.Conn
	wrote func()
}

func (c *notifyingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote()
	return n, err
}

func TestConnectFailure(t *testing.T) {
	_, err := client.Connect(context.Background(), nil)
	wantErr(t, err, client.ErrNoServers)
	addr := testenv.FreePorts(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = client.Connect(ctx, []string{fmt.Sprintf("127.0.0.1:%d", addr[0])}, client.WithLogger(testenv.TestLogger(t)))
	wantErr(t, err, context.DeadlineExceeded)
}

// fakeMember is a scripted ZooKeeper member on loopback, for protocol
// cases a real shard cannot stage on demand: the i-th connection runs the
// i-th script; a script's error fails the test.
type fakeMember struct {
	t    testing.TB
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	nc   []net.Conn
}

func startFake(t testing.TB, scripts ...func(*fakeConn) error) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeMember{t: t, ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for _, script := range scripts {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.nc = append(f.nc, nc)
			f.mu.Unlock()
			if err := script(&fakeConn{nc: nc, br: bufio.NewReader(nc)}); err != nil {
				f.mu.Lock()
				f.errs = append(f.errs, err)
				f.mu.Unlock()
			}
			nc.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, nc := range f.nc {
			nc.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
		for _, err := range f.errs {
			t.Errorf("fake member: %v", err)
		}
	})
	return ln.Addr().String()
}

type fakeConn struct {
	nc net.Conn
	br *bufio.Reader
}

func (f *fakeConn) read(r proto.Record) error {
	frame, err := proto.ReadFrame(f.br, proto.DefaultMaxPacket)
	if err != nil {
		return err
	}
	return proto.Unmarshal(frame, r)
}

func (f *fakeConn) write(recs ...proto.Record) error {
	_, err := f.nc.Write(proto.AppendFrame(nil, recs...))
	return err
}

// handshake reads the connect request and grants the session.
func (f *fakeConn) handshake(id int64, passwd []byte) (proto.ConnectRequest, error) {
	var req proto.ConnectRequest
	if err := f.read(&req); err != nil {
		return req, err
	}
	return req, f.write(&proto.ConnectResponse{Timeout: 30000, SessionID: id, Passwd: passwd, HasReadOnly: req.HasReadOnly})
}

// request reads the next request: its header and its body into body.
func (f *fakeConn) request(op proto.OpCode, body proto.Record) (proto.RequestHeader, error) {
	frame, err := proto.ReadFrame(f.br, proto.DefaultMaxPacket)
	if err != nil {
		return proto.RequestHeader{}, err
	}
	d := proto.NewDecoder(frame)
	var h proto.RequestHeader
	h.Decode(d)
	if h.OpCode != op {
		return h, fmt.Errorf("got %v, want %v", h.OpCode, op)
	}
	return h, proto.Unmarshal(d.Rest(), body)
}

func (f *fakeConn) reply(xid int32, zxid int64, code proto.Code, resp proto.Record) error {
	h := &proto.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}
	if resp == nil || code != proto.ErrOK {
		return f.write(h)
	}
	return f.write(h, resp)
}

// closeSession answers the client's closeSession.
func (f *fakeConn) closeSession() error {
	h, err := f.request(proto.OpCloseSession, proto.Empty{})
	if err != nil {
		return err
	}
	return f.reply(h.Xid, 99, proto.ErrOK, nil)
}

var fakePasswd = []byte("0123456789abcdef")

// TestAbandonedRequest: a request whose ctx ends after it was sent
// returns at once; its late reply is matched and dropped, and the next
// request on the pipeline gets its own reply.
func TestAbandonedRequest(t *testing.T) {
	addr := startFake(t, func(f *fakeConn) error {
		if _, err := f.handshake(0x51, fakePasswd); err != nil {
			return err
		}
		var slow, fast proto.PathWatchRequest
		h1, err := f.request(proto.OpGetData, &slow)
		if err != nil {
			return err
		}
		h2, err := f.request(proto.OpGetData, &fast)
		if err != nil {
			return err
		}
		if slow.Path != "/slow" || fast.Path != "/fast" || h2.Xid <= h1.Xid {
			return fmt.Errorf("requests %v %q, %v %q", h1, slow.Path, h2, fast.Path)
		}
		for _, r := range []struct {
			xid  int32
			data string
		}{{h1.Xid, "late"}, {h2.Xid, "fast"}} {
			if err := f.reply(r.xid, 7, proto.ErrOK, &proto.GetDataResponse{Data: []byte(r.data)}); err != nil {
				return err
			}
		}
		return f.closeSession()
	})
	c := connect(t, []string{addr})
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, _, err := c.Get(ctx, "/slow")
	wantErr(t, err, context.DeadlineExceeded)
	data, _, err := c.Get(testCtx(t), "/fast")
	if err != nil || string(data) != "fast" {
		t.Fatalf("get after an abandoned request = %q %v", data, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReattachProtocol checks the wire of a reattach: same session id and
// password, the last zxid seen, auths first, then setWatches naming every
// watch by kind with the last zxid; an event the member sends then fires.
func TestReattachProtocol(t *testing.T) {
	lost := make(chan struct{})
	addr := startFake(t, func(f *fakeConn) error {
		if _, err := f.handshake(0x77, fakePasswd); err != nil {
			return err
		}
		var auth proto.AuthPacket
		h, err := f.request(proto.OpAuth, &auth)
		if err != nil || h.Xid != proto.XidAuth || auth.Scheme != "digest" || string(auth.Auth) != "u:p" {
			return fmt.Errorf("auth %v %+v %v", h, auth, err)
		}
		if err := f.reply(h.Xid, 0, proto.ErrOK, nil); err != nil {
			return err
		}
		var req proto.PathWatchRequest
		for _, step := range []struct {
			op   proto.OpCode
			code proto.Code
			zxid int64
			resp proto.Record
		}{
			{proto.OpGetData, proto.ErrOK, 41, &proto.GetDataResponse{}},
			{proto.OpExists, proto.ErrNoNode, 42, nil},
			{proto.OpGetChildren2, proto.ErrOK, 43, &proto.ChildrenResponse{WithStat: true}},
		} {
			h, err := f.request(step.op, &req)
			if err != nil || !req.Watch {
				return fmt.Errorf("%v: %+v %v", step.op, req, err)
			}
			if err := f.reply(h.Xid, step.zxid, step.code, step.resp); err != nil {
				return err
			}
		}
		<-lost
		return nil // the connection drops
	}, func(f *fakeConn) error {
		req, err := f.handshake(0x77, fakePasswd)
		if err != nil {
			return err
		}
		if req.SessionID != 0x77 || string(req.Passwd) != string(fakePasswd) || req.LastZxidSeen != 43 {
			return fmt.Errorf("reattach request %+v", req)
		}
		var auth proto.AuthPacket
		if h, err := f.request(proto.OpAuth, &auth); err != nil || f.reply(h.Xid, 0, proto.ErrOK, nil) != nil {
			return fmt.Errorf("auth on reattach: %v", err)
		}
		var sw proto.SetWatchesRequest
		h, err := f.request(proto.OpSetWatches, &sw)
		if err != nil {
			return err
		}
		if h.Xid != proto.XidSetWatches || sw.RelativeZxid != 43 || !slices.Equal(sw.DataWatches, []string{"/w"}) ||
			!slices.Equal(sw.ExistWatches, []string{"/e"}) || !slices.Equal(sw.ChildWatches, []string{"/k"}) {
			return fmt.Errorf("setWatches %v %+v", h, sw)
		}
		if err := f.reply(h.Xid, 44, proto.ErrOK, nil); err != nil {
			return err
		}
		if err := f.write(&proto.ReplyHeader{Xid: proto.XidNotification, Zxid: 44},
			&proto.WatcherEvent{Type: proto.EventNodeDataChanged, State: proto.StateSyncConnected, Path: "/w"}); err != nil {
			return err
		}
		return f.closeSession()
	})
	ctx := testCtx(t)
	c := connect(t, []string{addr}, client.WithAuth("digest", []byte("u:p")))
	w := dataWatch(t)(c.GetW(ctx, "/w"))
	if ok, _, _, err := c.ExistsW(ctx, "/e"); ok || err != nil {
		t.Fatalf("existsW = %v %v", ok, err)
	}
	childWatch(t)(c.ChildrenW(ctx, "/k"))
	close(lost)
	if ev := nextEvent(t, w, 10*time.Second); ev.Type != proto.EventNodeDataChanged || ev.Zxid != 44 {
		t.Fatalf("event %+v", ev)
	}
	if c.SessionID() != 0x77 || c.LastZxid() != 44 {
		t.Fatalf("session %x last zxid %d", c.SessionID(), c.LastZxid())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMemberSaysExpired: a member that answers the reattach with a zero
// timeout ends the session (the client does not wait for its own clock).
func TestMemberSaysExpired(t *testing.T) {
	addr := startFake(t, func(f *fakeConn) error {
		_, err := f.handshake(0x88, fakePasswd)
		return err
	}, func(f *fakeConn) error {
		var req proto.ConnectRequest
		if err := f.read(&req); err != nil {
			return err
		}
		return f.write(&proto.ConnectResponse{Passwd: make([]byte, proto.PasswordLen), HasReadOnly: req.HasReadOnly})
	})
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	c := connect(t, []string{"member-1"}, client.WithDialer(dial), client.WithSessionTimeout(time.Minute))
	ev := waitState(t, c, client.StateExpired, 10*time.Second)
	wantErr(t, ev.Err, proto.ErrSessionExpired)
	wantErr(t, c.Err(), proto.ErrSessionExpired)
}

// TestAuthRefusedAtConnect: credentials the member refuses end Connect
// with ErrAuthFailed rather than retrying forever.
func TestAuthRefusedAtConnect(t *testing.T) {
	addr := startFake(t, func(f *fakeConn) error {
		if _, err := f.handshake(0x99, fakePasswd); err != nil {
			return err
		}
		var auth proto.AuthPacket
		h, err := f.request(proto.OpAuth, &auth)
		if err != nil {
			return err
		}
		return f.reply(h.Xid, 0, proto.ErrAuthFailed, nil)
	})
	_, err := client.Connect(testCtx(t), []string{addr}, client.WithAuth("digest", []byte("u:wrong")),
		client.WithLogger(testenv.TestLogger(t)))
	wantErr(t, err, proto.ErrAuthFailed)
}
