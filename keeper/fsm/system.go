package fsm

import (
	"strconv"
	"strings"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ClickHouse Keeper's system nodes, which a ClickHouse client reads first
// to learn what the keeper serves. They are served, read-only, on every
// shard without being stored: the tree, its snapshots, backups and imports
// never hold them, and the root does not list /keeper, as ZooKeeper's
// would not. Writes under /keeper are refused (writesSystem).

// sysNode is one system node: its data or its children.
type sysNode struct {
	data     []byte
	children []string
}

var systemNodes = map[string]sysNode{
	proto.KeeperSystemPath:       {children: []string{"api_version", "feature_flags"}},
	proto.KeeperAPIVersionPath:   {data: []byte(strconv.Itoa(proto.KeeperAPIVersion))},
	proto.KeeperFeatureFlagsPath: {data: proto.FeatureBitmap(proto.Features...)},
}

// stat is the node's stat: zero but for its size and children.
func (n sysNode) stat() proto.Stat {
	return proto.Stat{DataLength: int32(len(n.data)), NumChildren: int32(len(n.children))}
}

// read answers read op of the node; list is a filteredList's kind (every
// system node is persistent).
func (n sysNode) read(op proto.OpCode, list uint8) (proto.Record, proto.Code) {
	switch op {
	case proto.OpExists:
		return &proto.StatResponse{Stat: n.stat()}, proto.ErrOK
	case proto.OpGetData:
		return &proto.GetDataResponse{Data: n.data, Stat: n.stat()}, proto.ErrOK
	case proto.OpGetChildren, proto.OpGetChildren2:
		return &proto.ChildrenResponse{Children: n.children, Stat: n.stat(), WithStat: op == proto.OpGetChildren2}, proto.ErrOK
	case proto.OpFilteredList:
		children := n.children
		if list == proto.ListEphemeralOnly {
			children = []string{}
		}
		return &proto.ChildrenResponse{Children: children, Stat: n.stat(), WithStat: true}, proto.ErrOK
	case proto.OpGetACL:
		return &proto.GetACLResponse{ACL: proto.WorldACL(proto.PermRead), Stat: n.stat()}, proto.ErrOK
	}
	return nil, proto.ErrUnimplemented
}

// readSystem answers read op of path if it is a system node: ok is false
// for any other path.
func readSystem(op proto.OpCode, path string, list uint8) (resp proto.Record, code proto.Code, ok bool) {
	n, ok := systemNodes[path]
	if !ok {
		return nil, proto.ErrOK, false
	}
	if op == proto.OpGetAllChildrenNumber {
		count := 0
		for p := range systemNodes {
			if strings.HasPrefix(p, childPrefix(path)) {
				count++
			}
		}
		return &proto.CountResponse{Count: int32(count)}, proto.ErrOK, true
	}
	resp, code = n.read(op, list)
	return resp, code, true
}

// isSystemNode reports whether path is a system node.
func isSystemNode(path string) bool {
	_, ok := systemNodes[path]
	return ok
}
