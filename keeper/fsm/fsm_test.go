package fsm

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	eph = proto.FlagEphemeral
	seq = proto.FlagSequential
)

func sameEvents(t *testing.T, got, want []Event) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	got = withoutACLs(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n got %+v\nwant %+v", got, want)
	}
}

// withoutACLs returns events without the ACLs that decide who hears of
// them (TestEventsCarryTheACLWatchersNeedReadOn checks those).
func withoutACLs(events []Event) []Event {
	out := slices.Clone(events)
	for i := range out {
		out[i].acl = nil
	}
	return out
}

func sameResp(t *testing.T, got, want proto.Record) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("response\n got %#v\nwant %#v", got, want)
	}
}

// createdStat is the Stat of a node created at zxid and time with data.
func createdStat(zxid, time, owner int64, data []byte) proto.Stat {
	return proto.Stat{Czxid: zxid, Mzxid: zxid, Pzxid: zxid, Ctime: time, Mtime: time,
		EphemeralOwner: owner, DataLength: int32(len(data))}
}

func TestCreate(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		flags     int32
		wantPath  string
		ephemeral bool
	}{
		{"persistent", "/p/a", 0, "/p/a", false},
		{"ephemeral", "/p/a", eph, "/p/a", true},
		{"sequential", "/p/s-", seq, "/p/s-0000000000", false},
		{"ephemeral sequential", "/p/s-", eph | seq, "/p/s-0000000000", true},
		{"sequential with empty base name", "/p/", seq, "/p/0000000000", false},
		{"deep", "/p/q/r", 0, "/p/q/r", false},
	}
	for _, tt := range tests {
		for _, op := range []proto.OpCode{proto.OpCreate, proto.OpCreate2} {
			t.Run(tt.name+"/"+op.String(), func(t *testing.T) {
				h := newHarness(t)
				c := h.session(m1)
				h.ok(c.create("/p", []byte("parent"), 0))
				parentPath := "/p"
				if tt.path == "/p/q/r" {
					h.ok(c.create("/p/q", nil, 0))
					parentPath = "/p/q"
				}
				before := h.stat(parentPath)
				data := []byte("hello")
				res, events := h.ok(c.req(op, &proto.CreateRequest{Path: tt.path, Data: data, ACL: openACL, Flags: tt.flags}))

				z, now := res.Zxid, h.s.Time()
				if z != h.s.Zxid() {
					t.Errorf("result zxid %d, state zxid %d", z, h.s.Zxid())
				}
				if now != h.wall {
					t.Errorf("official time %d, entry wall clock %d", now, h.wall)
				}
				var owner int64
				if tt.ephemeral {
					owner = c.sess
				}
				want := createdStat(z, now, owner, data)
				if got := h.stat(tt.wantPath); got != want {
					t.Errorf("stat\n got %+v\nwant %+v", got, want)
				}
				if op == proto.OpCreate {
					sameResp(t, res.Resp, &proto.PathRequest{Path: tt.wantPath})
				} else {
					sameResp(t, res.Resp, &proto.Create2Response{Path: tt.wantPath, Stat: want})
				}
				n := h.s.Node(tt.wantPath)
				if string(n.Data()) != "hello" || !reflect.DeepEqual(h.s.ACL(n), openACL) {
					t.Errorf("node data %q acl %v", n.Data(), h.s.ACL(n))
				}

				// The parent gains a child: cversion, numChildren and pzxid
				// move; its own data (mzxid, mtime, version) does not.
				wantParent := before
				wantParent.Cversion++
				wantParent.NumChildren++
				wantParent.Pzxid = z
				if got := h.stat(parentPath); got != wantParent {
					t.Errorf("parent stat\n got %+v\nwant %+v", got, wantParent)
				}
				sameEvents(t, events, []Event{
					{Type: proto.EventNodeCreated, Path: tt.wantPath, Zxid: z},
					{Type: proto.EventNodeChildrenChanged, Path: parentPath, Zxid: z},
				})

				wantEph := []string{}
				if tt.ephemeral {
					wantEph = []string{tt.wantPath}
				}
				if got := h.s.Session(c.sess).Ephemerals(); !slices.Equal(got, wantEph) {
					t.Errorf("session ephemerals %v, want %v", got, wantEph)
				}
				if h.s.EphemeralCount() != len(wantEph) {
					t.Errorf("EphemeralCount %d, want %d", h.s.EphemeralCount(), len(wantEph))
				}
				checkInvariants(t, h.s)
			})
		}
	}
}

func TestCreateWithoutData(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	res, _ := h.ok(c.create2("/a", nil, 0))
	if st := res.Resp.(*proto.Create2Response).Stat; st.DataLength != 0 {
		t.Errorf("dataLength %d", st.DataLength)
	}
	resp, code, _ := h.read(proto.OpGetData, pathWatch("/a", false))
	if code != proto.ErrOK || len(resp.(*proto.GetDataResponse).Data) != 0 {
		t.Errorf("getData %v %v", resp, code)
	}
}

func TestCreateContainer(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	res, events := h.ok(c.req(proto.OpCreateContainer,
		&proto.CreateRequest{Path: "/box", ACL: openACL, Flags: proto.FlagContainer}))
	if r, ok := res.Resp.(*proto.Create2Response); !ok || r.Path != "/box" {
		t.Fatalf("response %#v", res.Resp)
	}
	sameEvents(t, events, []Event{{Type: proto.EventNodeCreated, Path: "/box", Zxid: res.Zxid}, {Type: proto.EventNodeChildrenChanged, Path: "/", Zxid: res.Zxid}})
	// A container is no ephemeral: it may have children and outlives the session.
	h.ok(c.create("/box/child", nil, 0))
	if got := h.s.Session(c.sess).Ephemerals(); len(got) != 0 {
		t.Errorf("container listed as ephemeral: %v", got)
	}
	h.ok(c.close())
	if h.s.Node("/box") == nil || h.s.Node("/box/child") == nil {
		t.Error("closing the session removed the container")
	}
}

func TestSequentialSuffix(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/q", nil, 0))
	h.ok(c.create("/r", nil, 0))
	runCreateSteps(t, h, []createStep{
		{c.create("/q/n-", nil, seq), proto.ErrOK, "/q/n-0000000000"},
		{c.create("/q/n-", nil, seq), proto.ErrOK, "/q/n-0000000001"},
		{c.create("/q/x", nil, 0), proto.ErrOK, "/q/x"},
		{c.create("/q/n-", nil, seq), proto.ErrOK, "/q/n-0000000003"}, // the plain create took 2
		{c.create("/q/e-", nil, eph|seq), proto.ErrOK, "/q/e-0000000004"},
		{c.create("/q/", nil, seq), proto.ErrOK, "/q/0000000005"},
		{c.create("/q/x", nil, 0), proto.ErrNodeExists, ""}, // a failed create takes no number
		{c.create("/q/n-", nil, seq), proto.ErrOK, "/q/n-0000000006"},
		{c.create("/r/n-", nil, seq), proto.ErrOK, "/r/n-0000000000"}, // counted per parent
	})
	if st := h.stat("/q"); st.Cversion != 7 || st.NumChildren != 7 {
		t.Errorf("/q cversion %d numChildren %d, want 7 7", st.Cversion, st.NumChildren)
	}
}

// createStep is a request and what it must answer: its error and, for a
// create, the path it created ("" for requests that create nothing).
type createStep struct {
	req     Request
	wantErr proto.Code
	want    string
}

func runCreateSteps(t *testing.T, h *harness, steps []createStep) {
	t.Helper()
	for i, st := range steps {
		res, _ := h.do(st.req)
		if res.Err != st.wantErr {
			t.Fatalf("step %d: %v: %v, want %v", i, st.req.Op, res.Err, st.wantErr)
		}
		if st.want == "" {
			continue
		}
		if got := createdPath(res.Resp); got != st.want {
			t.Errorf("step %d: created %s, want %s", i, got, st.want)
		}
	}
}

// createdPath is the path a create or create2 response names.
func createdPath(r proto.Record) string {
	switch r := r.(type) {
	case *proto.PathRequest:
		return r.Path
	case *proto.Create2Response:
		return r.Path
	}
	return ""
}

// ZooKeeper keeps the number of child creates in the parent (the sequential
// counter) and serves cversion as 2*creates - numChildren, which counts
// creates and deletes (DataNode.copyStat). A delete leaves the counter, so
// the next sequential suffix does not skip.
func TestSequentialSuffixIgnoresDeletes(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	other := h.session(m2)
	h.ok(c.create("/q", nil, 0))
	// A delete must not advance the sequence.
	runCreateSteps(t, h, []createStep{
		{c.create("/q/n-", nil, seq), proto.ErrOK, "/q/n-0000000000"},
		{c.delete("/q/n-0000000000", -1), proto.ErrOK, ""},
		{c.create("/q/n-", nil, seq), proto.ErrOK, "/q/n-0000000001"}, // one create so far
		{other.create("/q/e-", nil, eph|seq), proto.ErrOK, "/q/e-0000000002"},
		{other.close(), proto.ErrOK, ""}, // deletes /q/e-0000000002
		{c.create("/q/n-", nil, seq), proto.ErrOK, "/q/n-0000000003"},
	})
	// Served cversion counts the 4 creates and the 2 deletes.
	if st := h.stat("/q"); st.Cversion != 6 || st.NumChildren != 2 {
		t.Errorf("/q cversion %d numChildren %d, want 6 2", st.Cversion, st.NumChildren)
	}
}

// ZooKeeper 3.8's DataTree starts with /, /zookeeper, /zookeeper/quota and
// /zookeeper/config (READ_ACL_UNSAFE), and serves cversion as
// 2*creates - numChildren, so a new tree shows cversion -1 on / and -2 on
// /zookeeper.
func TestInitialTreeMatchesZooKeeper(t *testing.T) {
	s := New()
	want := []struct {
		path     string
		children []string
		cversion int32
		acl      []proto.ACL
	}{
		{"/", []string{"zookeeper"}, -1, openACL},
		{"/zookeeper", []string{"config", "quota"}, -2, openACL},
		{"/zookeeper/quota", []string{}, 0, openACL},
		{"/zookeeper/config", []string{}, 0, proto.WorldACL(proto.PermRead)},
	}
	for _, w := range want {
		resp, code, _ := s.Read(proto.OpGetChildren2, pathWatch(w.path, false), 0, nil)
		if code != proto.ErrOK {
			t.Errorf("getChildren2 %s: %v", w.path, code)
			continue
		}
		r := resp.(*proto.ChildrenResponse)
		wantStat := proto.Stat{Cversion: w.cversion, NumChildren: int32(len(w.children))}
		if !slices.Equal(r.Children, w.children) || r.Stat != wantStat {
			t.Errorf("%s: children %v stat %+v, want %v %+v", w.path, r.Children, r.Stat, w.children, wantStat)
		}
		aresp, _, _ := s.Read(proto.OpGetACL, &proto.PathRequest{Path: w.path}, 0, nil)
		if got := aresp.(*proto.GetACLResponse).ACL; !reflect.DeepEqual(got, w.acl) {
			t.Errorf("%s: acl %v, want %v", w.path, got, w.acl)
		}
	}
	if resp, _, _ := s.Read(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: "/"}, 0, nil); resp.(*proto.CountResponse).Count != 3 {
		t.Errorf("getAllChildrenNumber / = %d, want 3", resp.(*proto.CountResponse).Count)
	}

	// One create at the root: 1 create, 2 children: cversion 0.
	h := &harness{t: t, s: s, wall: startWall}
	c := h.session(m1)
	h.ok(c.create("/a", nil, 0))
	if st := h.stat("/"); st.Cversion != 0 || st.NumChildren != 2 {
		t.Errorf("/ after a create: cversion %d numChildren %d, want 0 2", st.Cversion, st.NumChildren)
	}
}

