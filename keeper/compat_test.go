package keeper_test

// The differential compatibility test: every case runs against a 3-member
// xkeeper shard and a 3-member Apache ZooKeeper 3.8 ensemble at once, each
// under its own path prefix, records what it observes, and the two records
// must be identical. What legitimately differs is normalised while
// recording: zxids become their rank among the zxids the case saw (z1 <
// z2 < …), times become relations (ctime = mtime, ctime <= mtime), session
// ids become names, and children are sorted.
//
// Most cases use go-zookeeper; a small raw client (net.Conn and the
// keeper/proto records) sends what go-zookeeper cannot: bad paths, unknown
// opcodes, multiRead, getEphemerals, whoAmI, exact multi replies, the
// 44- and 45-byte handshakes.
//
// Two requests are never sent, because they break ZooKeeper 3.8 itself: a
// top-level check that succeeds (its followers drop out on the unknown txn
// type 13) and a malformed reconfig (it wedges the leader's reads).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

type compatCase struct {
	name string
	run  func(d *driver)
}

var compatCases = []compatCase{
	{"crud", caseCRUD},
	{"versions", caseVersions},
	{"stat", caseStat},
	{"sequential", caseSequential},
	{"ephemeral-close", caseEphemeralClose},
	{"ephemeral-expiry", caseEphemeralExpiry},
	{"watch-data", caseWatchData},
	{"watch-exists", caseWatchExists},
	{"watch-child", caseWatchChild},
	{"set-watches", caseSetWatches},
	{"multi-ok", caseMultiOK},
	{"multi-fail", caseMultiFail},
	{"multi-read", caseMultiRead},
	{"acl-world", caseACLWorld},
	{"acl-digest", caseACLDigest},
	{"auth", caseAuth},
	{"bad-paths", caseBadPaths},
	{"special-paths", caseSpecialPaths},
	{"get-ephemerals", caseGetEphemerals},
	{"all-children-number", caseAllChildrenNumber},
	{"unknown-op", caseUnknownOp},
	{"create-modes", caseCreateModes},
	{"connect", caseConnect},
	{"four-letter-words", caseFourLetterWords},
	{"follower-write-read", caseFollowerWriteRead},
	{"wide-parent", caseWideParent},
	{"watch-persistent", caseWatchPersistent},
	{"watch-recursive", caseWatchRecursive},
	{"remove-watches", caseRemoveWatches},
	{"set-watches2", caseSetWatches2},
	{"watch-acl", caseWatchACL},
}

// followerCase reports whether a case runs on a member that does not lead
// (xkeeper answers such a member's writes early, from the leader's result).
func followerCase(name string) bool { return strings.HasPrefix(name, "follower-") }

func TestCompatZooKeeper(t *testing.T) {
	zkEnsemble := testenv.StartZooKeeper(t, 3)
	// The ensemble answers every 4-letter word (4lw.commands.whitelist=*).
	shard := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 3,
		Security: func(s *config.Security) { s.FourLetterWords = []string{"*"} }})
	runCompatCases(t, shard, shard.Servers("a"), zkEnsemble.Servers(), compatCases, compatPrefix)
}

// compatPrefix puts every case under a top-level znode of its own.
func compatPrefix(_ int, name string) string { return "/compat-" + name }

