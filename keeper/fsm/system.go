package fsm

import (
	pathpkg "path"
	"slices"
	"strconv"

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

// SetAvailabilityZone makes the state serve zone at
// /keeper/availability_zone (keeper.availability_zone), or no such node
// for "". It is the member's own, not the shard's: no entry changes it,
// and no snapshot or backup holds it, so a member sets it again on every
// state it loads.
func (s *State) SetAvailabilityZone(zone string) { s.zone = zone }

// systemNode returns the system node at path, if any: systemNodes, and
// the availability zone where the member has one.
func (s *State) systemNode(path string) (sysNode, bool) {
	if s.zone == "" {
		n, ok := systemNodes[path]
		return n, ok
	}
	switch path {
	case proto.KeeperAvailabilityZonePath:
		return sysNode{data: []byte(s.zone)}, true
	case proto.KeeperSystemPath:
		n := systemNodes[path]
		return sysNode{children: append(slices.Clip(n.children), pathpkg.Base(proto.KeeperAvailabilityZonePath))}, true
	}
	n, ok := systemNodes[path]
	return n, ok
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
func (s *State) readSystem(op proto.OpCode, path string, list uint8) (resp proto.Record, code proto.Code, ok bool) {
	n, ok := s.systemNode(path)
	if !ok {
		return nil, proto.ErrOK, false
	}
	if op == proto.OpGetAllChildrenNumber {
		return &proto.CountResponse{Count: int32(s.systemDescendants(path, n))}, proto.ErrOK, true
	}
	resp, code = n.read(op, list)
	return resp, code, true
}

// systemDescendants counts the system nodes below n, at path.
func (s *State) systemDescendants(path string, n sysNode) int {
	count := 0
	for _, name := range n.children {
		c, _ := s.systemNode(childPrefix(path) + name)
		count += 1 + s.systemDescendants(childPrefix(path)+name, c)
	}
	return count
}

// isSystemNode reports whether path is a system node.
func (s *State) isSystemNode(path string) bool {
	_, ok := s.systemNode(path)
	return ok
}