// ZooKeeper reports ephemeralOwner 0 for container nodes
// (DataNode.getClientEphemeralOwner); the container marker is internal.
func TestContainerStatReportsNoOwner(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	res, _ := h.ok(c.req(proto.OpCreateContainer,
		&proto.CreateRequest{Path: "/box", ACL: openACL, Flags: proto.FlagContainer}))
	if owner := res.Resp.(*proto.Create2Response).Stat.EphemeralOwner; owner != 0 {
		t.Errorf("create2 stat ephemeralOwner %#x, want 0", owner)
	}
	resp, _, _ := h.read(proto.OpExists, pathWatch("/box", false))
	if owner := resp.(*proto.StatResponse).Stat.EphemeralOwner; owner != 0 {
		t.Errorf("exists stat ephemeralOwner %#x, want 0", owner)
	}
}

// errorFixture is a tree for the error cases: /p with child /p/c, the
// ephemeral /e, and /v at data version 2.
func errorFixture(t *testing.T) (*harness, testClient) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/p", nil, 0))
	h.ok(c.create("/p/c", nil, 0))
	h.ok(c.create("/e", nil, eph))
	h.ok(c.create("/v", nil, 0))
	h.ok(c.setData("/v", []byte("1"), -1))
	h.ok(c.setData("/v", []byte("2"), -1))
	return h, c
}

// applyFailing applies a request that must fail: it takes a zxid (as in
// ZooKeeper) but changes nothing else and fires nothing.
func applyFailing(t *testing.T, h *harness, r Request) Result {
	t.Helper()
	before := dumpState(h.s)
	res, events := h.do(r)
	if res.Zxid != before.Zxid+1 || h.s.Zxid() != before.Zxid+1 {
		t.Errorf("zxid: result %d state %d, want %d", res.Zxid, h.s.Zxid(), before.Zxid+1)
	}
	sameEvents(t, events, nil)
	after := dumpState(h.s)
	after.Zxid, after.Time = before.Zxid, before.Time
	if d := diffDumps(after, before); d != "" {
		t.Errorf("a failed %v changed the state: %s", r.Op, d)
	}
	return res
}

func TestWriteErrors(t *testing.T) {
	withACL := func(path string, acl ...proto.ACL) func(testClient) Request {
		return func(c testClient) Request { return c.createACL(path, acl, 0) }
	}
	acl := func(scheme, id string) proto.ACL {
		return proto.ACL{Perms: proto.PermAll, ID: proto.ID{Scheme: scheme, ID: id}}
	}
	create := func(path string, flags int32) func(testClient) Request {
		return func(c testClient) Request { return c.create(path, nil, flags) }
	}
	del := func(path string, version int32) func(testClient) Request {
		return func(c testClient) Request { return c.delete(path, version) }
	}
	set := func(path string, version int32) func(testClient) Request {
		return func(c testClient) Request { return c.setData(path, []byte("x"), version) }
	}
	setACL := func(path string, version int32, acl ...proto.ACL) func(testClient) Request {
		return func(c testClient) Request { return c.setACL(path, acl, version) }
	}
	tests := []struct {
		name string
		req  func(c testClient) Request
		want proto.Code
	}{
		// create: path
		{"create relative path", create("a", 0), proto.ErrBadArguments},
		{"create empty path", create("", 0), proto.ErrBadArguments},
		{"create trailing slash", create("/p/", 0), proto.ErrBadArguments},
		{"create dot", create("/p/.", 0), proto.ErrBadArguments},
		{"create dot-dot", create("/p/..", 0), proto.ErrBadArguments},
		{"create NUL", create("/p/a\x00b", 0), proto.ErrBadArguments},
		{"create control character", create("/p/a\x01", 0), proto.ErrBadArguments},
		{"create invalid UTF-8", create("/p/\xff", 0), proto.ErrBadArguments},
		// ZooKeeper looks the parent up before it validates the whole path,
		// so a bad component before the last is a missing parent.
		{"create empty component", create("/p//b", 0), proto.ErrNoNode},
		{"create dot component", create("/p/./b", 0), proto.ErrNoNode},
		{"create dot-dot component", create("/p/../b", 0), proto.ErrNoNode},
		{"create trailing slash missing parent", create("/nope/", 0), proto.ErrNoNode},
		// create: mode
		{"create flags 7", create("/p/a", 7), proto.ErrBadArguments},
		{"create flags -1", create("/p/a", -1), proto.ErrBadArguments},
		{"create persistent TTL mode", create("/p/a", proto.ModePersistentTTL), proto.ErrUnimplemented},
		{"create sequential TTL mode", create("/p/a", proto.ModePersistentSequentialTTL), proto.ErrUnimplemented},
		{"createTTL", func(c testClient) Request {
			return c.req(proto.OpCreateTTL, &proto.CreateTTLRequest{
				CreateRequest: proto.CreateRequest{Path: "/p/t", ACL: openACL, Flags: proto.ModePersistentTTL}, TTL: 1000})
		}, proto.ErrUnimplemented},
		// create: tree
		{"create existing", create("/p", 0), proto.ErrNodeExists},
		{"create root", create("/", 0), proto.ErrNodeExists},
		{"create missing parent", create("/nope/x", 0), proto.ErrNoNode},
		{"create under ephemeral", create("/e/x", 0), proto.ErrNoChildrenForEphemerals},
		{"create sequential under ephemeral", create("/e/x-", seq), proto.ErrNoChildrenForEphemerals},
		// create: ACL
		{"create empty ACL", withACL("/p/a"), proto.ErrInvalidACL},
		{"create digest id without password", withACL("/p/a", acl("digest", "alice")), proto.ErrInvalidACL},
		{"create digest id with trailing colon", withACL("/p/a", acl("digest", "alice:")), proto.ErrInvalidACL},
		{"create digest id with two colons", withACL("/p/a", acl("digest", "a:b:c")), proto.ErrInvalidACL},
		{"create auth without identities", withACL("/p/a", acl("auth", "")), proto.ErrInvalidACL},
		{"create world id other than anyone", withACL("/p/a", acl("world", "nobody")), proto.ErrInvalidACL},
		{"create unknown scheme", withACL("/p/a", acl("kerberos", "x")), proto.ErrInvalidACL},
		{"create ip mask too long", withACL("/p/a", acl("ip", "10.0.0.0/33")), proto.ErrInvalidACL},
		{"create ip bad address", withACL("/p/a", acl("ip", "300.1.1.1")), proto.ErrInvalidACL},
		{"create one bad entry among good", withACL("/p/a", openACL[0], acl("digest", "x")), proto.ErrInvalidACL},
		{"create ACL checked before parent", withACL("/nope/a"), proto.ErrInvalidACL},
		// delete
		{"delete root", del("/", -1), proto.ErrBadArguments},
		{"delete /zookeeper", del("/zookeeper", -1), proto.ErrBadArguments},
		{"delete /zookeeper/quota", del("/zookeeper/quota", -1), proto.ErrBadArguments},
		{"delete /zookeeper/config", del("/zookeeper/config", -1), proto.ErrBadArguments},
		{"delete relative path", del("a", -1), proto.ErrBadArguments},
		{"delete empty path", del("", -1), proto.ErrBadArguments},
		{"delete NUL", del("/p\x00", -1), proto.ErrBadArguments},
		{"delete missing", del("/nope", -1), proto.ErrNoNode},
		{"delete missing parent", del("/nope/x", -1), proto.ErrNoNode},
		{"delete trailing slash", del("/p/", -1), proto.ErrNoNode},
		{"delete bad version", del("/p/c", 1), proto.ErrBadVersion},
		{"delete not empty", del("/p", -1), proto.ErrNotEmpty},
		{"delete version checked before children", del("/p", 3), proto.ErrBadVersion},
		// setData
		{"setData bad version", set("/v", 0), proto.ErrBadVersion},
		{"setData missing", set("/nope", -1), proto.ErrNoNode},
		{"setData relative path", set("v", -1), proto.ErrBadArguments},
		{"setData trailing slash", set("/v/", -1), proto.ErrBadArguments},
		{"setData empty component", set("/p//c", -1), proto.ErrBadArguments},
		// setACL
		{"setACL bad version", setACL("/v", 1, openACL...), proto.ErrBadVersion},
		{"setACL missing", setACL("/nope", -1, openACL...), proto.ErrNoNode},
		{"setACL bad path", setACL("/v/", -1, openACL...), proto.ErrBadArguments},
		{"setACL empty ACL", setACL("/v", -1), proto.ErrInvalidACL},
		{"setACL ACL checked before node", setACL("/nope", -1), proto.ErrInvalidACL},
		// sessions
		{"unknown session", func(c testClient) Request {
			c.sess += 1000
			return c.create("/p/a", nil, 0)
		}, proto.ErrSessionExpired},
		{"close unknown session", func(c testClient) Request { c.sess += 1000; return c.close() }, proto.ErrSessionExpired},
		{"session owned by another member", func(c testClient) Request { return c.on(m2).create("/p/a", nil, 0) }, proto.ErrSessionMoved},
		// bodies and opcodes
		{"garbage body", func(c testClient) Request {
			r := c.create("/p/a", nil, 0)
			r.Body = []byte{0, 0}
			return r
		}, proto.ErrMarshallingError},
		{"trailing bytes", func(c testClient) Request {
			r := c.create("/p/a", nil, 0)
			r.Body = append(r.Body, 0)
			return r
		}, proto.ErrMarshallingError},
		{"createSession garbage body", func(c testClient) Request {
			return Request{Member: m1, Op: proto.OpCreateSession, Body: []byte{1}}
		}, proto.ErrMarshallingError},
		{"read op in the log", func(c testClient) Request { return c.req(proto.OpGetData, pathWatch("/p", false)) }, proto.ErrUnimplemented},
		{"unknown opcode", func(c testClient) Request { return c.req(999, &proto.PathRequest{Path: "/p"}) }, proto.ErrUnimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, c := errorFixture(t)
			res := applyFailing(t, h, tt.req(c))
			if res.Err != tt.want {
				t.Errorf("err %v, want %v", res.Err, tt.want)
			}
			if res.Resp != nil {
				t.Errorf("failed request has response %#v", res.Resp)
			}
		})
	}
}

