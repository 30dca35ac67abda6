package server

import (
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// mode is how a watch behaves as it fires (ZooKeeper's WatcherMode).
type mode uint8

const (
	oneShot    mode = iota // removed as it fires
	persistent             // stays; fires for its own node's events
	recursive              // stays; fires for its node and every descendant, never children-changed
)

// table maps a watched path to the connections watching it and how.
type table map[string]map[*conn]mode

// watches holds the watches of this member's connections in two tables,
// as ZooKeeper 3.8 does: data (exists, getData) and child (getChildren).
// A persistent or recursive watch (addWatch) is in both. A connection has
// one mode per path in each table: a later watch replaces the earlier one
// there, as in ZooKeeper 3.8 (3.9 keeps both).
type watches struct {
	mu         sync.Mutex
	data       table
	child      table
	recursives int // recursive entries in both tables: when none, no ancestor is looked up
	// byConn holds the paths each connection watches, in either table: a
	// connection that closes drops its own watches without a walk of
	// every watch of the member (under the lock that applies wait for).
	byConn map[*conn]map[string]struct{}
	// total counts the entries of both tables (a watch, as wchs and mntr
	// count them: a persistent one is two), and conn.watchCount each
	// connection's. A watch that would take a connection past perConn or
	// the member past perMember is refused (0: no bound).
	total              int
	perConn, perMember int
}

// watchBound is the bound a refused watch would pass: its config key and
// value.
type watchBound struct {
	key string
	max int
}

func newWatches(perConn, perMember int) *watches {
	return &watches{data: table{}, child: table{}, byConn: map[*conn]map[string]struct{}{},
		perConn: perConn, perMember: perMember}
}

// room reports whether c may take n more entries, and if not, the bound
// they would pass. A connection is a session's on this member (a session
// has one at a time, and its watches go with it), so perConn is the
// session's bound. The caller holds mu.
func (w *watches) room(c *conn, n int) (watchBound, bool) {
	switch {
	case n == 0:
	case w.perConn > 0 && c.watchCount+n > w.perConn:
		return watchBound{"keeper.max_watches_per_session", w.perConn}, false
	case w.perMember > 0 && w.total+n > w.perMember:
		return watchBound{"keeper.max_watches_per_member", w.perMember}, false
	}
	return watchBound{}, true
}

// fresh is 1 if c holds no watch on path in t, else 0: what setting one
// there adds to the counts.
func fresh(t table, path string, c *conn) int {
	if _, had := t[path][c]; had {
		return 0
	}
	return 1
}

func (w *watches) table(kind fsm.WatchKind) table {
	if kind == fsm.WatchChild {
		return w.child
	}
	return w.data
}

// add registers the one-shot watch a read leaves, unless it would pass a
// bound (ok false: nothing is registered).
func (w *watches) add(kind fsm.WatchKind, path string, c *conn) (b watchBound, ok bool) {
	return w.addReads(c, []fsm.ReadWatch{{Path: path, Kind: kind}})
}

// addReads registers the one-shot watches a read leaves (a multiRead's
// reads each their own), all or none: none if they would pass a bound
// (ok false). At a bound, only watches held already are set again.
func (w *watches) addReads(c *conn, set []fsm.ReadWatch) (b watchBound, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b, ok = w.room(c, len(set)); !ok {
		n, seen := 0, make(map[fsm.ReadWatch]bool, len(set))
		for _, rw := range set {
			if !seen[rw] { // a path read twice counts once
				seen[rw] = true
				n += fresh(w.table(rw.Kind), rw.Path, c)
			}
		}
		if b, ok = w.room(c, n); !ok {
			return b, false
		}
	}
	for _, rw := range set {
		w.set(w.table(rw.Kind), rw.Path, c, oneShot)
	}
	return watchBound{}, true
}

// addPersistent registers the watch of an addWatch of the given
// proto.AddWatch mode, in both tables; an unknown mode is a marshalling
// error, as in ZooKeeper, and a watch past a bound ErrQuotaExceeded (b
// names the bound).
func (w *watches) addPersistent(path string, c *conn, addMode int32) (code proto.Code, b watchBound) {
	m, ok := persistentMode(addMode)
	if !ok {
		return proto.ErrMarshallingError, b
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok = w.room(c, 2); !ok {
		if b, ok = w.room(c, fresh(w.data, path, c)+fresh(w.child, path, c)); !ok {
			return proto.ErrQuotaExceeded, b
		}
	}
	w.set(w.data, path, c, m)
	w.set(w.child, path, c, m)
	return proto.ErrOK, b
}

// persistentMode is the mode of an addWatch's proto.AddWatch mode.
func persistentMode(addMode int32) (mode, bool) {
	switch addMode {
	case proto.AddWatchPersistent:
		return persistent, true
	case proto.AddWatchPersistentRecursive:
		return recursive, true
	}
	return 0, false
}

// restore registers the watches a setWatches or setWatches2 re-sends: the
// one-shot ones of resolved that did not fire, then the persistent and
// recursive ones of r. It takes all or none: if they would pass a bound
// (counted as listed: a path listed twice counts twice), none is
// registered and ok is false.
func (w *watches) restore(c *conn, resolved []fsm.SetWatchesResult, r *proto.SetWatchesRequest) (b watchBound, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok = w.room(c, len(resolved)+2*(len(r.PersistentWatches)+len(r.PersistentRecursiveWatches))); !ok {
		// Near a bound: count only what c does not hold already.
		n := 0
		for _, res := range resolved {
			if res.Fire == proto.EventNone {
				n += fresh(w.table(res.Kind), res.Path, c)
			}
		}
		for _, p := range slices.Concat(r.PersistentWatches, r.PersistentRecursiveWatches) {
			n += fresh(w.data, p, c) + fresh(w.child, p, c)
		}
		if b, ok = w.room(c, n); !ok {
			return b, false
		}
	}
	for _, res := range resolved {
		if res.Fire == proto.EventNone {
			w.set(w.table(res.Kind), res.Path, c, oneShot)
		}
	}
	for _, p := range r.PersistentWatches {
		w.set(w.data, p, c, persistent)
		w.set(w.child, p, c, persistent)
	}
	for _, p := range r.PersistentRecursiveWatches {
		w.set(w.data, p, c, recursive)
		w.set(w.child, p, c, recursive)
	}
	return b, true
}

// set gives c a watch of mode m on path in t, replacing the one it had.
func (w *watches) set(t table, path string, c *conn, m mode) {
	set := t[path]
	if set == nil {
		set = map[*conn]mode{}
		t[path] = set
	}
	old, had := set[c]
	if !had {
		c.watchCount++
		w.total++
		paths := w.byConn[c]
		if paths == nil {
			paths = map[string]struct{}{}
			w.byConn[c] = paths
		}
		paths[path] = struct{}{}
	} else if old == recursive {
		w.recursives--
	}
	if m == recursive {
		w.recursives++
	}
	set[c] = m
}

// unset removes c's watch on path from t.
func (w *watches) unset(t table, path string, c *conn) {
	set := t[path]
	m, had := set[c]
	if !had {
		return
	}
	if m == recursive {
		w.recursives--
	}
	c.watchCount--
	w.total--
	delete(set, c)
	if len(set) == 0 {
		delete(t, path)
	}
	_, inData := w.data[path][c]
	_, inChild := w.child[path][c]
	if !inData && !inChild {
		delete(w.byConn[c], path)
		if len(w.byConn[c]) == 0 {
			delete(w.byConn, c)
		}
	}
}

// fire collects into hit the connections whose watches in t an event of
// type typ on path reaches, and removes the one-shot ones: any watch on
// path itself, and recursive ones on its ancestors. Recursive watches
// never hear of children changing.
func (w *watches) fire(t table, path string, typ proto.EventType, hit map[*conn]struct{}) {
	for p := path; ; p = parentOf(p) {
		for c, m := range t[p] {
			switch {
			case m == recursive:
				if typ != proto.EventNodeChildrenChanged {
					hit[c] = struct{}{}
				}
			case p == path:
				hit[c] = struct{}{}
				if m == oneShot {
					w.unset(t, p, c)
				}
			}
		}
		if p == "/" || w.recursives == 0 {
			return
		}
	}
}

// holds reports whether connection c holds any watch.
func (w *watches) holds(c *conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byConn[c]) > 0
}

// trigger fires the watches an event reaches; a connection that more than
// one of its watches make hear of the event hears of it once.
func (w *watches) trigger(ev fsm.Event) {
	hit := map[*conn]struct{}{}
	w.mu.Lock()
	switch ev.Type {
	case proto.EventNodeCreated, proto.EventNodeDataChanged:
		w.fire(w.data, ev.Path, ev.Type, hit)
	case proto.EventNodeDeleted:
		w.fire(w.data, ev.Path, ev.Type, hit)
		w.fire(w.child, ev.Path, ev.Type, hit)
	case proto.EventNodeChildrenChanged:
		w.fire(w.child, ev.Path, ev.Type, hit)
	}
	w.mu.Unlock()
	if len(hit) == 0 {
		return
	}
	var frame []byte
	for c := range hit {
		if !ev.ReadableBy(c.eventIdentities()) {
			continue // as ZooKeeper 3.8: no READ, no event
		}
		if frame == nil {
			frame = notification(ev.Type, ev.Path)
		}
		c.q.notify(frame)
	}
}

// notification is the frame of a watch event. ZooKeeper 3.8 sends it with
// zxid -1, not the zxid of the change.
func notification(t proto.EventType, path string) []byte {
	return proto.AppendFrame(nil, &proto.ReplyHeader{Xid: proto.XidNotification, Zxid: -1},
		&proto.WatcherEvent{Type: t, State: proto.StateSyncConnected, Path: path})
}

// matcher picks, for a removeWatches or checkWatches watcher type, the
// tables it looks in and the modes it takes there. The types ZooKeeper
// 3.8 knows (children, data, any) take every mode of their tables; the
// persistent ones, 3.9's, their own mode. Another type is not valid.
func (w *watches) matcher(typ int32) (tables []table, takes func(mode) bool, ok bool) {
	anyMode := func(mode) bool { return true }
	switch typ {
	case proto.WatcherChildren:
		return []table{w.child}, anyMode, true
	case proto.WatcherData:
		return []table{w.data}, anyMode, true
	case proto.WatcherAny:
		return []table{w.data, w.child}, anyMode, true
	case proto.WatcherPersistent:
		return []table{w.data, w.child}, func(m mode) bool { return m == persistent }, true
	case proto.WatcherPersistentRecursive:
		return []table{w.data, w.child}, func(m mode) bool { return m == recursive }, true
	}
	return nil, nil, false
}

// remove answers a removeWatches (or, with drop false, a checkWatches) of
// connection c: ok if c had a watch of that type on path (which is gone,
// if drop), ErrNoWatcher if not.
func (w *watches) remove(path string, c *conn, typ int32, drop bool) proto.Code {
	w.mu.Lock()
	defer w.mu.Unlock()
	tables, takes, ok := w.matcher(typ)
	if !ok {
		return proto.ErrMarshallingError
	}
	code := proto.ErrNoWatcher
	for _, t := range tables {
		if m, had := t[path][c]; had && takes(m) {
			code = proto.ErrOK
			if drop {
				w.unset(t, path, c)
			}
		}
	}
	return code
}

// dropChunk is how many of a closing connection's watched paths drop
// removes under the lock at a time: a connection of 100,000 watches took
// half a second, and every apply's watch events wait for the lock.
const dropChunk = 1024

// drop removes every watch of a connection, and returns how many entries
// it looked at: as many as the connection's, whatever the others hold.
// It lets go of the lock between chunks of paths; the connection has
// closed, so nothing adds to its watches meanwhile, and a watch of it
// that fires meanwhile is gone when drop reaches its path.
func (w *watches) drop(c *conn) (looked int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for path := range w.byConn[c] {
		for _, t := range []table{w.data, w.child} {
			looked++
			if _, ok := t[path][c]; ok {
				w.unset(t, path, c)
			}
		}
		if looked%(2*dropChunk) == 0 {
			w.mu.Unlock()
			runtime.Gosched()
			w.mu.Lock()
		}
	}
	delete(w.byConn, c)
	return looked
}

// held returns the number of watches without walking them: the metrics
// and mntr ask for it as often as they are scraped, and a walk of the
// member's millions of watches holds the lock that every apply's
// watch events wait for.
func (w *watches) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// counts returns the number of watching connections, watched paths and
// watches, for wchs, by walking every watch.
func (w *watches) counts() (conns, paths, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[*conn]struct{}{}
	for _, t := range []table{w.data, w.child} {
		for _, set := range t {
			paths++
			total += len(set)
			for c := range set {
				seen[c] = struct{}{}
			}
		}
	}
	return len(seen), paths, total
}

// watchRequest answers addWatch, removeWatches and checkWatches, after the
// session's earlier writes as ZooKeeper answers them in order. addWatch's
// reply carries an error code of 0, as ZooKeeper's does.
func (c *conn) watchRequest(h proto.RequestHeader, req proto.Record) bool {
	if !c.waitWrites() {
		return false
	}
	var code proto.Code
	var resp proto.Record
	switch r := req.(type) {
	case *proto.AddWatchRequest:
		var b watchBound
		code, b = c.s.watches.addPersistent(r.Path, c, r.Mode)
		if code == proto.ErrQuotaExceeded {
			c.refuseWatches(b)
		}
		resp = &proto.ErrorResponse{}
	case *proto.WatchesRequest:
		code = c.s.watches.remove(r.Path, c, r.Type, h.OpCode == proto.OpRemoveWatches)
	}
	c.reply(h.Xid, c.zxid(), code, resp, false)
	return true
}

// refuseWatches logs, once for the connection, that it was refused a
// watch past bound b. Only the reader calls it.
func (c *conn) refuseWatches(b watchBound) {
	if c.watchesRefused {
		return
	}
	c.watchesRefused = true
	c.s.log.Warn("refusing watches past a bound", "bound", b.key, "max", b.max,
		"session", hexID(c.session), "remote", c.remote)
}

// parentOf returns the parent of a znode path ("/" for a top-level node).
func parentOf(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

// watchedPath is the path whose watch a read that leaves one names.
func watchedPath(req proto.Record) string {
	if r, ok := req.(*proto.FilteredListRequest); ok {
		return r.Path
	}
	if r, ok := req.(*proto.ListWithStatsAndDataRequest); ok {
		return r.Path
	}
	return req.(*proto.PathWatchRequest).Path
}
