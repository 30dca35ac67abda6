package fsm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ImportedNode is a znode as another ZooKeeper-compatible store keeps it.
type ImportedNode struct {
	Path string
	Data []byte
	ACL  []proto.ACL
	// Stat as the store persists it: Cversion counts the child creates
	// (ZooKeeper's StatPersisted, not the cversion a client reads);
	// EphemeralOwner is a session, ContainerOwner, a TTL mark or 0;
	// NumChildren and DataLength are recomputed.
	Stat proto.Stat
}

// ImportSummary counts what Import did beyond copying.
type ImportSummary struct {
	Znodes     int // in the new state, the root and /zookeeper included
	Ephemerals int // dropped: their sessions do not come along
	TTL        int // TTL znodes, kept as persistent ones (TTLs are not kept here)
}

// TTLOwner is ZooKeeper's ephemeralOwner mark of a TTL znode
// (EphemeralType.TTL): the top byte all ones, the TTL in the rest.
const TTLOwner int64 = -1 << 56

// SessionOwned reports whether another store's ephemeralOwner names a
// session: not 0, a container, or a TTL mark.
func SessionOwned(owner int64) bool {
	return owner != 0 && owner != ContainerOwner && owner&TTLOwner != TTLOwner
}

// Import builds the state of a new shard from another store's znodes,
// which hold every write up to zxid, the last of them at time (Unix ms).
// Ephemeral znodes are dropped, as the expiry of their sessions would drop
// them after a restart: their parents' pzxid becomes zxid+1, the zxid of
// the drop, and the state's zxid with it. The root and ZooKeeper's
// /zookeeper nodes are added where missing. Every znode's parent must be
// there.
func Import(nodes []ImportedNode, zxid, time int64) (*State, ImportSummary, error) {
	s := New()
	s.zxid, s.time = zxid, time
	var sum ImportSummary
	byPath := map[string]*Node{}
	s.tree.bt.Scan(func(n *Node) bool { byPath[n.Path()] = n; return true })
	var dropped []string
	for i := range nodes {
		in := &nodes[i]
		if !validPath(in.Path) {
			return nil, sum, fmt.Errorf("fsm: import: invalid path %q", in.Path)
		}
		owner := in.Stat.EphemeralOwner
		switch {
		case owner == ContainerOwner:
		case owner&TTLOwner == TTLOwner:
			owner = 0
			sum.TTL++
		case owner != 0:
			dropped = append(dropped, in.Path)
			sum.Ephemerals++
			continue
		}
		st := in.Stat
		n := newNode(keyOf(in.Path), in.Data)
		n.acl = s.acls.intern(in.ACL).id
		n.Czxid, n.Mzxid, n.Pzxid, n.Ctime, n.Mtime = st.Czxid, st.Mzxid, st.Pzxid, st.Ctime, st.Mtime
		n.Owner, n.Version, n.Cversion, n.Aversion = owner, st.Version, st.Cversion, st.Aversion
		byPath[in.Path] = n
	}
	for _, n := range byPath {
		n.NumChildren = 0
	}
	for p := range byPath {
		if p == "/" {
			continue
		}
		parent := byPath[parentOf(p)]
		if parent == nil {
			return nil, sum, fmt.Errorf("fsm: import: %s has no parent (or its parent is an ephemeral)", p)
		}
		parent.NumChildren++
	}
	if len(dropped) > 0 {
		s.zxid = zxid + 1
		for _, p := range dropped {
			if parent := byPath[parentOf(p)]; parent != nil {
				parent.Pzxid = max(parent.Pzxid, s.zxid)
			}
		}
	}
	all := make([]*Node, 0, len(byPath))
	for _, n := range byPath {
		all = append(all, n)
	}
	clear(byPath)
	slices.SortFunc(all, func(a, b *Node) int { return strings.Compare(a.key(), b.key()) })
	s.tree = newTree()
	for _, n := range all {
		s.tree.bt.Load(n)
	}
	sum.Znodes = s.tree.len()
	s.recount()
	return s, sum, nil
}
