package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// restore reads back a snapshot and fails the test on an error.
func mustRestore(t testing.TB, b []byte) *State {
	t.Helper()
	s, err := Restore(bytes.NewReader(b))
	require.NoError(t, err, "restore")
	return s
}

// populate gives h sessions with ephemerals, ACLs, sequential nodes, data
// and history (deletes, setData, setACL) and returns its clients.
func populate(h *harness) (a, b testClient) {
	a, b = h.session(m1), h.session(m2)
	h.ok(a.create("/app", []byte("config"), 0))
	h.ok(a.as(aliceID).createACL("/app/secret", []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}}, 0))
	h.ok(a.createACL("/app/ro", proto.WorldACL(proto.PermRead|proto.PermAdmin), 0))
	for i := 0; i < 5; i++ {
		h.ok(a.create("/app/log-", []byte(strconv.Itoa(i)), seq))
	}
	h.ok(a.delete("/app/log-0000000004", -1))
	h.ok(a.create("/app/lock-", nil, eph|seq))
	h.ok(b.create("/app/lock-", nil, eph|seq))
	h.ok(b.create("/app/member", nil, eph))
	h.ok(a.setData("/app", []byte("config-2"), 0))
	h.ok(a.setACL("/app/ro", proto.WorldACL(proto.PermRead), 0))
	h.ok(a.req(proto.OpCreateContainer, &proto.CreateRequest{Path: "/box", ACL: openACL, Flags: proto.FlagContainer}))
	h.ok(a.create("/box/x", nil, 0))
	h.do(a.multi(opCreate("/app/y", 0), opCreate("/app/y", 0))) // fails, interns nothing new
	return a, b
}

func TestSnapshotIsPointInTime(t *testing.T) {
	h := newHarness(t)
	a, b := populate(h)
	want := dumpState(h.s)
	snap := h.s.Snapshot()
	if snap.Zxid() != h.s.Zxid() {
		t.Errorf("snapshot zxid %d, state %d", snap.Zxid(), h.s.Zxid())
	}

	// Change everything the snapshot holds.
	later := []Request{
		a.setData("/app", []byte("changed"), -1),
		a.delete("/app/log-0000000002", -1),
		a.setACL("/box", aliceAll, -1),
		a.create("/app/new", []byte("n"), 0),
		a.createACL("/app/digest", []proto.ACL{{Perms: proto.PermRead, ID: bobID}}, 0),
		b.close(),
		openSession(m2, 5, []byte("pw")),
		a.multi(opCreate("/app/m1", eph), opSetData("/app/log-0000000003", []byte("m"), -1)),
		a.on(m2).req(OpSessionOwner, nil),
	}
	for _, r := range later {
		h.ok(r)
	}
	final := snapshotBytes(t, h.s)

	var buf bytes.Buffer
	if err := snap.Write(&buf); err != nil {
		t.Fatalf("write: %v", err)
	}
	r := mustRestore(t, buf.Bytes())
	if d := diffDumps(dumpState(r), want); d != "" {
		t.Fatalf("restored state differs from the snapshot point: %s", d)
	}
	checkInvariants(t, r)

	// The restored replica goes on exactly like the live one.
	rh := &harness{t: t, s: r, wall: h.wall - 10*int64(len(later))}
	for _, req := range later {
		rh.ok(req)
	}
	if got := snapshotBytes(t, r); !bytes.Equal(got, final) {
		t.Errorf("replaying on the restored state: snapshot differs (%d vs %d bytes)", len(got), len(final))
	}
	if d := diffDumps(dumpState(r), dumpState(h.s)); d != "" {
		t.Errorf("replaying on the restored state: %s", d)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	populate(h)
	b := snapshotBytes(t, h.s)
	r := mustRestore(t, b)
	if d := diffDumps(dumpState(r), dumpState(h.s)); d != "" {
		t.Fatal(d)
	}
	if again := snapshotBytes(t, r); !bytes.Equal(again, b) {
		t.Error("a restored state writes a different snapshot")
	}
	if r.EphemeralCount() != h.s.EphemeralCount() || r.NodeCount() != h.s.NodeCount() {
		t.Errorf("counts: %d/%d ephemerals, %d/%d nodes", r.EphemeralCount(), h.s.EphemeralCount(), r.NodeCount(), h.s.NodeCount())
	}
	// A new state round-trips too.
	if d := diffDumps(dumpState(mustRestore(t, snapshotBytes(t, New()))), dumpState(New())); d != "" {
		t.Error(d)
	}
}

func TestRestoreRejectsBadInput(t *testing.T) {
	h := newHarness(t)
	populate(h)
	good := snapshotBytes(t, h.s)
	bad := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("NOTASNAP"), good[8:]...),
		"truncated": good[:len(good)-3],
		"header":    good[:20],
	}
	// An ACL id past the table: the first node's id is after its path
	// and data. Find the root record: path "/" then data.
	i := bytes.Index(good, []byte{0, 0, 0, 1, '/', 0, 0, 0, 0})
	if i < 0 {
		t.Fatal("root record not found")
	}
	badACL := bytes.Clone(good)
	copy(badACL[i+9:], []byte{0x7f, 0, 0, 0})
	bad["unknown acl"] = badACL
	for name, b := range bad {
		if _, err := Restore(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, io.ErrShortWrite
	}
	return len(p), nil
}

