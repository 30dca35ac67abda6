package testenv

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
)

// Tree is a keeper's znodes as ReadTreeExcept read them, by path.
type Tree struct {
	Nodes map[string]ZNode
	// Partial holds the paths some of whose children were left out: their
	// stat counts children the tree does not hold.
	Partial map[string]bool
}

// ReadTreeExcept reads every znode under root as ReadTree does, leaving
// out the subtrees at the paths skip names (system nodes such as
// /zookeeper that each server keeps its own way).
func ReadTreeExcept(t testing.TB, conn *zk.Conn, root string, skip ...string) Tree {
	t.Helper()
	tree := Tree{Nodes: map[string]ZNode{}, Partial: map[string]bool{}}
	for queue := []string{root}; len(queue) > 0; {
		p := queue[0]
		queue = queue[1:]
		var n ZNode
		data, stat, err := conn.Get(p)
		if err == nil {
			n.Data, n.Stat = data, *stat
			n.ACL, _, err = conn.GetACL(p)
		}
		var kids []string
		if err == nil {
			kids, _, err = conn.Children(p)
		}
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		tree.Nodes[p] = n
		for _, k := range kids {
			if kid := path.Join(p, k); slices.Contains(skip, kid) {
				tree.Partial[p] = true
			} else {
				queue = append(queue, kid)
			}
		}
	}
	return tree
}

// Diff lists how tree b differs from a, one line a path, in path order:
// a node only in one of them, or one whose data, ACL, version, aversion,
// number of children, ephemerality or (unless Partial in either) cversion
// differ. Times, zxids and session ids are each server's own.
func (a Tree) Diff(b Tree) []string {
	var diffs []string
	paths := map[string]bool{}
	for p := range a.Nodes {
		paths[p] = true
	}
	for p := range b.Nodes {
		paths[p] = true
	}
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		x, inA := a.Nodes[p]
		y, inB := b.Nodes[p]
		switch {
		case !inA:
			diffs = append(diffs, fmt.Sprintf("%s: only in the second (%q)", p, y.Data))
		case !inB:
			diffs = append(diffs, fmt.Sprintf("%s: only in the first (%q)", p, x.Data))
		default:
			if d := znodeDiff(x, y, a.Partial[p] || b.Partial[p]); d != "" {
				diffs = append(diffs, p+": "+d)
			}
		}
	}
	return diffs
}

// znodeDiff says how two znodes at one path differ, or "".
func znodeDiff(x, y ZNode, partial bool) string {
	var d []string
	if string(x.Data) != string(y.Data) {
		d = append(d, fmt.Sprintf("data %q != %q", x.Data, y.Data))
	}
	if fmt.Sprint(x.ACL) != fmt.Sprint(y.ACL) {
		d = append(d, fmt.Sprintf("acl %v != %v", x.ACL, y.ACL))
	}
	for _, f := range []struct {
		name string
		x, y int64
	}{
		{"version", int64(x.Stat.Version), int64(y.Stat.Version)},
		{"aversion", int64(x.Stat.Aversion), int64(y.Stat.Aversion)},
		{"ephemeral", ephemeral(x.Stat), ephemeral(y.Stat)},
	} {
		if f.x != f.y {
			d = append(d, fmt.Sprintf("%s %d != %d", f.name, f.x, f.y))
		}
	}
	if !partial && (x.Stat.Cversion != y.Stat.Cversion || x.Stat.NumChildren != y.Stat.NumChildren) {
		d = append(d, fmt.Sprintf("cversion/children %d/%d != %d/%d", x.Stat.Cversion, x.Stat.NumChildren, y.Stat.Cversion, y.Stat.NumChildren))
	}
	return strings.Join(d, ", ")
}

func ephemeral(s zk.Stat) int64 {
	if s.EphemeralOwner != 0 {
		return 1
	}
	return 0
}
