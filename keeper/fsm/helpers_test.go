package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Test-only helpers: building log entries, driving a State through them
// and comparing whole states.

const (
	m1 = "m1" // the member sessions are opened on
	m2 = "m2"

	// startWall is the wall clock of a harness's first entry (ms).
	startWall int64 = 1_700_000_000_000
)

var (
	openACL  = proto.WorldACL(proto.PermAll)
	aliceID  = proto.ID{Scheme: "digest", ID: DigestID("alice:secret")}
	bobID    = proto.ID{Scheme: "digest", ID: DigestID("bob:hunter2")}
	superID  = proto.ID{Scheme: "super", ID: ""}
	localIP  = proto.ID{Scheme: "ip", ID: "127.0.0.1"}
	aliceAll = []proto.ACL{{Perms: proto.PermAll, ID: aliceID}}
)

// harness drives a State the way a replica does: one log entry at a time,
// each with a wall clock 10 ms after the previous one.
type harness struct {
	t      testing.TB
	s      *State
	wall   int64
	nextID uint64
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, s: New(), wall: startWall}
}

// mustApply applies one entry holding reqs and fails the test if the entry
// does not decode. Requests without an ID get a fresh one.
func (h *harness) mustApply(reqs ...Request) ([]Result, []Event) {
	h.t.Helper()
	h.wall += 10
	return h.mustApplyAt(h.wall, reqs...)
}

// mustApplyAt is mustApply with an explicit wall clock.
func (h *harness) mustApplyAt(wall int64, reqs ...Request) ([]Result, []Event) {
	h.t.Helper()
	for i := range reqs {
		if reqs[i].ID == 0 {
			h.nextID++
			reqs[i].ID = h.nextID
		}
	}
	res, ev, err := h.s.Apply(EncodeEntry(nil, wall, reqs))
	if err != nil {
		h.t.Fatalf("apply: %v", err)
	}
	if len(res) != len(reqs) {
		h.t.Fatalf("apply: %d results for %d requests", len(res), len(reqs))
	}
	for i := range res {
		if res[i].ID != reqs[i].ID || res[i].Op != reqs[i].Op {
			h.t.Fatalf("result %d is for request %d op %v, want %d op %v",
				i, res[i].ID, res[i].Op, reqs[i].ID, reqs[i].Op)
		}
	}
	return res, ev
}

// do applies one request in its own entry.
func (h *harness) do(r Request) (Result, []Event) {
	h.t.Helper()
	res, ev := h.mustApply(r)
	return res[0], ev
}

// ok applies one request and fails the test unless it succeeds.
func (h *harness) ok(r Request) (Result, []Event) {
	h.t.Helper()
	res, ev := h.do(r)
	if res.Err != proto.ErrOK {
		h.t.Fatalf("%v: %v", r.Op, res.Err)
	}
	return res, ev
}

// session opens a session owned by member and returns a client for it.
func (h *harness) session(member string) testClient {
	h.t.Helper()
	res, _ := h.ok(openSession(member, 30000, []byte("0123456789abcdef")))
	if res.Session == 0 {
		h.t.Fatal("createSession returned session 0")
	}
	return testClient{sess: res.Session, member: member}
}

// read answers a read for ids.
func (h *harness) read(op proto.OpCode, req proto.Record, ids ...proto.ID) (proto.Record, proto.Code, WatchKind) {
	return h.s.Read(op, req, 0, ids)
}

// stat returns the Stat of an existing node.
func (h *harness) stat(path string) proto.Stat {
	h.t.Helper()
	n := h.s.Node(path)
	if n == nil {
		h.t.Fatalf("%s does not exist", path)
	}
	return n.Stat()
}

func openSession(member string, timeout int32, passwd []byte) Request {
	return Request{Member: member, Op: proto.OpCreateSession,
		Body: proto.Marshal(&CreateSession{Timeout: timeout, Passwd: passwd})}
}

// client builds the requests of one session as seen from one member with
// some identities.
type testClient struct {
	sess   int64
	member string
	ids    []proto.ID
}

// as returns the client with other identities.
func (c testClient) as(ids ...proto.ID) testClient { c.ids = ids; return c }

// on returns the client as seen from another member.
func (c testClient) on(member string) testClient { c.member = member; return c }

func (c testClient) req(op proto.OpCode, body proto.Record) Request {
	r := Request{Session: c.sess, Member: c.member, Op: op, IDs: c.ids}
	if body != nil {
		r.Body = proto.Marshal(body)
	}
	return r
}

func (c testClient) create(path string, data []byte, flags int32) Request {
	return c.req(proto.OpCreate, &proto.CreateRequest{Path: path, Data: data, ACL: openACL, Flags: flags})
}

func (c testClient) create2(path string, data []byte, flags int32) Request {
	return c.req(proto.OpCreate2, &proto.CreateRequest{Path: path, Data: data, ACL: openACL, Flags: flags})
}

func (c testClient) createACL(path string, acl []proto.ACL, flags int32) Request {
	return c.req(proto.OpCreate, &proto.CreateRequest{Path: path, ACL: acl, Flags: flags})
}

func (c testClient) delete(path string, version int32) Request {
	return c.req(proto.OpDelete, &proto.PathVersionRequest{Path: path, Version: version})
}

func (c testClient) setData(path string, data []byte, version int32) Request {
	return c.req(proto.OpSetData, &proto.SetDataRequest{Path: path, Data: data, Version: version})
}

