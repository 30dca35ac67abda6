package client

import (
	"sync"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// watchKind is where a watch is kept, as ZooKeeper's client keeps them:
// data watches (getData, exists on a present node), exist watches (exists
// on a missing node) and child watches.
type watchKind uint8

const (
	watchData watchKind = iota
	watchExist
	watchChild
)

type watchKey struct {
	path string
	kind watchKind
}

// watchReq is the watch a request leaves when its reply allows it.
type watchReq struct {
	path   string
	kind   watchKind // watchData or watchChild
	exists bool      // an exists call: a missing node leaves an exist watch
	ch     chan Event
}

func newWatchReq(path string, kind watchKind, exists bool) *watchReq {
	return &watchReq{path: path, kind: kind, exists: exists, ch: make(chan Event, 1)}
}

// watchSet holds the one-shot watches of a session. Each channel has room
// for its one event, is sent it once and then closed, so firing never
// blocks.
type watchSet struct {
	mu     sync.Mutex
	m      map[watchKey][]chan Event
	closed *Event // the final event, once the session ended
}

func newWatchSet() watchSet { return watchSet{m: map[watchKey][]chan Event{}} }

func (s *watchSet) add(path string, kind watchKind, ch chan Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		fire(ch, *s.closed)
		return
	}
	k := watchKey{path, kind}
	s.m[k] = append(s.m[k], ch)
}

func fire(ch chan Event, ev Event) {
	ch <- ev
	close(ch)
}

// trigger fires the watches a notification reaches, as ZooKeeper's client
// does: created and changed reach data and exist watches, deleted reaches
// all three, children-changed the child watches.
func (s *watchSet) trigger(ev Event) {
	var kinds []watchKind
	switch ev.Type {
	case proto.EventNodeCreated, proto.EventNodeDataChanged:
		kinds = []watchKind{watchData, watchExist}
	case proto.EventNodeDeleted:
		kinds = []watchKind{watchData, watchExist, watchChild}
	case proto.EventNodeChildrenChanged:
		kinds = []watchKind{watchChild}
	}
	var hit []chan Event
	s.mu.Lock()
	for _, kind := range kinds {
		k := watchKey{ev.Path, kind}
		hit = append(hit, s.m[k]...)
		delete(s.m, k)
	}
	s.mu.Unlock()
	for _, ch := range hit {
		fire(ch, ev)
	}
}

// closeAll fires every watch with the session's final event; watches
// added later fire at once.
func (s *watchSet) closeAll(ev Event) {
	s.mu.Lock()
	m := s.m
	s.m, s.closed = map[watchKey][]chan Event{}, &ev
	s.mu.Unlock()
	for _, chs := range m {
		for _, ch := range chs {
			fire(ch, ev)
		}
	}
}

func (s *watchSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// setWatches lists the watched paths for re-registration after a
// reattach, in requests of at most limit bytes of paths each.
func (s *watchSet) setWatches(relZxid int64, limit int) []*proto.SetWatchesRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*proto.SetWatchesRequest
	var cur *proto.SetWatchesRequest
	size := 0
	for k := range s.m {
		if cur == nil || size+len(k.path)+4 > limit {
			cur = &proto.SetWatchesRequest{RelativeZxid: relZxid}
			out = append(out, cur)
			size = 0
		}
		size += len(k.path) + 4
		switch k.kind {
		case watchData:
			cur.DataWatches = append(cur.DataWatches, k.path)
		case watchExist:
			cur.ExistWatches = append(cur.ExistWatches, k.path)
		case watchChild:
			cur.ChildWatches = append(cur.ChildWatches, k.path)
		}
	}
	return out
}
