package fsm

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/tidwall/btree"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Node is one znode. A node in the tree is never modified: a change stores
// a new Node, so snapshots that share it stay valid.
//
// At a million znodes every byte of a node counts, and so does every
// object the collector must scan: a Node holds no pointers and is the head
// of one pointer-free allocation that holds, after it, the node's key (a
// two-byte depth, then the path: a node's children are contiguous) and its
// data. A Node is only made by allocNode and copied by clone, never by
// value.
type Node struct {
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
	acl         uint32 // the interned ACL's id (aclTable)
	klen        int32  // the key's length
	dlen        int32  // the data's length, -1 when the data is null (as opposed to empty)
}

// nodeHead is where a node's key starts: right after its last field, in
// what would be the struct's trailing padding. So a Node is never copied
// by value, which would write over the key; clone and withData copy the
// fields.
const nodeHead = int(unsafe.Offsetof(Node{}.dlen) + unsafe.Sizeof(Node{}.dlen))

// allocNode returns a zeroed node with room for a key of klen bytes and
// dlen bytes of data (-1 for null), in one pointer-free allocation.
func allocNode(klen, dlen int) *Node {
	return nodeIn(make([]byte, nodeSize(klen, dlen)), klen, dlen)
}

// nodeSize is the bytes a node with a key of klen bytes and dlen bytes of
// data takes.
func nodeSize(klen, dlen int) int { return max(int(unsafe.Sizeof(Node{})), nodeHead+klen+max(dlen, 0)) }

// nodeIn makes the zeroed bytes b, of at least nodeSize, a node.
func nodeIn(b []byte, klen, dlen int) *Node {
	n := (*Node)(unsafe.Pointer(unsafe.SliceData(b)))
	n.klen, n.dlen = int32(klen), int32(dlen)
	return n
}

// tail is the key then the data, the bytes after the head.
func (n *Node) tail() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(n), nodeHead)), int(n.klen)+max(int(n.dlen), 0))
}

// newNode returns a node of key holding a copy of data (nil for null).
func newNode(key string, data []byte) *Node {
	dlen := len(data)
	if data == nil {
		dlen = -1
	}
	n := allocNode(len(key), dlen)
	copy(n.tail()[copy(n.tail(), key):], data)
	return n
}

// probe returns a node to look key up with.
func probe(key string) *Node {
	n := allocNode(len(key), -1)
	copy(n.tail(), key)
	return n
}

// probeOf returns a node to look path up with: probe(keyOf(path)) in one
// allocation, or in buf (grown if need be) when buf is not nil.
func probeOf(buf *[]byte, path string) *Node {
	var n *Node
	if size := nodeSize(2+len(path), -1); buf == nil {
		n = allocNode(2+len(path), -1)
	} else {
		if cap(*buf) < size {
			*buf = make([]byte, 2*size)
		}
		b := (*buf)[:size]
		clear(b)
		n = nodeIn(b, 2+len(path), -1)
	}
	t := n.tail()
	binary.BigEndian.PutUint16(t, uint16(depth(path)))
	copy(t[2:], path)
	return n
}

// withData returns a copy of the node holding a copy of data instead of
// its own (nil for null).
func (n *Node) withData(data []byte) *Node {
	c := newNode(n.key(), data)
	klen, dlen := c.klen, c.dlen
	copy(c.fields(), n.fields())
	c.klen, c.dlen = klen, dlen
	return c
}

// fields are the bytes of the node's fields.
func (n *Node) fields() []byte { return unsafe.Slice((*byte)(unsafe.Pointer(n)), nodeHead) }

func (n *Node) key() string {
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(n), nodeHead)), int(n.klen))
}

// emptyData is the data of every node whose data is empty but not null.
var emptyData = []byte{}

// Data returns the node's data, nil if it is null. The slice shares the
// node's memory: it must not be modified.
func (n *Node) Data() []byte {
	switch n.dlen {
	case -1:
		return nil
	case 0:
		return emptyData
	}
	return n.tail()[n.klen:]
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
		EphemeralOwner: owner, DataLength: max(n.dlen, 0), NumChildren: n.NumChildren,
	}
}

// size is what the node counts for in the state's data size: its path
// and its data, as ZooKeeper's approximate data size counts them.
func (n *Node) size() int64 { return int64(n.klen) - 2 + int64(max(n.dlen, 0)) }

// IsEphemeral reports whether a session owns the node.
func (n *Node) IsEphemeral() bool { return n.Owner != 0 && n.Owner != ContainerOwner }

func (n *Node) clone() *Node { return n.withData(n.Data()) }

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

func (t tree) get(path string) *Node { return t.getWith(nil, path) }

// getWith is get with the probe in buf (see probeOf), for a caller that
// runs alone.
func (t tree) getWith(buf *[]byte, path string) *Node {
	n, _ := t.bt.Get(probeOf(buf, path))
	return n
}

// put stores n and returns the node it replaced, nil if none.
func (t tree) put(n *Node) *Node {
	prev, _ := t.bt.Set(n)
	return prev
}

// remove deletes the node of key and returns it, nil if there was none.
func (t tree) remove(key string) *Node {
	prev, _ := t.bt.Delete(probe(key))
	return prev
}

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