func TestValidPath(t *testing.T) {
	valid := []string{"/", "/a", "/a/b", "/a.", "/.a", "/a/..b", "/a/b.", "/...", "/a/.../b",
		"/a b", "/é", "/日本", "/\u00a0", "/\ud7ff", "/\ufeff", "/a-0000000001"}
	invalid := []string{"", "a", "a/b", "/a/", "//", "/a//b", "/.", "/..", "/a/.", "/a/..",
		"/./a", "/../a", "/a/./b", "/a/../b", "/a\x00", "/\x01", "/\x1f", "/\x7f", "/\u0080",
		"/\u009f", "/\ue000", "/\uf8ff", "/\ufff0", "/\uffff", "/\xff", "/a\xc3"}
	for _, p := range valid {
		if !validPath(p) {
			t.Errorf("validPath(%q) = false", p)
		}
	}
	for _, p := range invalid {
		if validPath(p) {
			t.Errorf("validPath(%q) = true", p)
		}
	}
}

// ZooKeeper validates paths as UTF-16: a character outside the BMP is a
// surrogate pair, and surrogates (0xd800-0xf8ff) are refused
// (PathUtils.validatePath).
func TestPathRejectsSupplementaryCharacters(t *testing.T) {
	for _, p := range []string{"/\U0001F600", "/a\U00010000b", "/\U0010FFFF"} {
		if validPath(p) {
			t.Errorf("validPath(%q) = true", p)
		}
		h := newHarness(t)
		c := h.session(m1)
		if res, _ := h.do(c.create(p, nil, 0)); res.Err != proto.ErrBadArguments {
			t.Errorf("create %q: %v, want %v", p, res.Err, proto.ErrBadArguments)
		}
	}
}

func TestFailedWriteConsumesZxid(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	z := h.s.Zxid()
	res, _ := h.mustApply(c.create("/nope/a", nil, 0), c.create("/a", nil, 0), c.delete("/a", 5))
	for i, want := range []proto.Code{proto.ErrNoNode, proto.ErrOK, proto.ErrBadVersion} {
		if res[i].Err != want || res[i].Zxid != z+int64(i)+1 {
			t.Errorf("request %d: err %v zxid %d, want %v %d", i, res[i].Err, res[i].Zxid, want, z+int64(i)+1)
		}
	}
	if h.s.Zxid() != z+3 {
		t.Errorf("zxid %d, want %d", h.s.Zxid(), z+3)
	}
	if st := h.stat("/a"); st.Czxid != z+2 {
		t.Errorf("czxid %d, want %d", st.Czxid, z+2)
	}
}

func TestOfficialTime(t *testing.T) {
	walls := []int64{1000, 900, 900, 2000, 1500, 1501, 1502, 5000, 0}
	want := []int64{1000, 1000, 1000, 2000, 2000, 2000, 2000, 5000, 5000}
	h := newHarness(t)
	res, _ := h.mustApplyAt(500, openSession(m1, 30000, nil))
	c := testClient{sess: res[0].Session, member: m1}
	for i, wall := range walls {
		path := "/t" + string(rune('a'+i))
		res, _ := h.mustApplyAt(wall, c.create(path, nil, 0))
		require.Equal(t, proto.ErrOK, res[0].Err, "create %s", path)
		assert.Equal(t, want[i], h.s.Time(), "entry %d (wall %d)", i, wall)
		st := h.stat(path)
		assert.Equal(t, []int64{want[i], want[i]}, []int64{st.Ctime, st.Mtime}, "%s: ctime and mtime", path)
	}
	// Entries faster than the clock's milliseconds do not run it ahead.
	for range 5000 {
		h.mustApplyAt(5000, nil...)
	}
	assert.Equal(t, int64(5000), h.s.Time(), "5,000 entries in one millisecond")
	h.mustApplyAt(5002, c.setData("/ta", []byte("x"), -1))
	st := h.stat("/ta")
	assert.Equal(t, []int64{1000, 5002}, []int64{st.Ctime, st.Mtime}, "setData stamps mtime with the official time")
	// A corrupt entry changes nothing.
	_, _, err := h.s.Apply([]byte{entryBatch})
	require.Error(t, err)
	assert.Equal(t, int64(5002), h.s.Time(), "after a corrupt entry")
}

// TestOfficialTimeOfOldEntries: entries written before version 3 keep
// their rule, at least 1 ms each, so an old log replays to the state it
// made.
func TestOfficialTimeOfOldEntries(t *testing.T) {
	h := newHarness(t)
	old := func(wall int64, reqs ...Request) {
		entry := EncodeEntry(nil, wall, reqs)
		entry[1] = 2 // version 2 has version 3's layout
		_, _, err := h.s.Apply(entry)
		require.NoError(t, err)
	}
	old(1000)
	old(900)
	old(1000)
	assert.Equal(t, int64(1002), h.s.Time())
	h.mustApplyAt(1000, nil...)
	assert.Equal(t, int64(1002), h.s.Time(), "a version 3 entry never moves it back")
}

func TestSetData(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/a", []byte("v0"), 0))
	h.ok(c.create("/a/child", nil, 0))
	before := h.stat("/a")
	res, events := h.ok(c.setData("/a", []byte("value-1"), 0))
	want := before
	want.Version, want.Mzxid, want.Mtime, want.DataLength = 1, res.Zxid, h.s.Time(), 7
	sameResp(t, res.Resp, &proto.StatResponse{Stat: want})
	if got := h.stat("/a"); got != want {
		t.Errorf("stat\n got %+v\nwant %+v", got, want)
	}
	sameEvents(t, events, []Event{{Type: proto.EventNodeDataChanged, Path: "/a", Zxid: res.Zxid}})
	// The expected version must be the current one; -1 matches any.
	if res, _ := h.do(c.setData("/a", nil, 0)); res.Err != proto.ErrBadVersion {
		t.Errorf("stale version: %v", res.Err)
	}
	h.ok(c.setData("/a", nil, 1))
	res, _ = h.ok(c.setData("/a", []byte("x"), -1))
	if st := res.Resp.(*proto.StatResponse).Stat; st.Version != 3 || st.DataLength != 1 {
		t.Errorf("stat after two more writes %+v", st)
	}
}

func TestSetACL(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/a", []byte("x"), 0))
	before := h.stat("/a")
	res, events := h.ok(c.setACL("/a", aliceAll, 0))
	want := before
	want.Aversion = 1
	sameResp(t, res.Resp, &proto.StatResponse{Stat: want})
	if got := h.stat("/a"); got != want {
		t.Errorf("stat\n got %+v\nwant %+v", got, want)
	}
	if got := h.s.ACL(h.s.Node("/a")); !reflect.DeepEqual(got, aliceAll) {
		t.Errorf("acl %v", got)
	}
	sameEvents(t, events, nil)
	// The version of setACL is the ACL version.
	if res, _ := h.do(c.as(aliceID).setACL("/a", openACL, 0)); res.Err != proto.ErrBadVersion {
		t.Errorf("stale aversion: %v", res.Err)
	}
	h.ok(c.as(aliceID).setACL("/a", openACL, 1))
}

func TestDelete(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/a", []byte("x"), 0))
	h.ok(c.create("/a/b", nil, 0))
	h.ok(c.create("/a/c", nil, 0))
	h.ok(c.setData("/a/b", nil, -1))
	before := h.stat("/a")
	res, events := h.ok(c.delete("/a/b", 1))
	if res.Resp != nil {
		t.Errorf("delete response %#v", res.Resp)
	}
	want := before
	want.Cversion++ // served cversion counts deletes too
	want.NumChildren--
	want.Pzxid = res.Zxid
	if got := h.stat("/a"); got != want {
		t.Errorf("parent stat\n got %+v\nwant %+v", got, want)
	}
	if h.s.Node("/a/b") != nil {
		t.Error("/a/b still exists")
	}
	sameEvents(t, events, []Event{{Type: proto.EventNodeDeleted, Path: "/a/b", Zxid: res.Zxid}, {Type: proto.EventNodeChildrenChanged, Path: "/a", Zxid: res.Zxid}})
	checkInvariants(t, h.s)
}

func TestDeleteOtherSessionsEphemeral(t *testing.T) {
	h := newHarness(t)
	a, b := h.session(m1), h.session(m2)
	h.ok(a.create("/e", nil, eph))
	h.ok(b.delete("/e", -1))
	if got := h.s.Session(a.sess).Ephemerals(); len(got) != 0 {
		t.Errorf("owner still lists %v", got)
	}
	// Closing the owner now has nothing to delete.
	_, events := h.ok(a.close())
	sameEvents(t, events, nil)
	checkInvariants(t, h.s)
}

