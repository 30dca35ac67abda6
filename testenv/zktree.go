package testenv

import (
	"path"
	"testing"

	"github.com/go-zookeeper/zk"
)

// ZNode is a znode as a ZooKeeper client reads it.
type ZNode struct {
	Data []byte
	Stat zk.Stat
	ACL  []zk.ACL
}

// ReadTree reads every znode under root through the client protocol, as
// conn's identities may: of ZooKeeper or of xkeeper alike, to compare the
// two.
func ReadTree(t testing.TB, conn *zk.Conn, root string) map[string]ZNode {
	t.Helper()
	tree := map[string]ZNode{}
	var walk func(p string)
	walk = func(p string) {
		data, stat, err := conn.Get(p)
		if err != nil {
			t.Fatalf("get %s: %v", p, err)
		}
		acl, _, err := conn.GetACL(p)
		if err != nil {
			t.Fatalf("getACL %s: %v", p, err)
		}
		tree[p] = ZNode{Data: data, Stat: *stat, ACL: acl}
		kids, _, err := conn.Children(p)
		if err != nil {
			t.Fatalf("children %s: %v", p, err)
		}
		for _, k := range kids {
			walk(path.Join(p, k))
		}
	}
	walk(root)
	return tree
}