func TestSnapshotWriteError(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	for i := 0; i < 20; i++ {
		reqs := make([]Request, 500)
		for j := range reqs {
			reqs[j] = c.create(fmt.Sprintf("/n%05d", i*500+j), bytes.Repeat([]byte("x"), 200), 0)
		}
		h.mustApply(reqs...)
	}
	if err := h.s.Snapshot().Write(&failingWriter{n: 1 << 20}); err == nil {
		t.Error("a failing writer gave no error")
	}
}

// gateWriter lets the first Write through, then holds the writer until the
// test has applied entries, so Write and Apply surely overlap.
type gateWriter struct {
	w       io.Writer
	once    sync.Once
	started chan struct{}
	proceed chan struct{}
}

func (g *gateWriter) Write(p []byte) (int, error) {
	n, err := g.w.Write(p)
	g.once.Do(func() {
		close(g.started)
		<-g.proceed
	})
	return n, err
}

// TestSnapshotWhileApplying streams a snapshot of a large tree from a
// goroutine while the state goes on applying (run it under -race), then
// checks the snapshot holds exactly the state at the snapshot point.
func TestSnapshotWhileApplying(t *testing.T) {
	nodes, more := 200_000, 10_000
	if testing.Short() {
		nodes, more = 20_000, 2_000
	}
	const dirs, batch = 200, 1000
	h := newHarness(t)
	c := h.session(m1)
	for d := 0; d < dirs; d++ {
		h.ok(c.create(fmt.Sprintf("/d%03d", d), nil, 0))
	}
	reqs := make([]Request, 0, batch)
	flush := func() {
		if len(reqs) > 0 {
			res, _ := h.mustApply(reqs...)
			for _, r := range res {
				if r.Err != proto.ErrOK {
					t.Fatalf("create: %v", r.Err)
				}
			}
			reqs = reqs[:0]
		}
	}
	for i := 0; i < nodes-dirs; i++ {
		flags := int32(0)
		if i%50 == 0 {
			flags = eph
		}
		reqs = append(reqs, c.create(fmt.Sprintf("/d%03d/n%06d", i%dirs, i), []byte(strconv.Itoa(i)), flags))
		if len(reqs) == batch {
			flush()
		}
	}
	flush()
	want := dumpState(h.s)

	snap := h.s.Snapshot()
	pr, pw := io.Pipe()
	gate := &gateWriter{w: pw, started: make(chan struct{}), proceed: make(chan struct{})}
	var (
		wg       sync.WaitGroup
		writeErr error
		restored *State
		readErr  error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		writeErr = snap.Write(gate)
		pw.CloseWithError(writeErr)
	}()
	go func() {
		defer wg.Done()
		restored, readErr = Restore(pr)
		pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if Restore stopped early
	}()

	// Apply more while the snapshot streams: creates in new and old
	// directories, and changes to nodes the snapshot holds.
	apply := func(from, to int) {
		for i := from; i < to; i++ {
			reqs = append(reqs, c.create(fmt.Sprintf("/d%03d/new%06d", i%dirs, i), nil, 0))
			switch i % 100 {
			case 0:
				reqs = append(reqs, c.setData(fmt.Sprintf("/d%03d/n%06d", i%dirs, i), []byte("changed"), -1))
			case 1:
				reqs = append(reqs, c.delete(fmt.Sprintf("/d%03d/n%06d", i%dirs, i), -1))
			case 2:
				reqs = append(reqs, c.setACL(fmt.Sprintf("/d%03d", i%dirs), []proto.ACL{openACL[0], {Perms: proto.PermRead, ID: bobID}}, -1))
			}
			if len(reqs) >= batch {
				flush()
			}
		}
		flush()
	}
	select {
	case <-gate.started:
	case <-time.After(time.Minute):
		t.Fatal("snapshot writer did not start")
	}
	apply(0, more/2)
	close(gate.proceed)
	apply(more/2, more)
	h.ok(c.close()) // deletes the snapshot's ephemerals from the live state
	wg.Wait()

	if writeErr != nil || readErr != nil {
		t.Fatalf("write: %v, restore: %v", writeErr, readErr)
	}
	if d := diffDumps(dumpState(restored), want); d != "" {
		t.Fatalf("restored snapshot is not the state at the snapshot point: %s", d)
	}
	if h.s.NodeCount() == restored.NodeCount() {
		t.Error("live state did not move on")
	}
	checkInvariants(t, restored)
}