func TestEvents(t *testing.T) {
	tests := []struct {
		name string
		req  func(c testClient) Request
		want func(z int64) []Event
	}{
		{"create", func(c testClient) Request { return c.create("/a/c", nil, 0) }, func(z int64) []Event {
			return []Event{{Type: proto.EventNodeCreated, Path: "/a/c", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/a", Zxid: z}}
		}},
		{"create at root", func(c testClient) Request { return c.create("/x", nil, 0) }, func(z int64) []Event {
			return []Event{{Type: proto.EventNodeCreated, Path: "/x", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/", Zxid: z}}
		}},
		{"create sequential", func(c testClient) Request { return c.create("/a/s-", nil, eph|seq) }, func(z int64) []Event {
			return []Event{{Type: proto.EventNodeCreated, Path: "/a/s-0000000001", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/a", Zxid: z}}
		}},
		{"delete", func(c testClient) Request { return c.delete("/a/b", -1) }, func(z int64) []Event {
			return []Event{{Type: proto.EventNodeDeleted, Path: "/a/b", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/a", Zxid: z}}
		}},
		{"setData", func(c testClient) Request { return c.setData("/a", []byte("x"), -1) }, func(z int64) []Event {
			return []Event{{Type: proto.EventNodeDataChanged, Path: "/a", Zxid: z}}
		}},
		{"setACL", func(c testClient) Request { return c.setACL("/a", aliceAll, -1) }, func(int64) []Event { return nil }},
		{"failed create", func(c testClient) Request { return c.create("/a/b", nil, 0) }, func(int64) []Event { return nil }},
		{"createSession", func(testClient) Request { return openSession(m1, 1000, nil) }, func(int64) []Event { return nil }},
		{"closeSession without ephemerals", func(c testClient) Request { return c.close() }, func(int64) []Event { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			c := h.session(m1)
			h.ok(c.create("/a", nil, 0))
			h.ok(c.create("/a/b", nil, 0))
			res, events := h.do(tt.req(c))
			sameEvents(t, events, tt.want(res.Zxid))
		})
	}
}

func TestEventsOfAnEntryInOrder(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/a", nil, 0))
	res, events := h.mustApply(c.create("/a/1", nil, 0), c.setData("/a", nil, -1), c.create("/nope/x", nil, 0), c.delete("/a/1", -1))
	z := res[0].Zxid
	sameEvents(t, events, []Event{
		{Type: proto.EventNodeCreated, Path: "/a/1", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/a", Zxid: z},
		{Type: proto.EventNodeDataChanged, Path: "/a", Zxid: z + 1},
		{Type: proto.EventNodeDeleted, Path: "/a/1", Zxid: z + 3}, {Type: proto.EventNodeChildrenChanged, Path: "/a", Zxid: z + 3},
	})
}

func TestMultiSuccess(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/m", nil, 0))
	before := h.stat("/m")
	ops := []proto.MultiOp{
		opCreate("/m/a", 0),
		opCreate2("/m/b", []byte("b")),
		opSetData("/m/a", []byte("a1"), 0),
		opCheck("/m/b", 0),
		opDelete("/m/b", 0),
	}
	res, events := h.ok(c.multi(ops...))
	z, now := res.Zxid, h.s.Time()
	if z != h.s.Zxid() {
		t.Errorf("a multi takes one zxid: result %d state %d", z, h.s.Zxid())
	}
	afterSet := createdStat(z, now, 0, []byte("a1"))
	afterSet.Version = 1
	// A create2 is answered with the new node's stat, as ClickHouse Keeper
	// answers it (CREATE_WITH_STATS); in ZooKeeper's form, as ZooKeeper
	// 3.8 answers it, as a plain create.
	zkForm := []proto.MultiResult{
		{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: "/m/a"}},
		{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: "/m/b"}},
		{Op: proto.OpSetData, Resp: &proto.StatResponse{Stat: afterSet}},
		{Op: proto.OpCheck},
		{Op: proto.OpDelete},
	}
	chForm := slices.Clone(zkForm)
	chForm[1] = proto.MultiResult{Op: proto.OpCreate2, Resp: &proto.Create2Response{Path: "/m/b", Stat: createdStat(z, now, 0, []byte("b"))}}
	sameResp(t, res.Resp, &proto.MultiResponse{Results: chForm})
	sameResp(t, res.Resp.(*proto.MultiResponse).ZooKeeperForm(ops), &proto.MultiResponse{Results: zkForm})
	sameEvents(t, events, []Event{
		{Type: proto.EventNodeCreated, Path: "/m/a", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/m", Zxid: z},
		{Type: proto.EventNodeCreated, Path: "/m/b", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/m", Zxid: z},
		{Type: proto.EventNodeDataChanged, Path: "/m/a", Zxid: z},
		{Type: proto.EventNodeDeleted, Path: "/m/b", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/m", Zxid: z},
	})
	if got := h.stat("/m/a"); got != afterSet {
		t.Errorf("/m/a stat %+v", got)
	}
	if h.s.Node("/m/b") != nil {
		t.Error("/m/b exists")
	}
	want := before
	want.Cversion += 3 // two creates and a delete
	want.NumChildren++
	want.Pzxid = z
	if got := h.stat("/m"); got != want {
		t.Errorf("/m stat\n got %+v\nwant %+v", got, want)
	}
	checkInvariants(t, h.s)
}

func TestMultiEmpty(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	res, events := h.ok(c.multi())
	if r := res.Resp.(*proto.MultiResponse); len(r.Results) != 0 {
		t.Errorf("results %v", r.Results)
	}
	sameEvents(t, events, nil)
}

func TestMultiFailure(t *testing.T) {
	const (
		ok = proto.ErrOK
		ri = proto.ErrRuntimeInconsistency
	)
	tests := []struct {
		name string
		ops  func(c testClient) []proto.MultiOp
		want []proto.Code
	}{
		{"first op fails", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opSetData("/m/nope", nil, -1), opCreate("/m/a", 0), opCreate("/m/b", 0)}
		}, []proto.Code{proto.ErrNoNode, ri, ri}},
		{"middle op fails", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/a", 0), opCheck("/m/v", 1), opCreate("/m/b", 0)}
		}, []proto.Code{ok, proto.ErrBadVersion, ri}},
		{"last op fails", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/a", 0), opSetData("/m/v", []byte("x"), 0), opDelete("/m", -1)}
		}, []proto.Code{ok, ok, proto.ErrNotEmpty}},
		{"create twice", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/a", 0), opCreate("/m/a", 0)}
		}, []proto.Code{ok, proto.ErrNodeExists}},
		{"must not exist assertion on existing node", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/c", 0), opDelete("/m/c", -1), opCreate("/m/x", eph|seq)}
		}, []proto.Code{proto.ErrNodeExists, ri, ri}},
		{"one node changed thrice, then failure", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/a", 0), opSetData("/m/a", []byte("x"), 0), opDelete("/m/a", -1),
				opSetData("/m/v", []byte("y"), -1), opDelete("/m/v", -1), opCreate("/m/v", 0), opCheck("/m/c", 9)}
		}, []proto.Code{ok, ok, ok, ok, ok, ok, proto.ErrBadVersion}},
		{"check sees staged delete", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opDelete("/m/c", -1), opCheck("/m/c", -1)}
		}, []proto.Code{ok, proto.ErrNoNode}},
		{"child of staged ephemeral", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/e", eph), opCreate("/m/e/x", 0)}
		}, []proto.Code{ok, proto.ErrNoChildrenForEphemerals}},
		{"sequential then failure", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/s-", seq), opCreate("/m/s-", eph|seq), opSetData("/nope", nil, -1)}
		}, []proto.Code{ok, ok, proto.ErrNoNode}},
		{"delete ephemeral then failure", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opDelete("/m/eph", -1), opCheck("/m/v", 7)}
		}, []proto.Code{ok, proto.ErrBadVersion}},
		{"invalid ACL", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/a", 0), {Op: proto.OpCreate, Req: &proto.CreateRequest{Path: "/m/b"}}}
		}, []proto.Code{ok, proto.ErrInvalidACL}},
		{"no auth", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/a", 0), opCreate("/m/locked/x", 0)}
		}, []proto.Code{ok, proto.ErrNoAuth}},
		{"TTL", func(testClient) []proto.MultiOp {
			return []proto.MultiOp{opCreate("/m/a", 0), opCreate("/m/t", proto.ModePersistentTTL)}
		}, []proto.Code{ok, proto.ErrUnimplemented}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			c := h.session(m1)
			h.ok(c.create("/m", nil, 0))
			h.ok(c.create("/m/c", nil, 0))
			h.ok(c.create("/m/v", nil, 0))
			h.ok(c.create("/m/eph", nil, eph))
			h.ok(c.createACL("/m/locked", aliceAll, 0))

			res := applyFailing(t, h, c.multi(tt.ops(c)...))
			if res.Err != proto.ErrOK {
				t.Fatalf("a failed multi answers with header err 0, got %v", res.Err)
			}
			var want []proto.MultiResult
			for _, code := range tt.want {
				want = append(want, proto.MultiResult{Op: proto.OpError, Err: code})
			}
			sameResp(t, res.Resp, &proto.MultiResponse{Results: want})
			// A sequential create after the failed multi numbers as if it
			// never ran.
			runCreateSteps(t, h, []createStep{{c.create("/m/s-", nil, seq), proto.ErrOK, "/m/s-0000000004"}})
		})
	}
}

// ClickHouse asserts that a node does not exist with create X; delete X.
func TestMultiCreateThenDelete(t *testing.T) {
	for _, flags := range []int32{0, eph} {
		h := newHarness(t)
		c := h.session(m1)
		h.ok(c.create("/blocks", nil, 0))
		before := h.stat("/blocks")
		res, events := h.ok(c.multi(opCreate("/blocks/id", flags), opDelete("/blocks/id", -1)))
		z := res.Zxid
		sameResp(t, res.Resp, &proto.MultiResponse{Results: []proto.MultiResult{
			{Op: proto.OpCreate, Resp: &proto.PathRequest{Path: "/blocks/id"}},
			{Op: proto.OpDelete},
		}})
		if h.s.Node("/blocks/id") != nil {
			t.Errorf("flags %d: /blocks/id exists", flags)
		}
		want := before
		want.Cversion += 2
		want.Pzxid = z
		if got := h.stat("/blocks"); got != want {
			t.Errorf("flags %d: parent stat\n got %+v\nwant %+v", flags, got, want)
		}
		sameEvents(t, events, []Event{
			{Type: proto.EventNodeCreated, Path: "/blocks/id", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/blocks", Zxid: z},
			{Type: proto.EventNodeDeleted, Path: "/blocks/id", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/blocks", Zxid: z},
		})
		if got := h.s.Session(c.sess).Ephemerals(); len(got) != 0 {
			t.Errorf("flags %d: session lists %v", flags, got)
		}
		checkInvariants(t, h.s)
	}
}

func TestMultiSequentialConsecutive(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/s", nil, 0))
	h.ok(c.create("/s/plain", nil, 0))
	res, _ := h.ok(c.multi(opCreate("/s/n-", seq), opCreate("/s/n-", seq), opCreate("/s/lock-", eph|seq)))
	var got []string
	for _, r := range res.Resp.(*proto.MultiResponse).Results {
		got = append(got, createdPath(r.Resp))
	}
	want := []string{"/s/n-0000000001", "/s/n-0000000002", "/s/lock-0000000003"}
	if !slices.Equal(got, want) {
		t.Errorf("created %v, want %v", got, want)
	}
	if eph := h.s.Session(c.sess).Ephemerals(); !slices.Equal(eph, []string{"/s/lock-0000000003"}) {
		t.Errorf("ephemerals %v", eph)
	}
}

func TestMultiEphemeralBookkeeping(t *testing.T) {
	h := newHarness(t)
	a, b := h.session(m1), h.session(m2)
	h.ok(a.create("/m", nil, 0))
	h.ok(a.multi(opCreate("/m/e1", eph), opCreate("/m/e2", eph)))
	// b deletes a's ephemeral and recreates it as its own.
	h.ok(b.multi(opDelete("/m/e1", -1), opCreate("/m/e1", eph)))
	// a creates, deletes and creates again: one entry.
	h.ok(a.multi(opCreate("/m/e3", eph), opDelete("/m/e3", -1), opCreate("/m/e3", eph)))
	if got := h.s.Session(a.sess).Ephemerals(); !slices.Equal(got, []string{"/m/e2", "/m/e3"}) {
		t.Errorf("a's ephemerals %v", got)
	}
	if got := h.s.Session(b.sess).Ephemerals(); !slices.Equal(got, []string{"/m/e1"}) {
		t.Errorf("b's ephemerals %v", got)
	}
	if st := h.stat("/m/e1"); st.EphemeralOwner != b.sess {
		t.Errorf("/m/e1 owner %#x, want %#x", st.EphemeralOwner, b.sess)
	}
	checkInvariants(t, h.s)
}

// aclFixture: /open (world all), /ro (world read), /alice (alice all) with
// child /alice/child, /mixed (world read, alice all), /noread (world all
// but read), /ip (10.0.0.0/8 all), /createonly and /deleteonly (world
// create, world delete) each with a child.
func aclFixture(t *testing.T) (*harness, testClient) {
	h := newHarness(t)
	c := h.session(m1)
	world := func(perms int32) proto.ACL { return proto.WorldACL(perms)[0] }
	h.ok(c.create("/open", nil, 0))
	h.ok(c.createACL("/ro", []proto.ACL{world(proto.PermRead)}, 0))
	h.ok(c.createACL("/alice", aliceAll, 0))
	h.ok(c.as(aliceID).create("/alice/child", nil, 0))
	h.ok(c.createACL("/mixed", []proto.ACL{world(proto.PermRead), aliceAll[0]}, 0))
	h.ok(c.createACL("/noread", []proto.ACL{world(proto.PermAll &^ proto.PermRead)}, 0))
	h.ok(c.createACL("/ip", []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "ip", ID: "10.0.0.0/8"}}}, 0))
	h.ok(c.createACL("/createonly", []proto.ACL{world(proto.PermCreate)}, 0))
	h.ok(c.create("/createonly/child", nil, 0))
	h.ok(c.create("/deleteonly", nil, 0))
	h.ok(c.create("/deleteonly/child", nil, 0))
	h.ok(c.setACL("/deleteonly", []proto.ACL{world(proto.PermDelete)}, -1))
	return h, c
}