func (c testClient) setACL(path string, acl []proto.ACL, version int32) Request {
	return c.req(proto.OpSetACL, &proto.SetACLRequest{Path: path, ACL: acl, Version: version})
}

func (c testClient) multi(ops ...proto.MultiOp) Request {
	return c.req(proto.OpMulti, &proto.MultiRequest{Ops: ops})
}

func (c testClient) close() Request { return c.req(proto.OpCloseSession, nil) }

// Ops of a multi.

func opCreate(path string, flags int32) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, ACL: openACL, Flags: flags}}
}

func opCreate2(path string, data []byte) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpCreate2, Req: &proto.CreateRequest{Path: path, Data: data, ACL: openACL}}
}

func opDelete(path string, version int32) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpDelete, Req: &proto.PathVersionRequest{Path: path, Version: version}}
}

func opCheck(path string, version int32) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpCheck, Req: &proto.PathVersionRequest{Path: path, Version: version}}
}

func opSetData(path string, data []byte, version int32) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpSetData, Req: &proto.SetDataRequest{Path: path, Data: data, Version: version}}
}

// Reads.

func pathWatch(path string, watch bool) *proto.PathWatchRequest {
	return &proto.PathWatchRequest{Path: path, Watch: watch}
}

// Whole-state views, for comparing states.

type nodeDump struct {
	Path string
	Data string
	Stat proto.Stat
	ACL  []proto.ACL
}

type sessionDump struct {
	ID         int64
	Timeout    int32
	Passwd     string
	Owner      string
	Ephemerals []string
}

type stateDump struct {
	Zxid, Time int64
	Nodes      []nodeDump
	Sessions   []sessionDump
}

// dumpNodes lists every node in tree order.
func dumpNodes(s *State) []nodeDump {
	var out []nodeDump
	s.tree.scan(func(n *Node) bool {
		out = append(out, nodeDump{Path: n.Path(), Data: string(n.Data()), Stat: n.Stat(),
			ACL: append([]proto.ACL(nil), s.ACL(n)...)})
		return true
	})
	return out
}

func dumpSessions(s *State) []sessionDump {
	var out []sessionDump
	for _, ss := range s.Sessions() {
		out = append(out, sessionDump{ID: ss.ID, Timeout: ss.Timeout, Passwd: string(ss.Passwd),
			Owner: ss.Owner, Ephemerals: ss.Ephemerals()})
	}
	return out
}

func dumpState(s *State) stateDump {
	return stateDump{Zxid: s.Zxid(), Time: s.Time(), Nodes: dumpNodes(s), Sessions: dumpSessions(s)}
}

// diffDumps describes the first difference between two dumps, or "".
func diffDumps(got, want stateDump) string {
	if got.Zxid != want.Zxid || got.Time != want.Time {
		return fmt.Sprintf("zxid/time %d/%d, want %d/%d", got.Zxid, got.Time, want.Zxid, want.Time)
	}
	for i := 0; i < max(len(got.Nodes), len(want.Nodes)); i++ {
		switch {
		case i >= len(got.Nodes):
			return fmt.Sprintf("node %q missing", want.Nodes[i].Path)
		case i >= len(want.Nodes):
			return fmt.Sprintf("extra node %q", got.Nodes[i].Path)
		case !reflect.DeepEqual(got.Nodes[i], want.Nodes[i]):
			return fmt.Sprintf("node\n got %+v\nwant %+v", got.Nodes[i], want.Nodes[i])
		}
	}
	if !reflect.DeepEqual(got.Sessions, want.Sessions) {
		return fmt.Sprintf("sessions\n got %+v\nwant %+v", got.Sessions, want.Sessions)
	}
	return ""
}

// snapshotBytes writes a snapshot of s.
func snapshotBytes(t testing.TB, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Snapshot().Write(&buf); err != nil {
		t.Fatalf("write snapshot: %v", err)
	}
	return buf.Bytes()
}

// checkInvariants verifies what must hold after any sequence of entries:
// every node but the root has a parent, NumChildren counts the children,
// ephemerals have no children, and each session's ephemeral list (a
// closed session's still reaping too) is exactly the nodes it owns.
func checkInvariants(t testing.TB, s *State) {
	t.Helper()
	children := map[string]int32{}
	owned := map[int64][]string{}
	s.tree.scan(func(n *Node) bool {
		p := n.Path()
		if p != "/" {
			if s.Node(parentOf(p)) == nil {
				t.Errorf("%s has no parent", p)
			}
			children[parentOf(p)]++
		}
		if n.IsEphemeral() {
			owned[n.Owner] = append(owned[n.Owner], p)
		}
		return true
	})
	s.tree.scan(func(n *Node) bool {
		if n.NumChildren != children[n.Path()] {
			t.Errorf("%s: NumChildren %d, has %d children", n.Path(), n.NumChildren, children[n.Path()])
		}
		if n.IsEphemeral() && n.NumChildren != 0 {
			t.Errorf("ephemeral %s has children", n.Path())
		}
		return true
	})
	listsOwned := func(ss *Session, what string) {
		got, want := ss.Ephemerals(), owned[ss.ID]
		slices.Sort(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s %#x lists ephemerals %v, owns %v", what, ss.ID, got, want)
		}
		delete(owned, ss.ID)
	}
	for _, ss := range s.Sessions() {
		listsOwned(ss, "session")
	}
	for _, ss := range s.reaping {
		listsOwned(ss, "closed session still reaping")
	}
	for id, paths := range owned {
		t.Errorf("nodes %v owned by dead session %#x", paths, id)
	}
}