// testSeed returns the seed of a randomized test: XKEEPER_SEED, or the clock.
func testSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if v := os.Getenv("XKEEPER_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("XKEEPER_SEED: %v", err)
		}
	}
	t.Logf("seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce with XKEEPER_SEED=%d", seed)
		}
	})
	return seed
}

// workload generates random entries against a live state, so requests
// mostly name sessions and nodes that exist.
type workload struct {
	r        *rand.Rand
	wall     int64
	sessions []int64
	owners   map[int64]string
}

var (
	workloadMembers = []string{"m1", "m2", "m3"}
	workloadPaths   = []string{"/a", "/a/b", "/a/b/c", "/a/d", "/b", "/b/x", "/b/y", "/c", "/c/q", "/zookeeper/z", "/a/b/"}
	workloadIDs     = [][]proto.ID{nil, {aliceID}, {bobID}, {aliceID, localIP}, {superID}}
	workloadACLs    = [][]proto.ACL{
		openACL, openACL, openACL, aliceAll, proto.WorldACL(proto.PermRead), {{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}},
		{{Perms: proto.PermRead | proto.PermCreate, ID: proto.ID{Scheme: "ip", ID: "127.0.0.0/8"}}, aliceAll[0]}, nil,
	}
)

func (w *workload) pick(v []string) string { return v[w.r.Intn(len(v))] }

func (w *workload) path() string {
	p := w.pick(workloadPaths)
	if w.r.Intn(10) == 0 {
		p += "/n-000000000" + strconv.Itoa(w.r.Intn(10))
	}
	return p
}

// version is -1 (any) half the time.
func (w *workload) version() int32 { return max(-1, int32(w.r.Intn(6))-3) }

func (w *workload) client() testClient {
	c := testClient{sess: 777, member: w.pick(workloadMembers)}
	if len(w.sessions) > 0 && w.r.Intn(20) != 0 {
		c.sess = w.sessions[w.r.Intn(len(w.sessions))]
		if w.r.Intn(10) != 0 {
			c.member = w.owners[c.sess]
		}
	}
	return c.as(workloadIDs[w.r.Intn(len(workloadIDs))]...)
}

func (w *workload) op() proto.MultiOp {
	p := w.path()
	switch w.r.Intn(5) {
	case 0, 1:
		return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: p, Data: []byte(p),
			ACL: workloadACLs[w.r.Intn(len(workloadACLs))], Flags: int32(w.r.Intn(4))}}
	case 2:
		return opDelete(p, w.version())
	case 3:
		return opSetData(p, []byte(strconv.Itoa(w.r.Int())), w.version())
	}
	return opCheck(p, w.version())
}

