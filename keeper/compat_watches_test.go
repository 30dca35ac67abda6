package keeper_test

// Differential cases of ZooKeeper 3.6+'s watch ops: addWatch (persistent
// and recursive), removeWatches, checkWatches and setWatches2. ZooKeeper
// 3.8 keeps a data and a child table of watches, one mode per connection
// and path in each: a persistent or recursive watch is in both, a later
// one-shot watch on the same path replaces it in its table, and removing
// the children (or data) watcher removes whatever the session has in that
// table. These cases pin that down. Not sent: the watcher types
// Persistent and PersistentRecursive (ZooKeeper 3.9's; 3.8 answers them
// with a marshalling error, xkeeper as 3.9 does: TestRecursiveWatchOnOneShard).

import (
	"github.com/go-zookeeper/zk"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// addWatch sends addWatch over rc and records the outcome.
func (d *driver) addWatch(rc *rawConn, path string, mode int32) {
	d.step(rc, "addWatch "+path, proto.OpAddWatch, &proto.AddWatchRequest{Path: path, Mode: mode}, nil)
}

// watches sends removeWatches or checkWatches over rc and records the
// outcome.
func (d *driver) watches(rc *rawConn, op proto.OpCode, path string, typ int32) {
	d.step(rc, op.String()+" "+path, op, &proto.WatchesRequest{Path: path, Type: typ}, nil)
}

// flush syncs over rc: the events of every change made before reach rc
// first, and are recorded.
func (d *driver) flush(rc *rawConn) {
	d.step(rc, "sync", proto.OpSync, &proto.PathRequest{Path: d.prefix}, &proto.PathRequest{})
}

// writes makes changes from the driver's own session: "+path" creates,
// "-path" deletes, "=path" sets data.
func (d *driver) writes(changes ...string) {
	for _, c := range changes {
		path := d.p(c[1:])
		var err error
		switch c[0] {
		case '+':
			_, err = d.zk.Create(path, nil, 0, world)
		case '-':
			err = d.zk.Delete(path, -1)
		case '=':
			_, err = d.zk.Set(path, []byte("x"), -1)
		}
		d.rec("%s: %s", c, errStr(err))
	}
}

func caseWatchPersistent(d *driver) {
	rc := d.raw("raw")
	a := d.p("/a")
	d.addWatch(rc, a, proto.AddWatchPersistent)
	d.addWatch(rc, a, 2)
	d.addWatch(rc, a, -1)
	d.writes("+/a", "+/a/b", "=/a", "=/a/b", "-/a/b", "-/a", "+/a")
	d.flush(rc)
	for _, typ := range []int32{0, proto.WatcherChildren, proto.WatcherData, proto.WatcherAny, 6} {
		d.watches(rc, proto.OpCheckWatches, a, typ)
	}
	d.watches(rc, proto.OpCheckWatches, d.p("/nope"), proto.WatcherAny)
	d.watches(rc, proto.OpCheckWatches, d.p("/a/b"), proto.WatcherAny)
	d.watches(rc, proto.OpRemoveWatches, a, proto.WatcherChildren)
	d.watches(rc, proto.OpCheckWatches, a, proto.WatcherChildren)
	d.writes("+/a/c", "=/a")
	d.flush(rc)
	d.watches(rc, proto.OpRemoveWatches, a, proto.WatcherChildren)
	d.watches(rc, proto.OpRemoveWatches, a, proto.WatcherData)
	d.watches(rc, proto.OpCheckWatches, a, proto.WatcherAny)
	d.writes("=/a", "-/a/c")
	d.flush(rc)

	// A one-shot watch after a persistent one replaces its data part; a
	// persistent one after a one-shot one takes its place.
	d.writes("+/m", "+/s")
	d.addWatch(rc, d.p("/m"), proto.AddWatchPersistent)
	d.step(rc, "getData watch /m", proto.OpGetData, &proto.PathWatchRequest{Path: d.p("/m"), Watch: true}, &proto.GetDataResponse{})
	d.step(rc, "getData watch /s", proto.OpGetData, &proto.PathWatchRequest{Path: d.p("/s"), Watch: true}, &proto.GetDataResponse{})
	d.addWatch(rc, d.p("/s"), proto.AddWatchPersistent)
	d.writes("=/m", "=/s")
	d.flush(rc)
	d.writes("=/m", "=/s", "+/m/k")
	d.flush(rc)
	d.rec("after: %s", rc.alive())
}

func caseWatchRecursive(d *driver) {
	rc := d.raw("raw")
	r := d.p("/r")
	d.addWatch(rc, r, proto.AddWatchPersistentRecursive)
	for _, typ := range []int32{proto.WatcherChildren, proto.WatcherData, proto.WatcherAny} {
		d.watches(rc, proto.OpCheckWatches, r, typ)
	}
	d.watches(rc, proto.OpCheckWatches, d.p("/r/x"), proto.WatcherAny)
	d.writes("+/r", "+/r/x", "+/r/x/y", "=/r/x/y", "=/r", "-/r/x/y")
	d.flush(rc)
	d.watches(rc, proto.OpRemoveWatches, r, proto.WatcherChildren)
	d.watches(rc, proto.OpCheckWatches, r, proto.WatcherAny)
	d.writes("+/r/x/z")
	d.flush(rc)
	d.watches(rc, proto.OpRemoveWatches, r, proto.WatcherAny)
	d.watches(rc, proto.OpRemoveWatches, r, proto.WatcherAny)
	d.writes("+/r/x/q")
	d.flush(rc)

	// One-shot watches below a recursive one: one event per change.
	d.writes("+/q", "+/q/k")
	d.addWatch(rc, d.p("/q"), proto.AddWatchPersistentRecursive)
	d.step(rc, "getData watch /q/k", proto.OpGetData, &proto.PathWatchRequest{Path: d.p("/q/k"), Watch: true}, &proto.GetDataResponse{})
	d.step(rc, "getChildren watch /q", proto.OpGetChildren, &proto.PathWatchRequest{Path: d.p("/q"), Watch: true}, &proto.ChildrenResponse{})
	d.writes("=/q/k", "-/q/k")
	d.flush(rc)

	// A persistent watch after a recursive one on the same path replaces it.
	d.writes("+/d")
	d.addWatch(rc, d.p("/d"), proto.AddWatchPersistentRecursive)
	d.addWatch(rc, d.p("/d"), proto.AddWatchPersistent)
	d.writes("+/d/k", "=/d/k", "=/d")
	d.flush(rc)
	for _, typ := range []int32{proto.WatcherChildren, proto.WatcherData, proto.WatcherAny} {
		d.watches(rc, proto.OpRemoveWatches, d.p("/d"), typ)
	}
	d.rec("after: %s", rc.alive())
}

func caseRemoveWatches(d *driver) {
	rc := d.raw("raw")
	e := d.p("/e")
	d.watches(rc, proto.OpRemoveWatches, e, proto.WatcherAny)
	d.step(rc, "exists watch", proto.OpExists, &proto.PathWatchRequest{Path: e, Watch: true}, &proto.StatResponse{})
	d.watches(rc, proto.OpCheckWatches, e, proto.WatcherChildren)
	d.watches(rc, proto.OpCheckWatches, e, proto.WatcherData)
	d.watches(rc, proto.OpRemoveWatches, e, proto.WatcherChildren)
	d.watches(rc, proto.OpRemoveWatches, e, proto.WatcherData)
	d.watches(rc, proto.OpRemoveWatches, e, proto.WatcherData)
	d.writes("+/e")
	d.flush(rc)
	d.step(rc, "getChildren watch", proto.OpGetChildren, &proto.PathWatchRequest{Path: e, Watch: true}, &proto.ChildrenResponse{})
	d.step(rc, "getData watch", proto.OpGetData, &proto.PathWatchRequest{Path: e, Watch: true}, &proto.GetDataResponse{})
	d.watches(rc, proto.OpRemoveWatches, e, proto.WatcherAny)
	d.watches(rc, proto.OpRemoveWatches, e, proto.WatcherAny)
	d.writes("=/e", "+/e/k")
	d.flush(rc)
	d.watches(rc, proto.OpRemoveWatches, e, 7)
	d.rec("after: %s", rc.alive())
}

// caseSetWatches2 reattaches a session on a new connection and re-sends
// its persistent and recursive watches: they are registered again, with
// no event for what changed meanwhile.
func caseSetWatches2(d *driver) {
	rc := d.raw("raw")
	d.addWatch(rc, d.p("/sw"), proto.AddWatchPersistent)
	d.addWatch(rc, d.p("/swr"), proto.AddWatchPersistentRecursive)
	h, _ := rc.do(proto.OpExists, &proto.PathWatchRequest{Path: d.prefix}, &proto.StatResponse{})
	rc.nc.Close()
	d.writes("+/swr")
	rc2, err := d.dialRaw(proto.ConnectRequest{LastZxidSeen: h.Zxid, Timeout: 4000,
		SessionID: rc.resp.SessionID, Passwd: rc.resp.Passwd})
	if err != nil {
		d.fatalf("reattach: %v", err)
	}
	d.rec("reattach: session %s", d.session(rc2.resp.SessionID))
	sw := &proto.SetWatchesRequest{V2: true, RelativeZxid: h.Zxid,
		PersistentWatches: []string{d.p("/sw")}, PersistentRecursiveWatches: []string{d.p("/swr")}}
	h, body, err := rc2.call(proto.XidSetWatches, proto.OpSetWatches2, sw)
	d.rec("setWatches2: xid=%d err=%d body=%d %v", h.Xid, h.Err, len(body), err)
	d.writes("+/sw", "+/swr/k", "=/swr")
	d.flush(rc2)
	d.watches(rc2, proto.OpCheckWatches, d.p("/sw"), proto.WatcherChildren)
	d.watches(rc2, proto.OpCheckWatches, d.p("/swr"), proto.WatcherChildren)
	d.watches(rc2, proto.OpCheckWatches, d.p("/swr"), proto.WatcherData)
}

// caseWatchACL: a watcher hears of a change only with READ on the node
// (on the parent, for children changed), and a one-shot watch is used up
// by an event it does not hear: ZooKeeper 3.8 filters each event by the
// ACL (TestWatchEventsNeedRead).
func caseWatchACL(d *driver) {
	rc := d.raw("anon")
	alice := d.connect("alice")
	d.rec("auth alice: %s", errStr(alice.AddAuth("digest", []byte("alice:secret"))))
	n := d.p("/n")
	exists := func() {
		d.step(rc, "exists watch", proto.OpExists, &proto.PathWatchRequest{Path: n, Watch: true}, &proto.StatResponse{})
	}
	exists()
	d.step(rc, "getChildren watch", proto.OpGetChildren, &proto.PathWatchRequest{Path: d.prefix, Watch: true}, &proto.ChildrenResponse{})
	_, err := alice.Create(n, nil, 0, zk.DigestACL(zk.PermAll, "alice", "secret"))
	d.rec("create alice's: %s", errStr(err))
	d.flush(rc)
	exists()
	_, err = alice.Set(n, []byte("x"), -1)
	d.rec("set: %s", errStr(err))
	d.flush(rc)
	_, err = alice.SetACL(n, world, -1)
	d.rec("setACL world: %s", errStr(err))
	_, err = alice.Set(n, []byte("y"), -1)
	d.rec("set: %s", errStr(err))
	d.flush(rc)
	exists()
	d.rec("delete: %s", errStr(alice.Delete(n, -1)))
	d.flush(rc)
}
