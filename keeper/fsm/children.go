package fsm

import (
	"strings"
	"sync"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Child lists of parents with many children are kept between reads:
// getChildren of a parent of a thousand children otherwise walks a
// thousand nodes and builds and encodes a thousand names each time, and a
// busy list (ClickHouse's replication log, its blocks) is read far more
// often than it changes.
const (
	cachedChildrenMin = 64       // shorter lists are built each time
	childCacheBytes   = 16 << 20 // what the kept lists may take together
)

// childCache keeps child lists for reads, which run in parallel with each
// other (never with an apply). A list is kept with its parent's stamp and
// served while the parent's node has the same: every create of a child
// moves cversion, every delete numChildren, and both pzxid, so a list
// needs no invalidation and a rolled-back multi leaves it valid.
type childCache struct {
	mu    sync.Mutex
	lists map[string]*childList
	bytes int
}

type childList struct {
	stamp  childStamp
	names  []string // sorted; slices of one string, so no node is kept alive
	vector []byte   // the names as jute encodes them
	bytes  int
}

type childStamp struct {
	pzxid         int64
	cversion, num int32
}

func stampOf(n *Node) childStamp { return childStamp{n.Pzxid, n.Cversion, n.NumChildren} }

// childResponse answers getChildren (and getChildren2, withStat) of path,
// whose node is n.
func (s *State) childResponse(path string, n *Node, withStat bool) *proto.ChildrenResponse {
	r := &proto.ChildrenResponse{WithStat: withStat}
	if withStat {
		r.Stat = n.Stat()
	}
	if n.NumChildren < cachedChildrenMin {
		r.Children = s.tree.children(path, int(n.NumChildren))
		return r
	}
	l := s.children.get(path, stampOf(n))
	if l == nil {
		l = newChildList(s.tree.children(path, int(n.NumChildren)), stampOf(n))
		s.children.put(path, l)
	}
	r.Children, r.Vector = l.names, l.vector
	return r
}

// newChildList copies names into one string, so the list holds no node's
// memory, and encodes them.
func newChildList(names []string, stamp childStamp) *childList {
	var b strings.Builder
	for _, name := range names {
		b.WriteString(name)
	}
	all, at := b.String(), 0
	for i, name := range names {
		names[i] = all[at : at+len(name)]
		at += len(name)
	}
	e := proto.NewEncoder(nil)
	e.Strings(names)
	l := &childList{stamp: stamp, names: names, vector: e.Bytes()}
	l.bytes = len(all) + 16*len(names) + len(l.vector)
	return l
}

func (c *childCache) get(path string, stamp childStamp) *childList {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.lists[path]; l != nil && l.stamp == stamp {
		return l
	}
	return nil
}

// put keeps l for path; when the kept lists would take more than
// childCacheBytes, the others go.
func (c *childCache) put(path string, l *childList) {
	if l.bytes > childCacheBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.lists[path]; old != nil {
		c.bytes -= old.bytes
	}
	if c.lists == nil || c.bytes+l.bytes > childCacheBytes {
		c.lists, c.bytes = map[string]*childList{}, 0
	}
	c.lists[path] = l
	c.bytes += l.bytes
}
