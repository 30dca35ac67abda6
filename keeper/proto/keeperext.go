package proto

import "strings"

// ClickHouse Keeper's own opcodes (Coordination::OpNum, 500 and up). A
// ClickHouse client sends them only where the keeper's
// /keeper/feature_flags says it may (see Features).
const (
	OpFilteredList                 OpCode = 500 // getChildren2 of the children of one kind
	OpCheckNotExists               OpCode = 501 // check that a node, or that version of it, is absent
	OpCreateIfNotExists            OpCode = 502 // create, or nothing (ZOK) if the node is there
	OpRemoveRecursive              OpCode = 503 // delete a subtree of at most a given size
	OpCheckStat                    OpCode = 504 // check of a node's version and stat fields (checkstat.go)
	OpTryRemove                    OpCode = 505 // delete, or nothing (ZOK) if it cannot be deleted
	OpFilteredListWithStatsAndData OpCode = 506 // filteredList with the children's stats and data (liststat.go)
	OpListRecursive                OpCode = 507 // not implemented
)

// Kinds of children a filteredList asks for (ClickHouse's ListRequestType).
const (
	ListAll            uint8 = 0
	ListPersistentOnly uint8 = 1
	ListEphemeralOnly  uint8 = 2
)

// FilteredListRequest is a filteredList: getChildren2 of the children of
// one kind. Its reply is a ChildrenResponse with the parent's stat.
type FilteredListRequest struct {
	PathWatchRequest
	Type uint8 // ListAll, ListPersistentOnly or ListEphemeralOnly
}

// FilteredList returns the filteredList of path's children of kind typ.
func FilteredList(path string, watch bool, typ uint8) *FilteredListRequest {
	return &FilteredListRequest{PathWatchRequest{Path: path, Watch: watch}, typ}
}

// Encode implements Record.
func (r *FilteredListRequest) Encode(e *Encoder) { r.PathWatchRequest.Encode(e); e.Uint8(r.Type) }

// Decode implements Record.
func (r *FilteredListRequest) Decode(d *Decoder) { r.PathWatchRequest.Decode(d); r.Type = d.Uint8() }

// RemoveRecursiveRequest deletes a node and everything below it, if the
// subtree holds at most Limit nodes (the node itself counted); its reply
// has no body.
type RemoveRecursiveRequest struct {
	Path  string
	Limit uint32
}

// Encode implements Record.
func (r *RemoveRecursiveRequest) Encode(e *Encoder) { e.String(r.Path); e.Int32(int32(r.Limit)) }

// Decode implements Record.
func (r *RemoveRecursiveRequest) Decode(d *Decoder) { r.Path = d.String(); r.Limit = uint32(d.Int32()) }

// MaxRemoveRecursive bounds the nodes one removeRecursive may delete,
// whatever limit it asks for: its apply is linear in them on every member
// (at 1,048,576 nodes, 5 s of CPU and 1.1 GB allocated on each; at this
// bound about 100 ms and 22 MB, BENCHMARKS.md). ClickHouse asks for 1,000
// by default and, refused, removes the subtree in batches.
const MaxRemoveRecursive = 16_384

// BoundRemoveRecursive lowers the limit of req's removeRecursive (alone
// or in a multi) to MaxRemoveRecursive where it is above, as a member
// does where the request enters, and reports whether it changed any: a
// subtree larger than the bound is then refused (ErrNotEmpty) as one over
// the request's own limit is.
func BoundRemoveRecursive(req Record) bool {
	lower := func(r Record) bool {
		if rr, ok := r.(*RemoveRecursiveRequest); ok && rr.Limit > MaxRemoveRecursive {
			rr.Limit = MaxRemoveRecursive
			return true
		}
		return false
	}
	m, ok := req.(*MultiRequest)
	if !ok {
		return lower(req)
	}
	changed := false
	for _, op := range m.Ops {
		changed = lower(op.Req) || changed
	}
	return changed
}

// KeeperSystemPath is where ClickHouse Keeper serves its system nodes,
// read-only: KeeperAPIVersionPath, KeeperFeatureFlagsPath and, where the
// member has one, KeeperAvailabilityZonePath.
const (
	KeeperSystemPath           = "/keeper"
	KeeperAPIVersionPath       = KeeperSystemPath + "/api_version"
	KeeperFeatureFlagsPath     = KeeperSystemPath + "/feature_flags"
	KeeperAvailabilityZonePath = KeeperSystemPath + "/availability_zone"
)

// UnderKeeperSystem reports whether path is KeeperSystemPath or below it,
// where ClickHouse Keeper refuses every write with ErrBadArguments.
func UnderKeeperSystem(path string) bool {
	return path == KeeperSystemPath || strings.HasPrefix(path, KeeperSystemPath+"/")
}
