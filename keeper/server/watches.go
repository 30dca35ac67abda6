package server

import (
	"strings"
	"sync"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// watches holds the one-shot data and child watches of this member's
// connections.
type watches struct {
	mu     sync.Mutex
	data   map[string]map[*conn]struct{}
	child  map[string]map[*conn]struct{}
	byConn map[*conn]map[string]struct{} // paths of each connection's data watches
}

func newWatches() *watches {
	return &watches{data: map[string]map[*conn]struct{}{}, child: map[string]map[*conn]struct{}{},
		byConn: map[*conn]map[string]struct{}{}}
}

func (w *watches) table(kind fsm.WatchKind) map[string]map[*conn]struct{} {
	if kind == fsm.WatchChild {
		return w.child
	}
	return w.data
}

func (w *watches) add(kind fsm.WatchKind, path string, c *conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.table(kind)
	set := t[path]
	if set == nil {
		set = map[*conn]struct{}{}
		t[path] = set
	}
	set[c] = struct{}{}
	if kind != fsm.WatchChild {
		paths := w.byConn[c]
		if paths == nil {
			paths = map[string]struct{}{}
			w.byConn[c] = paths
		}
		paths[path] = struct{}{}
	}
}

func (w *watches) take(kind fsm.WatchKind, path string, into map[*conn]struct{}) {
	t := w.table(kind)
	for c := range t[path] {
		into[c] = struct{}{}
		if kind != fsm.WatchChild {
			w.forgetData(c, path)
		}
	}
	delete(t, path)
}

func (w *watches) forgetData(c *conn, path string) {
	if paths := w.byConn[c]; paths != nil {
		delete(paths, path)
		if len(paths) == 0 {
			delete(w.byConn, c)
		}
	}
}

// watching reports whether connection c has a data or child watch on any
// of paths, or a data watch on a child of any of dirs (the parents of
// sequential creates, whose names are not known yet).
func (w *watches) watching(c *conn, paths, dirs []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range paths {
		if _, ok := w.data[p][c]; ok {
			return true
		}
		if _, ok := w.child[p][c]; ok {
			return true
		}
	}
	if len(dirs) == 0 {
		return false
	}
	for p := range w.byConn[c] {
		for _, d := range dirs {
			if parentOf(p) == d {
				return true
			}
		}
	}
	return false
}

// trigger fires and removes the watches an event reaches; a connection
// watching a deleted node through both tables hears of it once.
func (w *watches) trigger(ev fsm.Event) {
	hit := map[*conn]struct{}{}
	w.mu.Lock()
	switch ev.Type {
	case proto.EventNodeCreated, proto.EventNodeDataChanged:
		w.take(fsm.WatchData, ev.Path, hit)
	case proto.EventNodeDeleted:
		w.take(fsm.WatchData, ev.Path, hit)
		w.take(fsm.WatchChild, ev.Path, hit)
	case proto.EventNodeChildrenChanged:
		w.take(fsm.WatchChild, ev.Path, hit)
	}
	w.mu.Unlock()
	if len(hit) == 0 {
		return
	}
	frame := notification(ev.Type, ev.Path)
	for c := range hit {
		c.notify(frame)
	}
}

// notification is the frame of a watch event. ZooKeeper 3.8 sends it with
// zxid -1, not the zxid of the change.
func notification(t proto.EventType, path string) []byte {
	return proto.AppendFrame(nil, &proto.ReplyHeader{Xid: proto.XidNotification, Zxid: -1},
		&proto.WatcherEvent{Type: t, State: proto.StateSyncConnected, Path: path})
}

// drop removes every watch of a connection.
func (w *watches) drop(c *conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byConn, c)
	for _, t := range []map[string]map[*conn]struct{}{w.data, w.child} {
		for path, set := range t {
			if _, ok := set[c]; ok {
				delete(set, c)
				if len(set) == 0 {
					delete(t, path)
				}
			}
		}
	}
}

// counts returns the number of watching connections, watched paths and
// watches, for wchs and mntr.
func (w *watches) counts() (conns, paths, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[*conn]struct{}{}
	for _, t := range []map[string]map[*conn]struct{}{w.data, w.child} {
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

// parentOf returns the parent of a znode path ("/" for a top-level node).
func parentOf(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}
