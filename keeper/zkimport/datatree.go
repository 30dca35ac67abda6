// Package zkimport brings a ZooKeeper's data over to xkeeper, as
// clickhouse-keeper-converter does for ClickHouse Keeper: from Apache
// ZooKeeper's on-disk files (the newest snapshot, then the transaction
// logs after it, replayed as ZooKeeper replays them on start), or from a
// running ZooKeeper through its client protocol. The result is a state
// machine state with every znode, stat and ACL, written as a backup that
// `xkeeper snapshot restore` turns into a new shard.
package zkimport

import (
	"fmt"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Summary tells what an import read.
type Summary struct {
	Snapshot     string `json:"snapshot,omitempty"` // the snapshot file read
	SnapshotZxid int64  `json:"snapshot_zxid"`
	Logs         int    `json:"logs"`         // transaction log files read
	Transactions int    `json:"transactions"` // replayed after the snapshot
	LastZxid     int64  `json:"last_zxid"`
	TornTail     bool   `json:"torn_tail,omitempty"` // the last log ended in an incomplete record (a crash mid-write), ignored
	fsm.ImportSummary
}

// znode is a znode as ZooKeeper's DataTree keeps it.
type znode struct {
	data []byte
	acl  []proto.ACL
	stat proto.Stat // ZooKeeper's StatPersisted: cversion counts child creates
}

// dataTree is ZooKeeper's data tree as far as replaying its log needs it.
type dataTree struct {
	nodes      map[string]*znode
	ephemerals map[int64]map[string]struct{} // by session
	zxid, time int64
	// gaps lets replay go on past missing transactions (Options.AllowGaps).
	gaps bool
}

func newDataTree() *dataTree {
	return &dataTree{nodes: map[string]*znode{}, ephemerals: map[int64]map[string]struct{}{}}
}

func parentOf(path string) string {
	for i := len(path) - 1; i > 0; i-- {
		if path[i] == '/' {
			return path[:i]
		}
	}
	return "/"
}

func (t *dataTree) put(path string, n *znode) {
	t.nodes[path] = n
	if owner := n.stat.EphemeralOwner; fsm.SessionOwned(owner) {
		if t.ephemerals[owner] == nil {
			t.ephemerals[owner] = map[string]struct{}{}
		}
		t.ephemerals[owner][path] = struct{}{}
	}
}

// The operations below apply ZooKeeper's transactions as its DataTree
// does on replay, including its rules for a fuzzy snapshot (one that
// already holds some of the transactions after its zxid): a create of a
// node that exists still moves its parent's cversion and pzxid forward, a
// delete of a node that is gone still moves the pzxid.

func (t *dataTree) create(path string, data []byte, acl []proto.ACL, owner int64, parentCVersion int32, zxid, time int64) {
	parent := t.nodes[parentOf(path)]
	if parent == nil {
		return
	}
	if parentCVersion == -1 {
		parentCVersion = parent.stat.Cversion + 1
	}
	if parentCVersion > parent.stat.Cversion {
		parent.stat.Cversion, parent.stat.Pzxid = parentCVersion, zxid
	}
	if _, exists := t.nodes[path]; exists {
		return
	}
	t.put(path, &znode{data: data, acl: acl, stat: proto.Stat{Czxid: zxid, Mzxid: zxid, Pzxid: zxid,
		Ctime: time, Mtime: time, EphemeralOwner: owner}})
}

func (t *dataTree) remove(path string, zxid int64) {
	if parent := t.nodes[parentOf(path)]; parent != nil && zxid > parent.stat.Pzxid {
		parent.stat.Pzxid = zxid
	}
	n := t.nodes[path]
	if n == nil {
		return
	}
	delete(t.nodes, path)
	if set := t.ephemerals[n.stat.EphemeralOwner]; set != nil {
		delete(set, path)
	}
}

func (t *dataTree) setData(path string, data []byte, version int32, zxid, time int64) {
	if n := t.nodes[path]; n != nil {
		n.data, n.stat.Version, n.stat.Mzxid, n.stat.Mtime = data, version, zxid, time
	}
}

func (t *dataTree) setACL(path string, acl []proto.ACL, version int32) {
	if n := t.nodes[path]; n != nil {
		n.acl, n.stat.Aversion = acl, version
	}
}

func (t *dataTree) closeSession(session, zxid int64) {
	for path := range t.ephemerals[session] {
		t.remove(path, zxid)
	}
	delete(t.ephemerals, session)
}

// state turns the tree into an xkeeper state.
func (t *dataTree) state() (*fsm.State, fsm.ImportSummary, error) {
	nodes := make([]fsm.ImportedNode, 0, len(t.nodes))
	for path, n := range t.nodes {
		nodes = append(nodes, fsm.ImportedNode{Path: path, Data: n.data, ACL: n.acl, Stat: n.stat})
	}
	t.nodes, t.ephemerals = nil, nil // the tree is in nodes now: let it go before the state is built
	st, sum, err := fsm.Import(nodes, t.zxid, t.time)
	if err != nil {
		return nil, sum, fmt.Errorf("zkimport: %w", err)
	}
	return st, sum, nil
}