func TestACLEnforcement(t *testing.T) {
	ip := func(addr string) proto.ID { return proto.ID{Scheme: "ip", ID: addr} }
	type action func(h *harness, c testClient) proto.Code
	write := func(mk func(c testClient) Request) action {
		return func(h *harness, c testClient) proto.Code { res, _ := h.do(mk(c)); return res.Err }
	}
	read := func(op proto.OpCode, req proto.Record) action {
		return func(h *harness, c testClient) proto.Code { _, code, _ := h.read(op, req, c.ids...); return code }
	}
	create := func(path string) action {
		return write(func(c testClient) Request { return c.create(path, nil, 0) })
	}
	setData := func(path string) action {
		return write(func(c testClient) Request { return c.setData(path, nil, -1) })
	}
	setACL := func(path string) action {
		return write(func(c testClient) Request { return c.setACL(path, openACL, -1) })
	}
	del := func(path string) action {
		return write(func(c testClient) Request { return c.delete(path, -1) })
	}
	getData := func(path string) action { return read(proto.OpGetData, pathWatch(path, true)) }
	tests := []struct {
		name string
		ids  []proto.ID
		do   action
		want proto.Code
	}{
		{"create under world-read parent", nil, create("/ro/x"), proto.ErrNoAuth},
		{"create under open parent", nil, create("/open/x"), proto.ErrOK},
		{"create under alice's node as anyone", nil, create("/alice/x"), proto.ErrNoAuth},
		{"create under alice's node as bob", []proto.ID{bobID}, create("/alice/x"), proto.ErrNoAuth},
		{"create under alice's node as alice", []proto.ID{aliceID}, create("/alice/x"), proto.ErrOK},
		{"create under alice's node as bob and alice", []proto.ID{bobID, aliceID}, create("/alice/x"), proto.ErrOK},
		{"create under alice's node as super", []proto.ID{superID}, create("/alice/x"), proto.ErrOK},
		{"create permission checked before existence", nil, create("/alice/child"), proto.ErrNoAuth},
		{"create from a matching ip", []proto.ID{ip("10.1.2.3")}, create("/ip/x"), proto.ErrOK},
		{"create from another ip", []proto.ID{ip("11.0.0.1")}, create("/ip/x"), proto.ErrNoAuth},
		{"delete needs parent DELETE", nil, del("/alice/child"), proto.ErrNoAuth},
		{"delete as alice", []proto.ID{aliceID}, del("/alice/child"), proto.ErrOK},
		{"delete ignores the node's own ACL", nil, del("/ro"), proto.ErrOK},
		{"delete under a create-only parent", nil, del("/createonly/child"), proto.ErrNoAuth},
		{"delete under a delete-only parent", nil, del("/deleteonly/child"), proto.ErrOK},
		{"create under a delete-only parent", nil, create("/deleteonly/x"), proto.ErrNoAuth},
		{"create under a create-only parent", nil, create("/createonly/x"), proto.ErrOK},
		{"setData on world-read", nil, setData("/ro"), proto.ErrNoAuth},
		{"setData on mixed as anyone", nil, setData("/mixed"), proto.ErrNoAuth},
		{"setData on mixed as alice", []proto.ID{aliceID}, setData("/mixed"), proto.ErrOK},
		{"setData on noread", nil, setData("/noread"), proto.ErrOK},
		{"getData on noread", nil, getData("/noread"), proto.ErrNoAuth},
		{"getData on world-read", nil, getData("/ro"), proto.ErrOK},
		{"getData on alice's node as anyone", nil, getData("/alice"), proto.ErrNoAuth},
		{"getData on alice's node as alice", []proto.ID{aliceID}, getData("/alice"), proto.ErrOK},
		{"getData on alice's node as super", []proto.ID{superID}, getData("/alice"), proto.ErrOK},
		{"getChildren on alice's node", nil, read(proto.OpGetChildren, pathWatch("/alice", true)), proto.ErrNoAuth},
		{"getChildren2 on alice's node", nil, read(proto.OpGetChildren2, pathWatch("/alice", false)), proto.ErrNoAuth},
		{"getChildren as alice", []proto.ID{aliceID}, read(proto.OpGetChildren, pathWatch("/alice", false)), proto.ErrOK},
		{"getAllChildrenNumber on alice's node", nil, read(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: "/alice"}), proto.ErrNoAuth},
		{"exists needs no permission", nil, read(proto.OpExists, pathWatch("/alice", true)), proto.ErrOK},
		{"exists on noread", nil, read(proto.OpExists, pathWatch("/noread", false)), proto.ErrOK},
		{"setACL on alice's node as anyone", nil, setACL("/alice"), proto.ErrNoAuth},
		{"setACL on mixed as anyone", nil, setACL("/mixed"), proto.ErrNoAuth},
		{"setACL on mixed as alice", []proto.ID{aliceID}, setACL("/mixed"), proto.ErrOK},
		{"setACL on noread (has ADMIN)", nil, setACL("/noread"), proto.ErrOK},
		{"getACL needs READ or ADMIN", nil, read(proto.OpGetACL, &proto.PathRequest{Path: "/alice"}), proto.ErrNoAuth},
		{"getACL with ADMIN only", nil, read(proto.OpGetACL, &proto.PathRequest{Path: "/noread"}), proto.ErrOK},
		{"getACL with READ only", nil, read(proto.OpGetACL, &proto.PathRequest{Path: "/ro"}), proto.ErrOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, c := aclFixture(t)
			if got := tt.do(h, c.as(tt.ids...)); got != tt.want {
				t.Errorf("%v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckInMultiNeedsRead(t *testing.T) {
	h, c := aclFixture(t)
	res, _ := h.ok(c.multi(opCheck("/noread", -1)))
	sameResp(t, res.Resp, &proto.MultiResponse{Results: []proto.MultiResult{{Op: proto.OpError, Err: proto.ErrNoAuth}}})
}

func TestGetACLRedactsDigests(t *testing.T) {
	h, _ := aclFixture(t)
	redacted := []proto.ACL{proto.WorldACL(proto.PermRead)[0],
		{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: "alice:x"}}}
	full := h.s.ACL(h.s.Node("/mixed"))
	tests := []struct {
		name string
		ids  []proto.ID
		want []proto.ACL
	}{
		{"anyone (READ, no ADMIN)", nil, redacted},
		{"bob", []proto.ID{bobID}, redacted},
		{"alice (ADMIN)", []proto.ID{aliceID}, full},
		{"super", []proto.ID{superID}, full},
	}
	for _, tt := range tests {
		resp, code, w := h.read(proto.OpGetACL, &proto.PathRequest{Path: "/mixed"}, tt.ids...)
		if code != proto.ErrOK || w != WatchNone {
			t.Fatalf("%s: %v %v", tt.name, code, w)
		}
		r := resp.(*proto.GetACLResponse)
		if !reflect.DeepEqual(r.ACL, tt.want) || r.Stat != h.stat("/mixed") {
			t.Errorf("%s: acl %v stat %+v, want %v", tt.name, r.ACL, r.Stat, tt.want)
		}
	}
	if full[1].ID.ID != aliceID.ID {
		t.Errorf("redaction changed the stored ACL: %v", full)
	}
}

func TestACLFixup(t *testing.T) {
	world := proto.WorldACL(proto.PermRead)[0]
	auth := proto.ACL{Perms: proto.PermRead | proto.PermWrite, ID: proto.ID{Scheme: "auth", ID: ""}}
	tests := []struct {
		name string
		acl  []proto.ACL
		ids  []proto.ID
		want []proto.ACL
	}{
		{"duplicates removed", []proto.ACL{world, world}, nil, []proto.ACL{world}},
		{"auth expands to the digest identity", []proto.ACL{auth}, []proto.ID{localIP, aliceID},
			[]proto.ACL{{Perms: auth.Perms, ID: aliceID}}},
		{"auth expands to every digest identity", []proto.ACL{auth, world}, []proto.ID{aliceID, bobID},
			[]proto.ACL{{Perms: auth.Perms, ID: aliceID}, {Perms: auth.Perms, ID: bobID}, world}},
		{"ip with mask", []proto.ACL{{Perms: 1, ID: proto.ID{Scheme: "ip", ID: "10.0.0.0/8"}}}, nil,
			[]proto.ACL{{Perms: 1, ID: proto.ID{Scheme: "ip", ID: "10.0.0.0/8"}}}},
	}
	for _, tt := range tests {
		h := newHarness(t)
		c := h.session(m1).as(tt.ids...)
		h.ok(c.createACL("/x", tt.acl, 0))
		h.ok(c.create("/y", nil, 0))
		h.ok(c.setACL("/y", tt.acl, -1))
		for _, p := range []string{"/x", "/y"} {
			if got := h.s.ACL(h.s.Node(p)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: %s acl %v, want %v", tt.name, p, got, tt.want)
			}
		}
	}
}

// ZooKeeper's fixupACL expands "auth" only to identities whose scheme has
// an authentication provider that says isAuthenticated; "super" has none
// (DigestAuthenticationProvider adds Id("super","") beside the digest id).
func TestAuthACLSkipsSuperIdentity(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1).as(superID, aliceID)
	h.ok(c.createACL("/x", []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}}, 0))
	if got := h.s.ACL(h.s.Node("/x")); !reflect.DeepEqual(got, aliceAll) {
		t.Errorf("acl %v, want %v", got, aliceAll)
	}
}

