package fsm

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/tidwall/btree"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Node is one znode. A node in the tree is never modified: a change stores
// a new Node, so snapshots that share it stay valid. Its key and data are
// one allocation, and the node fits Go's 96-byte size class: at a million
// znodes every byte of a node counts.
type Node struct {
	kd          string // the key (two-byte depth, then the path: a node's children are contiguous), then the data
	ACL         *ACLList
	Czxid       int64
	Mzxid       int64
	Pzxid       int64
	Ctime       int64
	Mtime       int64
	Owner       int64 // ephemeral owner session, ContainerOwner, or 0
	Version     int32
	Cversion    int32 // child creates (the sequential counter); Stat serves creates and deletes
	Aversion    int32
	NumChildren int32
	klen        int32 // the key's length in kd, negated when the data is null (as opposed to empty)
}

// newNode returns a node of key holding a copy of data (nil for null).
func newNode(key string, data []byte) *Node {
	n := &Node{}
	n.setKeyData(key, data)
	return n
}

// probe returns a node to look key up with.
func probe(key string) *Node { return &Node{kd: key, klen: int32(len(key))} }

// setKeyData stores key and a copy of data (nil for null) in one allocation.
func (n *Node) setKeyData(key string, data []byte) {
	n.kd = key + string(data)
	n.klen = int32(len(key))
	if data == nil {
		n.klen = -n.klen
	}
}

func (n *Node) key() string {
	if n.klen < 0 {
		return n.kd[:-n.klen]
	}
	return n.kd[:n.klen]
}

// emptyData is the data of every node whose data is empty but not null.
var emptyData = []byte{}

// Data returns the node's data, nil if it is null. The slice shares the
// node's memory: it must not be modified.
func (n *Node) Data() []byte {
	if n.klen < 0 {
		return nil
	}
	d := n.kd[n.klen:]
	if len(d) == 0 {
		return emptyData
	}
	return unsafe.Slice(unsafe.StringData(d), len(d))
}

// ContainerOwner marks container nodes, as ZooKeeper's
// CONTAINER_EPHEMERAL_OWNER does; clients see an ephemeralOwner of 0.
const ContainerOwner int64 = -1 << 63

// Path returns the node's path.
func (n *Node) Path() string { return n.key()[2:] }

// Stat returns the node's ZooKeeper Stat, computed as DataNode.copyStat
// does: cversion counts child creates and deletes (2*creates - children),
// and a container shows no owner.
func (n *Node) Stat() proto.Stat {
	owner := n.Owner
	if owner == ContainerOwner {
		owner = 0
	}
	return proto.Stat{
		Czxid: n.Czxid, Mzxid: n.Mzxid, Pzxid: n.Pzxid, Ctime: n.Ctime, Mtime: n.Mtime,
		Version: n.Version, Cversion: 2*n.Cversion - n.NumChildren, Aversion: n.Aversion,
		EphemeralOwner: owner, DataLength: int32(len(n.Data())), NumChildren: n.NumChildren,
	}
}

// size is what the node counts for in the state's data size: its path
// and its data, as ZooKeeper's approximate data size counts them.
func (n *Node) size() int64 { return int64(len(n.kd) - 2) }

// IsEphemeral reports whether a session owns the node.
func (n *Node) IsEphemeral() bool { return n.Owner != 0 && n.Owner != ContainerOwner }

func (n *Node) clone() *Node {
	c := *n
	return &c
}

func depth(path string) int {
	if path == "/" {
		return 0
	}
	return strings.Count(path, "/")
}

func keyAt(d int, path string) string {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], uint16(d))
	return string(b[:]) + path
}

func keyOf(path string) string { return keyAt(depth(path), path) }

// parentOf returns the parent path of a normalised path.
func parentOf(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

func childPrefix(path string) string {
	if path == "/" {
		return "/"
	}
	return path + "/"
}

// tree is the znode B-tree ordered by (depth, path).
type tree struct{ bt *btree.BTreeG[*Node] }

func newTree() tree {
	return tree{bt: btree.NewBTreeGOptions(func(a, b *Node) bool { return a.key() < b.key() },
		btree.Options{NoLocks: true, Degree: 64})}
}

func (t tree) copy() tree { return tree{bt: t.bt.Copy()} }

func (t tree) get(path string) *Node {
	n, _ := t.bt.Get(probe(keyOf(path)))
	return n
}

func (t tree) put(n *Node) { t.bt.Set(n) }

func (t tree) remove(path string) { t.bt.Delete(probe(keyOf(path))) }

func (t tree) len() int { return t.bt.Len() }

// eachChild calls fn with each child of path in name order until fn
// returns false.
func (t tree) eachChild(path string, fn func(*Node) bool) {
	prefix := keyAt(depth(path)+1, childPrefix(path))
	t.bt.Ascend(probe(prefix), func(n *Node) bool {
		if !strings.HasPrefix(n.key(), prefix) {
			return false
		}
		return fn(n)
	})
}

// children returns the names of path's children, sorted; n is how many
// there are (the node's NumChildren), to allocate once.
func (t tree) children(path string, n int) []string {
	names := make([]string, 0, n)
	skip := len(childPrefix(path))
	t.eachChild(path, func(n *Node) bool {
		names = append(names, n.Path()[skip:])
		return true
	})
	return names
}

// descendants counts every node below path.
func (t tree) descendants(path string) int {
	count := 0
	var walk func(p string)
	walk = func(p string) {
		t.eachChild(p, func(n *Node) bool {
			count++
			if n.NumChildren > 0 {
				walk(n.Path())
			}
			return true
		})
	}
	walk(path)
	return count
}

// scan calls fn for every node in key order.
func (t tree) scan(fn func(*Node) bool) { t.bt.Scan(fn) }
