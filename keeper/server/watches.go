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
	byConn map[*conn]int // how many watches each connection holds
}

func newWatches() *watches {
	return &watches{data: map[string]map[*conn]struct{}{}, child: map[string]map[*conn]struct{}{},
		byConn: map[*conn]int{}}
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
	if _, ok := set[c]; !ok {
		set[c] = struct{}{}
		w.byConn[c]++
	}
}

func (w *watches) take(kind fsm.WatchKind, path string, into map[*conn]struct{}) {
	t := w.table(kind)
	for c := range t[path] {
		into[c] = struct{}{}
		if w.byConn[c]--; w.byConn[c] <= 0 {
			delete(w.byConn, c)
		}
	}
	delete(t, path)
}

// holds reports whether connection c holds any watch.
func (w *watches) holds(c *conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byConn[c] > 0
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