func TestDigestID(t *testing.T) {
	// Expected values from `printf %s user:password | openssl dgst -sha1 -binary | base64`.
	tests := []struct{ in, want string }{
		{"super:admin", "super:xQJmxLMiHGwaqBvst5y6rkB6HQs="},
		{"user:pw", "user:2Om+GBbT2q/tS6pdvACZbbm7/1A="},
		{"alice:secret", "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E="},
		{"bob:p:w", "bob:c9E8gjtVdLtMPTfBBukKZD37tig="}, // the password may hold ':'
	}
	for _, tt := range tests {
		if got := DigestID(tt.in); got != tt.want {
			t.Errorf("DigestID(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// ZooKeeper: split(":", 2)[0] + ":" + base64(sha1(whole string)).
		sum := sha1.Sum([]byte(tt.in))
		user, _, _ := strings.Cut(tt.in, ":")
		if want := user + ":" + base64.StdEncoding.EncodeToString(sum[:]); DigestID(tt.in) != want {
			t.Errorf("DigestID(%q) = %q, want %q", tt.in, DigestID(tt.in), want)
		}
	}
	if got := UserName(aliceID); got != "alice" {
		t.Errorf("UserName(digest alice) = %q", got)
	}
	if got := UserName(localIP); got != "127.0.0.1" {
		t.Errorf("UserName(ip) = %q", got)
	}
}

func TestCreateSession(t *testing.T) {
	h := newHarness(t)
	z := h.s.Zxid()
	res, events := h.ok(openSession(m1, 12345, []byte("password")))
	if res.Session == 0 || res.Zxid != z+1 || res.Resp != nil {
		t.Fatalf("result %+v", res)
	}
	sameEvents(t, events, nil)
	s := h.s.Session(res.Session)
	if s == nil || s.ID != res.Session || s.Timeout != 12345 || string(s.Passwd) != "password" || s.Owner != m1 {
		t.Fatalf("session %+v", s)
	}
	res2, _ := h.ok(openSession(m2, 1, nil))
	if res2.Session <= res.Session {
		t.Errorf("second session id %#x not after %#x", res2.Session, res.Session)
	}
	ss := h.s.Sessions()
	if len(ss) != 2 || ss[0].ID != res.Session || ss[1].ID != res2.Session {
		t.Errorf("Sessions() %+v", ss)
	}
}

func TestCloseSessionRemovesEphemerals(t *testing.T) {
	h := newHarness(t)
	a, b := h.session(m1), h.session(m2)
	h.ok(a.create("/s", nil, 0))
	h.ok(a.create("/t", nil, 0))
	h.ok(a.create("/s/e2", nil, eph))
	h.ok(a.create("/t/e3", nil, eph))
	h.ok(a.create("/s/e1", nil, eph))
	h.ok(b.create("/s/b", nil, eph))
	h.ok(a.create("/s/persistent", nil, 0))
	beforeS, beforeT := h.stat("/s"), h.stat("/t")

	// Anyone may close a session: ZooKeeper does not check the owner.
	res, events := h.ok(a.on(m2).close())
	z := res.Zxid
	sameEvents(t, events, []Event{
		{Type: proto.EventNodeDeleted, Path: "/s/e1", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/s", Zxid: z},
		{Type: proto.EventNodeDeleted, Path: "/s/e2", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/s", Zxid: z},
		{Type: proto.EventNodeDeleted, Path: "/t/e3", Zxid: z}, {Type: proto.EventNodeChildrenChanged, Path: "/t", Zxid: z},
	})
	for _, p := range []string{"/s/e1", "/s/e2", "/t/e3"} {
		if h.s.Node(p) != nil {
			t.Errorf("%s survived", p)
		}
	}
	if h.s.Node("/s/b") == nil || h.s.Node("/s/persistent") == nil {
		t.Error("closing a removed another session's or a persistent node")
	}
	wantS := beforeS
	wantS.Cversion += 2
	wantS.NumChildren -= 2
	wantS.Pzxid = z
	if got := h.stat("/s"); got != wantS {
		t.Errorf("/s stat\n got %+v\nwant %+v", got, wantS)
	}
	if got := h.stat("/t"); got.NumChildren != beforeT.NumChildren-1 || got.Pzxid != z {
		t.Errorf("/t stat %+v", got)
	}
	if h.s.Session(a.sess) != nil || h.s.EphemeralCount() != 1 {
		t.Errorf("session still there or wrong ephemeral count %d", h.s.EphemeralCount())
	}
	if res, _ := h.do(a.create("/s/late", nil, 0)); res.Err != proto.ErrSessionExpired {
		t.Errorf("write after close: %v", res.Err)
	}
	if res, _ := h.do(a.close()); res.Err != proto.ErrSessionExpired {
		t.Errorf("second close: %v", res.Err)
	}
	checkInvariants(t, h.s)
}

func TestSessionOwner(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	if res, _ := h.do(c.on(m2).create("/a", nil, 0)); res.Err != proto.ErrSessionMoved {
		t.Errorf("write from m2: %v", res.Err)
	}
	res, events := h.ok(c.on(m2).req(OpSessionOwner, nil))
	sameEvents(t, events, nil)
	if res.Resp != nil || h.s.Session(c.sess).Owner != m2 {
		t.Errorf("owner %q", h.s.Session(c.sess).Owner)
	}
	h.ok(c.on(m2).create("/a", nil, eph))
	if res, _ := h.do(c.create("/b", nil, 0)); res.Err != proto.ErrSessionMoved {
		t.Errorf("write from the old member: %v", res.Err)
	}
	if res, _ := h.do(testClient{sess: c.sess + 99, member: m1}.req(OpSessionOwner, nil)); res.Err != proto.ErrSessionExpired {
		t.Errorf("moving an unknown session: %v", res.Err)
	}
}

func TestSync(t *testing.T) {
	h := newHarness(t)
	res, _ := h.ok(Request{Op: proto.OpSync, Body: proto.Marshal(&proto.PathRequest{Path: "/a/b"})})
	sameResp(t, res.Resp, &proto.PathRequest{Path: "/a/b"})
}

func TestExists(t *testing.T) {
	h, c := aclFixture(t)
	h.ok(c.setData("/open", []byte("abc"), -1))
	st := h.stat("/open")
	exists := proto.OpExists
	checkReads(t, h, []readCase{
		{exists, pathWatch("/open", true), proto.ErrOK, &proto.StatResponse{Stat: st}, WatchData},
		{exists, pathWatch("/open", false), proto.ErrOK, &proto.StatResponse{Stat: st}, WatchNone},
		{exists, pathWatch("/nope", true), proto.ErrNoNode, nil, WatchData}, // a watch for the create
		{exists, pathWatch("/nope", false), proto.ErrNoNode, nil, WatchNone},
		{exists, pathWatch("/open\x00", true), proto.ErrBadArguments, nil, WatchNone},
		{exists, pathWatch("/noread", false), proto.ErrOK, &proto.StatResponse{Stat: h.stat("/noread")}, WatchNone},
	})
}

// readCase is a read and what it must answer.
type readCase struct {
	op        proto.OpCode
	req       proto.Record
	wantCode  proto.Code
	wantResp  proto.Record
	wantWatch WatchKind
}

func checkReads(t *testing.T, h *harness, cases []readCase) {
	t.Helper()
	for _, tt := range cases {
		resp, code, w := h.read(tt.op, tt.req)
		if code != tt.wantCode || w != tt.wantWatch {
			t.Errorf("%v %+v: %v %v, want %v %v", tt.op, tt.req, code, w, tt.wantCode, tt.wantWatch)
		}
		sameResp(t, resp, tt.wantResp)
	}
}

func TestGetData(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/a", []byte("data"), 0))
	want := &proto.GetDataResponse{Data: []byte("data"), Stat: h.stat("/a")}
	checkReads(t, h, []readCase{
		{proto.OpGetData, pathWatch("/a", true), proto.ErrOK, want, WatchData},
		{proto.OpGetData, pathWatch("/a", false), proto.ErrOK, want, WatchNone},
		{proto.OpGetData, pathWatch("/nope", true), proto.ErrNoNode, nil, WatchNone}, // no watch on failure
	})
}

// ZooKeeper gives back the null data a client created a node with.
func TestNullDataIsPreserved(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/null", nil, 0))
	h.ok(c.create("/empty", []byte{}, 0))
	h.ok(c.create("/set-null", []byte("x"), 0))
	h.ok(c.setData("/set-null", nil, -1))
	for _, tt := range []struct {
		path     string
		wantNull bool
	}{{"/null", true}, {"/empty", false}, {"/set-null", true}} {
		resp, _, _ := h.read(proto.OpGetData, pathWatch(tt.path, false))
		if data := resp.(*proto.GetDataResponse).Data; (data == nil) != tt.wantNull {
			t.Errorf("getData %s: data nil=%v, want nil=%v", tt.path, data == nil, tt.wantNull)
		}
	}
}

func TestGetChildren(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/d", nil, 0))
	for _, name := range []string{"c", "a", "b", "aa", "B", "a-0"} {
		h.ok(c.create("/d/"+name, nil, 0))
	}
	h.ok(c.create("/d/a/grandchild", nil, 0))
	h.ok(c.create("/dd", nil, 0))
	want := []string{"B", "a", "a-0", "aa", "b", "c"}

	resp, code, w := h.read(proto.OpGetChildren, pathWatch("/d", true))
	if code != proto.ErrOK || w != WatchChild {
		t.Fatalf("getChildren: %v %v", code, w)
	}
	sameResp(t, resp, &proto.ChildrenResponse{Children: want})
	if _, _, w := h.read(proto.OpGetChildren, pathWatch("/d", false)); w != WatchNone {
		t.Errorf("watch %v without asking", w)
	}

	resp, code, w = h.read(proto.OpGetChildren2, pathWatch("/d", true))
	if code != proto.ErrOK || w != WatchChild {
		t.Fatalf("getChildren2: %v %v", code, w)
	}
	sameResp(t, resp, &proto.ChildrenResponse{Children: want, Stat: h.stat("/d"), WithStat: true})

	for _, tt := range []struct {
		path string
		want []string
	}{
		{"/", []string{"d", "dd", "zookeeper"}},
		{"/d/a", []string{"grandchild"}},
		{"/d/c", []string{}},
	} {
		resp, _, _ := h.read(proto.OpGetChildren, pathWatch(tt.path, false))
		if got := resp.(*proto.ChildrenResponse).Children; got == nil || !slices.Equal(got, tt.want) {
			t.Errorf("children of %s: %#v, want %v", tt.path, got, tt.want)
		}
	}
	if _, code, w := h.read(proto.OpGetChildren, pathWatch("/nope", true)); code != proto.ErrNoNode || w != WatchNone {
		t.Errorf("missing: %v %v", code, w)
	}
}

func TestGetAllChildrenNumber(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	for _, p := range []string{"/d", "/d/a", "/d/a/x", "/d/a/y", "/d/b", "/d/b/z", "/d/b/z/w", "/dd", "/dd/x"} {
		h.ok(c.create(p, nil, 0))
	}
	for _, tt := range []struct {
		path string
		want int32
		code proto.Code
	}{
		{"/d", 6, proto.ErrOK}, // not /dd
		{"/d/a", 2, proto.ErrOK},
		{"/d/b", 2, proto.ErrOK},
		{"/d/a/x", 0, proto.ErrOK},
		{"/nope", 0, proto.ErrNoNode},
	} {
		resp, code, _ := h.read(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: tt.path})
		if code != tt.code {
			t.Errorf("%s: %v, want %v", tt.path, code, tt.code)
			continue
		}
		if code == proto.ErrOK {
			sameResp(t, resp, &proto.CountResponse{Count: tt.want})
		}
	}
}

func TestGetEphemerals(t *testing.T) {
	h := newHarness(t)
	a, b := h.session(m1), h.session(m2)
	for _, p := range []string{"/e", "/f"} {
		h.ok(a.create(p, nil, 0))
	}
	for _, p := range []string{"/e/a2", "/f/a3", "/e/a1", "/ea"} {
		h.ok(a.create(p, nil, eph))
	}
	h.ok(b.create("/e/b1", nil, eph))
	all := []string{"/e/a1", "/e/a2", "/ea", "/f/a3"}
	for _, tt := range []struct {
		session int64
		prefix  string
		want    []string
	}{
		{a.sess, "", all},
		{a.sess, "/", all},
		{a.sess, "/e", []string{"/e/a1", "/e/a2", "/ea"}}, // a string prefix, as in ZooKeeper
		{a.sess, "/e/", []string{"/e/a1", "/e/a2"}},
		{a.sess, "/zzz", []string{}},
		{b.sess, "/", []string{"/e/b1"}},
		{12345, "/", []string{}},
	} {
		resp, code, _ := h.s.Read(proto.OpGetEphemerals, &proto.PathRequest{Path: tt.prefix}, tt.session, nil)
		if code != proto.ErrOK {
			t.Fatalf("getEphemerals: %v", code)
		}
		if got := resp.(*proto.ChildrenResponse).Children; got == nil || !slices.Equal(got, tt.want) {
			t.Errorf("session %#x prefix %q: %#v, want %v", tt.session, tt.prefix, got, tt.want)
		}
	}
}

func TestMultiRead(t *testing.T) {
	h, c := aclFixture(t)
	h.ok(c.create("/open/k", []byte("v"), 0))
	pr := func(op proto.OpCode, path string) proto.MultiOp {
		return proto.MultiOp{Op: op, Req: &proto.PathRequest{Path: path}}
	}
	req := &proto.MultiRequest{Ops: []proto.MultiOp{
		pr(proto.OpGetData, "/open/k"),
		pr(proto.OpGetChildren, "/open"),
		pr(proto.OpGetData, "/nope"),
		pr(proto.OpGetChildren, "/alice"),
		pr(proto.OpGetData, "/alice"),
		pr(proto.OpGetChildren, "/open/k"),
	}}
	resp, code, w := h.read(proto.OpMultiRead, req)
	if code != proto.ErrOK || w != WatchNone {
		t.Fatalf("multiRead: %v %v", code, w)
	}
	sameResp(t, resp, &proto.MultiResponse{Results: []proto.MultiResult{
		{Op: proto.OpGetData, Resp: &proto.GetDataResponse{Data: []byte("v"), Stat: h.stat("/open/k")}},
		{Op: proto.OpGetChildren, Resp: &proto.ChildrenResponse{Children: []string{"k"}}},
		{Op: proto.OpError, Err: proto.ErrNoNode},
		{Op: proto.OpError, Err: proto.ErrNoAuth},
		{Op: proto.OpError, Err: proto.ErrNoAuth},
		{Op: proto.OpGetChildren, Resp: &proto.ChildrenResponse{Children: []string{}}},
	}})
	// Every op on its own: alice may read her node.
	resp, _, _ = h.read(proto.OpMultiRead, &proto.MultiRequest{Ops: []proto.MultiOp{pr(proto.OpGetData, "/alice")}}, aliceID)
	if r := resp.(*proto.MultiResponse).Results[0]; r.Op != proto.OpGetData {
		t.Errorf("alice's multiRead: %+v", r)
	}
}

func TestReadUnsupported(t *testing.T) {
	s := New()
	if _, code, _ := s.Read(proto.OpCreate, &proto.CreateRequest{Path: "/a"}, 0, nil); code != proto.ErrUnimplemented {
		t.Errorf("read of a create: %v", code)
	}
	if _, code, _ := s.Read(proto.OpMulti, &proto.MultiRequest{}, 0, nil); code != proto.ErrUnimplemented {
		t.Errorf("multi as a read: %v", code)
	}
}

// ZooKeeper's read path does not validate paths: exists refuses only a NUL
// (and still leaves its watch), getData, getChildren, getChildren2, getACL
// and getAllChildrenNumber look the path up and answer NoNode
// (FinalRequestProcessor).
func TestReadsDoNotValidatePaths(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	h.ok(c.create("/a", nil, 0))
	checkReads(t, h, []readCase{
		{proto.OpExists, pathWatch("/a/", true), proto.ErrNoNode, nil, WatchData},
		{proto.OpExists, pathWatch("a", false), proto.ErrNoNode, nil, WatchNone},
		{proto.OpExists, pathWatch("/a\x00", true), proto.ErrBadArguments, nil, WatchNone},
		{proto.OpGetData, pathWatch("/a/", true), proto.ErrNoNode, nil, WatchNone},
		{proto.OpGetChildren, pathWatch("/a//b", false), proto.ErrNoNode, nil, WatchNone},
		{proto.OpGetChildren2, pathWatch("/a/../b", false), proto.ErrNoNode, nil, WatchNone},
		{proto.OpGetACL, &proto.PathRequest{Path: "a"}, proto.ErrNoNode, nil, WatchNone},
		{proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: "/a/"}, proto.ErrNoNode, nil, WatchNone},
	})
}

func TestResolveWatches(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	r1, _ := h.ok(c.create("/w", nil, 0))
	r2, _ := h.ok(c.setData("/w", []byte("x"), -1))
	r3, _ := h.ok(c.create("/w/child", nil, 0))
	created, modified, childChanged := r1.Zxid, r2.Zxid, r3.Zxid

	kinds := []struct {
		name  string
		kind  WatchKind
		exist bool
		req   func(path string, rel int64) *proto.SetWatchesRequest
	}{
		{"data", WatchData, false, func(p string, rel int64) *proto.SetWatchesRequest {
			return &proto.SetWatchesRequest{RelativeZxid: rel, DataWatches: []string{p}}
		}},
		{"exist", WatchData, true, func(p string, rel int64) *proto.SetWatchesRequest {
			return &proto.SetWatchesRequest{RelativeZxid: rel, ExistWatches: []string{p}}
		}},
		{"child", WatchChild, false, func(p string, rel int64) *proto.SetWatchesRequest {
			return &proto.SetWatchesRequest{RelativeZxid: rel, ChildWatches: []string{p}}
		}},
	}
	tests := []struct {
		kind string
		path string
		rel  int64
		want proto.EventType
	}{
		{"data", "/w", modified, proto.EventNone},
		{"data", "/w", childChanged, proto.EventNone}, // child changes are no data change
		{"data", "/w", modified - 1, proto.EventNodeDataChanged},
		{"data", "/w", created, proto.EventNodeDataChanged},
		{"data", "/gone", modified, proto.EventNodeDeleted},
		{"exist", "/w", childChanged, proto.EventNodeCreated},
		{"exist", "/w", 0, proto.EventNodeCreated},
		{"exist", "/gone", 0, proto.EventNone},
		{"child", "/w", childChanged, proto.EventNone},
		{"child", "/w", childChanged - 1, proto.EventNodeChildrenChanged},
		{"child", "/w", modified, proto.EventNodeChildrenChanged}, // setData leaves pzxid
		{"child", "/gone", childChanged, proto.EventNodeDeleted},
		{"child", "/w/child", childChanged, proto.EventNone},
	}
	for _, tt := range tests {
		for _, k := range kinds {
			if k.name != tt.kind {
				continue
			}
			got := h.s.ResolveWatches(k.req(tt.path, tt.rel))
			want := []SetWatchesResult{{Path: tt.path, Kind: k.kind, Fire: tt.want, Exist: k.exist}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s watch %s rel %d: %+v, want %+v", tt.kind, tt.path, tt.rel, got, want)
			}
		}
	}

	// All lists at once come back data, exist, child.
	got := h.s.ResolveWatches(&proto.SetWatchesRequest{RelativeZxid: childChanged,
		DataWatches: []string{"/w", "/gone"}, ExistWatches: []string{"/gone2"}, ChildWatches: []string{"/w"}})
	want := []SetWatchesResult{
		{Path: "/w", Kind: WatchData, Fire: proto.EventNone},
		{Path: "/gone", Kind: WatchData, Fire: proto.EventNodeDeleted},
		{Path: "/gone2", Kind: WatchData, Fire: proto.EventNone, Exist: true},
		{Path: "/w", Kind: WatchChild, Fire: proto.EventNone},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("all lists: %+v", got)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	reqs := []Request{
		{ID: 1, Session: 2, Member: "m", Op: proto.OpCreate, IDs: []proto.ID{aliceID, localIP}, Body: []byte("body")},
		{ID: 1 << 63, Session: -1, Op: OpSessionOwner},
		{ID: 3, Session: 2, Member: "m", Op: proto.OpSetData, Conn: 1 << 60, Seq: 9, Wait: true, Body: []byte("b")},
	}
	entry := EncodeEntry([]byte("prefix"), -5, reqs)[len("prefix"):]
	wall, got, err := DecodeEntry(entry)
	if err != nil || wall != -5 {
		t.Fatalf("decode: %v wall %d", err, wall)
	}
	if !reflect.DeepEqual(got, reqs) {
		t.Errorf("decoded\n %+v\nwant\n %+v", got, reqs)
	}
	whole := EncodeEntry(nil, -5, reqs)
	assert.Equal(t, entrySize(reqs), len(whole), "the entry's size is known before it is encoded")
	if !raceEnabled {
		assert.Equal(t, 1.0, testing.AllocsPerRun(10, func() { EncodeEntry(nil, -5, reqs) }), "one allocation")
	}
}

// TestVersion1EntriesDecode: entries written before connections and write
// numbers were carried (version 1) still decode, with neither.
func TestVersion1EntriesDecode(t *testing.T) {
	e := proto.NewEncoder([]byte{entryBatch, 1})
	e.Int64(42)
	e.Int32(1)
	e.Int64(7)
	e.Int64(2)
	e.String("m")
	e.Int32(int32(proto.OpCreate))
	e.Int32(0)
	e.Buffer([]byte("body"))
	wall, got, err := DecodeEntry(e.Bytes())
	require.NoError(t, err)
	assert.Equal(t, int64(42), wall)
	assert.Equal(t, []Request{{ID: 7, Session: 2, Member: "m", Op: proto.OpCreate, Body: []byte("body")}}, got)
}

func TestApplyRejectsCorruptEntries(t *testing.T) {
	good := EncodeEntry(nil, 100, []Request{openSession(m1, 1, nil)})
	tests := map[string][]byte{
		"empty":          {},
		"unknown kind":   append([]byte{9}, good[1:]...),
		"newer version":  append([]byte{entryBatch, entryNewest + 1}, good[2:]...),
		"truncated":      good[:len(good)-1],
		"negative count": append(EncodeEntry(nil, 1, nil)[:10], 0xff, 0xff, 0xff, 0xff),
		"huge count":     append(EncodeEntry(nil, 1, nil)[:10], 0x7f, 0xff, 0xff, 0xff),
		"negative ids": func() []byte {
			b := EncodeEntry(nil, 1, []Request{{Member: "m"}})
			b[len(b)-8] = 0xff // the id count
			return b
		}(),
	}
	for name, entry := range tests {
		s := New()
		before := dumpState(s)
		if _, _, err := s.Apply(entry); err == nil {
			t.Errorf("%s: no error", name)
		}
		if d := diffDumps(dumpState(s), before); d != "" {
			t.Errorf("%s: state changed: %s", name, d)
		}
	}
}

func TestIPACLMatching(t *testing.T) {
	tests := []struct {
		addr, expr string
		want       bool
	}{
		{"10.1.2.3", "10.0.0.0/8", true},
		{"11.1.2.3", "10.0.0.0/8", false},
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.2", "127.0.0.1", false},
		{"10.1.2.3", "10.1.2.3/32", true},
		{"10.1.2.3", "0.0.0.0/0", true},
		{"::1", "::1", true},
		{"::1", "::1/128", true},
		{"fe80::1", "fe80::/10", true},
		{"10.0.0.1", "fe80::/10", false},
		{"fe80::1", "10.0.0.0/8", false},
		{"10.0.0.1", "10.0.0.0/x", false},
		{"10.0.0.1", "10.0.0.0/33", false},
		{"not-an-ip", "10.0.0.0/8", false},
	}
	for _, tt := range tests {
		acl := &ACLList{List: []proto.ACL{{Perms: proto.PermRead, ID: proto.ID{Scheme: "ip", ID: tt.expr}}}}
		if got := checkACL(acl, proto.PermRead, []proto.ID{{Scheme: "ip", ID: tt.addr}}); got != tt.want {
			t.Errorf("ip %s against %s: %v, want %v", tt.addr, tt.expr, got, tt.want)
		}
	}
}

// TestDataSizeFollowsEveryChange: the data size and the ACLs' users kept
// as writes apply are what the tree holds, through creates, sets, deletes,
// failed and committed multis, a session's ephemerals going with it, and a
// snapshot's restore.
func TestDataSizeFollowsEveryChange(t *testing.T) {
	h := newHarness(t)
	c := h.session(m1)
	recount := func(what string) {
		t.Helper()
		want, users := h.s.DataSize(), aclUsers(h.s)
		h.s.recount()
		require.Equal(t, h.s.DataSize(), want, what)
		require.Equal(t, aclUsers(h.s), users, what)
	}
	recount("a new state")
	h.ok(c.create("/d", []byte("0123456789"), 0))
	h.ok(c.create("/d/eph", []byte("e"), eph))
	recount("creates")
	h.ok(c.setData("/d", []byte("longer data than before"), -1))
	h.ok(c.setData("/d", nil, -1))
	recount("sets")
	h.do(c.multi(opCreate("/d/a", 0), opSetData("/d", []byte("xyz"), -1), opDelete("/nope", -1)))
	recount("a failed multi")
	h.ok(c.multi(opCreate("/d/a", 0), opSetData("/d", []byte("xyz"), -1), opCreate("/d/b", 0), opDelete("/d/b", -1)))
	recount("a multi")
	h.ok(c.delete("/d/a", -1))
	recount("a delete")
	h.ok(c.close())
	recount("a session's ephemerals")
	var buf bytes.Buffer
	require.NoError(t, h.s.Snapshot().Write(&buf))
	st, err := Restore(&buf)
	require.NoError(t, err)
	require.Equal(t, h.s.DataSize(), st.DataSize())
	require.Equal(t, int64(len("/d")+len("xyz")+len("/zookeeper")+len("/zookeeper/quota")+len("/zookeeper/config")+len("/")), st.DataSize())
}

// TestNodeLayout: a node, its key and its data are one allocation of 76
// bytes more than the key and the data, it keeps null data apart
// from empty data, holds a copy of the data it was given, and a change of
// data or a clone leaves the node it came from as it was.
func TestNodeLayout(t *testing.T) {
	assert.Equal(t, 76, nodeHead)
	for _, p := range []string{"/", "/a", "/a/b/c"} {
		assert.Equal(t, keyOf(p), probeOf(nil, p).key())
		var buf []byte
		assert.Equal(t, keyOf(p), probeOf(&buf, p).key(), "in a buffer")
		assert.Equal(t, keyOf("/"), probeOf(&buf, "/").key(), "in the same buffer again")
	}
	key, data := keyOf("/a/b"), make([]byte, 100)
	if !raceEnabled {
		assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { newNode(key, data) }))
	}
	given := []byte("value")
	n := newNode(keyOf("/a/b"), given)
	given[0] = 'X'
	assert.Equal(t, "/a/b", n.Path())
	assert.Equal(t, []byte("value"), n.Data())
	assert.Equal(t, int64(len("/a/b")+len("value")), n.size())
	assert.Nil(t, newNode(keyOf("/n"), nil).Data(), "null data")
	empty := newNode(keyOf("/e"), []byte{}).Data()
	assert.NotNil(t, empty, "empty data is not null")
	assert.Empty(t, empty)
	n.Version, n.acl = 7, 3
	null := n.withData(nil)
	assert.Equal(t, "/a/b", null.Path(), "the key stays when the data goes")
	assert.Nil(t, null.Data())
	assert.Equal(t, int32(7), null.Version, "the stat stays when the data goes")
	assert.Equal(t, uint32(3), null.acl, "the ACL stays when the data goes")
	longer := n.withData([]byte("a longer value"))
	assert.Equal(t, "a longer value", string(longer.Data()))
	c := longer.clone()
	c.Version = 8
	assert.Equal(t, "/a/b", c.Path())
	assert.Equal(t, "a longer value", string(c.Data()))
	assert.Equal(t, int32(7), longer.Version, "a clone is a copy")
	assert.Equal(t, []byte("value"), n.Data(), "the node a change came from stays as it was")
}

// TestSessionWithAGivenID: an endpoint's session on a shard takes the id
// of the client's session on the root shard; an id in use is refused, and
// the shard's own ids go around one taken this way.
func TestSessionWithAGivenID(t *testing.T) {
	h := newHarness(t)
	first := h.session("m1")
	given := first.sess + 1 // the id the shard would give next
	res, _ := h.ok(Request{Member: "m1", Op: proto.OpCreateSession,
		Body: proto.Marshal(&CreateSession{Timeout: 30000, Passwd: []byte("p"), ID: given})})
	require.Equal(t, given, res.Session)
	res, _ = h.do(Request{Member: "m1", Op: proto.OpCreateSession,
		Body: proto.Marshal(&CreateSession{Timeout: 30000, Passwd: []byte("q"), ID: given})})
	assert.Equal(t, proto.ErrNodeExists, res.Err)
	assert.Equal(t, []byte("p"), h.s.Session(given).Passwd)
	assert.Equal(t, given+1, h.session("m1").sess, "the next own id skips the given one")
	res, _ = h.do(Request{Member: "m1", Op: proto.OpCreateSession,
		Body: proto.Marshal(&CreateSession{Timeout: 30000, Passwd: []byte("p"), ID: -5})})
	assert.Equal(t, proto.ErrBadArguments, res.Err)

	// Only a batch that creates a session is written as version 4 or newer
	// (now 8, for the write order), which older members refuse rather than
	// apply without the session.
	withID := Request{Member: "m1", Op: proto.OpCreateSession, Body: proto.Marshal(&CreateSession{Timeout: 1, Passwd: []byte("p"), ID: 7})}
	create := Request{Member: "m1", Op: proto.OpCreate, Body: proto.Marshal(&proto.CreateRequest{Path: "/x", ACL: proto.WorldACL(proto.PermAll)})}
	assert.Equal(t, entryVersion, EncodeEntry(nil, 1, []Request{create})[1])
	assert.Equal(t, entrySequenced, EncodeEntry(nil, 1, []Request{create, withID})[1])
}

// TestShardsSeedDisjointSessionIDs: two shards whose first sessions are
// created in the same millisecond give out different ids (an endpoint gives
// a root-shard session's id to its sessions on the others), while an entry
// older than the shard tag replays to the ids it gave.
func TestShardsSeedDisjointSessionIDs(t *testing.T) {
	open := func(shard string, version byte) []int64 {
		s := New()
		s.SeedSessions(shard)
		var reqs []Request
		for i := range 3 {
			reqs = append(reqs, openSession("m1", 30000, []byte("p")))
			reqs[i].ID = uint64(i + 1)
		}
		entry := EncodeEntry(nil, startWall, reqs)
		require.Equal(t, entrySequenced, entry[1], "a batch that creates sessions is written as version 6 or newer")
		entry[1] = version
		res, _, err := s.Apply(entry)
		require.NoError(t, err)
		var ids []int64
		for _, r := range res {
			require.Equal(t, proto.ErrOK, r.Err)
			require.Positive(t, r.Session)
			ids = append(ids, r.Session)
		}
		return ids
	}
	a, b := open("a", entryShardSeeds), open("b", entryShardSeeds)
	assert.NotEqual(t, a[0]>>56, b[0]>>56, "each shard's tag is in its ids' top bits")
	assert.NotContains(t, a, b[0])
	assert.NotContains(t, a, b[1])
	assert.NotContains(t, a, b[2])
	assert.Equal(t, a, open("a", entryShardSeeds), "the same shard seeds the same ids on every member")
	old := open("a", entryFixedResults)
	assert.Equal(t, old, open("b", entryFixedResults), "before version 6 the seed was the time alone")
	wall := int64(startWall)
	assert.Equal(t, int64(uint64(wall<<24)>>8)+1, old[0])
}