// runCompatCases runs the differential cases on xkeeper (its shard a's
// members, or its nodes' endpoints, at servers) and on a ZooKeeper
// ensemble, each under prefix(index, name), and compares what they
// answered.
func runCompatCases(t *testing.T, shard *testenv.Cluster, servers, zkServers []string, cases []compatCase, prefix func(int, string) string) {
	targets := []struct {
		name    string
		servers []string
	}{{"xkeeper", servers}, {"zookeeper", zkServers}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			drivers := make([]*driver, len(targets))
			var wg sync.WaitGroup
			for j, tg := range targets {
				// Every connection of a case goes to one member, so that a
				// write is visible to the case's next read on any connection.
				server := tg.servers[i%len(tg.servers)]
				if tg.name == "xkeeper" && followerCase(c.name) && len(shard.Config.Nodes) == 0 {
					server = followerAddr(t, shard)
				}
				d := newDriver(t, tg.name, server, prefix(i, c.name))
				drivers[j] = d
				wg.Go(func() {
					defer d.close()
					d.start()
					c.run(d)
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			want := drivers[1].result()
			got := drivers[0].result()
			if !slices.Equal(got, want) {
				t.Errorf("xkeeper differs from ZooKeeper:\n%s", diffLines(got, want))
			} else if testing.Verbose() {
				t.Logf("both answered:\n    %s", strings.Join(want, "\n    "))
			}
		})
	}
}

// diffLines shows both records side by side, marking differing lines.
func diffLines(got, want []string) string {
	var b strings.Builder
	for i := range max(len(got), len(want)) {
		g, w := "<none>", "<none>"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g == w {
			fmt.Fprintf(&b, "    %s\n", g)
		} else {
			fmt.Fprintf(&b, "  ! xkeeper:   %s\n  ! zookeeper: %s\n", g, w)
		}
	}
	return b.String()
}

// driver runs one case against one target and records what it sees.
type driver struct {
	t       *testing.T
	target  string
	addr    string
	prefix  string
	zk      *zk.Conn
	lines   []string
	names   map[int64]string
	closers []func()
	mu      sync.Mutex
}

func newDriver(t *testing.T, target, addr, prefix string) *driver {
	return &driver{t: t, target: target, addr: addr, prefix: prefix, names: map[int64]string{}}
}

// fatalf fails the test and ends the driver's goroutine.
func (d *driver) fatalf(format string, args ...any) {
	d.t.Errorf("%s: "+format, append([]any{d.target}, args...)...)
	runtime.Goexit()
}

func (d *driver) start() {
	d.zk = d.connect("self")
	if _, err := d.zk.Create(d.prefix, nil, 0, world); err != nil {
		d.fatalf("create %s: %v", d.prefix, err)
	}
}

func (d *driver) close() {
	d.mu.Lock()
	closers := d.closers
	d.closers = nil
	d.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

func (d *driver) onClose(fn func()) {
	d.mu.Lock()
	d.closers = append(d.closers, fn)
	d.mu.Unlock()
}

// p returns a path under the case's prefix.
func (d *driver) p(rel string) string { return d.prefix + rel }

// rec records one observation; the prefix is written $P.
func (d *driver) rec(format string, args ...any) {
	d.lines = append(d.lines, strings.ReplaceAll(fmt.Sprintf(format, args...), d.prefix, "$P"))
}

// zxidMark is a zxid to rank, with the zone it is ranked in (zxidIn).
var zxidMark = regexp.MustCompile(`<zxid:([a-z0-9]*)/(-?\d+)>`)

// result returns the record with every zxid replaced by its rank among the
// zxids of its zone: z1 < z2 < … in the zone "", zone.z1 < … in others.
func (d *driver) result() []string {
	all := map[string][]int64{}
	for _, l := range d.lines {
		for _, m := range zxidMark.FindAllStringSubmatch(l, -1) {
			v, _ := strconv.ParseInt(m[2], 10, 64)
			all[m[1]] = append(all[m[1]], v)
		}
	}
	for zone, zxids := range all {
		slices.Sort(zxids)
		all[zone] = slices.Compact(zxids)
	}
	out := make([]string, len(d.lines))
	for i, l := range d.lines {
		out[i] = zxidMark.ReplaceAllStringFunc(l, func(s string) string {
			m := zxidMark.FindStringSubmatch(s)
			v, _ := strconv.ParseInt(m[2], 10, 64)
			rank, _ := slices.BinarySearch(all[m[1]], v)
			if m[1] == "" {
				return fmt.Sprintf("z%d", rank+1)
			}
			return fmt.Sprintf("%s.z%d", m[1], rank+1)
		})
	}
	return out
}

// zx marks a zxid for ranking; zero and negative values stay literal.
func zx(v int64) string { return zxidIn("", v) }

// zxidIn marks a zxid for ranking among the zone's zxids only: the zxids
// of different shards are not comparable.
func zxidIn(zone string, v int64) string {
	if v <= 0 {
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprintf("<zxid:%s/%d>", zone, v)
}

// session returns the name of a session id.
func (d *driver) session(id int64) string {
	switch id {
	case 0:
		return "0"
	case math.MinInt64:
		return "container"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.names[id]; ok {
		return n
	}
	return "unknown-session"
}

func (d *driver) nameSession(id int64, name string) {
	d.mu.Lock()
	d.names[id] = name
	d.mu.Unlock()
}

func (d *driver) stat(s proto.Stat) string { return d.statIn("", s) }

// statIn describes a stat whose zxids are ranked within zone.
func (d *driver) statIn(zone string, s proto.Stat) string {
	times := "ctime<=mtime"
	switch {
	case s.Version == 0 && s.Ctime == s.Mtime:
		times = "ctime=mtime"
	case s.Version == 0 || s.Ctime > s.Mtime:
		times = fmt.Sprintf("ctime?mtime(%d,%d)", s.Ctime, s.Mtime)
	}
	if age := time.Since(time.UnixMilli(s.Ctime)); age < -time.Minute || age > 10*time.Minute {
		times += " ctime-not-now"
	}
	return fmt.Sprintf("{czxid=%s mzxid=%s pzxid=%s %s version=%d cversion=%d aversion=%d owner=%s len=%d kids=%d}",
		zxidIn(zone, s.Czxid), zxidIn(zone, s.Mzxid), zxidIn(zone, s.Pzxid), times, s.Version, s.Cversion, s.Aversion,
		d.session(s.EphemeralOwner), s.DataLength, s.NumChildren)
}

func (d *driver) zstat(s *zk.Stat) string {
	if s == nil {
		return "nil"
	}
	return d.stat(proto.Stat(*s))
}

func errStr(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func sorted(v []string) []string {
	v = slices.Clone(v)
	sort.Strings(v)
	return v
}

var world = zk.WorldACL(zk.PermAll)

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// connect opens a go-zookeeper session to the driver's member.
func (d *driver) connect(name string) *zk.Conn {
	c, ev, err := zk.Connect([]string{d.addr}, 4*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		d.fatalf("connect: %v", err)
	}
	d.onClose(c.Close)
	deadline := time.After(15 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == zk.StateHasSession {
				d.nameSession(c.SessionID(), name)
				go func() {
					for range ev {
					}
				}()
				return c
			}
		case <-deadline:
			d.fatalf("no session from %s", d.addr)
		}
	}
}

// event waits for one watch event and records it.
func (d *driver) event(what string, ch <-chan zk.Event) {
	select {
	case e := <-ch:
		d.rec("%s: event %s %s err=%s", what, e.Type, e.Path, errStr(e.Err))
	case <-time.After(15 * time.Second):
		d.rec("%s: no event", what)
	}
}

// waitGone polls until path no longer exists, within a deadline.
func (d *driver) waitGone(path string, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		ok, _, err := d.zk.Exists(path)
		if err == nil && !ok {
			d.rec("gone: %s", path)
			return
		}
		if time.Now().After(deadline) {
			d.rec("still there after %v: %s (%s)", within, path, errStr(err))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- the raw client ----

// rawConn is a minimal ZooKeeper client that sends any record with any
// opcode and shows the reply exactly as it came.
type rawConn struct {
	d        *driver
	nc       net.Conn
	xid      int32
	resp     proto.ConnectResponse
	replyLen int // length of the connect reply frame
	// onEvent, when set, takes the notifications call reads instead of
	// the record.
	onEvent func(proto.WatcherEvent)
	// lastZxid is the highest header zxid of a reply call read: the zxid
	// a client offers when it reconnects.
	lastZxid int64
}

// dialRaw opens a raw connection and sends a handshake: 44 bytes, or 45
// with the readOnly byte.
func (d *driver) dialRaw(req proto.ConnectRequest) (*rawConn, error) {
	c, err := d.dialRawAt(d.addr, req)
	if c == nil {
		d.fatalf("dial %s: %v", d.addr, err)
	}
	return c, err
}

// dialRawAt is dialRaw to addr; it returns no connection if it cannot
// dial.
func (d *driver) dialRawAt(addr string, req proto.ConnectRequest) (*rawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	d.onClose(func() { nc.Close() })
	c := &rawConn{d: d, nc: nc}
	nc.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := nc.Write(proto.AppendFrame(nil, &req)); err != nil {
		return c, err
	}
	frame, err := proto.ReadFrame(nc, proto.DefaultMaxPacket)
	if err != nil {
		return c, err
	}
	c.replyLen = len(frame)
	if err := proto.Unmarshal(frame, &c.resp); err != nil {
		return c, err
	}
	return c, nil
}

// raw opens a new session over a raw connection. The raw client never
// pings, so its sessions get the longest timeout both servers grant.
func (d *driver) raw(name string) *rawConn { return d.rawSession(name, 10000) }

func (d *driver) rawSession(name string, timeoutMs int32) *rawConn {
	c, err := d.dialRaw(proto.ConnectRequest{Timeout: timeoutMs, Passwd: make([]byte, proto.PasswordLen)})
	if err != nil || c.resp.SessionID == 0 {
		d.fatalf("raw handshake: %v (session %x)", err, c.resp.SessionID)
	}
	d.nameSession(c.resp.SessionID, name)
	return c
}

// call sends a request and returns its reply; notifications that arrive
// first are recorded.
func (c *rawConn) call(xid int32, op proto.OpCode, req proto.Record) (proto.ReplyHeader, []byte, error) {
	c.nc.SetDeadline(time.Now().Add(15 * time.Second))
	recs := []proto.Record{&proto.RequestHeader{Xid: xid, OpCode: op}}
	if req != nil {
		recs = append(recs, req)
	}
	if _, err := c.nc.Write(proto.AppendFrame(nil, recs...)); err != nil {
		return proto.ReplyHeader{}, nil, err
	}
	for {
		frame, err := proto.ReadFrame(c.nc, proto.DefaultMaxPacket)
		if err != nil {
			return proto.ReplyHeader{}, nil, err
		}
		d := proto.NewDecoder(frame)
		var h proto.ReplyHeader
		h.Decode(d)
		if d.Err() != nil {
			return h, nil, d.Err()
		}
		if h.Xid == proto.XidNotification {
			var ev proto.WatcherEvent
			err := proto.Unmarshal(d.Rest(), &ev)
			if c.onEvent != nil && err == nil {
				c.onEvent(ev)
				continue
			}
			c.d.rec("  notification zxid=%s type=%d state=%d path=%s %v", zx(h.Zxid), ev.Type, ev.State, ev.Path, err)
			continue
		}
		c.lastZxid = max(c.lastZxid, h.Zxid)
		if h.Xid != xid {
			return h, nil, fmt.Errorf("reply xid %d, want %d", h.Xid, xid)
		}
		return h, d.Rest(), nil
	}
}

// do sends a request with the next xid, decodes the reply into resp and
// describes the outcome: the error code, and anything odd about the body.
func (c *rawConn) do(op proto.OpCode, req, resp proto.Record) (proto.ReplyHeader, string) {
	c.xid++
	h, body, err := c.call(c.xid, op, req)
	if err != nil {
		return h, "conn: " + connErr(err)
	}
	out := proto.Code(h.Err).Error()
	switch {
	case h.Err != proto.ErrOK || resp == nil:
		if len(body) > 0 {
			out += fmt.Sprintf(" +%d body bytes", len(body))
		}
	default:
		if err := proto.Unmarshal(body, resp); err != nil {
			out += " bad body: " + err.Error()
		}
	}
	return h, out
}

func connErr(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		// The server closed it: which of these the client sees depends on
		// whether it was still writing (a request past the packet limit).
		return "closed"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return err.Error()
}

// alive reports whether the server still answers a ping on c.
func (c *rawConn) alive() string {
	_, _, err := c.call(proto.XidPing, proto.OpPing, nil)
	if err != nil {
		return "conn " + connErr(err)
	}
	return "conn open"
}

// closing polls, for up to 2 s, whether the server closes c: ZooKeeper
// closes a connection after an unimplemented op, but may first answer a
// ping it has already read (seen once in 8 runs).
func (c *rawConn) closing() string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		s := c.alive()
		if s != "conn open" || time.Now().After(deadline) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *rawConn) create(path string, data []byte, flags int32) string {
	var resp proto.PathRequest
	_, out := c.do(proto.OpCreate, &proto.CreateRequest{Path: path, Data: data, ACL: proto.WorldACL(proto.PermAll), Flags: flags}, &resp)
	return out + " " + resp.Path
}

// step sends one request over rc and records its outcome under a label.
func (d *driver) step(rc *rawConn, what string, op proto.OpCode, req, resp proto.Record) {
	_, out := rc.do(op, req, resp)
	d.rec("%s: %s", what, out)
}

// followerAddr returns the client address of a member of shard a that does
// not lead.
func followerAddr(t *testing.T, c *testenv.Cluster) string {
	leader := c.WaitLeader("a")
	for _, m := range c.Shard("a").Members {
		if m.ID != leader && c.Member(m.ID) != nil {
			return m.ClientAddr
		}
	}
	t.Fatal("no follower")
	return ""
}

// ---- cases ----

// caseFollowerWriteRead: on a follower, each write's effect is visible to
// the session's next read, and a watch the session holds fires before the
// reply of its own write that triggers it (data, child on create and
// delete, exists on a sequential node's name), on the wire.
func caseFollowerWriteRead(d *driver) {
	rc := d.raw("raw")
	f := d.p("/f")
	d.step(rc, "create", proto.OpCreate, &proto.CreateRequest{Path: f, Data: []byte("0"), ACL: proto.WorldACL(proto.PermAll)}, &proto.PathRequest{})
	for i := range 10 {
		kid := fmt.Sprintf("%s/k%d", f, i)
		d.step(rc, "setData", proto.OpSetData, &proto.SetDataRequest{Path: f, Data: []byte(fmt.Sprint(i)), Version: -1}, &proto.StatResponse{})
		d.step(rc, "getData", proto.OpGetData, &proto.PathWatchRequest{Path: f}, &proto.GetDataResponse{})
		d.step(rc, "create kid", proto.OpCreate, &proto.CreateRequest{Path: kid, ACL: proto.WorldACL(proto.PermAll)}, &proto.PathRequest{})
		d.step(rc, "exists kid", proto.OpExists, &proto.PathWatchRequest{Path: kid}, &proto.StatResponse{})
		d.step(rc, "delete kid", proto.OpDelete, &proto.PathVersionRequest{Path: kid, Version: -1}, nil)
		d.step(rc, "exists kid", proto.OpExists, &proto.PathWatchRequest{Path: kid}, &proto.StatResponse{})
	}
	d.step(rc, "getData watch", proto.OpGetData, &proto.PathWatchRequest{Path: f, Watch: true}, &proto.GetDataResponse{})
	d.step(rc, "setData watched", proto.OpSetData, &proto.SetDataRequest{Path: f, Data: []byte("w"), Version: -1}, &proto.StatResponse{})
	d.step(rc, "getChildren watch", proto.OpGetChildren, &proto.PathWatchRequest{Path: f, Watch: true}, &proto.ChildrenResponse{})
	d.step(rc, "create under watched", proto.OpCreate, &proto.CreateRequest{Path: f + "/c", ACL: proto.WorldACL(proto.PermAll)}, &proto.PathRequest{})
	d.step(rc, "getChildren watch", proto.OpGetChildren, &proto.PathWatchRequest{Path: f, Watch: true}, &proto.ChildrenResponse{})
	d.step(rc, "delete under watched", proto.OpDelete, &proto.PathVersionRequest{Path: f + "/c", Version: -1}, nil)
	d.step(rc, "exists watch seq name", proto.OpExists, &proto.PathWatchRequest{Path: f + "/s0000000022", Watch: true}, &proto.StatResponse{})
	d.step(rc, "create sequential", proto.OpCreate, &proto.CreateRequest{Path: f + "/s", Flags: proto.FlagSequential, ACL: proto.WorldACL(proto.PermAll)}, &proto.PathRequest{})
	d.step(rc, "exists", proto.OpExists, &proto.PathWatchRequest{Path: f}, &proto.StatResponse{})
}

func caseCRUD(d *driver) {
	z := d.zk
	p, err := z.Create(d.p("/a"), []byte("one"), 0, world)
	d.rec("create /a: %s %s", p, errStr(err))
	_, err = z.Create(d.p("/a"), nil, 0, world)
	d.rec("create /a again: %s", errStr(err))
	_, err = z.Create(d.p("/missing/b"), nil, 0, world)
	d.rec("create under missing parent: %s", errStr(err))
	data, st, err := z.Get(d.p("/a"))
	d.rec("get /a: %q %s %s", data, d.zstat(st), errStr(err))
	ok, st, err := z.Exists(d.p("/a"))
	d.rec("exists /a: %v %s %s", ok, d.zstat(st), errStr(err))
	ok, st, err = z.Exists(d.p("/nope"))
	d.rec("exists /nope: %v %s %s", ok, d.zstat(st), errStr(err))
	_, _, err = z.Get(d.p("/nope"))
	d.rec("get /nope: %s", errStr(err))
	_, err = z.Set(d.p("/nope"), nil, -1)
	d.rec("set /nope: %s", errStr(err))
	st, err = z.Set(d.p("/a"), []byte("two"), -1)
	d.rec("set /a: %s %s", d.zstat(st), errStr(err))
	for _, c := range []string{"/a/c", "/a/b"} {
		_, err = z.Create(d.p(c), []byte(c), 0, world)
		d.rec("create %s: %s", c, errStr(err))
	}
	kids, st, err := z.Children(d.p("/a"))
	d.rec("children /a: %v %s %s", sorted(kids), d.zstat(st), errStr(err))
	_, _, err = z.Children(d.p("/nope"))
	d.rec("children /nope: %s", errStr(err))
	d.rec("delete /a with children: %s", errStr(z.Delete(d.p("/a"), -1)))
	for _, c := range []string{"/a/b", "/a/c", "/a"} {
		d.rec("delete %s: %s", c, errStr(z.Delete(d.p(c), -1)))
	}
	d.rec("delete /a again: %s", errStr(z.Delete(d.p("/a"), -1)))
	_, _, err = z.Get(d.p("/a"))
	d.rec("get deleted /a: %s", errStr(err))
	sp, err := z.Sync(d.p("/nope"))
	d.rec("sync: %s %s", sp, errStr(err))

	// Null and empty data, seen on the wire.
	rc := d.raw("raw")
	d.rec("create null data: %s", rc.create(d.p("/null"), nil, 0))
	d.rec("create empty data: %s", rc.create(d.p("/empty"), []byte{}, 0))
	for _, p := range []string{"/null", "/empty"} {
		rc.xid++
		h, body, err := rc.call(rc.xid, proto.OpGetData, &proto.PathWatchRequest{Path: d.p(p)})
		if err != nil || len(body) < 4 {
			d.rec("getData %s: %v %s", p, h.Err, errStr(err))
			continue
		}
		d.rec("getData %s: err=%d data length field %d, body %d bytes", p, h.Err,
			int32(binary.BigEndian.Uint32(body)), len(body))
	}
}

func caseVersions(d *driver) {
	z := d.zk
	v := d.p("/v")
	_, err := z.Create(v, []byte("0"), 0, world)
	d.rec("create: %s", errStr(err))
	for _, ver := range []int32{0, 0, 5, -1, -2} {
		st, err := z.Set(v, []byte("x"), ver)
		d.rec("set version %d: %s %s", ver, errStr(err), d.zstat(st))
	}
	for _, ver := range []int32{1, 0, -1} {
		st, err := z.SetACL(v, world, ver)
		d.rec("setACL aversion %d: %s %s", ver, errStr(err), d.zstat(st))
	}
	// Only failing checks stand alone: a successful top-level check makes
	// ZooKeeper 3.8 followers drop out ("Unsupported Txn with type=13").
	rc := d.raw("raw")
	d.step(rc, "check bad version", proto.OpCheck, &proto.PathVersionRequest{Path: v, Version: 0}, nil)
	d.step(rc, "check missing", proto.OpCheck, &proto.PathVersionRequest{Path: d.p("/nope"), Version: -1}, nil)
	for _, ver := range []int32{1, 5, 2} {
		d.rec("delete version %d: %s", ver, errStr(z.Delete(v, ver)))
	}
}

func caseStat(d *driver) {
	z := d.zk
	s := d.p("/s")
	show := func(what, path string) {
		_, st, err := z.Exists(path)
		d.rec("%s: %s %s", what, d.zstat(st), errStr(err))
	}
	_, err := z.Create(s, []byte("abc"), 0, world)
	d.rec("create: %s", errStr(err))
	show("new node", s)
	_, err = z.Create(s+"/c1", nil, 0, world)
	d.rec("create child: %s", errStr(err))
	show("parent after child create", s)
	show("child", s+"/c1")
	_, err = z.Set(s+"/c1", []byte("12345"), -1)
	d.rec("set child: %s", errStr(err))
	show("parent after child set", s)
	show("child after set", s+"/c1")
	_, err = z.Create(s+"/c2", nil, 0, world)
	d.rec("create child 2: %s", errStr(err))
	d.rec("delete child 1: %s", errStr(z.Delete(s+"/c1", -1)))
	show("parent after child delete", s)
	_, err = z.SetACL(s, zk.WorldACL(zk.PermAll), -1)
	d.rec("setACL: %s", errStr(err))
	show("parent after setACL", s)
	_, err = z.Set(s, nil, -1)
	d.rec("set empty: %s", errStr(err))
	show("parent after set empty", s)
	_, err = z.Create(s+"/e", []byte("e"), zk.FlagEphemeral, world)
	d.rec("create ephemeral: %s", errStr(err))
	show("ephemeral", s+"/e")
	_, st, err := z.Children(s)
	d.rec("getChildren2 stat: %s %s", d.zstat(st), errStr(err))
	_, st, err = z.Get(s + "/c2")
	d.rec("getData stat: %s %s", d.zstat(st), errStr(err))
	_, st, err = z.GetACL(s)
	d.rec("getACL stat: %s %s", d.zstat(st), errStr(err))
}

// caseWideParent lists a parent with more children than the member
// keeps an encoded child list for (64) as it changes: getChildren and
// getChildren2, raw, whose reply the member sends in parts.
func caseWideParent(d *driver) {
	z := d.zk
	w := d.p("/w")
	_, err := z.Create(w, nil, 0, world)
	d.rec("create: %s", errStr(err))
	for i := range 100 {
		if _, err := z.Create(fmt.Sprintf("%s/c%03d", w, i), nil, 0, world); err != nil {
			d.rec("create child %d: %s", i, errStr(err))
		}
	}
	rc := d.raw("raw")
	list := func(what string) {
		for _, op := range []proto.OpCode{proto.OpGetChildren, proto.OpGetChildren2} {
			kids := &proto.ChildrenResponse{WithStat: op == proto.OpGetChildren2}
			_, out := rc.do(op, &proto.PathWatchRequest{Path: w}, kids)
			d.rec("%s %v: %s %d %v %s", what, op, out, len(kids.Children), sorted(kids.Children), d.stat(kids.Stat))
		}
	}
	list("children")
	list("children again")
	d.rec("delete c050: %s", errStr(z.Delete(w+"/c050", -1)))
	list("after delete")
	_, err = z.Create(w+"/c100", nil, 0, world)
	d.rec("create c100: %s", errStr(err))
	list("after create")
}

func caseSequential(d *driver) {
	z := d.zk
	q := d.p("/q")
	_, err := z.Create(q, nil, 0, world)
	d.rec("create: %s", errStr(err))
	seq := func(base string, flags int32) {
		p, err := z.Create(q+base, nil, flags, world)
		d.rec("create seq %q flags %d: %s %s", base, flags, p, errStr(err))
	}
	for range 3 {
		seq("/n-", zk.FlagSequence)
	}
	d.rec("delete n-0000000001: %s", errStr(z.Delete(q+"/n-0000000001", -1)))
	seq("/n-", zk.FlagSequence)
	_, err = z.Create(q+"/plain", nil, 0, world)
	d.rec("create plain: %s", errStr(err))
	_, err = z.Create(q+"/plain", nil, 0, world)
	d.rec("create plain again: %s", errStr(err))
	seq("/n-", zk.FlagSequence)
	seq("/", zk.FlagSequence)
	seq("/e-", zk.FlagEphemeralSequential)
	_, st, _ := z.Exists(q)
	d.rec("parent: %s", d.zstat(st))
	kids, _, err := z.Children(q)
	d.rec("children: %v %s", sorted(kids), errStr(err))
	res, err := z.Multi(&zk.CreateRequest{Path: q + "/m-", Flags: zk.FlagSequence, Acl: world},
		&zk.CreateRequest{Path: q + "/m-", Flags: zk.FlagSequence, Acl: world})
	for _, r := range res {
		d.rec("multi seq: %s %s", r.String, errStr(r.Error))
	}
	d.rec("multi: %s", errStr(err))
	// A sequential name that already exists: a plain node that looks like
	// the next sequential name.
	_, err = z.Create(q+"/x-0000000011", nil, 0, world)
	d.rec("create look-alike: %s", errStr(err))
	seq("/x-", zk.FlagSequence)
	seq("/x-", zk.FlagSequence)
}

func caseEphemeralClose(d *driver) {
	z := d.zk
	z2 := d.connect("s2")
	e := d.p("/e")
	_, err := z2.Create(e, []byte("x"), zk.FlagEphemeral, world)
	d.rec("create ephemeral: %s", errStr(err))
	p, err := z2.Create(d.p("/es-"), nil, zk.FlagEphemeralSequential, world)
	d.rec("create ephemeral sequential: %s %s", p, errStr(err))
	_, err = z2.Create(e+"/child", nil, 0, world)
	d.rec("child of ephemeral: %s", errStr(err))
	_, err = z2.Create(e+"/child", nil, zk.FlagEphemeral, world)
	d.rec("ephemeral child of ephemeral: %s", errStr(err))
	ok, st, ch, err := z.ExistsW(e)
	d.rec("exists from another session: %v %s %s", ok, d.zstat(st), errStr(err))
	_, st, _ = z.Exists(d.prefix)
	d.rec("parent: %s", d.zstat(st))
	z2.Close()
	d.event("after close", ch)
	d.waitGone(e, 10*time.Second)
	d.waitGone(p, 10*time.Second)
	_, st, _ = z.Exists(d.prefix)
	d.rec("parent: %s", d.zstat(st))
	// An ephemeral deleted by its own session before the close.
	z3 := d.connect("s3")
	_, err = z3.Create(e, nil, zk.FlagEphemeral, world)
	d.rec("create again: %s", errStr(err))
	d.rec("delete own ephemeral: %s", errStr(z3.Delete(e, -1)))
	_, err = z.Create(e, nil, 0, world)
	d.rec("persistent at the same path: %s", errStr(err))
	z3.Close()
	ok, st, err = z.Exists(e)
	d.rec("persistent after close: %v %s %s", ok, d.zstat(st), errStr(err))
}

func caseEphemeralExpiry(d *driver) {
	z := d.zk
	rc := d.rawSession("raw", 4000) // ZooKeeper's least with tickTime 2s
	d.rec("negotiated timeout %d", rc.resp.Timeout)
	e := d.p("/e")
	d.rec("create ephemeral: %s", rc.create(e, nil, proto.FlagEphemeral))
	ok, st, ch, err := z.ExistsW(e)
	d.rec("exists: %v %s %s", ok, d.zstat(st), errStr(err))
	rc.nc.Close() // no closeSession: the session must expire
	start := time.Now()
	d.event("after expiry", ch)
	if el := time.Since(start); el < 2*time.Second {
		d.t.Errorf("%s: ephemeral went after %v, before the session timeout", d.target, el)
	}
	d.waitGone(e, 10*time.Second)
	// Reattaching to the expired session is refused.
	old := rc.resp
	rc2, err := d.dialRaw(proto.ConnectRequest{Timeout: 4000, SessionID: old.SessionID, Passwd: old.Passwd})
	if err != nil {
		d.rec("reattach expired: %s", connErr(err))
		return
	}
	d.rec("reattach expired: reply %d bytes, timeout %d, session %s, passwd %d bytes, %s", rc2.replyLen,
		rc2.resp.Timeout, d.session(rc2.resp.SessionID), len(rc2.resp.Passwd), rc2.alive())
}

func caseWatchData(d *driver) {
	z := d.zk
	w := d.p("/w")
	_, err := z.Create(w, []byte("a"), 0, world)
	d.rec("create: %s", errStr(err))
	_, _, ch, err := z.GetW(w)
	d.rec("getW: %s", errStr(err))
	_, err = z.Set(w, []byte("b"), -1)
	d.rec("set: %s", errStr(err))
	d.event("data watch", ch)

	// One-shot, seen on the wire: two changes, one notification, which
	// comes before the reply of the change that fired it.
	rc := d.raw("raw")
	d.step(rc, "raw getData watch", proto.OpGetData, &proto.PathWatchRequest{Path: w, Watch: true}, &proto.GetDataResponse{})
	for i := range 2 {
		d.step(rc, fmt.Sprintf("raw setData %d", i), proto.OpSetData, &proto.SetDataRequest{Path: w, Data: []byte("c"), Version: -1}, &proto.StatResponse{})
	}
	d.step(rc, "raw exists", proto.OpExists, &proto.PathWatchRequest{Path: w}, &proto.StatResponse{})
	// A watch on a node deleted fires NodeDeleted, once even when set twice.
	d.step(rc, "raw getData watch", proto.OpGetData, &proto.PathWatchRequest{Path: w, Watch: true}, &proto.GetDataResponse{})
	d.step(rc, "raw getData watch again", proto.OpGetData, &proto.PathWatchRequest{Path: w, Watch: true}, &proto.GetDataResponse{})
	d.step(rc, "raw delete", proto.OpDelete, &proto.PathVersionRequest{Path: w, Version: -1}, nil)
	d.step(rc, "raw create", proto.OpCreate, &proto.CreateRequest{Path: w, ACL: proto.WorldACL(proto.PermAll)}, &proto.PathRequest{})
	// A failed getData leaves no watch.
	d.step(rc, "raw getData watch missing", proto.OpGetData, &proto.PathWatchRequest{Path: w + "/x", Watch: true}, &proto.GetDataResponse{})
	d.step(rc, "raw create it", proto.OpCreate, &proto.CreateRequest{Path: w + "/x", ACL: proto.WorldACL(proto.PermAll)}, &proto.PathRequest{})
	d.step(rc, "raw exists", proto.OpExists, &proto.PathWatchRequest{Path: w}, &proto.StatResponse{})
}

func caseWatchExists(d *driver) {
	z := d.zk
	m := d.p("/m")
	ok, _, ch, err := z.ExistsW(m)
	d.rec("existsW missing: %v %s", ok, errStr(err))
	_, err = z.Create(m, nil, 0, world)
	d.rec("create: %s", errStr(err))
	d.event("exists watch", ch)
	ok, _, ch, err = z.ExistsW(m)
	d.rec("existsW present: %v %s", ok, errStr(err))
	d.rec("delete: %s", errStr(z.Delete(m, -1)))
	d.event("exists watch on present node", ch)

	rc := d.raw("raw")
	d.step(rc, "raw exists watch missing", proto.OpExists, &proto.PathWatchRequest{Path: m, Watch: true}, &proto.StatResponse{})
	d.rec("raw create: %s", rc.create(m, nil, 0))
	d.step(rc, "raw delete", proto.OpDelete, &proto.PathVersionRequest{Path: m, Version: -1}, nil)
	d.rec("raw create: %s", rc.create(m, nil, 0))
	d.step(rc, "raw exists watch present", proto.OpExists, &proto.PathWatchRequest{Path: m, Watch: true}, &proto.StatResponse{})
	d.step(rc, "raw setData", proto.OpSetData, &proto.SetDataRequest{Path: m, Data: []byte("x"), Version: -1}, &proto.StatResponse{})
	d.step(rc, "raw setData", proto.OpSetData, &proto.SetDataRequest{Path: m, Data: []byte("y"), Version: -1}, &proto.StatResponse{})
	// setACL fires nothing.
	d.step(rc, "raw exists watch", proto.OpExists, &proto.PathWatchRequest{Path: m, Watch: true}, &proto.StatResponse{})
	d.step(rc, "raw setACL", proto.OpSetACL, &proto.SetACLRequest{Path: m, ACL: proto.WorldACL(proto.PermAll), Version: -1}, &proto.StatResponse{})
	d.step(rc, "raw sync", proto.OpSync, &proto.PathRequest{Path: m}, &proto.PathRequest{})
}

func caseWatchChild(d *driver) {
	z := d.zk
	c := d.p("/c")
	_, err := z.Create(c, nil, 0, world)
	d.rec("create: %s", errStr(err))
	_, _, ch, err := z.ChildrenW(c)
	d.rec("childrenW: %s", errStr(err))
	_, err = z.Create(c+"/1", nil, 0, world)
	d.rec("create child: %s", errStr(err))
	d.event("child watch", ch)

	rc := d.raw("raw")
	kids := &proto.ChildrenResponse{}
	_, out := rc.do(proto.OpGetChildren, &proto.PathWatchRequest{Path: c, Watch: true}, kids)
	d.rec("raw getChildren watch: %s %v", out, kids.Children)
	d.rec("raw create child: %s", rc.create(c+"/2", nil, 0))
	d.rec("raw create child: %s", rc.create(c+"/3", nil, 0))
	kids = &proto.ChildrenResponse{WithStat: true}
	_, out = rc.do(proto.OpGetChildren2, &proto.PathWatchRequest{Path: c, Watch: true}, kids)
	d.rec("raw getChildren2 watch: %s %v %s", out, sorted(kids.Children), d.stat(kids.Stat))
	d.step(rc, "raw setData parent (no child event)", proto.OpSetData, &proto.SetDataRequest{Path: c, Data: []byte("x"), Version: -1}, &proto.StatResponse{})
	d.step(rc, "raw delete child", proto.OpDelete, &proto.PathVersionRequest{Path: c + "/1", Version: -1}, nil)
	// Child and data watch on a node that is deleted: one NodeDeleted.
	d.step(rc, "raw getChildren watch", proto.OpGetChildren, &proto.PathWatchRequest{Path: c + "/2", Watch: true}, &proto.ChildrenResponse{})
	d.step(rc, "raw getData watch", proto.OpGetData, &proto.PathWatchRequest{Path: c + "/2", Watch: true}, &proto.GetDataResponse{})
	d.step(rc, "raw delete watched", proto.OpDelete, &proto.PathVersionRequest{Path: c + "/2", Version: -1}, nil)
	// A child watch alone on a deleted node.
	d.step(rc, "raw getChildren watch", proto.OpGetChildren, &proto.PathWatchRequest{Path: c + "/3", Watch: true}, &proto.ChildrenResponse{})
	d.step(rc, "raw delete watched", proto.OpDelete, &proto.PathVersionRequest{Path: c + "/3", Version: -1}, nil)
	d.step(rc, "raw sync", proto.OpSync, &proto.PathRequest{Path: c}, &proto.PathRequest{})
}

// caseSetWatches reattaches a session on a new connection and re-sends its
// watches, as clients do after a reconnect: those whose node changed since
// the given zxid fire at once, the others are registered again.
func caseSetWatches(d *driver) {
	z := d.zk
	for _, p := range []string{"/changed", "/same", "/gone", "/kids", "/kids-same"} {
		_, err := z.Create(d.p(p), nil, 0, world)
		d.rec("create %s: %s", p, errStr(err))
	}
	rc := d.raw("raw")
	h, out := rc.do(proto.OpExists, &proto.PathWatchRequest{Path: d.p("/same")}, &proto.StatResponse{})
	d.rec("exists: %s", out)
	seen := h.Zxid // everything above is older than this
	_, err := z.Set(d.p("/changed"), []byte("x"), -1)
	d.rec("set /changed: %s", errStr(err))
	d.rec("delete /gone: %s", errStr(z.Delete(d.p("/gone"), -1)))
	_, err = z.Create(d.p("/born"), nil, 0, world)
	d.rec("create /born: %s", errStr(err))
	_, err = z.Create(d.p("/kids/k"), nil, 0, world)
	d.rec("create /kids/k: %s", errStr(err))

	rc2, err := d.dialRaw(proto.ConnectRequest{LastZxidSeen: seen, Timeout: 4000,
		SessionID: rc.resp.SessionID, Passwd: rc.resp.Passwd})
	if err != nil {
		d.fatalf("reattach: %v", err)
	}
	d.rec("reattach: session %s", d.session(rc2.resp.SessionID))
	sw := &proto.SetWatchesRequest{RelativeZxid: seen,
		DataWatches:  []string{d.p("/changed"), d.p("/same"), d.p("/gone")},
		ExistWatches: []string{d.p("/born"), d.p("/unborn")},
		ChildWatches: []string{d.p("/kids"), d.p("/kids-same")},
	}
	h, body, err := rc2.call(proto.XidSetWatches, proto.OpSetWatches, sw)
	d.rec("setWatches: xid=%d err=%d body=%d %v", h.Xid, h.Err, len(body), err)
	// The watches registered again fire on the next change.
	_, err = z.Set(d.p("/same"), []byte("y"), -1)
	d.rec("set /same: %s", errStr(err))
	_, err = z.Create(d.p("/unborn"), nil, 0, world)
	d.rec("create /unborn: %s", errStr(err))
	_, err = z.Create(d.p("/kids-same/k"), nil, 0, world)
	d.rec("create /kids-same/k: %s", errStr(err))
	d.step(rc2, "sync", proto.OpSync, &proto.PathRequest{Path: d.prefix}, &proto.PathRequest{})
	d.step(rc2, "exists", proto.OpExists, &proto.PathWatchRequest{Path: d.prefix}, &proto.StatResponse{})
}

// multi sends a multi over rc and records the header and every result.
// A write's header zxid is its own; a read's is whatever the member last
// applied, which other cases move, so it is left out.
func (d *driver) multi(rc *rawConn, what string, op proto.OpCode, ops ...proto.MultiOp) {
	resp := &proto.MultiResponse{}
	h, out := rc.do(op, &proto.MultiRequest{Ops: ops}, resp)
	zxid := "(read)"
	if op == proto.OpMulti {
		zxid = zx(h.Zxid)
	}
	d.rec("%s: %s zxid=%s results=%d", what, out, zxid, len(resp.Results))
	for i, r := range resp.Results {
		d.rec("  %d: %s", i, d.multiResult("", r, func(data []byte) string { return strconv.Quote(string(data)) }))
	}
}

// multiResult describes one result of a multi, its stat's zxids ranked in
// zone and its data shown by showData.
func (d *driver) multiResult(zone string, r proto.MultiResult, showData func([]byte) string) string {
	line := fmt.Sprintf("type=%d err=%d", r.Op, r.Err)
	switch v := r.Resp.(type) {
	case *proto.PathRequest:
		line += " path=" + v.Path
	case *proto.Create2Response:
		line += " path=" + v.Path + " " + d.statIn(zone, v.Stat)
	case *proto.StatResponse:
		line += " " + d.statIn(zone, v.Stat)
	case *proto.GetDataResponse:
		line += fmt.Sprintf(" data=%s %s", showData(v.Data), d.statIn(zone, v.Stat))
	case *proto.ChildrenResponse:
		line += fmt.Sprintf(" children=%v", sorted(v.Children))
	}
	return line
}

func mCreate(op proto.OpCode, path string, flags int32) proto.MultiOp {
	return proto.MultiOp{Op: op, Req: &proto.CreateRequest{Path: path, Data: []byte("d"), ACL: proto.WorldACL(proto.PermAll), Flags: flags}}
}

func mPathVersion(op proto.OpCode, path string, version int32) proto.MultiOp {
	return proto.MultiOp{Op: op, Req: &proto.PathVersionRequest{Path: path, Version: version}}
}

func mSet(path string, version int32) proto.MultiOp {
	return proto.MultiOp{Op: proto.OpSetData, Req: &proto.SetDataRequest{Path: path, Data: []byte("set"), Version: version}}
}

func mRead(op proto.OpCode, path string) proto.MultiOp {
	return proto.MultiOp{Op: op, Req: &proto.PathWatchRequest{Path: path}}
}

func caseMultiOK(d *driver) {
	rc := d.raw("raw")
	m := d.p("/m")
	d.multi(rc, "multi", proto.OpMulti,
		mCreate(proto.OpCreate, m, 0),
		mCreate(proto.OpCreate2, m+"/a", 0),
		mSet(m, -1),
		mPathVersion(proto.OpCheck, m, 1),
		mPathVersion(proto.OpDelete, m+"/a", 0),
		mCreate(proto.OpCreate, m+"/s-", proto.FlagSequential),
		mCreate(proto.OpCreate, m+"/e", proto.FlagEphemeral),
		mCreate(proto.OpCreateContainer, m+"/k", proto.FlagContainer),
	)
	kids := &proto.ChildrenResponse{WithStat: true}
	_, out := rc.do(proto.OpGetChildren2, &proto.PathWatchRequest{Path: m}, kids)
	d.rec("children: %s %v %s", out, sorted(kids.Children), d.stat(kids.Stat))
	// ClickHouse's "must not exist" assertion.
	d.multi(rc, "create-delete", proto.OpMulti, mCreate(proto.OpCreate, m+"/x", 0), mPathVersion(proto.OpDelete, m+"/x", -1))
	d.step(rc, "exists after create-delete", proto.OpExists, &proto.PathWatchRequest{Path: m + "/x"}, &proto.StatResponse{})
	d.multi(rc, "empty multi", proto.OpMulti)
	d.multi(rc, "delete then create", proto.OpMulti, mPathVersion(proto.OpDelete, m+"/e", -1), mCreate(proto.OpCreate, m+"/e", 0))
	st := &proto.StatResponse{}
	_, out = rc.do(proto.OpExists, &proto.PathWatchRequest{Path: m + "/e"}, st)
	d.rec("recreated: %s %s", out, d.stat(st.Stat))
	d.multi(rc, "create under created", proto.OpMulti, mCreate(proto.OpCreate, m+"/p", 0), mCreate(proto.OpCreate, m+"/p/q", 0))
	// Inside a multi the flags, not the opcode, choose the kind of create.
	d.multi(rc, "create kinds by flags", proto.OpMulti,
		mCreate(proto.OpCreate, m+"/c1", proto.FlagContainer),
		mCreate(proto.OpCreate2, m+"/c2", proto.FlagContainer),
		mCreate(proto.OpCreateContainer, m+"/c3", 0),
		mCreate(proto.OpCreateContainer, m+"/c4", proto.FlagEphemeral),
		mCreate(proto.OpCreateContainer, m+"/c5-", proto.FlagSequential))
	d.multi(rc, "createTTL without a TTL mode", proto.OpMulti, proto.MultiOp{Op: proto.OpCreateTTL, Req: &proto.CreateTTLRequest{
		CreateRequest: proto.CreateRequest{Path: m + "/t", ACL: proto.WorldACL(proto.PermAll)}, TTL: 1000}})
	for _, p := range []string{"/c1", "/c2", "/c3", "/c4"} {
		st := &proto.StatResponse{}
		_, out := rc.do(proto.OpExists, &proto.PathWatchRequest{Path: m + p}, st)
		d.rec("%s: %s %s", p, out, d.stat(st.Stat))
	}
}

func caseMultiFail(d *driver) {
	rc := d.raw("raw")
	f := d.p("/f")
	d.rec("create: %s", rc.create(f, nil, 0))
	d.multi(rc, "bad version in the middle", proto.OpMulti,
		mCreate(proto.OpCreate, f+"/a", 0), mSet(f, 7), mCreate(proto.OpCreate, f+"/b", 0))
	d.multi(rc, "first op fails", proto.OpMulti,
		mPathVersion(proto.OpCheck, d.p("/nope"), -1), mCreate(proto.OpCreate, f+"/a", 0))
	d.multi(rc, "last op fails", proto.OpMulti,
		mCreate(proto.OpCreate, f+"/a", 0), mCreate(proto.OpCreate, f+"/a", 0))
	d.multi(rc, "delete non-empty", proto.OpMulti,
		mCreate(proto.OpCreate, f+"/a", 0), mPathVersion(proto.OpDelete, f, -1))
	d.multi(rc, "bad path", proto.OpMulti, mCreate(proto.OpCreate, f+"/a", 0), mCreate(proto.OpCreate, "bad", 0))
	d.multi(rc, "create2 then bad check", proto.OpMulti,
		mCreate(proto.OpCreate2, f+"/a", 0), mPathVersion(proto.OpCheck, f, 3))
	d.multi(rc, "child of ephemeral", proto.OpMulti,
		mCreate(proto.OpCreate, f+"/e", proto.FlagEphemeral), mCreate(proto.OpCreate, f+"/e/c", 0))
	d.multi(rc, "read op in a write multi", proto.OpMulti, mCreate(proto.OpCreate, f+"/a", 0), mRead(proto.OpGetData, f))
	kids := &proto.ChildrenResponse{WithStat: true}
	_, out := rc.do(proto.OpGetChildren2, &proto.PathWatchRequest{Path: f}, kids)
	d.rec("nothing applied: %s %v %s", out, kids.Children, d.stat(kids.Stat))
	d.rec("%s", rc.alive())
}

func caseMultiRead(d *driver) {
	rc := d.raw("raw")
	r := d.p("/r")
	d.rec("create: %s", rc.create(r, []byte("data"), 0))
	d.rec("create: %s", rc.create(r+"/k", nil, 0))
	d.multi(rc, "multiRead", proto.OpMultiRead,
		mRead(proto.OpGetData, r), mRead(proto.OpGetChildren, r), mRead(proto.OpGetData, d.p("/nope")),
		mRead(proto.OpGetChildren, r+"/k"))
	d.rec("%s", rc.alive())
}

func caseACLWorld(d *driver) {
	z := d.zk
	mk := func(name string, acl []zk.ACL) string {
		p := d.p("/" + name)
		_, err := z.Create(p, []byte("x"), 0, acl)
		d.rec("create %s %v: %s", name, acl, errStr(err))
		return p
	}
	ro := mk("read-only", zk.WorldACL(zk.PermRead))
	_, err := z.Set(ro, nil, -1)
	d.rec("set read-only: %s", errStr(err))
	_, err = z.Create(ro+"/c", nil, 0, world)
	d.rec("create under read-only: %s", errStr(err))
	_, _, err = z.Get(ro)
	d.rec("get read-only: %s", errStr(err))
	acl, _, err := z.GetACL(ro)
	d.rec("getACL read-only: %v %s", acl, errStr(err))
	_, err = z.SetACL(ro, world, -1)
	d.rec("setACL read-only: %s", errStr(err))

	nd := mk("no-delete", zk.WorldACL(zk.PermRead|zk.PermCreate))
	_, err = z.Create(nd+"/c", nil, 0, world)
	d.rec("create under no-delete: %s", errStr(err))
	d.rec("delete under no-delete: %s", errStr(z.Delete(nd+"/c", -1)))

	nr := mk("no-read", zk.WorldACL(zk.PermCreate|zk.PermWrite))
	_, _, err = z.Get(nr)
	d.rec("get no-read: %s", errStr(err))
	ok, _, err := z.Exists(nr)
	d.rec("exists no-read: %v %s", ok, errStr(err))
	_, _, err = z.Children(nr)
	d.rec("children no-read: %s", errStr(err))
	_, _, err = z.GetACL(nr)
	d.rec("getACL no-read: %s", errStr(err))
	_, err = z.Set(nr, []byte("y"), -1)
	d.rec("set no-read: %s", errStr(err))
	rc := d.raw("raw")
	d.step(rc, "check no-read", proto.OpCheck, &proto.PathVersionRequest{Path: nr, Version: -1}, nil)
	d.multi(rc, "multi check no-read", proto.OpMulti, mPathVersion(proto.OpCheck, nr, -1))

	adm := mk("admin-only", zk.WorldACL(zk.PermAdmin))
	acl, _, err = z.GetACL(adm)
	d.rec("getACL admin-only: %v %s", acl, errStr(err))
	_, err = z.SetACL(adm, zk.WorldACL(zk.PermRead|zk.PermAdmin), -1)
	d.rec("setACL admin-only: %s", errStr(err))

	for _, acl := range [][]zk.ACL{
		{},
		{{Perms: zk.PermAll, Scheme: "foo", ID: "bar"}},
		{{Perms: zk.PermAll, Scheme: "world", ID: "someone"}},
		{{Perms: zk.PermAll, Scheme: "digest", ID: "nocolon"}},
		{{Perms: zk.PermAll, Scheme: "ip", ID: "not-an-ip"}},
		{{Perms: zk.PermAll, Scheme: "ip", ID: "127.0.0.1/33"}},
		{{Perms: zk.PermAll, Scheme: "auth", ID: ""}},
		{{Perms: 0, Scheme: "world", ID: "anyone"}},
		{{Perms: zk.PermAll, Scheme: "world", ID: "anyone"}, {Perms: zk.PermAll, Scheme: "world", ID: "anyone"}},
	} {
		p := d.p("/bad")
		_, err := z.Create(p, nil, 0, acl)
		acl2, _, _ := z.GetACL(p)
		z.Delete(p, -1)
		d.rec("create with acl %v: %s %v", acl, errStr(err), acl2)
	}
	ip := mk("ip-local", []zk.ACL{{Perms: zk.PermRead, Scheme: "ip", ID: "127.0.0.1"}})
	_, _, err = z.Get(ip)
	d.rec("get ip-local: %s", errStr(err))
	ip = mk("ip-net", []zk.ACL{{Perms: zk.PermRead, Scheme: "ip", ID: "127.0.0.0/8"}})
	_, _, err = z.Get(ip)
	d.rec("get ip-net: %s", errStr(err))
	ip = mk("ip-other", []zk.ACL{{Perms: zk.PermRead, Scheme: "ip", ID: "10.1.2.3"}})
	_, _, err = z.Get(ip)
	d.rec("get ip-other: %s", errStr(err))
}

func caseACLDigest(d *driver) {
	alice := d.zk
	d.rec("auth alice: %s", errStr(alice.AddAuth("digest", []byte("alice:secret"))))
	own := d.p("/own")
	_, err := alice.Create(own, []byte("x"), 0, zk.AuthACL(zk.PermAll))
	d.rec("create with auth acl: %s", errStr(err))
	acl, _, err := alice.GetACL(own)
	d.rec("getACL as owner: %v %s", acl, errStr(err))
	bobs := d.p("/bobs")
	_, err = alice.Create(bobs, nil, 0, zk.DigestACL(zk.PermRead|zk.PermWrite, "bob", "pw"))
	d.rec("create for bob: %s", errStr(err))
	mixed := d.p("/mixed")
	_, err = alice.Create(mixed, nil, 0, append(zk.WorldACL(zk.PermRead), zk.DigestACL(zk.PermAll, "alice", "secret")...))
	d.rec("create mixed: %s", errStr(err))

	anon := d.connect("anon")
	_, _, err = anon.Get(own)
	d.rec("anon get own: %s", errStr(err))
	_, _, err = anon.GetACL(own)
	d.rec("anon getACL own: %s", errStr(err))
	acl, _, err = anon.GetACL(mixed)
	d.rec("anon getACL mixed (redacted): %v %s", acl, errStr(err))
	acl, _, err = alice.GetACL(mixed)
	d.rec("alice getACL mixed: %v %s", acl, errStr(err))
	_, err = anon.Create(d.p("/anon"), nil, 0, zk.AuthACL(zk.PermAll))
	d.rec("anon create with auth acl: %s", errStr(err))
	_, err = anon.Set(mixed, nil, -1)
	d.rec("anon set mixed: %s", errStr(err))

	bob := d.connect("bob")
	d.rec("auth bob: %s", errStr(bob.AddAuth("digest", []byte("bob:pw"))))
	_, _, err = bob.Get(bobs)
	d.rec("bob get: %s", errStr(err))
	acl, _, err = bob.GetACL(bobs)
	d.rec("bob getACL (no admin): %v %s", acl, errStr(err))
	_, err = bob.Set(bobs, []byte("y"), -1)
	d.rec("bob set: %s", errStr(err))
	_, _, err = bob.Get(own)
	d.rec("bob get own: %s", errStr(err))

	wrong := d.connect("wrong")
	d.rec("auth wrong password: %s", errStr(wrong.AddAuth("digest", []byte("alice:wrong"))))
	_, _, err = wrong.Get(own)
	d.rec("wrong get own: %s", errStr(err))
	d.rec("auth right password too: %s", errStr(wrong.AddAuth("digest", []byte("alice:secret"))))
	_, _, err = wrong.Get(own)
	d.rec("get own with both: %s", errStr(err))
	d.rec("wrong delete own: %s", errStr(wrong.Delete(own, -1)))
}

// whoAmI records the connection's identities, sorted: ZooKeeper keeps them
// in a hash set.
func (d *driver) whoAmI(rc *rawConn) {
	resp := &proto.WhoAmIResponse{}
	_, out := rc.do(proto.OpWhoAmI, nil, resp)
	ids := make([]string, len(resp.IDs))
	for i, id := range resp.IDs {
		ids[i] = id.Scheme + ":" + id.ID
	}
	d.rec("whoAmI: %s %v", out, sorted(ids))
}

func (d *driver) auth(rc *rawConn, xid int32, scheme, auth string) {
	h, body, err := rc.call(xid, proto.OpAuth, &proto.AuthPacket{Scheme: scheme, Auth: []byte(auth)})
	if err != nil {
		d.rec("auth %s %q: conn %s", scheme, auth, connErr(err))
		return
	}
	d.rec("auth %s %q: xid=%d zxid=%s err=%d body=%d, %s", scheme, auth, h.Xid, zx(h.Zxid), h.Err, len(body), rc.alive())
}

func caseAuth(d *driver) {
	rc := d.raw("raw")
	d.whoAmI(rc)
	d.auth(rc, proto.XidAuth, "digest", "alice:secret")
	d.whoAmI(rc)
	d.auth(rc, 7, "digest", "alice:secret")
	d.auth(rc, proto.XidAuth, "digest", "nocolon")
	d.auth(rc, proto.XidAuth, "digest", "bob:")
	d.whoAmI(rc)
	d.auth(rc, proto.XidAuth, "ip", "1.2.3.4")
	d.whoAmI(rc)
	d.auth(rc, proto.XidAuth, "world", "anyone")
	rc = d.raw("raw2")
	d.auth(rc, proto.XidAuth, "foo", "bar")
	rc = d.raw("raw3")
	d.auth(rc, proto.XidAuth, "super", "x:y")
}

var badPaths = []string{"", "a", "/a/", "//", "/a//b", "/a/./b", "/a/../b", "/.", "/..", "/a/.", "/a/..",
	"/a\x00b", "/a\x01b", "/a\u007fb", "/a\u0085b", "/a\ufff0b", "/\xff", "/a/.b", "/a/..b", "/a/b.", "/zookeeper/../x",
	"/\U0001F600", "/a\U00010000b", "/\U0010FFFF"}

func caseBadPaths(d *driver) {
	rc := d.raw("raw")
	for _, bp := range badPaths {
		var outs []string
		for _, op := range []struct {
			code proto.OpCode
			req  proto.Record
		}{
			{proto.OpCreate, &proto.CreateRequest{Path: bp, ACL: proto.WorldACL(proto.PermAll)}},
			{proto.OpCreate, &proto.CreateRequest{Path: bp, ACL: proto.WorldACL(proto.PermAll), Flags: proto.FlagSequential}},
			{proto.OpDelete, &proto.PathVersionRequest{Path: bp, Version: -1}},
			{proto.OpSetData, &proto.SetDataRequest{Path: bp, Version: -1}},
			{proto.OpExists, &proto.PathWatchRequest{Path: bp}},
			{proto.OpGetData, &proto.PathWatchRequest{Path: bp}},
			{proto.OpGetChildren2, &proto.PathWatchRequest{Path: bp}},
			{proto.OpGetACL, &proto.PathRequest{Path: bp}},
			{proto.OpSetACL, &proto.SetACLRequest{Path: bp, ACL: proto.WorldACL(proto.PermAll), Version: -1}},
			{proto.OpSync, &proto.PathRequest{Path: bp}},
			{proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: bp}},
		} {
			_, out := rc.do(op.code, op.req, nil)
			if strings.HasPrefix(out, "zk: ok") {
				out = "ok"
			}
			outs = append(outs, fmt.Sprintf("%v=%s", op.code, strings.TrimPrefix(out, "zk: ")))
		}
		d.rec("path %q: %s", bp, strings.Join(outs, ", "))
		if strings.HasPrefix(outs[0], "create=ok") || strings.HasPrefix(outs[1], "create=ok") {
			d.rec("  (created something at %q)", bp)
		}
	}
	// Relative forms under the prefix are checked too: created on ZooKeeper
	// they would be real nodes, so create them only where both refuse.
	for _, rel := range []string{"/./x", "/../x", "/x/", "//x"} {
		d.rec("create %q: %s", rel, rc.create(d.p(rel), nil, 0))
	}
	d.rec("create sequential with trailing slash: %s", rc.create(d.p("/"), nil, proto.FlagSequential))
	d.rec("%s", rc.alive())
}

func caseSpecialPaths(d *driver) {
	rc := d.raw("raw")
	for _, p := range []string{"/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"} {
		var outs []string
		st := &proto.StatResponse{}
		_, out := rc.do(proto.OpExists, &proto.PathWatchRequest{Path: p}, st)
		outs = append(outs, "exists="+out)
		_, out = rc.do(proto.OpCreate, &proto.CreateRequest{Path: p, ACL: proto.WorldACL(proto.PermAll)}, nil)
		outs = append(outs, "create="+out)
		_, out = rc.do(proto.OpDelete, &proto.PathVersionRequest{Path: p, Version: 12345}, nil)
		outs = append(outs, "delete bad version="+out)
		if p != "/" && p != "/zookeeper/config" {
			outs = append(outs, "stat="+d.stat(st.Stat))
		}
		if p != "/" {
			kids := &proto.ChildrenResponse{}
			_, out = rc.do(proto.OpGetChildren, &proto.PathWatchRequest{Path: p}, kids)
			outs = append(outs, fmt.Sprintf("children=%s %v", out, sorted(kids.Children)))
			acl := &proto.GetACLResponse{}
			_, out = rc.do(proto.OpGetACL, &proto.PathRequest{Path: p}, acl)
			outs = append(outs, fmt.Sprintf("acl=%s %v", out, acl.ACL))
		}
		d.rec("%s: %s", p, strings.Join(outs, "; "))
	}
	d.rec("%s", rc.alive())
}

func (d *driver) getEphemerals(rc *rawConn, prefix string) {
	resp := &proto.ChildrenResponse{}
	_, out := rc.do(proto.OpGetEphemerals, &proto.PathRequest{Path: prefix}, resp)
	var mine []string
	other := 0
	for _, p := range resp.Children {
		if strings.Contains(p, d.prefix) {
			mine = append(mine, p)
		} else {
			other++
		}
	}
	d.rec("getEphemerals %q: %s %v (+%d elsewhere)", prefix, out, sorted(mine), other)
}

func caseGetEphemerals(d *driver) {
	rc := d.raw("raw")
	g := d.p("/g")
	d.rec("create: %s", rc.create(g, nil, 0))
	d.rec("create: %s", rc.create(g+"/sub", nil, 0))
	d.rec("create: %s", rc.create(g+"2", nil, 0))
	for _, p := range []string{"/e1", "/sub/e3", "/e2", "2/e4"} {
		d.rec("create ephemeral: %s", rc.create(g+p, nil, proto.FlagEphemeral))
	}
	for _, p := range []string{g, g + "/", g + "/sub", g + "/e1", d.p("/none"), "/", ""} {
		d.getEphemerals(rc, p)
	}
	d.rec("delete: %s", errStr(d.zk.Delete(g+"/e1", -1)))
	d.getEphemerals(rc, g)
	d.getEphemerals(d.raw("raw2"), "/")
}

func caseAllChildrenNumber(d *driver) {
	z := d.zk
	n := d.p("/n")
	for _, p := range []string{"", "/a", "/a/b", "/a/b/c", "/d"} {
		_, err := z.Create(n+p, nil, 0, world)
		d.rec("create %s: %s", p, errStr(err))
	}
	_, err := z.Create(n+"/secret", nil, 0, zk.WorldACL(zk.PermCreate))
	d.rec("create secret: %s", errStr(err))
	rc := d.raw("raw")
	for _, p := range []string{"", "/a", "/a/b/c", "/d", "/secret", "/nope"} {
		resp := &proto.CountResponse{}
		_, out := rc.do(proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: n + p}, resp)
		d.rec("getAllChildrenNumber %s: %s %d", p, out, resp.Count)
	}
}

func caseUnknownOp(d *driver) {
	for _, op := range []proto.OpCode{999, 10, -3} {
		rc := d.raw("raw")
		h, out := rc.do(op, &proto.PathRequest{Path: d.prefix}, nil)
		zxid := "0"
		if h.Zxid > 0 {
			zxid = "positive"
		} else if h.Zxid < 0 {
			zxid = strconv.FormatInt(h.Zxid, 10)
		}
		d.rec("op %d: %s xid=%d zxid=%s, %s", op, out, h.Xid, zxid, rc.closing())
	}
	// Reconfig, well formed (a malformed one wedges ZooKeeper 3.8's leader).
	_, err := d.zk.IncrementalReconfig(nil, []string{"3"}, -1)
	d.rec("reconfig: %s", errStr(err))
	_, _, err = d.zk.Get(d.prefix)
	d.rec("get after reconfig: %s", errStr(err))
}

func caseCreateModes(d *driver) {
	z := d.zk
	p, err := z.CreateTTL(d.p("/ttl"), nil, zk.FlagTTL, world, time.Second)
	d.rec("go-zookeeper createTTL: %q %s", p, errStr(err))
	p, err = z.CreateContainer(d.p("/container"), nil, zk.FlagContainer, world)
	d.rec("go-zookeeper createContainer: %q %s", p, errStr(err))
	_, st, _ := z.Exists(d.p("/container"))
	d.rec("container stat: %s", d.zstat(st))
	_, err = z.Create(d.p("/container/child"), nil, 0, world)
	d.rec("child of container: %s", errStr(err))

	rc := d.raw("raw")
	ops := []proto.OpCode{proto.OpCreate, proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL}
	for _, op := range ops {
		for _, flags := range []int32{-1, 0, 1, 2, 3, 4, 5, 6, 7} {
			path := d.p(fmt.Sprintf("/m%d_%d", op, flags))
			cr := proto.CreateRequest{Path: path, ACL: proto.WorldACL(proto.PermAll), Flags: flags}
			var req proto.Record = &cr
			if op == proto.OpCreateTTL {
				req = &proto.CreateTTLRequest{CreateRequest: cr, TTL: 60000}
			}
			var resp proto.Record = &proto.Create2Response{}
			if op == proto.OpCreate {
				resp = &proto.PathRequest{}
			}
			_, out := rc.do(op, req, resp)
			st := &proto.StatResponse{}
			_, exists := rc.do(proto.OpExists, &proto.PathWatchRequest{Path: path}, st)
			if strings.HasPrefix(exists, "zk: ok") {
				exists = d.stat(st.Stat)
			}
			d.rec("%v flags %d: %s -> %s", op, flags, out, exists)
		}
	}
	_, out := rc.do(proto.OpCreateTTL, &proto.CreateTTLRequest{CreateRequest: proto.CreateRequest{
		Path: d.p("/ttl0"), ACL: proto.WorldACL(proto.PermAll), Flags: 5}, TTL: 0}, &proto.Create2Response{})
	d.rec("createTTL ttl 0: %s", out)
	d.multi(rc, "multi createTTL", proto.OpMulti, proto.MultiOp{Op: proto.OpCreateTTL, Req: &proto.CreateTTLRequest{
		CreateRequest: proto.CreateRequest{Path: d.p("/mttl"), ACL: proto.WorldACL(proto.PermAll), Flags: 5}, TTL: 1000}})
	d.multi(rc, "multi createContainer", proto.OpMulti, mCreate(proto.OpCreateContainer, d.p("/mc"), proto.FlagContainer))
	d.rec("%s", rc.alive())
}

func caseConnect(d *driver) {
	for _, readOnly := range []bool{false, true} {
		req := proto.ConnectRequest{Timeout: 4000, Passwd: make([]byte, proto.PasswordLen), HasReadOnly: readOnly}
		rc, err := d.dialRaw(req)
		if err != nil {
			d.rec("connect readOnly=%v: %s", readOnly, connErr(err))
			continue
		}
		d.nameSession(rc.resp.SessionID, fmt.Sprintf("raw-ro-%v", readOnly))
		d.rec("connect %d bytes: reply %d bytes, version %d, timeout %d, session %s, passwd %d bytes, readOnly %v/%v",
			len(proto.Marshal(&req)), rc.replyLen, rc.resp.ProtocolVersion, rc.resp.Timeout,
			d.session(rc.resp.SessionID), len(rc.resp.Passwd), rc.resp.HasReadOnly, rc.resp.ReadOnly)
		// Reattach to the same session with the right and a wrong password.
		good := proto.ConnectRequest{Timeout: 4000, SessionID: rc.resp.SessionID, Passwd: rc.resp.Passwd, HasReadOnly: readOnly}
		rc2, err := d.dialRaw(good)
		if err == nil {
			d.rec("  reattach: reply %d bytes, session %s, same passwd %v, %s", rc2.replyLen, d.session(rc2.resp.SessionID),
				string(rc2.resp.Passwd) == string(rc.resp.Passwd), rc2.alive())
		} else {
			d.rec("  reattach: %s", connErr(err))
		}
		bad := good
		bad.Passwd = make([]byte, proto.PasswordLen)
		rc3, err := d.dialRaw(bad)
		if err == nil {
			d.rec("  wrong password: reply %d bytes, timeout %d, session %s, passwd %d bytes, %s", rc3.replyLen,
				rc3.resp.Timeout, d.session(rc3.resp.SessionID), len(rc3.resp.Passwd), rc3.alive())
		} else {
			d.rec("  wrong password: %s", connErr(err))
		}
	}
	// Timeouts inside both servers' bounds are granted as asked.
	for _, ms := range []int32{4000, 6000, 10000} {
		rc, err := d.dialRaw(proto.ConnectRequest{Timeout: ms, Passwd: make([]byte, proto.PasswordLen)})
		if err != nil {
			d.rec("timeout %d: %s", ms, connErr(err))
			continue
		}
		d.rec("timeout %d: granted %d", ms, rc.resp.Timeout)
	}
}

func caseFourLetterWords(d *driver) {
	// A watch and a connection, so that wchs and cons have something to show.
	d.zk.ExistsW(d.p("/watched"))
	flw := func(cmd string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := testenv.FourLetterWord(ctx, d.addr, cmd)
		if err != nil {
			d.rec("%s: %v", cmd, err)
		}
		return out
	}
	lines := func(out string) []string { return strings.Split(strings.TrimRight(out, "\n"), "\n") }
	has := func(out string, re string) bool {
		for _, l := range lines(out) {
			if regexp.MustCompile(re).MatchString(l) {
				return true
			}
		}
		return false
	}
	d.rec("ruok: %q", flw("ruok"))
	d.rec("isro: %q", flw("isro"))
	srvr := flw("srvr")
	d.rec("srvr: version line %v, zxid line %v, mode line %v, node count line %v, latency line %v", has(srvr, `^Zookeeper version: 3\.8\.`),
		has(srvr, `^Zxid: 0x[0-9a-f]+$`), has(srvr, `^Mode: (leader|follower)$`), has(srvr, `^Node count: \d+$`),
		has(srvr, `^Latency min/avg/max: [\d.]+/[\d.]+/[\d.]+$`))
	stat := flw("stat")
	d.rec("stat: clients line %v, client entry %v, zxid line %v, mode line %v", has(stat, `^Clients:$`),
		has(stat, `^ /127\.0\.0\.1:\d+\[\d\]\(.*\)$`), has(stat, `^Zxid: 0x[0-9a-f]+$`), has(stat, `^Mode: (leader|follower)$`))
	mntr := flw("mntr")
	kv := true
	for _, l := range lines(mntr) {
		if !regexp.MustCompile(`^\S+\t.+$`).MatchString(l) {
			kv = false
		}
	}
	d.rec("mntr: key-tab-value lines %v, zk_version %v, zk_server_state %v, zk_znode_count %v, zk_watch_count %v, zk_ephemerals_count %v",
		kv, has(mntr, `^zk_version\t3\.8\.`), has(mntr, `^zk_server_state\t(leader|follower)$`),
		has(mntr, `^zk_znode_count\t\d+$`), has(mntr, `^zk_watch_count\t\d+$`), has(mntr, `^zk_ephemerals_count\t\d+$`))
	conf := flw("conf")
	d.rec("conf: non-empty %v, clientPort %v, dataDir %v, tickTime %v, maxSessionTimeout %v", conf != "",
		has(conf, `^clientPort=\d+$`), has(conf, `^dataDir=\S+$`), has(conf, `^tickTime=\d+$`), has(conf, `^maxSessionTimeout=\d+$`))
	cons := flw("cons")
	d.rec("cons: non-empty %v, client entry %v", cons != "", has(cons, `^ /127\.0\.0\.1:\d+\[\d\]\(.*\)$`))
	wchs := flw("wchs")
	d.rec("wchs: non-empty %v, summary %v, total %v", wchs != "", has(wchs, `^\d+ connections watching \d+ paths$`),
		has(wchs, `^Total watches:\d+$`))
	dirs := flw("dirs")
	d.rec("dirs: non-empty %v, datadir_size %v, logdir_size %v", dirs != "", has(dirs, `^datadir_size: \d+$`), has(dirs, `^logdir_size: \d+$`))
	envi := flw("envi")
	d.rec("envi: first line %q", lines(envi)[0])
}