func (w *workload) request() Request {
	c := w.client()
	switch n := w.r.Intn(100); {
	case n < 6:
		return openSession(w.pick(workloadMembers), int32(w.r.Intn(60000)), []byte(strconv.Itoa(w.r.Int())))
	case n < 9:
		return c.close()
	case n < 12:
		return c.on(w.pick(workloadMembers)).req(OpSessionOwner, nil)
	case n < 15:
		return c.setACL(w.path(), workloadACLs[w.r.Intn(len(workloadACLs))], w.version())
	case n < 17:
		r := c.create(w.path(), nil, 0)
		r.Body = r.Body[:w.r.Intn(len(r.Body))]
		return r
	case n < 19:
		return c.req(proto.OpCreateContainer, &proto.CreateRequest{Path: w.path(), ACL: openACL, Flags: proto.FlagContainer})
	case n < 30:
		ops := make([]proto.MultiOp, 1+w.r.Intn(5))
		for i := range ops {
			ops[i] = w.op()
		}
		return c.multi(ops...)
	}
	op := w.op()
	return c.req(op.Op, op.Req)
}

// entry returns the next entry: up to 8 requests, the wall clock sometimes
// going backwards.
func (w *workload) entry() []byte {
	w.wall += int64(w.r.Intn(150)) - 50
	reqs := make([]Request, w.r.Intn(9))
	for i := range reqs {
		reqs[i] = w.request()
		reqs[i].ID = uint64(w.r.Int63())
	}
	return EncodeEntry(nil, w.wall, reqs)
}

// learn records the sessions an applied entry opened and closed.
func (w *workload) learn(entry []byte, res []Result) {
	_, reqs, _ := DecodeEntry(entry)
	for i, r := range res {
		if r.Err != proto.ErrOK {
			continue
		}
		switch r.Op {
		case proto.OpCreateSession:
			w.sessions = append(w.sessions, r.Session)
			w.owners[r.Session] = reqs[i].Member
		case proto.OpCloseSession:
			for j, id := range w.sessions {
				if id == r.Session {
					w.sessions = append(w.sessions[:j], w.sessions[j+1:]...)
					break
				}
			}
		case OpSessionOwner:
			w.owners[r.Session] = reqs[i].Member
		}
	}
}

// entryOutcome is what applying an entry answered.
type entryOutcome struct {
	results []Result
	events  []Event
}

// runWorkload applies n random entries to a new state and returns them
// with their outcomes.
func runWorkload(t *testing.T, seed int64, n int) (*State, [][]byte, []entryOutcome) {
	w := &workload{r: rand.New(rand.NewSource(seed)), wall: startWall, owners: map[int64]string{}}
	s := New()
	var entries [][]byte
	var outcomes []entryOutcome
	for i := 0; i < n; i++ {
		e := w.entry()
		res, ev, err := s.Apply(e)
		require.NoError(t, err, "entry %d", i)
		w.learn(e, res)
		entries = append(entries, e)
		outcomes = append(outcomes, entryOutcome{res, ev})
	}
	return s, entries, outcomes
}

func TestDeterminism(t *testing.T) {
	seed := testSeed(t)
	n := 2000
	if testing.Short() {
		n = 300
	}
	a, entries, outcomes := runWorkload(t, seed, n)
	checkInvariants(t, a)
	want := snapshotBytes(t, a)

	// A second replica fed the same entries answers the same and ends with
	// the same snapshot.
	b := New()
	for i, e := range entries {
		res, ev, err := b.Apply(e)
		require.NoError(t, err, "replica b, entry %d", i)
		if got := (entryOutcome{res, ev}); !reflect.DeepEqual(got, outcomes[i]) {
			t.Fatalf("entry %d: replica b answered\n%+v\nreplica a\n%+v", i, got, outcomes[i])
		}
	}
	if got := snapshotBytes(t, b); !bytes.Equal(got, want) {
		t.Fatal("replicas fed the same entries wrote different snapshots")
	}

	// A replica restored from a snapshot taken half way catches up the same.
	c := New()
	for _, e := range entries[:n/2] {
		if _, _, err := c.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	c = mustRestore(t, snapshotBytes(t, c))
	for _, e := range entries[n/2:] {
		if _, _, err := c.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := snapshotBytes(t, c); !bytes.Equal(got, want) {
		t.Fatalf("replica restored half way: %s", diffDumps(dumpState(c), dumpState(a)))
	}
	codes := map[proto.Code]int{}
	for _, o := range outcomes {
		for _, r := range o.results {
			codes[r.Err]++
		}
	}
	t.Logf("%d entries, %d nodes, %d sessions, zxid %d, results by code %v",
		n, a.NodeCount(), len(a.Sessions()), a.Zxid(), codes)
}
